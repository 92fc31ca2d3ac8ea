"""SPOILER: the solution of exercise 2.2 (log-softmax), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "17cd81fba5ac"  # common.exercise.given_fingerprint of log_softmax.py as the course ships it


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    """y[row] = x[row] - max(x[row]) - log(sum(exp(x[row] - max(x[row])))), for row = this program's."""
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=float("-inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)                      # every exponent <= 0
    y = z - tl.log(tl.sum(tl.exp(z), axis=0))      # the sum is >= 1: its log is finite
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def launch(log_softmax_kernel, x, y):
    """Yours to write: one program per row of x, BLOCK_N a power of two >= N, passed by keyword."""
    M, N = x.shape
    log_softmax_kernel[(M,)](x, y, N, x.stride(0), y.stride(0), BLOCK_N=triton.next_power_of_2(N))


# The mistakes, each an edit of the solution above (common.exercise.patched)
SHIFT = "    z = x - tl.max(x, axis=0)                      # every exponent <= 0\n"
LOG = "    y = z - tl.log(tl.sum(tl.exp(z), axis=0))      # the sum is >= 1: its log is finite\n"
WRONG = [Wrong("0 as padding", "values", "are wrong",
               dict(log_softmax_kernel=patched(log_softmax_kernel, ('other=float("-inf")', "other=0.0")))),
         Wrong("max not subtracted", "values", "case 'values near 100",  # exp(100) = inf in float32
               dict(log_softmax_kernel=patched(log_softmax_kernel, (SHIFT, "    z = x\n")))),
         Wrong("log of the softmax", "values", "case 'values 140 apart",  # exp underflows to 0 below -104
               dict(log_softmax_kernel=patched(log_softmax_kernel,
                                               (LOG, "    y = tl.log(tl.exp(z) / tl.sum(tl.exp(z), axis=0))\n")))),
         Wrong("no mask", "memory", "past the end of x",
               dict(log_softmax_kernel=patched(log_softmax_kernel, (', mask=mask, other=float("-inf")', ""),
                                               (", mask=mask)", ")")))),
         Wrong("rows N apart", "values", "case 'rows 512 apart",  # assumes contiguous rows
               dict(log_softmax_kernel=patched(log_softmax_kernel, ("row * stride_xm", "row * N"),
                                               ("row * stride_ym", "row * N")))),
         Wrong("BLOCK_N = N", "runs", "power of two",  # 5 is not a power of two
               dict(launch=patched(launch, ("BLOCK_N=triton.next_power_of_2(N)", "BLOCK_N=N"))))]
