"""SPOILER: the solution of exercise 5.7 (flash-decoding's merge, merge_splits), and wrong ones the tests check
the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "1d449bc9295c"  # common.exercise.given_fingerprint of merge_splits.py as the course ships it


@triton.jit
def merge_kernel(part_o_ptr, part_lse_ptr, o_ptr, lse_ptr, num_splits, rows,
                 HEAD_DIM: tl.constexpr, MAX_SPLITS: tl.constexpr):
    """o[row] and lse[row] from the num_splits shares' part_o[:, row] and part_lse[:, row]."""
    row = tl.program_id(axis=0)
    splits = tl.arange(0, MAX_SPLITS)
    dims = tl.arange(0, HEAD_DIM)
    lse_s = tl.load(part_lse_ptr + splits * rows + row, mask=splits < num_splits, other=float("-inf"))
    o_s = tl.load(part_o_ptr + (splits[:, None] * rows + row) * HEAD_DIM + dims[None, :],
                  mask=splits[:, None] < num_splits, other=0.0)
    m = tl.max(lse_s, axis=0)                          # the largest share's sum, as a log
    m_safe = tl.where(m == float("-inf"), 0.0, m)      # a row no share let see a key: every weight 0
    w = tl.exp2(lse_s - m_safe)                        # each share's sum over the largest: at most 1
    total = tl.sum(w, axis=0)
    out = tl.sum(o_s * w[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    lse = tl.where(total > 0, m_safe + tl.log2(tl.where(total > 0, total, 1.0)), float("-inf"))
    tl.store(o_ptr + row * HEAD_DIM + dims, out)
    tl.store(lse_ptr + row, lse)


# The mistakes, each an edit of the solution above (common.exercise.patched)
W = "w = tl.exp2(lse_s - m_safe)"
DIVIDED = " / tl.where(total > 0, total, 1.0)"
LSE = 'lse = tl.where(total > 0, m_safe + tl.log2(tl.where(total > 0, total, 1.0)), float("-inf"))'
WRONG = [Wrong("2^lse computed", "values", "case 'large sums",
               dict(merge_kernel=patched(merge_kernel, (W, "w = tl.exp2(lse_s)"), ("m_safe + tl.log2", "tl.log2")))),
         Wrong("-inf - -inf", "values", "case 'rows that saw nothing",
               dict(merge_kernel=patched(merge_kernel, (W, "w = tl.exp2(lse_s - m)"), (DIVIDED, " / total"),
                                         (LSE, "lse = m + tl.log2(total)")))),
         Wrong("not divided by the weights' sum", "values", "case 'three shares",
               dict(merge_kernel=patched(merge_kernel, (DIVIDED, "")))),
         Wrong("lse without the max", "values", "elements of lse are wrong",
               dict(merge_kernel=patched(merge_kernel, ("m_safe + tl.log2", "tl.log2"))))]
