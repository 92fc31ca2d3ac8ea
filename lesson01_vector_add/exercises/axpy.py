"""Exercise 1.1 (write): axpy, out = a * x + y, in one pass.

The statement. x and y are 1-D tensors of N elements (float32, float16 or bfloat16, one dtype), a
is a Python float, out has x's shape and dtype. Compute out[i] = a * x[i] + y[i] for every i, with
the arithmetic in float32 whatever the dtype, and store the result rounded to out's dtype. The
launcher below is given: one program per BLOCK_SIZE elements. Write the kernel's body, the six
steps of lesson 1 section 1 (pid, offsets, mask, load, compute, store): about 7 lines.

The cases: N = 1, 127, 128, 129, 1000 and 4099, with BLOCK_SIZE 128 or 1024 (the last block is
ragged in most of them, and N = 1 leaves all but one lane of the only program masked off),
values that are not symmetric (so that a + for a - or x for y shows), a = 1.5 and a = -3; and a
float16 case where a * x nearly cancels y (a * x near 450, the sum near 1), so that a * x rounded
to float16 on its own (an ulp of 0.25 there) shows against float32 arithmetic.

Run it: python lesson01_vector_add/exercises/axpy.py      (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
    """out[i] = a * x[i] + y[i] for the BLOCK_SIZE elements of this program."""
    pass


def launch(axpy_kernel, x, y, out, a, BLOCK_SIZE=1024):
    """Given: the grid covers N with blocks of BLOCK_SIZE (the last one ragged)."""
    N = x.numel()
    axpy_kernel[(cdiv(N, BLOCK_SIZE),)](x, y, out, a, N, BLOCK_SIZE=BLOCK_SIZE)


def reference(x, y, a):
    acc = torch.promote_types(x.dtype, torch.float32)  # float32, or float64 for the exact yardstick
    return {"out": (a * x.to(acc) + y.to(acc)).to(x.dtype)}


def cancelling(N: int = 300, a: float = 3.0) -> Case:
    """float16 x near 150 and y near -a * x: the sum is small, a * x alone is not."""
    x = torch.arange(N, dtype=torch.float32).mul(0.37).sin().mul(50).add(150).half()
    y = (-a * x.float() + torch.arange(N, dtype=torch.float32).mul(0.11).cos()).half()
    return Case(f"N = {N}, a = {a}, float16, a x near -y (they cancel)", dict(x=x, y=y, a=a), dict(BLOCK_SIZE=128))


def case(N: int, BLOCK_SIZE: int, a: float = 1.5, dtype=torch.float32) -> Case:
    x = torch.arange(N, dtype=torch.float32).mul(0.37).sin().add(0.1).to(dtype)  # no symmetry to hide a sign
    y = torch.arange(N, dtype=torch.float32).mul(0.11).cos().sub(0.3).to(dtype)
    return Case(f"N = {N}, BLOCK_SIZE {BLOCK_SIZE}, a = {a}, {str(dtype)[6:]}", dict(x=x, y=y, a=a),
                dict(BLOCK_SIZE=BLOCK_SIZE))


EXERCISE = Exercise(
    lesson="lesson01_vector_add", name="axpy", kind="write", parts=("axpy_kernel",), stub="21476b90c9ac",
    launch=launch, reference=reference, lines=7,
    cases=[case(1, 128), case(127, 128), case(128, 128), case(129, 128, a=-3.0), case(1000, 1024),
           case(4099, 1024, dtype=torch.float16), cancelling(), case(4099, 128, a=-3.0, dtype=torch.bfloat16)],
    bench_case=lambda: case(1 << 24, 1024),
    hints=["A program owns BLOCK_SIZE consecutive elements, starting at pid * BLOCK_SIZE: "
           "pid = tl.program_id(axis=0), offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE).",
           "The last program's offsets run past N: mask = offsets < N, and give that mask to every tl.load "
           "and to the tl.store, so that the lanes past the end read and write nothing.",
           "Load x and y under the mask and convert each to float32 as it arrives; compute in float32, and "
           "convert to the output's dtype (out_ptr.dtype.element_ty) only at the store, under the same mask."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
