"""Exercise 2.3 (stretch, optimise to a budget): softmax of rows longer than a block, in two walks.

Worth doing after section 3 (the online softmax).

The statement. x is a 2-D tensor of shape (M, N), rows x.stride(0) apart and columns contiguous
(float32 or bfloat16); y has its shape and dtype, contiguous. Compute y = softmax(x) over each
row, the arithmetic in float32, with one program per row that holds only BLOCK_N columns at a
time (BLOCK_N, a power of two, is given, and N can be many times larger): the program walks its
row in tiles. The three-walk way (the max; then the sum of exp(x - max); then the output) reads
x three times. Do it in two:
- walk 1 keeps a running max m and a running sum l of exp(x - m) over the tiles seen so far;
  when a tile raises the max from m to m_new, everything in l was scaled by exp(-m) instead of
  exp(-m_new): multiply l by exp(m - m_new) before adding the tile's terms;
- walk 2 writes exp(x - m) / l, tile by tile.
The budget is checked: every element of x must be loaded exactly twice (counted under the
interpreter), so a third walk fails it, and so does a walk that skips a tile. About 16 lines.

One trap more: a row may begin with -inf (the masked positions of a causal mask), so a whole
first tile can be -inf. Then m_new = -inf, and -inf - (-inf) is NaN: where m_new is -inf,
subtract 0 instead (exp(-inf - 0) = 0 is right there). No row is -inf throughout.

The cases: N = 1 (one tile, all lanes but one masked); 100 columns in tiles of 16 (7 tiles, the
last ragged); 128 in tiles of 128 (the loop runs once, exactly); 129 in tiles of 64 (3 tiles,
the last with one lane); 1000 in tiles of 128 with the values rising along the row (the max
moves in every tile, so a missing rescale shows); all-negative rows near -100 (a running max
started at 0 instead of -inf leaves exp(x - 0) = 0 and a sum of 0); rows whose first 40 values
are -inf, in tiles of 16; a view of a wider tensor; bfloat16.

Run it: python lesson02_softmax/exercises/long_rows.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import numpy as np
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def online_softmax_kernel(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    """y[row] = softmax(x[row]), walking the row twice in tiles of BLOCK_N columns."""
    pass


def launch(online_softmax_kernel, x, y, BLOCK_N=128):
    """Given: one program per row; BLOCK_N columns at a time."""
    M, N = x.shape
    online_softmax_kernel[(M,)](x, y, N, x.stride(0), y.stride(0), BLOCK_N=BLOCK_N)


def reference(x):
    return {"y": torch.softmax(x, dim=1)}


def two_walks(log, x) -> str | None:
    """Every element of x loaded exactly twice: two walks, no tile skipped, none read thrice."""
    counts = np.zeros((x.shape[0] - 1) * x.stride(0) + (x.shape[1] - 1) * x.stride(1) + 1, dtype=np.int64)  # x's span
    for indices in log.elements("load", "x").values():
        np.add.at(counts, indices, 1)
    rows, cols = np.meshgrid(np.arange(x.shape[0]), np.arange(x.shape[1]), indexing="ij")
    counts = counts[(rows * x.stride(0) + cols * x.stride(1)).reshape(-1)]  # element (i, j) of the view
    off = np.flatnonzero(counts != 2)
    if off.size == 0:
        return None
    i, j = np.unravel_index(off[0], x.shape)
    times = counts[off[0]]
    walks = "a third walk: fold the max into the sum's walk" if times > 2 else "a tile skipped or a walk missing"
    return (f"x[{i}, {j}] was loaded {times} time{'s' if times != 1 else ''} ({off.size} of {x.numel()} elements "
            f"not loaded exactly twice); the budget is 2, one per walk: {walks}.")


def rows(M: int, N: int, scale: float = 4.0, shift: float = 0.0, rise: float = 0.0, seed: int = 0) -> torch.Tensor:
    i = torch.arange(M * N, dtype=torch.float64).reshape(M, N)
    j = torch.arange(N, dtype=torch.float64)
    return (scale * torch.sin(0.537 * i + 1.1 * seed + 0.3) + shift + rise * j / max(N, 1)).float()


def case(name: str, x: torch.Tensor, BLOCK_N: int, dtype=torch.float32) -> Case:
    return Case(f"{name}, {x.shape[0]} x {x.shape[1]} in tiles of {BLOCK_N}, {str(dtype)[6:]}", dict(x=x.to(dtype)),
                dict(BLOCK_N=BLOCK_N))


def masked_start() -> torch.Tensor:
    x = rows(2, 100, seed=6)
    x[:, :40] = float("-inf")  # the first two tiles of 16 all -inf, the third half
    return x


EXERCISE = Exercise(
    lesson="lesson02_softmax", name="long_rows", kind="optimise", parts=("online_softmax_kernel",),
    stub="b3d773f7b425", launch=launch, reference=reference, lines=16, stretch=True, budget_check=two_walks,
    cases=[case("one element", torch.tensor([[2.5]]), 16), case("ragged last tile", rows(3, 100, seed=1), 16),
           case("one tile exactly", rows(2, 128, seed=2), 128),
           case("one lane in the last tile", rows(2, 129, seed=3), 64),
           case("a rising max", rows(2, 1000, rise=30.0, seed=4), 128),
           case("all negative", rows(3, 100, scale=6.0, shift=-110.0, seed=5), 32),
           case("the first 40 columns -inf", masked_start(), 16),
           case("rows 300 apart", rows(3, 300, seed=7)[:, :250], 64),
           case("a rising max", rows(2, 300, rise=20.0, seed=8), 64, torch.bfloat16)],
    bench_case=lambda: Case("1024 x 131072 in tiles of 4096, float32", dict(x=torch.randn(1024, 131072)),
                            dict(BLOCK_N=4096)),
    hints=["Two loops over start in range(0, N, BLOCK_N), each loading the tile cols = start + tl.arange(0, BLOCK_N) "
           "with mask=cols < N and other=float('-inf'). Before the first: m = -inf and l = 0, as float32 scalars "
           "(tl.full([], float('-inf'), tl.float32), tl.zeros([], tl.float32)).",
           "In walk 1: m_new = tl.maximum(m, tl.max(x, axis=0)); l = l * exp(m - m_new) + sum(exp(x - m_new)); "
           "m = m_new. With m = -inf at the start, exp(m - m_new) = 0: nothing to rescale yet. Guard the -inf row "
           "start: m_safe = tl.where(m_new == float('-inf'), 0.0, m_new), and subtract m_safe instead of m_new.",
           "Walk 2: the same tiles again; tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) / l)"
           ".to(y_ptr.dtype.element_ty), mask=cols < N)."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
