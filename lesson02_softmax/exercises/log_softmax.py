"""Exercise 2.2 (write): log-softmax over rows, one program per row, -inf in the padding.

Worth doing after section 2 (the fused kernel) and the trace of section 5.

The statement. x is a 2-D tensor of shape (M, N) (float32 or float16; its columns contiguous, its
rows x.stride(0) elements apart, which can be more than N: a view of a wider tensor); y has x's
shape and dtype, contiguous. Compute, over each row,

    log_softmax(x)_j = x_j - m - log(sum_k exp(x_k - m)),    m = max_k x_k,

the arithmetic in float32, stored rounded to y's dtype. Subtracting m changes nothing in exact
arithmetic and everything in float32: exp(100) overflows it (its largest value is about e^88.7),
and so does a sum of exp(x) over a row of values near 100. Write both parts:
- log_softmax_kernel: one program per row, holding the whole row in one block of BLOCK_N lanes;
  the lanes past N are masked, and the masked lanes take part in the max and the sum, so the
  padding must change neither: about 7 lines;
- launch: the grid and BLOCK_N. tl.arange(0, BLOCK_N) needs a power of two, and N is rarely
  one: BLOCK_N is the next power of two >= N (triton.next_power_of_2): 3 lines.
The same steps as softmax_kernel of section 2 with BLOCK_M = 1, one step changed at the end; do
not copy that kernel: write this one from the formula.

The cases: 1 x 1 (BLOCK_N = 1: log_softmax is 0); rows of 5, all negative (padding with 0 would
win the max and add three exp(0) = 1 to the sum); rows of 127, 128 and 129 (one lane short of a
power of two, exactly one, one past: 128 is the only one where a wrong padding hides); rows of
1000 values near 100 (exp overflows float32 unless the max is subtracted); rows of -100 and
below (exp underflows: without the max, the sum is 0 and its log -inf); rows from -70 to 70
(exp(x - m) underflows to 0 below about -104, so log(softmax(x)) is -inf where log_softmax is a
finite -140: the reason log_softmax is a function of its own); 300 columns of a view with rows
512 apart (the row stride is not N); float16 rows of 129. No row is symmetric.

Run it: python lesson02_softmax/exercises/log_softmax.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    """y[row] = x[row] - max(x[row]) - log(sum(exp(x[row] - max(x[row])))), for row = this program's."""
    pass


def launch(log_softmax_kernel, x, y):
    """Yours to write: one program per row of x, BLOCK_N a power of two >= N, passed by keyword."""
    pass


def reference(x):
    return {"y": torch.log_softmax(x, dim=1)}


def rows(M: int, N: int, scale: float = 3.0, shift: float = 0.0, seed: int = 0) -> torch.Tensor:
    """M rows of N asymmetric values (a sine with an irrational step, each row its own phase)."""
    i = torch.arange(M * N, dtype=torch.float64).reshape(M, N)
    return (scale * torch.sin(0.731 * i + 1.3 * seed + 0.5) + shift + 0.01 * (i % 7)).float()


def case(name: str, x: torch.Tensor, dtype=torch.float32) -> Case:
    return Case(f"{name}, {x.shape[0]} x {x.shape[1]}, {str(dtype)[6:]}", dict(x=x.to(dtype)))


def strided_view() -> torch.Tensor:
    return rows(4, 512, seed=5)[:, :300]  # rows 512 apart, 300 columns each


EXERCISE = Exercise(
    lesson="lesson02_softmax", name="log_softmax", kind="write", parts=("log_softmax_kernel", "launch"),
    stub="3e7b57fb54ef", reference=reference, lines=7,
    cases=[case("one element", torch.tensor([[0.7]])),
           case("all negative", rows(4, 5, scale=2.0, shift=-5.0, seed=1)),
           case("one lane short", rows(3, 127, seed=2)), case("a power of two", rows(3, 128, seed=3)),
           case("one past", rows(3, 129, seed=4)),
           case("values near 100", rows(2, 1000, scale=1.0, shift=100.0, seed=6)),
           case("values near -100", rows(2, 200, scale=5.0, shift=-105.0, seed=7)),
           case("values 140 apart", rows(2, 64, scale=70.0, seed=9)),
           case("rows 512 apart", strided_view()),
           case("one past", rows(3, 129, scale=4.0, seed=8), dtype=torch.float16)],
    bench_case=lambda: Case("4096 x 4096, float32", dict(x=torch.randn(4096, 4096))),
    hints=["A program owns row r = tl.program_id(axis=0): cols = tl.arange(0, BLOCK_N), mask = cols < N, and the "
           "row starts at x_ptr + r * stride_xm (not r * N). In launch: M, N = x.shape; "
           "BLOCK_N = triton.next_power_of_2(N); grid (M,).",
           "Load with other=float('-inf'): -inf never wins a max, and exp(-inf - m) = 0 adds nothing to the sum. "
           "Then m = tl.max(x, axis=0), z = x - m, and log(sum(exp(z))) is one number per row.",
           "x = tl.load(x_ptr + r * stride_xm + cols, mask=mask, other=float('-inf')).to(tl.float32); "
           "z = x - tl.max(x, axis=0); y = z - tl.log(tl.sum(tl.exp(z), axis=0)); "
           "tl.store(y_ptr + r * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
