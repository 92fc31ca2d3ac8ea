"""Attention as models call it: grouped-query heads, cross-attention, any head dim up to 256.

main.py's kernel is the chapter's case, kept plain for its trace: q, k and v of one shape, a
head dim of 16, 32, 64 or 128. main.attention() hands everything else to this file's kernels,
forward and backward, which take what real models pass:

- k and v with fewer heads than q: grouped-query attention (Llama, Mistral), multi-query with one
  key head. The query heads are a multiple of the key heads; query head h reads key head
  h // (H_Q // H_KV), by index: k and v are never copied to H_Q heads.
- q and k/v of different lengths: cross-attention, or new queries against a KV cache. causal=True
  aligns the mask bottom-right, as FlashAttention-2 does and a KV cache needs: query i sees keys
  j <= i + (seq_k - seq_q), so the last query sees every key. (PyTorch's is_causal=True aligns
  top-left, query i seeing keys j <= i; torch.nn.attention.bias.causal_lower_right is PyTorch's
  bottom-right mask, the reference the tests use.) Where seq_q > seq_k, the first queries see no
  key at all: their output is 0, and their gradient too.
- any head dim from 1 to 256: the dims padded to the next power of two (at least 16, tl.dot's
  smallest), the padding masked on load and store (80 and 96 compute as 128).

The kernels are main.py's and backward.py's with three changes: a key head per query head, two
lengths, and a mask on the dims. They walk every key block with one masked loop, where main.py
walks the blocks that need no mask apart: simpler, and a little slower. A row that has seen no
key yet has a running max of -inf, which the update below guards (exp2(-inf - -inf) is NaN).
"""
import functools
import math

import torch
import triton
import triton.language as tl

from common import bench, checks
from common.device import DEVICE, INTERPRET, interpretable
from common.launch import cdiv, next_power_of_2, splits_to_fill, traceable
from common.table import print_table

LOG2E = tl.constexpr(1.4426950408889634)
MAX_HEAD_DIM = 256


def check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q (B, H_Q, seq_q, D), k and v (B, H_KV, seq_k, D): a clear error for anything else."""
    (B, H, _, D), (Bk, H_KV, _, Dk) = q.shape, k.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if Bk != B or Dk != D:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch (dim 0) and head_dim (dim 3)")
    if H_KV == 0 or H % H_KV:
        raise ValueError(f"q's {H} heads must be a multiple of k's and v's {H_KV} (grouped-query attention)")
    if not 1 <= D <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be from 1 to {MAX_HEAD_DIM}, got {D}")


def attention_reference(q, k, v, *, causal=False, sm_scale=None):
    """Standard attention (main.py, section 1) for these shapes, written out: k and v repeated to
    q's heads, the causal mask aligned bottom-right, a query that sees no key giving 0."""
    sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-2, -1)).to(torch.promote_types(q.dtype, torch.float32)) * sm_scale
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    i, j = torch.arange(seq_q, device=q.device)[:, None], torch.arange(seq_k, device=q.device)[None, :]
    allowed = (j <= i + seq_k - seq_q) if causal else torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device)
    sees = allowed.any(dim=-1, keepdim=True)
    s = torch.where(sees, s.masked_fill(~allowed, float("-inf")), 0.0)
    p = torch.where(sees, torch.softmax(s, dim=-1), 0.0).to(q.dtype)
    return p @ v


@triton.jit
def attend_keys(q, query_idx, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd, lo, hi, diag, qk_scale,
                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr, INDEX_TYPE: tl.constexpr):
    """A block of query rows q (BLOCK_M x BLOCK_D; query_idx: each row's query index, for the causal
    mask: query i sees keys j <= i + diag, diag = seq_k - seq_q) against keys lo to hi of one key
    head, block by block: main.py's online softmax, every block masked.
    Returns the rows' output, acc / l, and lse (base 2, as main.py's). A row that sees no key has
    l = 0: its output is 0 and its lse the log of an empty sum, -inf (taken without log2(0)); the
    backward masks that query's scores, as the forward did."""
    dims = tl.arange(0, BLOCK_D)
    real_dim = dims < HEAD_DIM                            # the padding past the head dim: loaded as 0
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        cols = (start_n + tl.arange(0, BLOCK_N)).to(INDEX_TYPE)
        kT = tl.load(k_base + dims[:, None] * stride_kd + cols[None, :] * stride_kn,
                     mask=real_dim[:, None] & (cols[None, :] < hi), other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=(cols[:, None] < hi) & real_dim[None, :], other=0.0)
        keep = cols[None, :] < hi
        if CAUSAL:
            keep = keep & (cols[None, :] <= query_idx[:, None] + diag)
        s = tl.where(keep, tl.dot(q, kT, input_precision=INPUT_PRECISION) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: nothing to rescale
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
        m_i = m_new
    seen = l_i > 0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    return out, tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("-inf"))


@triton.jit
def attention_general_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    sm_scale, H, GROUP, seq_q, seq_k,                   # query heads, query heads per key head, lengths
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,      # the head dim, and it padded to a power of two
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    INPUT_PRECISION: tl.constexpr = "tf32", INDEX_TYPE: tl.constexpr = tl.int32,
):
    pid = tl.program_id(axis=0)  # one grid axis: the query blocks of head 0, then head 1, ...
    num_pid_m = tl.cdiv(seq_q, BLOCK_M)
    pid_m, pid_bh = pid % num_pid_m, pid // num_pid_m
    b, h = (pid_bh // H).to(INDEX_TYPE), (pid_bh % H).to(INDEX_TYPE)
    hk = h // GROUP                                       # the key/value head this query head reads
    rows = pid_m.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    real_dim = dims < HEAD_DIM                            # the padding past the head dim: loaded as 0
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn + dims[None, :] * stride_qd,
                mask=(rows[:, None] < seq_q) & real_dim[None, :], other=0.0)
    qk_scale = tl.cast(sm_scale, tl.float32) * LOG2E
    diag = seq_k - seq_q                                  # causal: query i sees keys j <= i + diag
    hi = seq_k
    if CAUSAL:  # the key blocks past this block's last query's last key are skipped
        hi = tl.minimum(seq_k, (pid_m + 1) * BLOCK_M + diag)
    out, lse = attend_keys(q, rows, k_ptr + b * stride_kb + hk * stride_kh, v_ptr + b * stride_vb + hk * stride_vh,
                           stride_kn, stride_kd, stride_vn, stride_vd, 0, hi, diag, qk_scale, HEAD_DIM, BLOCK_D,
                           BLOCK_M, BLOCK_N, CAUSAL, INPUT_PRECISION, INDEX_TYPE)
    tl.store(lse_ptr + pid_bh.to(INDEX_TYPE) * seq_q + rows, lse, mask=rows < seq_q)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_on + dims[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=(rows[:, None] < seq_q) & real_dim[None, :])


@triton.jit
def preprocess_general_kernel(o_ptr, do_ptr, delta_ptr, seq_q, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                              BLOCK_M: tl.constexpr, INDEX_TYPE: tl.constexpr = tl.int32):
    """Delta = rowsum(dO * O) per query row; o and do contiguous (B, H_Q, seq_q, HEAD_DIM)."""
    num_pid_m = tl.cdiv(seq_q, BLOCK_M)
    rows = ((tl.program_id(0) % num_pid_m) * BLOCK_M + tl.arange(0, BLOCK_M)).to(INDEX_TYPE)
    bh = (tl.program_id(0) // num_pid_m).to(INDEX_TYPE)
    dims = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < seq_q) & (dims[None, :] < HEAD_DIM)
    offsets = bh * seq_q * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]
    o = tl.load(o_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * seq_q + rows, tl.sum(o * do, axis=1), mask=rows < seq_q)


@triton.jit
def row_offsets(bh, rows, dims, seq_q, HEAD_DIM: tl.constexpr):
    """Where a block of query rows of head bh lives in a contiguous (B, H_Q, seq_q, HEAD_DIM) tensor
    (q, dO, dQ): offsets and mask. (No pointer goes in: torch.compile's analysis of which tensors
    a kernel writes takes a store through a helper's result as a store to every pointer passed in.)"""
    mask = (rows[:, None] < seq_q) & (dims[None, :] < HEAD_DIM)
    return bh * seq_q * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :], mask


@triton.jit
def query_rows(q_ptr, do_ptr, lse_ptr, delta_ptr, bh, rows, dims, seq_q, HEAD_DIM: tl.constexpr):
    """The backward's view of a block of query rows of head bh: q, dO, lse and Delta."""
    offsets, mask = row_offsets(bh, rows, dims, seq_q, HEAD_DIM)
    q = tl.load(q_ptr + offsets, mask=mask, other=0.0)
    do = tl.load(do_ptr + offsets, mask=mask, other=0.0)
    lse = tl.load(lse_ptr + bh * seq_q + rows, mask=rows < seq_q, other=0.0)
    delta = tl.load(delta_ptr + bh * seq_q + rows, mask=rows < seq_q, other=0.0)
    return q, do, lse, delta


@triton.jit
def dkdv_general_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, sm_scale,
                        H_KV, GROUP, seq_q, seq_k, parts, part_stride, HEAD_DIM: tl.constexpr,
                        BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                        DIM_SPLIT: tl.constexpr, INPUT_PRECISION: tl.constexpr = "tf32",
                        INDEX_TYPE: tl.constexpr = tl.int32):
    """One program per block of keys of one (batch, key head), one of `parts` parts of the work and
    one of DIM_SPLIT slices of the head dim: its rows of dK and dV, summed over the GROUP query
    heads that read them (grouped-query attention's gradient: no atomics). With parts > 1, dk_ptr
    and dv_ptr are float32 buffers of `parts` partial sums, part_stride elements apart, which the
    launcher adds up. With DIM_SPLIT > 1 a program keeps BLOCK_D // DIM_SPLIT columns of dK and dV
    (below)."""
    num_pid_n = tl.cdiv(seq_k, BLOCK_N)
    pid_n, rest = tl.program_id(0) % num_pid_n, tl.program_id(0) // num_pid_n
    dim_part, rest = rest % DIM_SPLIT, rest // DIM_SPLIT
    part, bhk = rest % parts, (rest // parts).to(INDEX_TYPE)
    b, hk = bhk // H_KV, bhk % H_KV
    keys = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(INDEX_TYPE)
    dims = tl.arange(0, BLOCK_D)
    kv_mask = (keys[:, None] < seq_k) & (dims[None, :] < HEAD_DIM)
    kv_offsets = bhk * seq_k * HEAD_DIM + keys[:, None] * HEAD_DIM + dims[None, :]
    k = tl.load(k_ptr + kv_offsets, mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + kv_offsets, mask=kv_mask, other=0.0)
    # The head dim split (head dim 256): S^T and dP^T sum over every dim, so each program computes
    # them whole, but it keeps only its slice of dK's and dV's columns, out_dims: two float32
    # accumulators of BLOCK_N x 256 would not fit in registers (they would spill to memory); half as
    # wide they do. The price: S^T and dP^T computed once per slice (at DIM_SPLIT = 2, 6 matmuls'
    # worth of work for 4), and q and dO's slices loaded a second time (from the cache).
    out_dims = dim_part * (BLOCK_D // DIM_SPLIT) + tl.arange(0, BLOCK_D // DIM_SPLIT)
    dk = tl.zeros([BLOCK_N, BLOCK_D // DIM_SPLIT], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D // DIM_SPLIT], dtype=tl.float32)
    sm_scale = tl.cast(sm_scale, tl.float32)
    qk_scale = sm_scale * LOG2E
    diag = seq_k - seq_q
    lo = 0
    if CAUSAL:  # the queries before pid_n * BLOCK_N - diag (this block's first key) see none of these keys
        lo = tl.maximum(pid_n * BLOCK_N - diag, 0) // BLOCK_M * BLOCK_M
    # One loop over the GROUP query heads that read key head hk and, for each, their query blocks
    # from lo to the end: step is query head hk * GROUP + step // blocks, its block step % blocks.
    # With parts > 1 (a multi-query head's few key blocks, too few programs to fill the GPU), this
    # program takes one part of the steps.
    blocks = tl.cdiv(tl.maximum(seq_q - lo, 0), BLOCK_M)  # query blocks per query head
    per_part = tl.cdiv(GROUP * blocks, parts)
    for step in range(part * per_part, tl.minimum(GROUP * blocks, (part + 1) * per_part)):
        bh = b * (H_KV * GROUP) + hk * GROUP + step // blocks  # a query head that reads key head hk
        rows = (lo + (step % blocks) * BLOCK_M + tl.arange(0, BLOCK_M)).to(INDEX_TYPE)
        q, do, lse, delta = query_rows(q_ptr, do_ptr, lse_ptr, delta_ptr, bh, rows, dims, seq_q, HEAD_DIM)
        keep = (rows[None, :] < seq_q) & (keys[:, None] < seq_k)
        if CAUSAL:
            keep = keep & (keys[:, None] <= rows[None, :] + diag)
        pT = tl.where(keep, tl.exp2(tl.dot(k, tl.trans(q), input_precision=INPUT_PRECISION) * qk_scale
                                    - lse[None, :]), 0.0)
        q_out, do_out = q, do
        if DIM_SPLIT > 1:  # this program's columns of q and dO, for dK's and dV's
            out_offsets, out_mask = row_offsets(bh, rows, out_dims, seq_q, HEAD_DIM)
            q_out = tl.load(q_ptr + out_offsets, mask=out_mask, other=0.0)
            do_out = tl.load(do_ptr + out_offsets, mask=out_mask, other=0.0)
        dv += tl.dot(pT.to(do.dtype), do_out, input_precision=INPUT_PRECISION)
        dpT = tl.dot(v, tl.trans(do), input_precision=INPUT_PRECISION)
        dsT = pT * (dpT - delta[None, :])
        dk += tl.dot(dsT.to(q.dtype), q_out, input_precision=INPUT_PRECISION)
    store_mask = (keys[:, None] < seq_k) & (out_dims[None, :] < HEAD_DIM)
    store_offsets = (part.to(INDEX_TYPE) * part_stride + bhk * seq_k * HEAD_DIM + keys[:, None] * HEAD_DIM
                     + out_dims[None, :])
    tl.store(dk_ptr + store_offsets, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=store_mask)
    tl.store(dv_ptr + store_offsets, dv.to(dv_ptr.dtype.element_ty), mask=store_mask)


@triton.jit
def dq_general_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, sm_scale,
                      H, GROUP, seq_q, seq_k, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                      INPUT_PRECISION: tl.constexpr = "tf32", INDEX_TYPE: tl.constexpr = tl.int32):
    """One program per block of queries of one (batch, query head): its rows of dQ."""
    num_pid_m = tl.cdiv(seq_q, BLOCK_M)
    pid_m, bh = tl.program_id(0) % num_pid_m, (tl.program_id(0) // num_pid_m).to(INDEX_TYPE)
    bhk = (bh // H) * (H // GROUP) + (bh % H) // GROUP   # its (batch, key head)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(INDEX_TYPE)
    dims = tl.arange(0, BLOCK_D)
    q, do, lse, delta = query_rows(q_ptr, do_ptr, lse_ptr, delta_ptr, bh, rows, dims, seq_q, HEAD_DIM)
    q_offsets, q_mask = row_offsets(bh, rows, dims, seq_q, HEAD_DIM)  # for dQ's store
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    sm_scale = tl.cast(sm_scale, tl.float32)
    qk_scale = sm_scale * LOG2E
    diag = seq_k - seq_q
    hi = seq_k
    if CAUSAL:
        hi = tl.minimum(seq_k, (pid_m + 1) * BLOCK_M + diag)
    for start_n in range(0, hi, BLOCK_N):
        cols = (start_n + tl.arange(0, BLOCK_N)).to(INDEX_TYPE)
        kv_mask = (cols[:, None] < seq_k) & (dims[None, :] < HEAD_DIM)
        kv_offsets = bhk * seq_k * HEAD_DIM + cols[:, None] * HEAD_DIM + dims[None, :]
        k = tl.load(k_ptr + kv_offsets, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + kv_offsets, mask=kv_mask, other=0.0)
        keep = (rows[:, None] < seq_q) & (cols[None, :] < seq_k)
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + diag)
        p = tl.where(keep, tl.exp2(tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * qk_scale
                                   - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=INPUT_PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=INPUT_PRECISION)
    tl.store(dq_ptr + q_offsets, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=q_mask)


# Block sizes: the head dim can be 256, twice main.py's largest, so some tiles are smaller; the last
# configuration of each list (what small problems run untimed) fits every GPU's shared memory in
# float32 at head dim 256 (tests/test_gpus.py). The first of dK/dV's and dQ's lists is main.py's
# best at head dim 128 (its section 15); 32 x 32 over 8 warps gives dK/dV's few keys of small
# problems more programs (a multi-query head's get parts, dkdv_parts, as well). The second of
# dK/dV's splits the head dim in two (DIM_SPLIT, in the kernel): at head dim 256 only (the prune
# below); one stage of dQ's 64 x 32 is for head dim 256 too. The autotuner picks per shape;
# section 16 (RESULTS.md) times the result.
GPU_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
               for bm, bn, w, s in [(128, 64, 8, 2), (64, 64, 4, 2), (16, 16, 4, 1)]]
GPU_DKDV_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "DIM_SPLIT": split}, num_warps=w, num_stages=s)
                    for bm, bn, w, s, split in [(64, 128, 8, 3, 1), (64, 128, 8, 1, 2), (32, 64, 4, 2, 1),
                                                (32, 32, 8, 2, 1),
                                                (16, 16, 2, 1, 1)]]  # 2 warps: 64 KB at head dim 256 in fp32, a T4's all
GPU_DQ_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                  for bm, bn, w, s in [(128, 64, 8, 3), (64, 32, 4, 2), (64, 32, 4, 1), (32, 32, 4, 2),
                                       (16, 16, 4, 1)]]
INTERPRETED = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16})]
INTERPRETED_DKDV = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "DIM_SPLIT": 1})]
CONFIGS, DKDV_CONFIGS, DQ_CONFIGS = ((INTERPRETED, INTERPRETED_DKDV, INTERPRETED) if INTERPRET else
                                     (GPU_CONFIGS, GPU_DKDV_CONFIGS, GPU_DQ_CONFIGS))


def splits_apply(config, BLOCK_D: int) -> bool:
    """Whether `config` is one for this BLOCK_D: a head-dim split (DIM_SPLIT > 1) at 256 only. Below
    it the whole dK and dV accumulators fit in registers, and a split only computes S^T and dP^T
    twice for nothing (at head dim 128 on an H200 it made the backward slower)."""
    return config.kwargs.get("DIM_SPLIT", 1) == 1 or BLOCK_D >= 256


def small_problems_untuned(configs, named_args, **kwargs):
    """As main.py's, counting both lengths: every configuration from 512 x 512 (query, key) pairs
    up, else the last: a chunk of 64 queries against 4096 keys is no small problem, and 16 x 16
    blocks would leave it several times slower than its tuned blocks. A head-dim split only where
    it applies (splits_apply)."""
    if named_args["seq_q"] * named_args["seq_k"] < 512 * 512:
        return configs[-1:]
    return [config for config in configs if splits_apply(config, kwargs["BLOCK_D"])]


KEY = ["seq_q", "seq_k", "BLOCK_D", "CAUSAL"]
PRUNE = {"early_config_prune": small_problems_untuned}
attention_general_kernel_tuned = triton.autotune(CONFIGS, key=KEY, prune_configs_by=PRUNE)(attention_general_kernel)
dkdv_general_kernel_tuned = triton.autotune(DKDV_CONFIGS, key=KEY + ["parts"], prune_configs_by=PRUNE)(dkdv_general_kernel)
dq_general_kernel_tuned = triton.autotune(DQ_CONFIGS, key=KEY, prune_configs_by=PRUNE)(dq_general_kernel)


def block_d(D: int) -> int:
    return max(16, next_power_of_2(D))


def launch(kernel, q, k, v, causal: bool, sm_scale: float, **meta) -> tuple:
    """(o, lse) by `kernel` (the autotuned one, or its traceable form from the operator)."""
    B, H, seq_q, D = q.shape
    H_KV, seq_k = k.shape[1], k.shape[2]
    o = torch.empty_like(q)
    lse = q.new_empty((B, H, seq_q), dtype=torch.float32)
    if q.numel() == 0:
        return o, lse
    if seq_k == 0:  # no key at all: every output is 0 (as every query that sees no key)
        return o.zero_(), lse.fill_(float("-inf"))
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    index = checks.index_type(q, k, v, o)
    q, k, v = interpretable(q), interpretable(k), interpretable(v)

    def grid(meta):
        return (cdiv(seq_q, meta["BLOCK_M"]) * B * H,)

    kernel[grid](q, k, v, o, lse, sm_scale, H, H // H_KV, seq_q, seq_k, *q.stride(), *k.stride(), *v.stride(),
                 *o.stride(), HEAD_DIM=D, BLOCK_D=block_d(D), CAUSAL=causal, INPUT_PRECISION=precision,
                 INDEX_TYPE=index, **meta)
    return o, lse


def dkdv_parts(batch_key_heads: int, seq_k: int, group: int) -> int:
    """How many programs share a key block's work in the dK/dV kernel: 1, unless the B x H_KV key
    heads' blocks of 128 keys (its largest BLOCK_N) give fewer than 4 programs per SM (multi-query
    attention: one key head for 32 query heads); then enough parts for that, each taking some of the
    GROUP heads' query blocks, at most GROUP."""
    return splits_to_fill(cdiv(seq_k, 128) * batch_key_heads, group)


def launch_backward(do, q, k, v, o, lse, causal: bool, sm_scale: float, *, preprocess=preprocess_general_kernel,
                    dkdv=dkdv_general_kernel_tuned, dq=dq_general_kernel_tuned, dkdv_meta=None, dq_meta=None) -> tuple:
    """dq, dk, dv: the three kernels in turn, on contiguous copies where the inputs are views.
    dkdv_meta, dq_meta: block sizes for plain (not autotuned) kernels, as backward.py's."""
    B, H, seq_q, D = q.shape
    H_KV, seq_k = k.shape[1], k.shape[2]
    dq_out, dk_out, dv_out = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    if q.numel() == 0 or k.numel() == 0:
        return dq_out.zero_(), dk_out.zero_(), dv_out.zero_()
    q, k, v, do, o = (interpretable(t.contiguous()) for t in (q, k, v, do, o))
    delta = torch.empty_like(lse)
    index = checks.index_type(q, k, v, do, o)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    dims = dict(HEAD_DIM=D, BLOCK_D=block_d(D), INDEX_TYPE=index)
    preprocess[(cdiv(seq_q, 16) * B * H,)](o, do, delta, seq_q, BLOCK_M=16, **dims)
    group = H // H_KV
    parts = dkdv_parts(B * H_KV, seq_k, group)
    if parts == 1:
        dk_sums, dv_sums = dk_out, dv_out
    else:  # float32 partial sums, added up below (in a fixed order: the same bits on every run)
        dk_sums, dv_sums = (k.new_empty((parts, *k.shape), dtype=torch.float32) for _ in range(2))
    dkdv[lambda meta: (cdiv(seq_k, meta["BLOCK_N"]) * meta["DIM_SPLIT"] * parts * B * H_KV,)](
        q, k, v, do, lse, delta, dk_sums, dv_sums, sm_scale, H_KV, group, seq_q, seq_k, parts, k.numel(),
        CAUSAL=causal, INPUT_PRECISION=precision, **dims, **(dkdv_meta or {}))
    if parts > 1:
        dk_out.copy_(dk_sums.sum(dim=0))
        dv_out.copy_(dv_sums.sum(dim=0))
    dq[lambda meta: (cdiv(seq_q, meta["BLOCK_M"]) * B * H,)](
        q, k, v, do, lse, delta, dq_out, sm_scale, H, group, seq_q, seq_k, CAUSAL=causal,
        INPUT_PRECISION=precision, **dims, **(dq_meta or {}))
    return dq_out, dk_out, dv_out


@torch.library.triton_op("lessons::attention_general", mutates_args=())
def attention_general_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                         sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    return launch(traceable(attention_general_kernel_tuned), q, k, v, causal, sm_scale)


@torch.library.triton_op("lessons::attention_general_backward", mutates_args=())
def attention_general_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               o: torch.Tensor, lse: torch.Tensor, causal: bool,
                               sm_scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return launch_backward(do, q, k, v, o, lse, causal, sm_scale, preprocess=traceable(preprocess_general_kernel),
                           dkdv=traceable(dkdv_general_kernel_tuned), dq=traceable(dq_general_kernel_tuned))


def keep_for_backward(ctx, inputs, output):
    q, k, v, ctx.causal, ctx.sm_scale = inputs
    ctx.save_for_backward(q, k, v, *output)
    ctx.mark_non_differentiable(output[1])


def attention_general_grad(ctx, do, dlse):
    q, k, v, o, lse = ctx.saved_tensors
    return *attention_general_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale), None, None


attention_general_op.register_autograd(attention_general_grad, setup_context=keep_for_backward)


# Timing these shapes against PyTorch's SDPA (main.py, section 16; GPU only).
# (batch, query heads, key heads, seq_q, seq_k, head_dim, causal): grouped-query and multi-query
# heads, head dims that are not powers of two and the largest, new queries against a longer KV
# cache (causal, bottom-right), then decoding (decode.py's kernels): one query against 8192 keys, and
# four (speculative decoding, causal).
BENCH_CASES = [(4, 32, 8, 4096, 4096, 128, False), (4, 32, 8, 4096, 4096, 128, True), (4, 32, 1, 4096, 4096, 64, True),
               (4, 16, 16, 4096, 4096, 80, True), (4, 16, 16, 4096, 4096, 96, True), (4, 8, 8, 4096, 4096, 256, True),
               (4, 16, 16, 1024, 4096, 128, True), (16, 32, 8, 1, 8192, 128, False), (16, 32, 8, 4, 8192, 128, True)]


def visible_pairs(seq_q: int, seq_k: int, causal: bool) -> int:
    """The (query, key) pairs attention computes: all of them, or, causal and aligned bottom-right,
    sum over queries i of the keys j <= i + seq_k - seq_q."""
    if not causal:
        return seq_q * seq_k
    return sum(min(seq_k, max(0, i + 1 + seq_k - seq_q)) for i in range(seq_q))


def sdpa(q, k, v, *, causal=False, backend="FLASH_ATTENTION"):
    """PyTorch's scaled_dot_product_attention on these shapes, one backend forced: k and v's heads
    repeated by SDPA itself (enable_gqa), the causal mask bottom-right (causal_lower_right) where
    the lengths differ, as this file's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(q.shape[-2], k.shape[-2]) if causal and q.shape[-2] != k.shape[-2] else None
    with sdpa_kernel(getattr(SDPBackend, backend)):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None, enable_gqa=k.shape[1] != q.shape[1])


def bench_general(impls: dict, cases=BENCH_CASES, dtype=torch.float16):
    """Forward and backward of each implementation in impls = {name: fn(q, k, v, causal=...)}
    (main.py's attention first, then SDPA's backends, which the comparisons divide by) on each case,
    side by side. A backend that refuses a shape (SDPA's do not take every head dim or mask) is
    left out of that case's rows. GPU only."""
    rows = []
    for B, H, H_KV, seq_q, seq_k, D, causal in cases:
        q = torch.randn(B, H, seq_q, D, device=DEVICE, dtype=dtype, requires_grad=True)
        k, v = (torch.randn(B, H_KV, seq_k, D, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(2))
        do = torch.randn(B, H, seq_q, D, device=DEVICE, dtype=dtype)
        outs = {}
        for name, fn in impls.items():
            try:
                out = fn(q, k, v, causal=causal)
                torch.autograd.grad(out, (q, k, v), do, retain_graph=True)  # its backward too
                outs[name] = out
            except RuntimeError as error:  # "No available kernel", for this shape
                print(f"{name} left out of {B} x {H}/{H_KV} x {seq_q}/{seq_k} x {D}: {str(error).splitlines()[0]}")
        forward = bench.side_by_side({name: functools.partial(impls[name], q, k, v, causal=causal) for name in outs})
        backward = bench.side_by_side({name: functools.partial(torch.autograd.grad, o, (q, k, v), do, retain_graph=True)
                                       for name, o in outs.items()})
        flops = 4 * B * H * visible_pairs(seq_q, seq_k, causal) * D
        ours = next(iter(outs))
        for name in outs:
            rows.append((f"{B} x {H}/{H_KV} x {seq_q}/{seq_k} x {D}", causal, name, forward[name] * 1e3,
                         backward[name] * 1e3, bench.tflops(flops, forward[name]),
                         bench.tflops(2.5 * flops, backward[name]), forward[name] / forward[ours],
                         backward[name] / backward[ours]))
        del q, k, v, do, outs
    return print_table(
        rows, ["B x heads q/kv x seq q/kv x head_dim", "causal", "implementation", "forward µs", "backward µs",
               "forward TFLOP/s", "backward TFLOP/s", "forward: its µs / ours", "backward: its µs / ours"],
        title=f"general.py's shapes against SDPA's backends, {checks.dtype_name(dtype)}", floatfmt=".2f",
        note="Kernel time (profiler timestamps, L2 flushed between calls); the backward is the gradient call, "
             "torch.autograd.grad(o, (q, k, v), dO). " + bench.SIDE_BY_SIDE_NOTE + " TFLOP/s: forward 4 B H "
             "head_dim times the (query, key) pairs computed (causal: bottom-right, general.visible_pairs), backward "
             "2.5 times that; at head_dim 80 and 96 the kernels compute 128, which is not counted. 'its µs / ours': "
             "above 1, this file's kernels are the faster. SDPA gets k and v with their own heads (enable_gqa) and "
             "the bottom-right mask (causal_lower_right) where the lengths differ.")
