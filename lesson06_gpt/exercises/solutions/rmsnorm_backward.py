"""SPOILER: the solution of exercise 6.1 (RMSNorm's backward), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


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


# The mistakes, each an edit of the solution above (common.exercise.patched)
W_LOAD = "tl.load(w_ptr + cols, mask=mask, other=0.0)"
WRONG = [Wrong("g = dy, without w", "values", "are wrong",
               dict(rmsnorm_backward_kernel=patched(rmsnorm_backward_kernel, (", w * dy", ", dy")))),
         Wrong("divided by BLOCK_N, not N", "values", "1 x 1, BLOCK_N 128",
               dict(rmsnorm_backward_kernel=patched(rmsnorm_backward_kernel, ("axis=0) / N", "axis=0) / BLOCK_N")))),
         Wrong("the outer rstd left out", "values", "are wrong",
               dict(rmsnorm_backward_kernel=patched(rmsnorm_backward_kernel, ("rstd * (g - xh * s)", "g - xh * s")))),
         Wrong("N as the row stride", "values", "x's rows 1100 apart",
               dict(rmsnorm_backward_kernel=patched(rmsnorm_backward_kernel, ("row * stride_xm", "row * N"),
                                                    ("row * stride_dym", "row * N")))),
         Wrong("w loaded without a mask", "memory", "past the end of w",
               dict(rmsnorm_backward_kernel=patched(rmsnorm_backward_kernel, (W_LOAD, "tl.load(w_ptr + cols)"))))]
