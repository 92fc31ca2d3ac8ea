"""Lesson 5's op: attention(q, k, v, causal=..., sm_scale=...), flash attention, forward and backward,
for every shape models pass: grouped-query heads, queries and keys of different lengths (the causal
mask aligned bottom-right), head dims to 256, decoding.

A program owns a block of query rows of one (batch, head) and walks the keys and values block by
block (lesson 3's tiles): each tile of scores by tl.dot (lesson 4), folded into a running softmax
(lesson 2's online softmax: a running max m, a running sum l, and an output accumulator rescaled
whenever the max grows), then p @ v by tl.dot again. The seq x seq scores never touch memory.
main.py, the chapter, builds it from a teaching kernel (flash_kernel: one block of queries, two
tl.dots, causal or not; section 3), step by step to this file's attention_kernel (section 4: each of
its parameters comes from one step), traces it, checks it and times it; this file is what a model
imports.

The op has the course's one shape (lesson 1, section 5): attention() checks its inputs and asks
route() which kernel runs; Attention (an autograd function) launches it in its forward, keeping q,
k, v, o and lse, and its backward launches backward.py's kernels or hopper.py's; the launchers run
`kernel[grid](...)`. ROUTES and route() are the one place that says which kernel runs, forward and
backward: decode.py's split keys for decoding, hopper.py's Gluon kernels on an H100 or H200 where
they were timed faster, this file's attention_kernel everywhere else.
"""
import math

from common.device import INTERPRET, interpretable  # first: it decides how triton is imported

import torch
import triton
import triton.language as tl

from common import checks
from common.checks import check_tensors, flag, real
from common.launch import cdiv, dot_block, traced_config
from common.trace import show
from common.tuned import recorded
from lesson05_flash_attention import backward, decode, hopper  # the lesson's other op files

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) = exp2(x * LOG2E)


# %% The kernel: the chapter's teaching kernel (main.py, section 3) with the steps of its section 4,
# which says why each is there: any layout, grouped-query heads, two lengths, padded head dims,
# decoding, the lse for training; exp2 with log2(e) folded into the scale; causal, the key blocks
# above the diagonal skipped, those below it unmasked, the diagonal's masked (`attend` runs in two
# stages, MASKED known at compile time); m, l and acc in fp32, p cast to the inputs' dtype for the
# second tl.dot; float32 inputs multiplied in full fp32 ("ieee").
@triton.jit
def attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, query, diag, key_end, dim_ok, qk_scale, lo, hi,
           BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
           INPUT_PRECISION: tl.constexpr, INDEX_TYPE: tl.constexpr, TRACE: tl.constexpr):
    """Fold the key/value blocks lo, lo + BLOCK_N, ... below hi into the running softmax (m_i, l_i) and
    the output acc. k_ptrs, v_ptrs address key block 0: k^T as [BLOCK_D, BLOCK_N], v as [BLOCK_N,
    BLOCK_D]; dim_ok: which of the BLOCK_D dims are real (all, unless the head dim was padded). MASKED:
    keys from key_end on get no weight, nor (causal) the keys after query + diag, row by row."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)             # the keys of this block
        start = tl.cast(start_n, INDEX_TYPE)               # 64-bit if start * stride can pass 2^31
        if MASKED:  # keys past the end (or this program's share) load as 0
            kT = tl.load(k_ptrs + start * stride_kn, mask=dim_ok[:, None] & (cols[None, :] < key_end), other=0.0)
            v = tl.load(v_ptrs + start * stride_vn, mask=(cols[:, None] < key_end) & dim_ok[None, :], other=0.0)
        else:  # (a mask of real dims only: the compiler drops it where every dim is real)
            kT = tl.load(k_ptrs + start * stride_kn, mask=dim_ok[:, None], other=0.0)
            v = tl.load(v_ptrs + start * stride_vn, mask=dim_ok[None, :], other=0.0)
        qk = tl.dot(q, kT, input_precision=INPUT_PRECISION)  # [BLOCK_M, BLOCK_N]: q . k, not yet scaled
        if MASKED:
            # Keys past the end, and (causal) keys after the query, get -inf: exp2 turns them into 0.
            keep = cols[None, :] < key_end
            if CAUSAL:
                keep = keep & (cols[None, :] <= query[:, None] + diag)
            s = tl.where(keep, qk * qk_scale, float("-inf"))  # the scores, in base-2 units
            m_new = tl.maximum(m_i, tl.max(s, axis=1))        # the running max, per query row
            # A row that has seen no key yet keeps m = -inf, and exp2(-inf - -inf) is NaN: for it,
            # nothing to rescale and nothing to add (only where seq_q > seq_k, or in a share of keys).
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp2(s - m_safe[:, None])
            alpha = tl.exp2(m_i - m_safe)                     # how much the old max overstated
        else:
            # qk_scale > 0, so the max of the scaled scores is the scaled max: one multiply per
            # row here, and qk * qk_scale - m below is one fused multiply-add per score.
            m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)
            p = tl.exp2(qk * qk_scale - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)  # acc*alpha + p@v
        m_i = m_new
        if TRACE:
            show("key block", start_n // BLOCK_N, indent=2)
            show("stage", 2 if MASKED else 1)
            show("scores (natural units)", s / LOG2E if MASKED else qk * (qk_scale / LOG2E))
            show("m (natural units)", m_i / LOG2E)
            show("alpha", alpha)
            show("l", l_i)
            show("acc", acc)
    return acc, l_i, m_i


@triton.jit
def attention_kernel(
    # Each parameter by the step of main.py's section 4 that brings it; the teaching kernel's keep their names.
    q_ptr, k_ptr, v_ptr, o_ptr,                         # (teaching kernel)
    lse_ptr,                                            # training: one float per query row, for the backward
    sm_scale, H, GROUP, seq_q, seq_k,                   # grouped heads: H query heads, GROUP per key head; a
                                                        # KV cache: the lengths of q and of k, v
    share_len, stride_os, stride_ls,                    # decoding: keys per program; where each share writes
    stride_qb, stride_qh, stride_qn, stride_qd,         # any layout: the strides of q, in elements
    stride_kb, stride_kh, stride_kn, stride_kd,         # of k
    stride_vb, stride_vh, stride_vn, stride_vd,         # of v
    stride_ob, stride_oh, stride_on, stride_od,         # of o
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,      # head dims such as 80: BLOCK_D, it padded to a power of two
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,  # (teaching kernel)
    PACKED: tl.constexpr = False,            # decoding: rows, a key head's GROUP query heads stacked (decode.py)
    INPUT_PRECISION: tl.constexpr = "tf32",  # float32 inputs: the launcher asks for "ieee"
    INDEX_TYPE: tl.constexpr = tl.int32,     # past 2**31 elements: int64 offsets (lesson 2)
    TRACE: tl.constexpr = False,             # (teaching kernel)
):
    # Which program am I? One grid axis: the query blocks of head 0's first share of the keys, then
    # of its second share (decoding only: one share otherwise), then head 1's... (consecutive
    # programs share their keys and values in the L2 cache).
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(GROUP * seq_q if PACKED else seq_q, BLOCK_M)
    num_shares = tl.cdiv(seq_k, share_len)
    pid_m = pid % num_pid_m                    # which block of query rows
    share = (pid // num_pid_m) % num_shares    # which share of the keys
    pid_bh = pid // (num_pid_m * num_shares)   # which (batch, head)
    if PACKED:
        # Decoding: a (batch, key head) per program, its rows the seq_q queries of each of the GROUP
        # query heads that read it, stacked (row r: query head hk * GROUP + r // seq_q, query r % seq_q),
        # so that K and V are read once per key head, and a tile has GROUP x seq_q real rows.
        b, hk = (pid_bh // (H // GROUP)).to(INDEX_TYPE), (pid_bh % (H // GROUP)).to(INDEX_TYPE)
        r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        heads, query = hk * GROUP + (r // seq_q).to(INDEX_TYPE), (r % seq_q).to(INDEX_TYPE)
        real = r < GROUP * seq_q
        first_query, last_query = 0, seq_q - 1
    else:
        b, heads = (pid_bh // H).to(INDEX_TYPE), (pid_bh % H).to(INDEX_TYPE)  # which batch, which query head
        hk = heads // GROUP                    # the key/value head it reads (grouped-query attention)
        query = pid_m.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)  # the query rows
        real = query < seq_q
        first_query, last_query = pid_m * BLOCK_M, pid_m * BLOCK_M + BLOCK_M - 1
    dims = tl.arange(0, BLOCK_D).to(INDEX_TYPE)  # (dims * stride_kd can pass 2^31 too)
    if BLOCK_D == HEAD_DIM:  # the head dim a power of two: every dim real, no mask (it compiles away)
        dim_ok = tl.full([BLOCK_D], 1, tl.int1)
    else:  # head dims such as 80 padded to 128: the padding loads as 0 and is never stored
        dim_ok = dims < HEAD_DIM
    keys = tl.arange(0, BLOCK_N).to(INDEX_TYPE)
    # The queries, once: [BLOCK_M, BLOCK_D], a row's offset being its batch, head and query. The
    # keys as k^T, [BLOCK_D, BLOCK_N] (dims down, keys across: the strides do the transpose), and
    # the values, [BLOCK_N, BLOCK_D], of key block 0.
    q_rows = b * stride_qb + heads * stride_qh + query * stride_qn
    q = tl.load(q_ptr + q_rows[:, None] + dims[None, :] * stride_qd, mask=real[:, None] & dim_ok[None, :], other=0.0)
    k_ptrs = k_ptr + b * stride_kb + hk * stride_kh + dims[:, None] * stride_kd + keys[None, :] * stride_kn
    v_ptrs = v_ptr + b * stride_vb + hk * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd
    # The running softmax per query row: max m_i (base 2), sum l_i, and the unnormalised output acc.
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # fold log2(e) in (exp2 below is exp), in float32 whoever launches: torch.compile's generated
    # code passes a Python float as float64, which would carry float64 through every score.
    qk_scale = tl.cast(sm_scale, tl.float32) * LOG2E
    # The keys this program walks: its share, lo to share_end (all of them, but in decoding). Causal,
    # aligned bottom-right: query i sees keys j <= i + diag. Stage 1 walks the whole key blocks every
    # row sees in full, with no mask; stage 2 the rest up to the last row's last key, masked (the
    # diagonal's blocks, the ragged last block); the blocks past it are skipped: about half the work.
    lo = share * share_len
    share_end = tl.minimum(lo + share_len, seq_k)
    diag = seq_k - seq_q
    if CAUSAL:
        hi = tl.minimum(share_end, last_query + 1 + diag)            # past the last row's last key: skipped
        every_row_sees = tl.minimum(share_end, first_query + 1 + diag)  # keys before it: seen by every row
    else:
        hi = share_end
        every_row_sees = share_end
    full_end = lo + tl.maximum(every_row_sees - lo, 0) // BLOCK_N * BLOCK_N  # stage 1: whole blocks only
    if TRACE:
        show("program (query block, batch x head)", (pid_m, pid_bh), indent=0)
    acc, l_i, m_i = attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, query, diag, share_end, dim_ok,
                           qk_scale, lo, full_end, BLOCK_N=BLOCK_N, MASKED=False, CAUSAL=CAUSAL,
                           INPUT_PRECISION=INPUT_PRECISION, INDEX_TYPE=INDEX_TYPE, TRACE=TRACE)
    acc, l_i, m_i = attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, query, diag, share_end, dim_ok,
                           qk_scale, full_end, hi, BLOCK_N=BLOCK_N, MASKED=True, CAUSAL=CAUSAL,
                           INPUT_PRECISION=INPUT_PRECISION, INDEX_TYPE=INDEX_TYPE, TRACE=TRACE)
    # The normalisation, once, at the end. A row that saw no key has l = 0: its output is 0.
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    # For the backward (backward.py): lse = m + log2(l), the log of the softmax's sum (the max
    # folded in, base 2), from which exp2(scores - lse) gives back any tile of P. One float per row:
    # -inf for a row that saw no key. (Decoding: each share's own, which decode.py merges.)
    lse = m_i + tl.log2(l_safe)
    tl.store(lse_ptr + share * stride_ls + (b * H + heads) * seq_q + query, lse, mask=real)
    if TRACE:
        show("output", out)
    o_rows = share * stride_os + b * stride_ob + heads * stride_oh + query * stride_on
    tl.store(o_ptr + o_rows[:, None] + dims[None, :] * stride_od, out.to(o_ptr.dtype.element_ty),
             mask=real[:, None] & dim_ok[None, :])


# %% The launch settings (main.py, section 6): on a GPU the autotuner times the configurations of the
# head dim's list on the first call per (lengths, head dim, causal) and keeps the fastest, on disk
# too; below 512 x 512 (query, key) pairs the list's last runs untimed; under the interpreter one
# small configuration.
# The winners of the block-size sweep (section 10, RESULTS.md "Block sizes") for head dims to 128,
# then the one that small problems run untimed; at head dim 256 (twice the registers and shared
# memory per row) smaller tiles and pipelines, then theirs.
NARROW = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
          for bm, bn, w, s in [(128, 64, 8, 3), (64, 64, 4, 3), (64, 32, 4, 2)]]
WIDE = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in [(128, 64, 8, 2), (64, 64, 4, 2), (16, 16, 4, 1)]]
INTERPRETED = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32})]  # the interpreter: one small configuration


def configs_for(configs, named_args, **kwargs):
    """Autotune's early prune: the configurations for this head dim, all of them from 512 x 512
    (query, key) pairs up, else the last alone. It reads only what the autotuner's key holds: the
    choice is kept per key, so a rule on the batch size too would let a first, small batch fix the
    smallest configuration for every later one."""
    configs = [c for c in (NARROW if kwargs["BLOCK_D"] <= 128 else WIDE) if c in configs] or configs  # (interpreter: its one)
    return configs if named_args["seq_q"] * named_args["seq_k"] >= 512 * 512 else configs[-1:]


attention_kernel_tuned = recorded("attention_kernel_tuned", triton.autotune(
    INTERPRETED if INTERPRET else NARROW + WIDE, key=["seq_q", "seq_k", "BLOCK_D", "CAUSAL"],
    prune_configs_by={"early_config_prune": configs_for}, cache_results=True)(attention_kernel))


def traced(q, causal: bool) -> dict:
    """The forward's one configuration while torch.compile traces (common.launch.traced_config):
    the first of the head dim's list, but at head dims to 64 with the causal mask 64 x 64, 4 warps,
    which section 10's sweep found the fastest there (RESULTS.md)."""
    configs = NARROW if q.shape[-1] <= 128 else WIDE
    return traced_config(configs[1:] if causal and q.shape[-1] <= 64 else configs, q.dtype)


# decode.py's launch: the same kernel, PACKED, tuned over the key blocks per share (its BLOCK_M is the
# packed rows)
attention_kernel_decode = recorded("attention_kernel_decode", triton.autotune(
    decode.CONFIGS, key=decode.KEY, prune_configs_by=decode.PRUNE, cache_results=True)(attention_kernel))


# %% The launcher
def launch(kernel, q, k, v, causal: bool, sm_scale: float, *, index_type=None, **meta) -> tuple:
    """(o, lse): o = attention(q, k, v) and its lse per query row, by `kernel`: attention_kernel_tuned
    (the op), or attention_kernel with its block sizes in `meta` (the trace, the sweep). One program
    per block of query rows per (batch, head).
    index_type: the offsets' integer type, by default the one the tensors need (common.checks)."""
    B, H, seq_q, D = q.shape
    H_KV, seq_k = k.shape[1], k.shape[2]
    # o in (B, seq, H, D) memory, as SDPA's flash kernels give it: what reads O next (a projection of
    # the heads side by side, o.transpose(1, 2).reshape(B, seq, H * D)) takes it as a view, no copy
    o = q.new_empty((B, seq_q, H, D)).transpose(1, 2)
    lse = q.new_empty((B, H, seq_q), dtype=torch.float32)
    if q.numel() == 0:
        return o, lse
    if seq_k == 0:  # no key at all: every output is 0, as every query that sees no key
        return o.zero_(), lse.fill_(float("-inf"))
    # float32 in, float32 products: a TF32 tensor-core dot (10-bit mantissa) would put errors of
    # about 1e-3 * |score| into the scores, which the softmax turns into relative errors of p.
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    if index_type is None:  # int64 where an offset can pass 2**31 (lesson 2), int32 otherwise
        index_type = checks.index_type(q, k, v, o)
    q, k, v = interpretable(q), interpretable(k), interpretable(v)  # (bf16 as fp32 under the interpreter)

    def grid(meta):  # the block sizes in use: given, or the autotuner's pick
        return (cdiv(seq_q, meta["BLOCK_M"]) * B * H,)

    # Every argument, defaults too: torch.compile's tracer reads the kernel's code with the arguments
    # it is given, and takes any kernel given fewer than all of them to write every tensor it reads.
    # (The trace's head dim of 2 takes blocks of 2: tl.dot's 16 is the GPU's.)
    meta = {"BLOCK_D": dot_block(D), "PACKED": False, "TRACE": False, **meta}
    kernel[grid](q, k, v, o, lse, sm_scale, H, H // H_KV, seq_q, seq_k, seq_k, 0, 0, *q.stride(), *k.stride(),
                 *v.stride(), *o.stride(), HEAD_DIM=D, CAUSAL=causal, INPUT_PRECISION=precision, INDEX_TYPE=index_type,
                 **meta)
    return o, lse


def check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q (B, H, seq_q, D), k and v (B, H_KV, seq_k, D): a clear error for anything else."""
    (B, H, _, D), (Bk, H_KV, _, Dk) = q.shape, k.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if Bk != B or Dk != D:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch (dim 0) and head_dim (dim 3)")
    if (H_KV == 0 and H != 0) or (H_KV and H % H_KV):  # (no heads at all: an empty output, as SDPA's)
        raise ValueError(f"q's {H} heads must be a multiple of k's and v's {H_KV} (grouped-query attention)")
    if D > MAX_HEAD_DIM:  # (a head dim of 0: an empty output, as SDPA's)
        raise ValueError(f"head_dim must be from 0 to {MAX_HEAD_DIM}, got {D}")


# %% The route: which kernel runs, forward and backward
# Every path, in the order route() tries them: (direction, path, its condition, the kernels it runs,
# an example that takes it as (batch, query heads, key heads, seq_q, seq_k, head_dim) in float16).
# The chapter prints it (section 6), the tests call route() on each example. Under torch.compile
# only Triton's @triton.jit kernels run (Dynamo records their `kernel[grid](...)`; a Gluon launch it
# does not trace), and the Gluon backward never where deterministic algorithms are asked for (its
# dQ is summed by reduce-adds in no fixed order).
ROUTES = [
    ("forward", "split keys", "decoding: GROUP x seq_q query rows per key head, at most decode.max_rows (64 to "
     "head_dim 64, fewer past it), against at least decode.MIN_KEYS (512) keys (decode.takes)",
     "attention_kernel_decode (attention_kernel PACKED, the keys in shares), decode.combine_splits_kernel",
     (4, 32, 8, 1, 4096, 128)),
    ("forward", "gluon", "sm_90 (hopper.HOPPER), head_dim in hopper.FASTER_HEAD_DIMS, hopper.takes (float16 or "
     "bfloat16; q, k, v of one contiguous shape; seq a multiple of 128); not under torch.compile",
     "hopper.attention_kernel_hopper", (4, 16, 16, 4096, 4096, 128)),
    ("forward", "triton", "everything else (an empty q, k or v too)", "attention_kernel_tuned",
     (4, 32, 8, 4096, 4096, 128)),
    ("backward", "gluon", "sm_90, head_dim in hopper.FASTER_BACKWARD_HEAD_DIMS, hopper.backward_takes (as takes, "
     "grouped-query heads too, and a QKV projection's views; not under torch.use_deterministic_algorithms); not "
     "under torch.compile",
     "backward.preprocess_kernel, hopper.attention_bwd_kernel_hopper", (4, 32, 8, 4096, 4096, 128)),
    ("backward", "triton", "everything else (an empty q, k or v too)", "backward.preprocess_kernel, dkdv_kernel_tuned (a key head's query "
     "heads in parts: dkdv_parts, then sum_parts_kernel; the head dim split at 256), dq_kernel_tuned", (4, 16, 16, 4096, 4096, 80)),
]


def route(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, direction: str = "forward") -> str:
    """The path of ROUTES that these (checked) inputs take in `direction`: "split keys", "gluon" or
    "triton" forward; "gluon" or "triton" backward, asked when the backward runs (whether
    deterministic algorithms are asked for, or torch.compile traces, is a question of that moment)."""
    compiling = torch.compiler.is_compiling()  # (asked first: Dynamo never traces Gluon's conditions)
    if q.numel() == 0 or k.numel() == 0:  # nothing to compute: this file's launchers return at once
        return "triton"
    if direction == "backward":
        if not compiling and hopper.HOPPER and q.shape[-1] in hopper.FASTER_BACKWARD_HEAD_DIMS \
                and hopper.backward_takes(q, k, v):
            return "gluon"
        return "triton"
    if decode.takes(q, k):
        return "split keys"
    if not compiling and hopper.HOPPER and q.shape[-1] in hopper.FASTER_HEAD_DIMS and hopper.takes(q, k, v):
        return "gluon"
    return "triton"


# %% The autograd function and the op
class Attention(torch.autograd.Function):
    """O = softmax(q k^T * sm_scale [+ causal mask]) v by the forward kernel `path` names (route's);
    it keeps q, k, v, O and lse (one float per query row: main.py section 4) for the backward,
    which recomputes each tile of P from them (backward.py derives it), the same whichever forward
    ran."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, path):
        if path == "split keys":
            o, lse = decode.launch(q, k, v, causal, sm_scale, split_kernel=attention_kernel_decode)
        elif path == "gluon":
            o, lse = hopper.launch(q, k, v, causal, sm_scale)
        elif torch.compiler.is_compiling():  # one configuration, no autotuner (common.launch.traced_config)
            o, lse = launch(attention_kernel, q, k, v, causal, sm_scale, **traced(q, causal))
        else:
            o, lse = launch(attention_kernel_tuned, q, k, v, causal, sm_scale)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        ctx.save_for_backward(q, k, v, o, lse)  # saved tensors: autograd checks they were not changed in place
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        if route(q, k, v, "backward") == "gluon":
            dq, dk, dv = hopper.launch_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale)
        elif torch.compiler.is_compiling():  # one configuration each, no autotuners (common.launch.traced_config)
            dq, dk, dv = backward.launch_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale,
                                                  **backward.traced_kernels(q))
        else:
            dq, dk, dv = backward.launch_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None, None  # one gradient per input of forward; none for causal, sm_scale, path


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask=None, *, causal: bool = False,
              sm_scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * sm_scale [+ causal mask]) v for q of shape (batch, heads, seq_q, head_dim) and
    k, v of shape (batch, kv_heads, seq_k, head_dim).

    float16, bfloat16 or float32 (fp32 softmax and accumulation inside; output in the input dtype);
    head_dim to 256; any sequence lengths and strides; kv_heads dividing heads (grouped-query
    attention: query head h reads key head h // (heads // kv_heads)); an empty batch, head count, length
    or head_dim gives SDPA's empty (or, without keys, zero) output; causal aligned bottom-right (query i sees keys
    j <= i + seq_k - seq_q, so the last query sees every key, as FlashAttention-2 and a KV cache have
    it; PyTorch's is_causal aligns top-left; the two agree where seq_q = seq_k; a query that sees no
    key gives 0); sm_scale defaults to 1/sqrt(head_dim). The kernel that runs is route()'s:
    attention_kernel, decoding's split keys (decode.py) or, on an H100/H200 at head_dim 128, the
    Gluon kernel (hopper.py).
    attn_mask is there only to refuse one clearly (SDPA's fourth argument): the one mask here is
    causal=True, which is never stored, only computed.
    """
    if attn_mask is not None:
        raise TypeError(f"attention takes no attn_mask (got {type(attn_mask).__name__}): its one mask is "
                        "causal=True, a keyword; for any other mask use torch.nn.functional.scaled_dot_product_attention")
    q, k, v = check_tensors({"q": q, "k": k, "v": v}, DTYPES, ndim=4)
    check_shapes(q, k, v)
    causal = flag("causal", causal)  # a string such as "False" would be truthy: causal attention
    D = q.shape[-1]
    sm_scale = (1.0 / math.sqrt(D) if D else 1.0) if sm_scale is None else real("sm_scale", sm_scale)
    if sm_scale < 0:  # the kernel's fused max needs a scale >= 0: (-c) q.k = c (-q).k
        q, sm_scale = -q, -sm_scale
    return Attention.apply(q, k, v, causal, sm_scale, route(q, k, v))


# %% A model's packed projection: attention over the heads of one QKV tensor
class AttentionQKV(torch.autograd.Function):
    """attention() for q, k, v that are the heads of one projection, qkv (B, seq, H + 2 H_KV, D), as
    a transformer computes them in one matmul. Given q, k and v as three views, autograd would join
    their three gradients into d(qkv) with a copy (torch.cat, split's backward); this function takes
    qkv itself, so the backward writes dq, dk and dv straight into one d(qkv) buffer, through the
    views' strides (the launchers' `out`). The forward: the Triton kernel (Gluon's forward reads
    contiguous heads; decoding's split keys need few queries against many keys, and one projection
    gives q and k the same length). The backward: route()'s, Gluon's on Hopper (it reads and writes
    heads side by side in a row, hopper.rows_readable), else Triton's."""

    @staticmethod
    def forward(ctx, qkv, heads, causal, sm_scale):
        q, k, v = split_heads(qkv, heads)
        if torch.compiler.is_compiling():  # one configuration, no autotuner (common.launch.traced_config)
            o, lse = launch(attention_kernel, q, k, v, causal, sm_scale, **traced(q, causal))
        else:
            o, lse = launch(attention_kernel_tuned, q, k, v, causal, sm_scale)
        ctx.heads, ctx.causal, ctx.sm_scale = heads, causal, sm_scale
        ctx.save_for_backward(qkv, o, lse)
        return o

    @staticmethod
    def backward(ctx, do):
        qkv, o, lse = ctx.saved_tensors
        q, k, v = split_heads(qkv, ctx.heads)
        if torch.compiler.is_compiling():  # one configuration each, no autotuners (common.launch.traced_config);
            # and gradients written contiguous, then joined: inductor gives a kernel that writes into a
            # strided view a copy of it laid out compact, reading past its end (pytorch/pytorch#161115)
            grads = backward.launch_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale,
                                             **backward.traced_kernels(qkv))
            return torch.cat([g.transpose(1, 2) for g in grads], dim=2), None, None, None
        dqkv = torch.empty_like(qkv)  # dq, dk and dv: views of it, written by the kernels in place
        out = split_heads(dqkv, ctx.heads)
        if route(q, k, v, "backward") == "gluon":
            hopper.launch_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale, out=out)
        else:
            backward.launch_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale, out=out)
        return dqkv, None, None, None  # none for heads, causal, sm_scale


def split_heads(qkv: torch.Tensor, heads: int) -> tuple:
    """q (B, heads, seq, D), k and v (B, kv_heads, seq, D): views of qkv (B, seq, heads + 2 kv_heads, D)."""
    kv_heads = (qkv.shape[2] - heads) // 2
    return tuple(t.transpose(1, 2) for t in qkv.split([heads, kv_heads, kv_heads], dim=2))


def attention_qkv(qkv: torch.Tensor, heads: int, *, causal: bool = False, sm_scale: float | None = None):
    """attention(q, k, v) for the heads of one projection, qkv of shape (batch, seq, heads +
    2 * kv_heads, head_dim): q its first `heads` heads, then k's kv_heads, then v's (a transformer's
    QKV matmul, viewed by head). Returns O (batch, heads, seq, head_dim), as attention() does; its
    backward writes the gradient of qkv in one buffer (AttentionQKV says why). sm_scale < 0 takes
    attention() on the three views."""
    (qkv,) = check_tensors({"qkv": qkv}, DTYPES, ndim=4)
    whole = isinstance(heads, int) and not isinstance(heads, bool)
    if not whole or heads < 1 or heads >= qkv.shape[2] or (qkv.shape[2] - heads) % 2:
        raise ValueError(f"heads must be a whole number from 1 that leaves qkv's other {qkv.shape[2]} - heads heads "
                         f"in two equal parts (k's and v's): got {heads!r}")
    q, k, v = split_heads(qkv, heads)
    check_shapes(q, k, v)
    causal = flag("causal", causal)
    D = qkv.shape[-1]
    sm_scale = (1.0 / math.sqrt(D) if D else 1.0) if sm_scale is None else real("sm_scale", sm_scale)
    if sm_scale < 0:  # (attention() negates q, a copy: the views' gradients are joined by autograd)
        return attention(q, k, v, causal=causal, sm_scale=sm_scale)
    return AttentionQKV.apply(qkv, heads, causal, sm_scale)
