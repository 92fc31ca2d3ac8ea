"""SPOILER: the solution of exercise 6.1 (RMSNorm's backward), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


GIVEN = "e6e3b1b111b1"  # common.exercise.given_fingerprint of rmsnorm_backward.py as the course ships it


@triton.jit
def rmsnorm_backward_kernel(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, N, stride_xm, stride_dym,
                            BLOCK_N: tl.constexpr):
    """dx[row] = rstd * (g - xh * mean(g * xh)), xh = x[row] * rstd[row], g = w * dy[row]: program
    `row` holds its whole row in one block of BLOCK_N lanes, the arithmetic in fp32."""
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)                 # the forward's, one float32 for the row
    xh, g = x * rstd, w * dy
    s = tl.sum(g * xh, axis=0) / N                 # the mean over the N real columns (masked lanes add 0)
    dx = rstd * (g - xh * s)
    tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def without_w(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, N, stride_xm, stride_dym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    xh, g = x * rstd, dy                           # g = dy: the weights' part of the chain left out
    s = tl.sum(g * xh, axis=0) / N
    tl.store(dx_ptr + row * N + cols, (rstd * (g - xh * s)).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def mean_over_the_lanes(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, N, stride_xm, stride_dym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    xh, g = x * rstd, w * dy
    s = tl.sum(g * xh, axis=0) / BLOCK_N           # the lanes, masked ones too, not the N columns
    tl.store(dx_ptr + row * N + cols, (rstd * (g - xh * s)).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def outer_rstd_left_out(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, N, stride_xm, stride_dym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    xh, g = x * rstd, w * dy
    s = tl.sum(g * xh, axis=0) / N
    tl.store(dx_ptr + row * N + cols, (g - xh * s).to(dx_ptr.dtype.element_ty), mask=mask)  # no rstd *


@triton.jit
def n_as_the_row_stride(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, N, stride_xm, stride_dym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)  # N for the strides
    dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    xh, g = x * rstd, w * dy
    s = tl.sum(g * xh, axis=0) / N
    tl.store(dx_ptr + row * N + cols, (rstd * (g - xh * s)).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def w_unmasked(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, N, stride_xm, stride_dym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols).to(tl.float32)       # w has N elements, the block BLOCK_N lanes
    rstd = tl.load(rstd_ptr + row)
    xh, g = x * rstd, w * dy
    s = tl.sum(g * xh, axis=0) / N
    tl.store(dx_ptr + row * N + cols, (rstd * (g - xh * s)).to(dx_ptr.dtype.element_ty), mask=mask)


WRONG = [Wrong("g = dy, without w", "values", "are wrong", dict(rmsnorm_backward_kernel=without_w)),
         Wrong("divided by BLOCK_N, not N", "values", "1 x 1, BLOCK_N 128",
               dict(rmsnorm_backward_kernel=mean_over_the_lanes)),
         Wrong("the outer rstd left out", "values", "are wrong", dict(rmsnorm_backward_kernel=outer_rstd_left_out)),
         Wrong("N as the row stride", "values", "x's rows 1100 apart",
               dict(rmsnorm_backward_kernel=n_as_the_row_stride)),
         Wrong("w loaded without a mask", "memory", "past the end of w", dict(rmsnorm_backward_kernel=w_unmasked))]
