"""Exercise 2.4 (write): softmax's backward, dx = y * (dy - rowsum(dy * y)), each input read once.

Worth doing after section 8 (training).

The statement. In training, autograd keeps the forward's output y = softmax(x) (shape (M, N),
rows contiguous, float32, float16 or bfloat16) and hands the backward dy = dL/dy, of y's shape
and dtype. Over one row, the derivative of y_j with respect to x_i is y_j (delta_ij - y_i), so
the chain rule gives dx = dL/dx:

    dx_i = sum_j dy_j y_j (delta_ij - y_i) = y_i (dy_i - s),    s = sum_j dy_j y_j:

one row reduction (s, the dot product of dy and y) and then an element-wise step. Write the
kernel: one program per row, the row in one block of BLOCK_N lanes (the launcher is given:
BLOCK_N = next power of two >= N), the arithmetic in float32, dx stored in its dtype. y and dy
are each read exactly once (counted: more than one load per element fails the budget): load a
block once, keep it in a variable, use it twice. About 8 lines.

The check: your dx against torch's autograd, torch.softmax(x, dim=1).backward(dy), in float64
(the tolerance from autograd's own error in the dtype); x is there for that reference, the kernel
never sees it (y is softmax(x) in the dtype, as the forward would have saved it).

The cases: a single element (y = 1: dx = 0); rows of 5, 127, 128, 129 and 1000 (one lane short of
a power of two, exactly one, one past); float16 and bfloat16; x from -8 to 8 and dy of both signs,
neither symmetric nor constant along a row (a constant dy gives dx = 0 whatever the kernel does).

Run it: python lesson02_softmax/exercises/softmax_backward.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def softmax_backward_kernel(y_ptr, dy_ptr, dx_ptr, N, stride_ym, stride_dym, stride_dxm, BLOCK_N: tl.constexpr):
    """dx[row] = y[row] * (dy[row] - sum(dy[row] * y[row])), for row = this program's."""
    pass


def launch(softmax_backward_kernel, x, y, dy, dx):
    """Given: one program per row, the row in one block (x is the reference's; the kernel needs y and dy)."""
    M, N = y.shape
    softmax_backward_kernel[(M,)](y, dy, dx, N, y.stride(0), dy.stride(0), dx.stride(0),
                                  BLOCK_N=triton.next_power_of_2(N))


def reference(x, y, dy):
    """torch's autograd: the gradient of sum(softmax(x) * dy) with respect to x."""
    x = x.detach().clone().requires_grad_(True)
    torch.softmax(x, dim=1).backward(dy.to(x.dtype))
    return {"dx": x.grad}


def case(M: int, N: int, dtype=torch.float32, seed: int = 0) -> Case:
    i = torch.arange(M * N, dtype=torch.float64).reshape(M, N)
    x = (8 * torch.sin(0.613 * i + seed)).to(dtype)               # -8..8: y from about 1e-7 to near 1
    dy = (torch.cos(0.377 * i + 2.0 * seed) - 0.25 + 0.1 * (i % 3)).to(dtype)  # both signs, not constant
    y = torch.softmax(x, dim=1)                                    # what the forward saved, in the dtype
    return Case(f"{M} x {N}, {str(dtype)[6:]}", dict(x=x, y=y, dy=dy))


EXERCISE = Exercise(
    lesson="lesson02_softmax", name="softmax_backward", kind="write", parts=("softmax_backward_kernel",),
    stub="5a37cabadd3d", launch=launch, reference=reference, lines=8,
    budget={"y": 1, "dy": 1}, budget_note="Load each block of y and dy once, into a variable, and use that variable "
                                          "for the sum and for dx.",
    cases=[case(1, 1), case(4, 5, seed=1), case(3, 127, seed=2), case(3, 128, seed=3), case(3, 129, seed=4),
           case(2, 1000, seed=5), case(3, 129, torch.float16, seed=6), case(2, 1000, torch.bfloat16, seed=7)],
    bench_case=lambda: Case("4096 x 4096, float32", case(4096, 4096).inputs),
    hints=["Two steps, in this order: first s = sum over the row of dy * y (one number per row: a reduction, like the "
           "forward's sum), then dx = y * (dy - s) for every element.",
           "The masked lanes must add nothing to s: load them as 0 (other=0.0), so that dy * y = 0 there. Load y "
           "and dy once each, convert them to float32, and use the same two blocks in both steps.",
           "row = tl.program_id(axis=0); cols = tl.arange(0, BLOCK_N); mask = cols < N; y = tl.load(y_ptr + row * "
           "stride_ym + cols, mask=mask, other=0.0).to(tl.float32), the same for dy; s = tl.sum(dy * y, axis=0); "
           "tl.store(dx_ptr + row * stride_dxm + cols, (y * (dy - s)).to(dx_ptr.dtype.element_ty), mask=mask)."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
