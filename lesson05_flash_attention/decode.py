"""Decoding: a few new queries against a long KV cache, the keys split between programs.

A model generating text runs attention once per new token: one query per head against every key
cached so far, thousands of them. attention.py's launch gives each (batch, query head) one program and a
block of query rows, so at decode time it launches B x H programs of one real row each, each
streaming a whole head of keys and values, and every query head of a group reads its key head again.
On 16 x 32 heads that is 512 programs on 132 SMs, each walking 8192 keys alone: the work is all
memory traffic (a query row is one vector, not a tile), and too few programs are reading it.

Two changes give the GPU the parallelism back (FlashAttention's "flash-decoding"), both options of
attention.py's attention_kernel, which attention.py hands to this file's launch (its route sends
decoding here: takes(), below):

- PACKED: the query heads of a group in one block's rows. The GROUP query heads that read key head
  hk, times seq_q queries each, are rows of one tile: row r is query head hk * GROUP + r // seq_q,
  query r % seq_q. K and V are read once per key head instead of once per query head, and the
  tile has GROUP x seq_q real rows instead of seq_q (tl.dot wants at least 16).
- share_len: the keys split between programs (lesson 3's split rows, for attention): each program
  walks one share of the keys with the online softmax, and writes its partial output, normalized by
  its own sum, and log2 of that sum, lse_s (attention.py's base-2 lse). A second kernel, here, merges the
  shares of each row exactly: o = sum_s 2^lse_s o_s / sum_s 2^lse_s, lse = log2(sum_s 2^lse_s),
  computed from the largest lse_s as the softmax is. A share whose keys a row's causal mask hides
  gives lse_s = -inf and weight 0. (Exercise 5.7, exercises/merge_splits.py, has you write that merge.)

The output and lse are the kernel's own, so backward.py's backward serves these too.
"""
from common.device import INTERPRET, interpretable  # first: it decides how triton is imported

import torch
import triton
import triton.language as tl

from common import checks
from common.launch import cdiv, dot_block, next_power_of_2, splits_to_fill

MAX_ROWS = 64       # GROUP x seq_q rows, packed into one block: more than that is not decoding
MAX_TILE = 64 * 64  # and the packed query tile (rows x BLOCK_D) at most 64 x 64 elements (head dim 256: 16 rows)
MIN_KEYS = 512      # fewer keys than that: attention.py's plain launch, for there is little to split
MIN_SHARE = 512     # keys per program, at least: a share shorter than that costs more to merge
SHARE_ALIGN = 128   # choose_splits's shares are rounded up to it: none ends in a part-filled key block
MAX_SPLITS = 16     # the most shares of one row (the merge loads them all at once)


def max_rows(head_dim: int) -> int:
    """The most packed rows (GROUP x seq_q) a block takes: MAX_ROWS, fewer where the head dim is wide
    (the tile of queries stays within MAX_TILE elements, so that the last configuration below fits a
    T4's shared memory in float32)."""
    return min(MAX_ROWS, MAX_TILE // dot_block(head_dim))


def takes(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Is this decoding? A few query rows per key head (GROUP x seq_q, max_rows) against many keys."""
    return q.shape[2] * (q.shape[1] // k.shape[1]) <= max_rows(q.shape[3]) and k.shape[2] >= MIN_KEYS


def choose_splits(programs: int, seq_k: int) -> int:
    """How many programs share a row's keys: as lesson 3's row sums, enough for 4 programs per SM
    where the packed blocks alone (B x H_KV of them) give fewer, but no more than seq_k // MIN_SHARE
    (shares of at least MIN_SHARE keys) or MAX_SPLITS. More programs than that only add partial
    results to merge."""
    return splits_to_fill(programs, min(seq_k // MIN_SHARE, MAX_SPLITS))


@triton.jit
def combine_splits_kernel(
    part_o_ptr, part_lse_ptr, o_ptr, lse_ptr, num_splits, H, seq_q, rows_total,  # rows: B x H x seq_q
    stride_ob, stride_oh, stride_on, stride_od,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MAX_SPLITS: tl.constexpr, INDEX_TYPE: tl.constexpr = tl.int32,
):
    row = tl.program_id(axis=0).to(INDEX_TYPE)    # one program per query row (b, h, i)
    splits = tl.arange(0, MAX_SPLITS).to(INDEX_TYPE)
    real_split = splits < num_splits
    dims = tl.arange(0, BLOCK_D)
    real_dim = dims < HEAD_DIM
    lse_s = tl.load(part_lse_ptr + splits * rows_total + row, mask=real_split, other=float("-inf"))
    m = tl.max(lse_s, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # a row that no share lets see a key: weights all 0
    w = tl.exp2(lse_s - m_safe)                    # each share's sum, over the largest
    total = tl.sum(w, axis=0)
    o_s = tl.load(part_o_ptr + (splits[:, None] * rows_total + row) * HEAD_DIM + dims[None, :],
                  mask=real_split[:, None] & real_dim[None, :], other=0.0)
    out = tl.sum(o_s * w[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    lse = tl.where(total > 0, m_safe + tl.log2(tl.where(total > 0, total, 1.0)), float("-inf"))
    b, h, i = row // (H * seq_q), row // seq_q % H, row % seq_q
    tl.store(lse_ptr + row, lse)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + i * stride_on + dims * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=real_dim)


# The split launch's block sizes (attention.py applies them to attention_kernel: attention_kernel_decode):
# BLOCK_M is the launcher's (the packed rows, at least 16), the key block and the pipeline's depth are
# tuned per share length. The last fits every GPU's shared memory in float32 at head dim 256
# (tests/test_gpus.py); it is also what small problems run untimed.
GPU_CONFIGS = [triton.Config({"BLOCK_N": bn}, num_warps=w, num_stages=s)
               for bn, w, s in [(64, 4, 2), (128, 4, 2), (64, 4, 3), (128, 8, 3), (16, 4, 1)]]
CONFIGS = [triton.Config({"BLOCK_N": 32})] if INTERPRET else GPU_CONFIGS
KEY = ["share_len", "BLOCK_M", "BLOCK_D", "CAUSAL"]


def small_problems_untuned(configs, named_args, **kwargs):
    """Every configuration from a share of MIN_SHARE keys up (what the tuning is worth), else the last."""
    return configs if named_args["share_len"] >= MIN_SHARE else configs[-1:]


PRUNE = {"early_config_prune": small_problems_untuned}


def launch(q, k, v, causal: bool, sm_scale: float, *, split_kernel, num_splits: int | None = None) -> tuple:
    """The same (o, lse) as attention.launch, computed by split_kernel (attention.py's
    attention_kernel_decode) over the shares of the keys, then combine_splits_kernel (where there is
    more than one share). num_splits: the shares of each row's keys, 1 to MAX_SPLITS, by
    default choose_splits's (the tests pick it); the count used is cdiv(seq_k, share_len), which
    rounding the shares up can make smaller."""
    B, H, seq_q, D = q.shape
    H_KV, seq_k = k.shape[1], k.shape[2]
    group = H // H_KV
    o = torch.empty_like(q)
    lse = q.new_empty((B, H, seq_q), dtype=torch.float32)
    if num_splits is not None and not 1 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits must be from 1 to {MAX_SPLITS}, got {num_splits}")
    if q.numel() == 0:
        return o, lse
    if seq_k == 0:  # no key at all: every output is 0 (as attention.launch has it)
        return o.zero_(), lse.fill_(float("-inf"))
    if num_splits is None:
        num_splits = choose_splits(B * H_KV, seq_k)
        share_len = cdiv(cdiv(seq_k, num_splits), SHARE_ALIGN) * SHARE_ALIGN
    else:
        share_len = cdiv(seq_k, num_splits)
    num_splits = cdiv(seq_k, share_len)  # the shares that hold keys (rounding can leave fewer)
    if num_splits == 1:  # one share: its output is the output
        part_o, part_lse = o, lse
    else:  # the partial results, float32, (num_splits, B, H, seq_q[, D]): share s's rows s * B * H * seq_q on
        part_o = q.new_empty((num_splits, B, H, seq_q, D), dtype=torch.float32)
        part_lse = q.new_empty((num_splits, B, H, seq_q), dtype=torch.float32)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    index = checks.index_type(q, k, v, o, part_o)
    q, k, v = interpretable(q), interpretable(k), interpretable(v)
    dims = dict(HEAD_DIM=D, BLOCK_D=dot_block(D), INDEX_TYPE=index)
    o_strides = part_o.stride()[-4:]  # (b, h, query, dim) of one share
    split_kernel[(num_splits * B * H_KV,)](  # (every argument, TRACE too: attention.launch says why)
        q, k, v, part_o, part_lse, sm_scale, H, group, seq_q, seq_k, share_len,
        part_o.stride(0) if num_splits > 1 else 0, part_lse.stride(0) if num_splits > 1 else 0,
        *q.stride(), *k.stride(), *v.stride(), *o_strides, BLOCK_M=max(16, next_power_of_2(group * seq_q)),
        CAUSAL=causal, PACKED=True, INPUT_PRECISION=precision, TRACE=False, **dims)
    if num_splits > 1:
        rows_total = B * H * seq_q
        combine_splits_kernel[(rows_total,)](part_o, part_lse, o, lse, num_splits, H, seq_q, rows_total, *o.stride(),
                                             MAX_SPLITS=MAX_SPLITS, **dims)
    return o, lse
