"""Exercise 1.5 (stretch, optimise to a budget): SwiGLU's gate, out = silu(a) * b, each input read once.

The statement. Llama's feed-forward layer computes silu(a) * b, with silu(a) = a * sigmoid(a) =
a / (1 + exp(-a)), on two tensors of one shape (float32, float16 or bfloat16). In PyTorch that is
F.silu(a) * b: two kernels, and the silu's result written to memory and read back. Fuse it: one
kernel, a and b each read exactly once, out written once, the arithmetic in float32. The budget
is checked: every element load of a and b is counted (under the interpreter), and more than one
load per element fails it. About 8 lines.

The cases: N = 1, 1000 and 4097 with blocks of 256 and 1024, the three dtypes, values from -8 to 8
(sigmoid's tails: exp(-a) overflows float16 for a < -11, so compute in float32).

Run it: python lesson01_vector_add/exercises/swiglu.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def swiglu_kernel(a_ptr, b_ptr, out_ptr, N, BLOCK_SIZE: tl.constexpr):
    """out = a * sigmoid(a) * b, in float32, stored in out's dtype."""
    pass


def launch(swiglu_kernel, a, b, out, BLOCK_SIZE=1024):
    N = a.numel()
    swiglu_kernel[(cdiv(N, BLOCK_SIZE),)](a, b, out, N, BLOCK_SIZE=BLOCK_SIZE)


def reference(a, b):
    return {"out": F.silu(a) * b}


def case(N: int, BLOCK_SIZE: int, dtype=torch.float32) -> Case:
    a = torch.linspace(-8, 8, N).mul(1.37).remainder(16).sub(8).to(dtype)  # -8..8, shuffled
    b = torch.arange(N, dtype=torch.float32).mul(0.29).cos().to(dtype)
    return Case(f"N = {N}, BLOCK_SIZE {BLOCK_SIZE}, {str(dtype)[6:]}", dict(a=a, b=b), dict(BLOCK_SIZE=BLOCK_SIZE))


EXERCISE = Exercise(
    lesson="lesson01_vector_add", name="swiglu", kind="optimise", parts=("swiglu_kernel",), stub="5c82ef92f6ac",
    launch=launch, reference=reference, lines=8, stretch=True,
    budget={"a": 1, "b": 1}, budget_note="Load each block once, into a variable, and use that variable twice.",
    cases=[case(1, 256), case(1000, 256), case(4097, 1024, torch.float16), case(4097, 256, torch.bfloat16)],
    bench_case=lambda: case(1 << 24, 1024, torch.bfloat16),
    hints=["The six steps again; the formula a * sigmoid(a) * b uses a twice, but memory need not be read twice.",
           "tl.sigmoid(x) exists; so does 1 / (1 + tl.exp(-x)). Either way, convert the loaded blocks with "
           ".to(tl.float32) first.",
           "a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32), the same for b; "
           "out = a * tl.sigmoid(a) * b; tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
