"""SPOILER: the solution of exercise 3.3 (a split row, added with tl.atomic_add), and wrong ones the tests
check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong
from common.launch import cdiv


GIVEN = "d2f1f3e076d0"  # common.exercise.given_fingerprint of split_row_atomic.py as the course ships it


@triton.jit
def row_sum_atomic_kernel(x_ptr, y_ptr, N, stride_xm, COLS_PER_PROGRAM, BLOCK_N: tl.constexpr):
    """y[m] += the sum of row m's columns j * COLS_PER_PROGRAM ..., for program (m, j)."""
    m = tl.program_id(axis=0)
    first = tl.program_id(axis=1) * COLS_PER_PROGRAM  # my stretch's first column
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, COLS_PER_PROGRAM, BLOCK_N):
        cols = first + start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + m * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr + m, tl.sum(acc, axis=0))  # once per program, into y[m], which the launcher zeroed


def launch(row_sum_atomic_kernel, x, y, COLS_PER_PROGRAM=1024, BLOCK_N=256):
    """Given: y zeroed, then one program per row and stretch of COLS_PER_PROGRAM columns."""
    M, N = x.shape
    assert COLS_PER_PROGRAM % BLOCK_N == 0, "a stretch is a whole number of tiles"
    y.zero_()  # the programs add into y
    grid = (M, cdiv(N, COLS_PER_PROGRAM))
    row_sum_atomic_kernel[grid](x, y, N, x.stride(0), COLS_PER_PROGRAM, BLOCK_N=BLOCK_N)


@triton.jit
def stored_not_added(x_ptr, y_ptr, N, stride_xm, COLS_PER_PROGRAM, BLOCK_N: tl.constexpr):
    m = tl.program_id(axis=0)
    first = tl.program_id(axis=1) * COLS_PER_PROGRAM
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, COLS_PER_PROGRAM, BLOCK_N):
        cols = first + start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + m * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + m, tl.sum(acc, axis=0))  # every program of the row writes y[m]: the last one wins


def not_zeroed(row_sum_atomic_kernel, x, y, COLS_PER_PROGRAM=1024, BLOCK_N=256):
    M, N = x.shape
    grid = (M, cdiv(N, COLS_PER_PROGRAM))  # y as it came: NaN here, whatever torch.empty held on a GPU
    row_sum_atomic_kernel[grid](x, y, N, x.stride(0), COLS_PER_PROGRAM, BLOCK_N=BLOCK_N)


@triton.jit
def an_atomic_per_tile(x_ptr, y_ptr, N, stride_xm, COLS_PER_PROGRAM, BLOCK_N: tl.constexpr):
    m = tl.program_id(axis=0)
    first = tl.program_id(axis=1) * COLS_PER_PROGRAM
    for start in range(0, COLS_PER_PROGRAM, BLOCK_N):
        cols = first + start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + m * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        tl.atomic_add(y_ptr + m, tl.sum(x, axis=0))  # right, but one atomic per tile


@triton.jit
def every_program_from_column_0(x_ptr, y_ptr, N, stride_xm, COLS_PER_PROGRAM, BLOCK_N: tl.constexpr):
    m = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, COLS_PER_PROGRAM, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)  # the stretch's first column forgotten
        acc += tl.load(x_ptr + m * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr + m, tl.sum(acc, axis=0))


@triton.jit
def masked_at_the_stretch_end(x_ptr, y_ptr, N, stride_xm, COLS_PER_PROGRAM, BLOCK_N: tl.constexpr):
    m = tl.program_id(axis=0)
    first = tl.program_id(axis=1) * COLS_PER_PROGRAM
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, COLS_PER_PROGRAM, BLOCK_N):
        cols = first + start + tl.arange(0, BLOCK_N)
        mask = cols < first + COLS_PER_PROGRAM  # the stretch's end, not the row's
        acc += tl.load(x_ptr + m * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr + m, tl.sum(acc, axis=0))


WRONG = [Wrong("tl.store instead of tl.atomic_add", "memory", "is written 2 times",
               dict(row_sum_atomic_kernel=stored_not_added)),
         Wrong("y not zeroed", "values", "= nan", dict(launch=not_zeroed)),
         Wrong("an atomic per tile", "budget", "atomic adds into y", dict(row_sum_atomic_kernel=an_atomic_per_tile)),
         Wrong("every stretch from column 0", "values", "are wrong",
               dict(row_sum_atomic_kernel=every_program_from_column_0)),
         Wrong("masked at the stretch's end, not N", "memory", "past the end of x",
               dict(row_sum_atomic_kernel=masked_at_the_stretch_end))]
