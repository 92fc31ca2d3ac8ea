"""SPOILER: the solution of exercise 6.2 (cross-entropy's backward), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "998e44e151a9"  # common.exercise.given_fingerprint of cross_entropy_backward.py as the course ships it


@triton.jit
def cross_entropy_backward_kernel(x_ptr, t_ptr, lse_ptr, dloss_ptr, dx_ptr, V, stride_xm, stride_dxm,
                                  BLOCK_V: tl.constexpr):
    """dx[row] = (exp(x[row] - lse[row]) - onehot(t[row])) * dloss[row]: program `row` walks its row in
    tiles of BLOCK_V columns, once, the arithmetic in fp32."""
    row = tl.program_id(axis=0)
    target = tl.load(t_ptr + row)
    lse = tl.load(lse_ptr + row)
    dloss = tl.load(dloss_ptr + row)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)       # the row's column numbers, not the tile's lanes
        mask = cols < V
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        p = tl.exp(x - lse)                        # softmax(x), recomputed from the stored lse: at most 1
        dx = (p - tl.where(cols == target, 1.0, 0.0)) * dloss
        tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


# The mistakes, each an edit of the solution above (common.exercise.patched)
WRONG = [Wrong("onehot by the tile's lane, not the column", "values", "are wrong",
               dict(cross_entropy_backward_kernel=patched(cross_entropy_backward_kernel,
                                                          ("cols == target", "tl.arange(0, BLOCK_V) == target")))),
         Wrong("exp(x) / exp(lse)", "values", "logits near 100",
               dict(cross_entropy_backward_kernel=patched(cross_entropy_backward_kernel,
                                                          ("p = tl.exp(x - lse)", "p = tl.exp(x) / tl.exp(lse)")))),
         Wrong("dloss left out", "values", "are wrong",
               dict(cross_entropy_backward_kernel=patched(cross_entropy_backward_kernel, (" * dloss\n", "\n")))),
         Wrong("range(0, V - BLOCK_V, BLOCK_V)", "memory", "left unwritten",
               dict(cross_entropy_backward_kernel=patched(cross_entropy_backward_kernel,
                                                          ("range(0, V, BLOCK_V)", "range(0, V - BLOCK_V, BLOCK_V)")))),
         Wrong("x's row stride for dx", "memory", "past the end of dx",
               dict(cross_entropy_backward_kernel=patched(cross_entropy_backward_kernel,
                                                          ("dx_ptr + row * stride_dxm", "dx_ptr + row * stride_xm"))))]
