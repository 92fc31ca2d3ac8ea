"""SPOILER: the solution of exercise 2.3 (long rows: the online softmax in two walks), and wrong ones the tests
check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


GIVEN = "02fddbc8c935"  # common.exercise.given_fingerprint of long_rows.py as the course ships it


@triton.jit
def online_softmax_kernel(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    """y[row] = softmax(x[row]), walking the row twice in tiles of BLOCK_N columns."""
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * stride_xm
    m = tl.full([], float("-inf"), tl.float32)   # the max so far
    l = tl.zeros([], dtype=tl.float32)           # the sum of exp(x - m) so far
    for start in range(0, N, BLOCK_N):           # walk 1
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: -inf - (-inf) would be NaN
        l = l * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)
        m = m_new
    for start in range(0, N, BLOCK_N):           # walk 2
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def three_walks(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * stride_xm
    m = tl.full([], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):           # the max
        cols = start + tl.arange(0, BLOCK_N)
        m = tl.maximum(m, tl.max(tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32), axis=0))
    l = tl.zeros([], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):           # the sum
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        l += tl.sum(tl.exp(x - m), axis=0)
    for start in range(0, N, BLOCK_N):           # the output
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def no_rescale(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * stride_xm
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l += tl.sum(tl.exp(x - m_safe), axis=0)  # the old terms still scaled by the old max
        m = m_new
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def max_from_zero(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * stride_xm
    m = tl.zeros([], dtype=tl.float32)  # 0 is above every value of an all-negative row
    l = tl.zeros([], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def no_guard(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * stride_xm
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)  # NaN while the row is all -inf
        m = m_new
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def last_tile_missed(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * stride_xm
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], dtype=tl.float32)
    for start in range(0, N - BLOCK_N + 1, BLOCK_N):  # whole tiles only: the ragged last one is left out
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l = l * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)
        m = m_new
    for start in range(0, N - BLOCK_N + 1, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < N)


WRONG = [Wrong("three walks", "budget", "loaded 3 times", dict(online_softmax_kernel=three_walks)),
         Wrong("l not rescaled", "values", "case 'ragged last tile", dict(online_softmax_kernel=no_rescale)),
         Wrong("running max from 0", "values", "case 'all negative", dict(online_softmax_kernel=max_from_zero)),
         Wrong("-inf - -inf", "values", "case 'the first 40 columns -inf", dict(online_softmax_kernel=no_guard)),
         Wrong("last tile missed", "memory", "left unwritten", dict(online_softmax_kernel=last_tile_missed))]
