"""SPOILER: the solution of exercise 2.2 (log-softmax), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


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


@triton.jit
def zero_padding(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)  # 0 can win the max
    z = x - tl.max(x, axis=0)
    y = z - tl.log(tl.sum(tl.exp(z), axis=0))
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def without_the_max(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=float("-inf")).to(tl.float32)
    y = x - tl.log(tl.sum(tl.exp(x), axis=0))  # exp(100) = inf in float32
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def no_mask(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols).to(tl.float32)
    z = x - tl.max(x, axis=0)
    y = z - tl.log(tl.sum(tl.exp(z), axis=0))
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty))


@triton.jit
def rows_n_apart(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=float("-inf")).to(tl.float32)  # assumes contiguous rows
    z = x - tl.max(x, axis=0)
    y = z - tl.log(tl.sum(tl.exp(z), axis=0))
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def log_of_softmax(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = tl.log(e / tl.sum(e, axis=0))  # exp underflows to 0 below -104: log(0) = -inf
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def block_of_n(log_softmax_kernel, x, y):
    M, N = x.shape
    log_softmax_kernel[(M,)](x, y, N, x.stride(0), y.stride(0), BLOCK_N=N)  # 5 is not a power of two


WRONG = [Wrong("0 as padding", "values", "are wrong", dict(log_softmax_kernel=zero_padding)),
         Wrong("max not subtracted", "values", "case 'values near 100", dict(log_softmax_kernel=without_the_max)),
         Wrong("log of the softmax", "values", "case 'values 140 apart", dict(log_softmax_kernel=log_of_softmax)),
         Wrong("no mask", "memory", "past the end of x", dict(log_softmax_kernel=no_mask)),
         Wrong("rows N apart", "values", "case 'rows 512 apart", dict(log_softmax_kernel=rows_n_apart)),
         Wrong("BLOCK_N = N", "runs", "power of two", dict(launch=block_of_n))]
