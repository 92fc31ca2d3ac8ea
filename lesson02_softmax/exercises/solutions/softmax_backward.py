"""SPOILER: the solution of exercise 2.4 (softmax's backward), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


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


# The mistakes, each an edit of the solution above (common.exercise.patched)
DOT = "tl.sum(dy * y, axis=0)"
LOAD_Y = "tl.load(y_ptr + row * stride_ym + cols, mask=mask, other=0.0).to(tl.float32)"
WRONG = [Wrong("sum of dy, not of dy * y", "values", "are wrong",
               dict(softmax_backward_kernel=patched(softmax_backward_kernel, (DOT, "tl.sum(dy, axis=0)")))),
         Wrong("y * dy - s", "values", "are wrong",
               dict(softmax_backward_kernel=patched(softmax_backward_kernel, ("y * (dy - s)", "y * dy - s")))),
         Wrong("y loaded twice", "budget", "y was read 2.00 times over",  # the same block again
               dict(softmax_backward_kernel=patched(softmax_backward_kernel, (DOT, f"tl.sum(dy * {LOAD_Y}, axis=0)")))),
         Wrong("dx stored into dy", "memory", "writes into dy, an input",
               dict(softmax_backward_kernel=patched(softmax_backward_kernel, ("tl.store(dx_ptr + row * stride_dxm",
                                                                              "tl.store(dy_ptr + row * stride_dym")))),
         Wrong("no mask", "memory", "past the end of y",
               dict(softmax_backward_kernel=patched(softmax_backward_kernel, (", mask=mask, other=0.0)", ")", 2),
                                                    (", mask=mask)", ")"))))]
