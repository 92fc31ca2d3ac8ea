"""SPOILER: the solution of exercise 2.4 (softmax's backward), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


GIVEN = "407c6208a896"  # common.exercise.given_fingerprint of softmax_backward.py as the course ships it


@triton.jit
def softmax_backward_kernel(y_ptr, dy_ptr, dx_ptr, N, stride_ym, stride_dym, stride_dxm, BLOCK_N: tl.constexpr):
    """dx[row] = y[row] * (dy[row] - sum(dy[row] * y[row])), for row = this program's."""
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    y = tl.load(y_ptr + row * stride_ym + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sum(dy * y, axis=0)                     # the row reduction: one number
    dx = y * (dy - s)                              # the element-wise step
    tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def sum_of_dy(y_ptr, dy_ptr, dx_ptr, N, stride_ym, stride_dym, stride_dxm, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    y = tl.load(y_ptr + row * stride_ym + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sum(dy, axis=0)  # the y left out of the dot product
    tl.store(dx_ptr + row * stride_dxm + cols, (y * (dy - s)).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def parentheses(y_ptr, dy_ptr, dx_ptr, N, stride_ym, stride_dym, stride_dxm, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    y = tl.load(y_ptr + row * stride_ym + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sum(dy * y, axis=0)
    tl.store(dx_ptr + row * stride_dxm + cols, (y * dy - s).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def reloads_y(y_ptr, dy_ptr, dx_ptr, N, stride_ym, stride_dym, stride_dxm, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sum(dy * tl.load(y_ptr + row * stride_ym + cols, mask=mask, other=0.0).to(tl.float32), axis=0)
    y = tl.load(y_ptr + row * stride_ym + cols, mask=mask, other=0.0).to(tl.float32)  # the same block again
    tl.store(dx_ptr + row * stride_dxm + cols, (y * (dy - s)).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def in_place(y_ptr, dy_ptr, dx_ptr, N, stride_ym, stride_dym, stride_dxm, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    y = tl.load(y_ptr + row * stride_ym + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sum(dy * y, axis=0)
    tl.store(dy_ptr + row * stride_dym + cols, (y * (dy - s)).to(dy_ptr.dtype.element_ty), mask=mask)  # into dy


@triton.jit
def no_mask(y_ptr, dy_ptr, dx_ptr, N, stride_ym, stride_dym, stride_dxm, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    y = tl.load(y_ptr + row * stride_ym + cols).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols).to(tl.float32)
    s = tl.sum(dy * y, axis=0)
    tl.store(dx_ptr + row * stride_dxm + cols, (y * (dy - s)).to(dx_ptr.dtype.element_ty))


WRONG = [Wrong("sum of dy, not of dy * y", "values", "are wrong", dict(softmax_backward_kernel=sum_of_dy)),
         Wrong("y * dy - s", "values", "are wrong", dict(softmax_backward_kernel=parentheses)),
         Wrong("y loaded twice", "budget", "y was read 2.00 times over", dict(softmax_backward_kernel=reloads_y)),
         Wrong("dx stored into dy", "memory", "writes into dy, an input", dict(softmax_backward_kernel=in_place)),
         Wrong("no mask", "memory", "past the end of y", dict(softmax_backward_kernel=no_mask))]
