"""Exercise 5.7 (write): flash-decoding's merge, the partial softmaxes of a row's key shares made one.

The statement. At decode time (decode.py) the keys of a row are split into S shares, and one
program per share walks its keys with the online softmax. Share s leaves two things per query row
r: o_s = part_o[s, r, :], its output normalized by its own sum (sum over its keys j of
2^(score_j - m) v_j / sum of 2^(score_j - m)), and lse_s = part_lse[s, r], the base-2 log of that
sum with the max put back: lse_s = log2(sum over its keys of 2^score_j). A share whose keys the
row's causal mask hides saw nothing: lse_s = -inf (and o_s = 0).

Write the merge, one program per row, in float32 (the loads are given):
- the row's output o = sum_s 2^lse_s o_s / sum_s 2^lse_s (each share weighed by its sum), and
- its lse = log2(sum_s 2^lse_s),
without computing 2^lse_s itself: lse_s can be 300, and 2^128 is already past float32's largest.
Take the largest lse_s, m, out of every exponent, as the softmax does (lesson 2): the weights
w_s = 2^(lse_s - m) are at most 1, o = sum_s w_s o_s / sum_s w_s, lse = m + log2(sum_s w_s). A row
that no share let see a key has every lse_s = -inf: its o is 0 and its lse -inf (and -inf - -inf
is NaN: guard m). About 6 lines.

The cases: one share (the merge must give it back unchanged); three shares of random sums; lse of
100 to 300 (2^lse overflows); shares that saw nothing (lse_s = -inf) beside ones that did; rows
that no share let see a key; 16 shares, the most the kernel loads (MAX_SPLITS), and 5 of 16.

Run it: python lesson05_flash_attention/exercises/merge_splits.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def merge_kernel(part_o_ptr, part_lse_ptr, o_ptr, lse_ptr, num_splits, rows,
                 HEAD_DIM: tl.constexpr, MAX_SPLITS: tl.constexpr):
    """o[row] and lse[row] from the num_splits shares' part_o[:, row] and part_lse[:, row]."""
    row = tl.program_id(axis=0)                        # one program per query row
    splits = tl.arange(0, MAX_SPLITS)
    dims = tl.arange(0, HEAD_DIM)
    lse_s = tl.load(part_lse_ptr + splits * rows + row, mask=splits < num_splits,
                    other=float("-inf"))               # [MAX_SPLITS]: -inf past the last share
    o_s = tl.load(part_o_ptr + (splits[:, None] * rows + row) * HEAD_DIM + dims[None, :],
                  mask=splits[:, None] < num_splits, other=0.0)  # [MAX_SPLITS, HEAD_DIM]

    # (yours) the largest lse_s, the weights, their sum: the row's output and its lse
    out = tl.zeros([HEAD_DIM], dtype=tl.float32)      # (yours) replace
    lse = tl.max(lse_s, axis=0)                        # (yours) replace

    tl.store(o_ptr + row * HEAD_DIM + dims, out)
    tl.store(lse_ptr + row, lse)


def launch(merge_kernel, part_o, part_lse, o, lse, MAX_SPLITS=16):
    """Given: one program per row; part_o (S, rows, HEAD_DIM), part_lse (S, rows), contiguous."""
    S, rows, D = part_o.shape
    assert S <= MAX_SPLITS
    merge_kernel[(rows,)](part_o, part_lse, o, lse, S, rows, HEAD_DIM=D, MAX_SPLITS=MAX_SPLITS)


def reference(part_o, part_lse):
    """The merge in torch: lse = log2(sum_s 2^lse_s) by logsumexp, each share's weight 2^(lse_s - lse);
    a row no share let see a key: o 0, lse -inf."""
    ln2 = 0.6931471805599453
    lse = torch.logsumexp(part_lse * ln2, dim=0) / ln2
    seen = torch.isfinite(lse)
    w = torch.where(seen, torch.exp2(part_lse - torch.where(seen, lse, 0.0)), 0.0)  # (S, rows)
    return {"o": (w[..., None] * part_o).sum(dim=0), "lse": lse}


def case(name: str, S: int, rows: int = 12, D: int = 16, lse: str = "normal") -> Case:
    g = torch.Generator().manual_seed(S * 17 + rows + D)
    part_o = torch.randn(S, rows, D, generator=g)
    part_lse = torch.randn(S, rows, generator=g) * 4 + 6
    if lse == "large":       # sums of 2^100 to 2^300: past float32's largest, 2^128
        part_lse = torch.rand(S, rows, generator=g) * 200 + 100
    elif lse == "hidden":    # every other share of a row saw no key
        hidden = (torch.arange(S)[:, None] + torch.arange(rows)[None, :]) % 2 == 0
        part_lse = part_lse.masked_fill(hidden, float("-inf"))
        part_o = part_o.masked_fill(hidden[..., None], 0.0)
    elif lse == "unseen":    # rows 0 to 3 saw no key in any share
        part_lse[:, :4] = float("-inf")
        part_o[:, :4] = 0.0
    return Case(f"{name}: {S} share{'s' if S > 1 else ''}, {rows} rows, head dim {D}", dict(part_o=part_o, part_lse=part_lse))


EXERCISE = Exercise(
    lesson="lesson05_flash_attention", name="merge_splits", kind="write", parts=("merge_kernel",),
    stub="f35ef8870cfc", launch=launch, reference=reference, lines=6,
    cases=[case("one share", 1), case("three shares", 3, rows=20, D=32), case("large sums", 4, lse="large"),
           case("shares that saw nothing", 5, lse="hidden"), case("rows that saw nothing", 3, lse="unseen"),
           case("the most shares", 16, rows=7), case("5 of 16", 5, rows=9)],
    bench_case=lambda: case("bench", 16, rows=16 * 32 * 4, D=128),
    hints=["Each share's sum is 2^lse_s. Too large to compute, but only the ratios matter: divide every sum by "
           "the largest, 2^m with m = tl.max(lse_s, axis=0), and the weights w_s = 2^(lse_s - m) are in (0, 1]. "
           "A share that saw nothing has lse_s = -inf and weight 0.",
           "total = tl.sum(w, axis=0); out = tl.sum(o_s * w[:, None], axis=0) / total; lse = m + log2(total). "
           "A row with every lse_s = -inf has m = -inf, and -inf - -inf is NaN: use m_safe = tl.where(m == -inf, 0.0, m) "
           "in the exponent, and guard the division and the log where total is 0.",
           "m = tl.max(lse_s, axis=0); m_safe = tl.where(m == float('-inf'), 0.0, m); w = tl.exp2(lse_s - m_safe); "
           "total = tl.sum(w, axis=0); out = tl.sum(o_s * w[:, None], axis=0) / tl.where(total > 0, total, 1.0); "
           "lse = tl.where(total > 0, m_safe + tl.log2(tl.where(total > 0, total, 1.0)), float('-inf'))."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
