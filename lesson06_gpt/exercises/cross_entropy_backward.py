"""Exercise 6.2 (write): cross-entropy's backward, dlogits = (softmax(x) - onehot(t)) * dloss, tile by tile.

Worth doing after section 7 (what a training step keeps for the backward).

The statement. A language model's loss, for one row of logits x (V of them, a score per token of
the vocabulary) and its target t, is loss = lse - x[t] with lse = logsumexp(x). Its gradient is

    dx[j] = (p[j] - (j == t)) * dloss,      p = softmax(x) = exp(x - lse),

where dloss = dL/dloss is the row's gradient from above (1/M for a mean over M rows, say). The
forward (lesson02_softmax/cross_entropy.py) stored lse, one float32 per row, and never the
probabilities: the backward recomputes p from x and lse, a tile at a time, and writes dx in one
walk. Write it: one program per row (the launcher below is given, grid (M,)), the row walked in
tiles of BLOCK_V columns (V is many tiles long in some cases, and not a multiple of the tile),
each tile loaded, turned into its dx and stored. x is M x V, float32, float16 or bfloat16, rows
stride_xm elements apart (a slice of a wider tensor in one case), columns contiguous; targets (M,)
int64, each in [0, V); lse and dloss (M,) float32. dx has x's shape and dtype, rows stride_dxm
apart; the arithmetic in float32, one rounding, at the store. Use the stored lse: exp(x - lse) is at
most 1, whereas exp(x) alone overflows float32 once a logit passes 88. About 10 lines.

The check: your dx against torch's autograd, F.cross_entropy(x, targets, reduction="none")
.backward(dloss), in float64 (the tolerance from its error in the dtype).

The cases: one column (p = 1 and the target is it: dx = 0 everywhere, so a missing onehot shows);
V = 127, 128 and 129 in tiles of 128 (the last with a tile of one column, and a target in it);
1000 columns in tiles of 256 with targets 0, 999 (the last, partial tile) and between; logits
near 100 (exp(x) overflows float32, exp(x - lse) does not); a slice of rows 1024 apart; float16 and
bfloat16 logits. The logits are not symmetric, each row has its own targets and its own dloss.

Run it: python lesson06_gpt/exercises/cross_entropy_backward.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def cross_entropy_backward_kernel(x_ptr, t_ptr, lse_ptr, dloss_ptr, dx_ptr, V, stride_xm, stride_dxm,
                                  BLOCK_V: tl.constexpr):
    """dx[row] = (exp(x[row] - lse[row]) - onehot(t[row])) * dloss[row]: program `row` walks its row in
    tiles of BLOCK_V columns, once, the arithmetic in fp32."""
    pass


def launch(cross_entropy_backward_kernel, x, targets, lse, dloss, dx, BLOCK_V=128):
    """Given: one program per row, BLOCK_V columns at a time."""
    M, V = x.shape
    cross_entropy_backward_kernel[(M,)](x, targets, lse, dloss, dx, V, x.stride(0), dx.stride(0), BLOCK_V=BLOCK_V)


def reference(x, targets, lse, dloss):
    """torch's autograd of the loss per row, in float32 (float64 for the exact yardstick); lse unused."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf = x.detach().to(acc).requires_grad_(True)
    F.cross_entropy(xf, targets, reduction="none").backward(dloss.to(acc))
    return {"dx": xf.grad.to(x.dtype)}


def case(M: int, V: int, BLOCK_V: int, dtype=torch.float32, targets=None, shift: float = 0.0,
         stride: int | None = None, seed: int = 0) -> Case:
    i = torch.arange(M * V, dtype=torch.float64).reshape(M, V)
    x = 3 * torch.sin(0.537 * i + seed) + 1.5 * torch.cos(0.071 * i) + 0.4 + shift  # not symmetric
    x = x.to(dtype)
    if targets is None:
        targets = [(7 * m + 3 * seed) % V for m in range(M)]
    t = torch.tensor(targets, dtype=torch.int64)
    lse = torch.logsumexp(x.float(), dim=1)                        # what the forward stored, float32
    dloss = (1.0 + 0.5 * torch.arange(M, dtype=torch.float32)) / M  # the mean's 1/M, each row its own
    if stride is not None:  # a slice of a wider tensor: rows `stride` elements apart
        x = torch.cat([x, torch.zeros(M, stride - V, dtype=dtype)], dim=1)[:, :V]
    name = (f"{M} x {V} in tiles of {BLOCK_V}, {str(dtype)[6:]}"
            + (f", targets {', '.join(map(str, targets))}" if M <= 4 else "")
            + (f", logits near {shift:g}" if shift else "") + (f", rows {stride} apart" if stride else ""))
    return Case(name, dict(x=x, targets=t, lse=lse, dloss=dloss), dict(BLOCK_V=BLOCK_V))


EXERCISE = Exercise(
    lesson="lesson06_gpt", name="cross_entropy_backward", kind="write", parts=("cross_entropy_backward_kernel",),
    stub="921cd512d6f0", launch=launch, reference=reference, lines=10,
    cases=[case(2, 1, 128, targets=[0, 0]), case(3, 127, 128, seed=1), case(3, 128, 128, targets=[0, 127, 64]),
           case(3, 129, 128, targets=[128, 5, 127]), case(4, 1000, 256, targets=[0, 999, 500, 767], seed=2),
           case(2, 300, 128, targets=[299, 17], shift=100.0, seed=3),
           case(3, 1000, 256, targets=[998, 1, 256], stride=1024, seed=4),
           case(2, 500, 128, torch.float16, targets=[499, 3], seed=5),
           case(2, 700, 256, torch.bfloat16, targets=[600, 0], seed=6)],
    bench_case=lambda: case(1024, 50304, 4096, torch.bfloat16),
    hints=["Before the loop, load the row's three numbers: its target, its lse and its dloss "
           "(tl.load(t_ptr + row) and so on). Then one loop, for start in range(0, V, BLOCK_V), over the "
           "tiles cols = start + tl.arange(0, BLOCK_V): load, p = tl.exp(x - lse), dx, store.",
           "The onehot is where the column is the target: tl.where(cols == target, 1.0, 0.0), with cols the "
           "row's column numbers (start + ...), not the lane numbers within the tile. Convert x with "
           ".to(tl.float32) as it is loaded, and mask the load and the store with cols < V.",
           "In float32: p from x and the stored lse, never from exp(x) alone; the one-hot from the column numbers "
           "against the target; both times dloss. What goes out is rounded once, to dx's dtype, under the mask "
           "that the load used."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
