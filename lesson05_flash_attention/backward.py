"""Lesson 5, second part: the backward pass, for training.

Write S = sm_scale Q K^T for the scores and P = softmax(S) row by row, so O = P V. The forward
wrote O and, per query row, one more number, lse: the log of the softmax's sum, with the max
folded in and in base 2 (lse = m + log2(l), which is logsumexp(S) * log2(e)). From Q, K and lse
any tile of P comes back, to float32 rounding: P = exp2(q k^T * qk_scale - lse), with qk_scale =
sm_scale * log2(e) as in the forward, no running max, no rescaling. So the backward, like the
forward, never holds the seq x seq matrices. With dO the loss's gradient with respect to O
(arriving from above):

    dV = P^T dO                      dP = dO V^T
    dS = P * (dP - Delta), Delta = rowsum(dO * O)   (softmax's backward, lesson 2: rowsum(dP * P) = Delta)
    dQ = dS K * sm_scale             dK = dS^T Q * sm_scale      (S carries sm_scale)

dK and dV sum over query rows, dQ over keys. The FlashAttention-2 paper gives each program a
block of keys, which owns its dK and dV, and adds each dQ contribution into memory with atomics
(additions that many programs may make to one address at once, none lost, in no fixed order: the
result varies in its last bits from run to run). Triton's fused-attention tutorial gives dQ a pass
of its own instead: one program per block of KEYS walks the query blocks for dK, dV; one program
per block of QUERIES walks the key blocks for dQ. The backward is 5 matmuls (S recomputed, since
P is never stored, then dV, dP, dK, dQ); the dQ pass recomputes S and dP a second time: 7
tl.dots, the price of no atomics. Before them, a small kernel computes Delta (`delta` in the code).

Both are here. The default is the tutorial's three kernels: deterministic, and the faster design
where section 16 timed them (RESULTS.md): atomics buy no speed worth giving up the same bits on
every run. atomic_dq=True is FlashAttention-2's way: the dK/dV pass also computes dQ's share, dS K, and adds
it with tl.atomic_add into a float32 accumulator (5 tl.dots, no dQ pass). What that saves in
matmuls it pays in memory traffic: every (key block, query block) pair adds a BLOCK_M x HEAD_DIM
float32 tile through the L2 cache's atomic units (BLOCK_M = BLOCK_N = HEAD_DIM = 64: 64 x 64 x 4
bytes = 16 KB for the pair's 5 matmuls of 2 x 64 x 64 x 64 flops, 2.6 MFLOP), and additions to
one address wait for each other.
FlashAttention-2 (written for the A100) pays that traffic to save the matmuls; FlashAttention-3
on Hopper makes it cheaper to issue: the tile goes to shared memory and one thread asks TMA
(Hopper's copy engine: lesson 4's hopper.py) to add all of it in memory, asynchronously, where
atomics take an instruction per element from every thread. tma_dq=True does that (Hopper and
newer; Triton's interpreter has no copy engine). Section 16 times the designs side by side
(RESULTS.md, "Backward designs and block sizes").

Causal: key j gets gradient only from the queries that see it, i >= j - (seq_k - seq_q) (the mask
aligned bottom-right, as the forward's), so a key block's walk starts at its own diagonal; as in the
forward, only the diagonal band (and the ragged last block) pays for masks. Every shape the forward
takes, the backward takes: grouped-query heads (a key block's program walks each of the GROUP query
heads that read it, so dK and dV are summed without atomics; where the key heads give too few
programs, several share a key block's heads, `parts`), two lengths, head dims to 256 (padded, and at
256 the dK/dV work split by columns between two programs).

attention.py's Attention (the op's autograd function) runs launch_backward, by default, from what its
forward kept. The chapter, main.py, hands the timing and tracing functions below what they need of
the forward as arguments (attention.py's launcher and op, which import this file, and the chapter's
reference): its sections 13-16 run them.
"""
import functools

from common.device import DEVICE, INTERPRET, capability, gpu_name, interpretable  # first: it decides how triton is imported

import torch
import triton
import triton.language as tl

from common import bench
from common.checks import dtype_name, flag, index_type
from common.launch import cdiv, dot_block, next_power_of_2, scratch, splits_to_fill, traced_config
from common.table import print_table
from common.trace import show
from common.tuned import recorded

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def preprocess_kernel(o_ptr, do_ptr, delta_ptr, H, seq_q,
                      stride_ob, stride_oh, stride_on, stride_od,        # o and do (B, H, seq_q, HEAD_DIM), any layout
                      stride_dob, stride_doh, stride_don, stride_dod,
                      HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                      INDEX_TYPE: tl.constexpr = tl.int32):
    """Delta = rowsum(dO * O), one number per query row, in fp32 (contiguous (B, H, seq_q))."""
    num_pid_m = tl.cdiv(seq_q, BLOCK_M)  # one grid axis, as the forward's: blocks of head 0, then head 1, ...
    rows = ((tl.program_id(0) % num_pid_m) * BLOCK_M + tl.arange(0, BLOCK_M)).to(INDEX_TYPE)
    bh = (tl.program_id(0) // num_pid_m).to(INDEX_TYPE)
    b, h = bh // H, bh % H
    dims = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < seq_q) & (dims[None, :] < HEAD_DIM)
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_on + dims[None, :] * stride_od,
                mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_don + dims[None, :] * stride_dod,
                 mask=mask, other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * seq_q + rows, tl.sum(o * do, axis=1), mask=rows < seq_q)


@triton.jit
def real_dims(lo, WIDTH: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM: tl.constexpr):
    """The dims lo .. lo + WIDTH of a head dim padded to BLOCK_D, and which of them are real: all,
    where the head dim is a power of two (a mask the compiler drops), else those below HEAD_DIM."""
    dims = lo + tl.arange(0, WIDTH)
    if BLOCK_D == HEAD_DIM:
        return dims, tl.full([WIDTH], 1, tl.int1)
    return dims, dims < HEAD_DIM


@triton.jit
def dkdv_blocks(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, dq_sum, keys, dims, dim_ok, out_dims, out_ok,
                stride_qn, stride_qd, stride_don, stride_dod,
                seq_q, diag, sm_scale, qk_scale, lo, hi, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr,
                SPLIT: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                TMA_DQ: tl.constexpr, INPUT_PRECISION: tl.constexpr, INDEX_TYPE: tl.constexpr, TRACE: tl.constexpr):
    """Add query blocks lo..hi of one query head into one key block's dk, dv ([BLOCK_N, out dims],
    fp32), and with ATOMIC_DQ each query block's share of dQ into the float32 dq accumulator in
    memory, dq_sum (a pointer, or with TMA_DQ a tensor descriptor). The pointers address row 0 of
    the query head; everything is computed transposed, keys down. SPLIT: dk and dv hold only the
    columns out_dims (the head dim split between programs)."""
    for start_m in range(lo, hi, BLOCK_M):
        rows = (start_m + tl.arange(0, BLOCK_M)).to(INDEX_TYPE)  # the query rows of this block
        if MASKED:  # rows past the end: q = dO = 0, and P^T is zeroed below
            row_ok = rows < seq_q
        else:
            row_ok = tl.full([BLOCK_M], 1, tl.int1)
        q = tl.load(q_ptr + rows[:, None] * stride_qn + dims[None, :] * stride_qd,
                    mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
        do = tl.load(do_ptr + rows[:, None] * stride_don + dims[None, :] * stride_dod,
                     mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
        lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
        delta = tl.load(delta_ptr + rows, mask=row_ok, other=0.0)
        # P^T, recomputed: [BLOCK_N, BLOCK_M], the forward's probabilities (lse folds in m and l)
        pT = tl.exp2(tl.dot(k, tl.trans(q), input_precision=INPUT_PRECISION) * qk_scale - lse[None, :])
        if MASKED:
            keep = row_ok[None, :]
            if CAUSAL:
                keep = keep & (keys[:, None] <= rows[None, :] + diag)  # query i sees keys j <= i + diag
            pT = tl.where(keep, pT, 0.0)  # (a row that sees no key has lse = -inf: exp2 gives inf, dropped here)
        q_out, do_out = q, do
        if SPLIT:  # this program's columns of q and dO, for dK's and dV's
            q_out = tl.load(q_ptr + rows[:, None] * stride_qn + out_dims[None, :] * stride_qd,
                            mask=row_ok[:, None] & out_ok[None, :], other=0.0)
            do_out = tl.load(do_ptr + rows[:, None] * stride_don + out_dims[None, :] * stride_dod,
                             mask=row_ok[:, None] & out_ok[None, :], other=0.0)
        dv += tl.dot(pT.to(do.dtype), do_out, input_precision=INPUT_PRECISION)        # dV += P^T dO
        dpT = tl.dot(v, tl.trans(do), input_precision=INPUT_PRECISION)                # dP^T = V dO^T
        dsT = pT * (dpT - delta[None, :])                                             # dS^T
        dk += tl.dot(dsT.to(q.dtype), q_out, input_precision=INPUT_PRECISION)        # dK += dS^T Q (scaled later)
        if ATOMIC_DQ:  # this key block's share of these rows' dQ = dS K * sm_scale, added in memory
            dq = tl.dot(tl.trans(dsT.to(k.dtype)), k, input_precision=INPUT_PRECISION) * sm_scale
            if TMA_DQ:  # Hopper: the tile goes to shared memory, then one request to the copy engine
                # adds all of it in memory (cp.reduce.async.bulk.tensor); rows past the end are clipped
                dq_sum.atomic_add([start_m, 0], dq)
            else:
                # sem="relaxed": no ordering with other memory operations (nothing reads dq_sum until
                # the kernel is over), the cheapest kind; lesson 3's atomics take the default, acq_rel
                tl.atomic_add(dq_sum + rows[:, None] * HEAD_DIM + dims[None, :], dq,
                              mask=row_ok[:, None] & dim_ok[None, :], sem="relaxed")
        if TRACE:
            show("query block", start_m // BLOCK_M, indent=2)
            show("P^T (keys down, queries across)", pT)
            show("dS^T", dsT)
            show("dV so far", dv)
            show("dK so far (before * sm_scale)", dk)
            if ATOMIC_DQ:
                show("dQ of these query rows, this key block's share (added to memory)", dq)
    return dk, dv


@triton.jit
def dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_sum_ptr, sm_scale,
                H_KV, GROUP, seq_q, seq_k, parts, part_stride,
                stride_qb, stride_qh, stride_qn, stride_qd,     # q, k, v, do: any layout, as the forward's
                stride_kb, stride_kh, stride_kn, stride_kd,
                stride_vb, stride_vh, stride_vn, stride_vd,
                stride_dob, stride_doh, stride_don, stride_dod,
                stride_dkb, stride_dkh, stride_dkn, stride_dkd,  # dk and dv (one layout), or one part of their sums
                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CAUSAL: tl.constexpr, DIM_SPLIT: tl.constexpr = 1, ATOMIC_DQ: tl.constexpr = False,
                TMA_DQ: tl.constexpr = False, INPUT_PRECISION: tl.constexpr = "tf32",
                INDEX_TYPE: tl.constexpr = tl.int32, TRACE: tl.constexpr = False):
    """One program per block of BLOCK_N keys of one (batch, key head), one of `parts` parts of its
    work and one of DIM_SPLIT slices of the head dim: its rows of dK and dV, summed over the GROUP
    query heads that read them (grouped-query attention's gradient: no atomics). With ATOMIC_DQ their
    share of every dQ row too, added into dq_sum_ptr (float32, zeroed) with atomics, with TMA_DQ
    (Hopper) a tile at a time by TMA's reduce-add. q, do (B, H_KV * GROUP, seq_q, HEAD_DIM) and k, v
    (B, H_KV, seq_k, HEAD_DIM) are read through their strides, dk and dv written through theirs (a
    model's d(QKV) buffer, say); lse and Delta are contiguous. With parts > 1, dk_ptr and dv_ptr are
    float32 buffers of `parts` partial sums, part_stride elements apart, which the launcher adds up."""
    tl.static_assert(not (ATOMIC_DQ and DIM_SPLIT > 1), "a head-dim split would add each dQ share twice")
    # One grid axis, as the forward's (axes 1 and 2 stop at 65535 programs; B x H can pass that)
    num_pid_n = tl.cdiv(seq_k, BLOCK_N)
    pid_n, rest = tl.program_id(0) % num_pid_n, tl.program_id(0) // num_pid_n
    dim_part, rest = rest % DIM_SPLIT, rest // DIM_SPLIT
    part, bhk = rest % parts, (rest // parts).to(INDEX_TYPE)
    start_n = pid_n * BLOCK_N
    keys = (start_n + tl.arange(0, BLOCK_N)).to(INDEX_TYPE)
    dims, dim_ok = real_dims(0, BLOCK_D, BLOCK_D, HEAD_DIM)
    # Keys past the end load as 0; their rows of dk, dv are never stored. (Their P^T is not masked
    # when not causal, so with ATOMIC_DQ they add dS^T-rows times k = 0 to dQ: nothing.)
    b, hk = bhk // H_KV, bhk % H_KV
    kv_mask = (keys[:, None] < seq_k) & dim_ok[None, :]
    k = tl.load(k_ptr + b * stride_kb + hk * stride_kh + keys[:, None] * stride_kn + dims[None, :] * stride_kd,
                mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + hk * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                mask=kv_mask, other=0.0)
    # The head dim split (head dim 256): S^T and dP^T sum over every dim, so each program computes
    # them whole, but it keeps only its slice of dK's and dV's columns, out_dims: two float32
    # accumulators of BLOCK_N x 256 would not fit in registers (they would spill to memory); half as
    # wide they do. The price: S^T and dP^T computed once per slice (at DIM_SPLIT = 2, 6 matmuls'
    # worth of work for 4), and q and dO's slices loaded a second time (from the cache).
    out_dims, out_ok = real_dims(dim_part * (BLOCK_D // DIM_SPLIT), BLOCK_D // DIM_SPLIT, BLOCK_D, HEAD_DIM)
    dk = tl.zeros([BLOCK_N, BLOCK_D // DIM_SPLIT], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D // DIM_SPLIT], dtype=tl.float32)
    sm_scale = tl.cast(sm_scale, tl.float32)  # float32 whoever launches (attention.py says why)
    qk_scale = sm_scale * LOG2E
    # Stages, in query rows (lo, mid, ... are row offsets, stepped by BLOCK_M). Causal (query i sees
    # keys j <= i + diag): the rows before lo see none of these keys, skipped; the diagonal band,
    # lo .. mid, whose rows see some (masked); the whole query blocks after it, which see them all
    # (no mask); the ragged last block (masked). Not causal: no diagonal (its call is an empty loop,
    # lo = mid), and the walk starts at the key block's own row, start_n (never past full_end), then
    # wraps round to rows 0 .. start_n. So the programs of one head, running side by side, start on
    # different query rows: with ATOMIC_DQ they add into different rows of dQ at any moment (atomics
    # on one address wait for each other). The causal walks start on different diagonals anyway.
    diag = seq_k - seq_q
    full_end = (seq_q // BLOCK_M) * BLOCK_M
    q_end = tl.cdiv(seq_q, BLOCK_M) * BLOCK_M
    if CAUSAL:
        lo = tl.minimum(tl.maximum(start_n - diag, 0) // BLOCK_M * BLOCK_M, q_end)
        mid = tl.minimum(tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - diag, 0), BLOCK_M) * BLOCK_M, q_end)
    else:
        lo = tl.minimum(start_n, full_end)
        mid = lo
    # One pass per query head that reads key head hk; with parts > 1 (a multi-query head's few key
    # blocks, too few programs to fill the GPU) this program takes one part of the GROUP heads.
    per_part = tl.cdiv(GROUP, parts)
    if TRACE:
        show("dK, dV program (key block, batch x head)", (pid_n, bhk), indent=0)
    for g in range(part * per_part, tl.minimum(GROUP, (part + 1) * per_part)):
        h = hk * GROUP + g                              # a query head that reads key head hk
        bh = b * (H_KV * GROUP) + h
        q_head, do_head = q_ptr + b * stride_qb + h * stride_qh, do_ptr + b * stride_dob + h * stride_doh
        lse_head, delta_head = lse_ptr + bh * seq_q, delta_ptr + bh * seq_q
        dq_head = dq_sum_ptr + bh * seq_q * HEAD_DIM
        if TMA_DQ:  # this head's dQ as a [seq_q, HEAD_DIM] matrix, in tiles of BLOCK_M rows (lesson 4's hopper.py)
            dq_sum = tl.make_tensor_descriptor(dq_head, shape=[seq_q, HEAD_DIM], strides=[HEAD_DIM, 1],
                                               block_shape=[BLOCK_M, HEAD_DIM])
        else:
            dq_sum = dq_head
        dk, dv = dkdv_blocks(dk, dv, k, v, q_head, do_head, lse_head, delta_head, dq_sum, keys, dims, dim_ok, out_dims,
                             out_ok, stride_qn, stride_qd, stride_don, stride_dod, seq_q, diag, sm_scale, qk_scale, lo, mid, BLOCK_M, HEAD_DIM, DIM_SPLIT > 1, True,
                             CAUSAL, ATOMIC_DQ, TMA_DQ, INPUT_PRECISION, INDEX_TYPE, TRACE)
        dk, dv = dkdv_blocks(dk, dv, k, v, q_head, do_head, lse_head, delta_head, dq_sum, keys, dims, dim_ok, out_dims,
                             out_ok, stride_qn, stride_qd, stride_don, stride_dod, seq_q, diag, sm_scale, qk_scale, mid, full_end, BLOCK_M, HEAD_DIM, DIM_SPLIT > 1,
                             False, CAUSAL, ATOMIC_DQ, TMA_DQ, INPUT_PRECISION, INDEX_TYPE, TRACE)
        dk, dv = dkdv_blocks(dk, dv, k, v, q_head, do_head, lse_head, delta_head, dq_sum, keys, dims, dim_ok, out_dims,
                             out_ok, stride_qn, stride_qd, stride_don, stride_dod, seq_q, diag, sm_scale, qk_scale, tl.maximum(full_end, mid), seq_q, BLOCK_M, HEAD_DIM,
                             DIM_SPLIT > 1, True, CAUSAL, ATOMIC_DQ, TMA_DQ, INPUT_PRECISION, INDEX_TYPE, TRACE)
        if not CAUSAL:  # the wrap: whole blocks 0 .. lo (none when lo = 0)
            dk, dv = dkdv_blocks(dk, dv, k, v, q_head, do_head, lse_head, delta_head, dq_sum, keys, dims, dim_ok,
                                 out_dims, out_ok, stride_qn, stride_qd, stride_don, stride_dod, seq_q, diag, sm_scale, qk_scale, 0, lo, BLOCK_M, HEAD_DIM,
                                 DIM_SPLIT > 1, False, CAUSAL, ATOMIC_DQ, TMA_DQ, INPUT_PRECISION, INDEX_TYPE, TRACE)
    offsets = (part.to(INDEX_TYPE) * part_stride + b * stride_dkb + hk * stride_dkh + keys[:, None] * stride_dkn
               + out_dims[None, :] * stride_dkd)
    mask = (keys[:, None] < seq_k) & out_ok[None, :]
    tl.store(dk_ptr + offsets, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=mask)
    tl.store(dv_ptr + offsets, dv.to(dv_ptr.dtype.element_ty), mask=mask)


@triton.jit
def sum_parts_kernel(dk_parts_ptr, dv_parts_ptr, dk_ptr, dv_ptr, rows, H_KV, seq_k,
                     stride_dkb, stride_dkh, stride_dkn, stride_dkd,   # dk (B, H_KV, seq_k, HEAD_DIM), any layout
                     stride_dvb, stride_dvh, stride_dvn, stride_dvd,   # ... and dv
                     PARTS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
                     INDEX_TYPE: tl.constexpr = tl.int32):
    """dK and dV from the dK/dV kernel's PARTS float32 parts (contiguous, (PARTS, B, H_KV, seq_k,
    HEAD_DIM)): each row (b, key head, key) the sum of its parts in a fixed order (the same bits on
    every run), each in its own dtype, stored where dk and dv lie. One launch for both."""
    r = tl.program_id(0).to(INDEX_TYPE) * BLOCK_R + tl.arange(0, BLOCK_R)  # rows of B x H_KV x seq_k
    d = tl.arange(0, BLOCK_D)
    mask = (r < rows)[:, None] & (d < HEAD_DIM)[None, :]
    dk = tl.zeros((BLOCK_R, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_R, BLOCK_D), dtype=tl.float32)
    for p in tl.static_range(PARTS):
        part = (r + p * rows)[:, None] * HEAD_DIM + d[None, :]
        dk += tl.load(dk_parts_ptr + part, mask=mask, other=0.0)
        dv += tl.load(dv_parts_ptr + part, mask=mask, other=0.0)
    b, h, n = r // (H_KV * seq_k), (r // seq_k) % H_KV, r % seq_k
    dk_offsets = (b * stride_dkb + h * stride_dkh + n * stride_dkn)[:, None] + d[None, :] * stride_dkd
    dv_offsets = (b * stride_dvb + h * stride_dvh + n * stride_dvn)[:, None] + d[None, :] * stride_dvd
    tl.store(dk_ptr + dk_offsets, dk.to(dk_ptr.dtype.element_ty), mask=mask)
    tl.store(dv_ptr + dv_offsets, dv.to(dv_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dq_blocks(dq, q, do, lse, delta, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd, rows, dims, dim_ok,
              seq_k, diag, qk_scale, lo, hi,
              BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
              INPUT_PRECISION: tl.constexpr, INDEX_TYPE: tl.constexpr):
    """Add key blocks lo..hi of one key head into one query block's dq ([BLOCK_M, BLOCK_D], fp32)."""
    for start_n in range(lo, hi, BLOCK_N):
        keys = (start_n + tl.arange(0, BLOCK_N)).to(INDEX_TYPE)
        if MASKED:
            key_ok = keys < seq_k
        else:
            key_ok = tl.full([BLOCK_N], 1, tl.int1)
        k = tl.load(k_ptr + keys[:, None] * stride_kn + dims[None, :] * stride_kd,
                    mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
        v = tl.load(v_ptr + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
        p = tl.exp2(tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * qk_scale - lse[:, None])
        if MASKED:
            keep = key_ok[None, :]
            if CAUSAL:
                keep = keep & (keys[None, :] <= rows[:, None] + diag)
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=INPUT_PRECISION)                 # dP = dO V^T
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=INPUT_PRECISION)             # dQ += dS K (scaled later)
    return dq


@triton.jit
def dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, sm_scale, H, GROUP, seq_q, seq_k,
              stride_qb, stride_qh, stride_qn, stride_qd,       # q, k, v, do: any layout (dkdv_kernel's)
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_dob, stride_doh, stride_don, stride_dod,
              stride_dqb, stride_dqh, stride_dqn, stride_dqd,   # dq: any layout too
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr = "tf32", INDEX_TYPE: tl.constexpr = tl.int32,
              TRACE: tl.constexpr = False):
    """One program per block of BLOCK_M queries of one (batch, query head): its rows of dQ. The
    stages are the forward's: whole key blocks every row sees (no mask), then the rest, masked."""
    num_pid_m = tl.cdiv(seq_q, BLOCK_M)  # one grid axis, as dkdv_kernel's
    pid_m, bh = tl.program_id(0) % num_pid_m, (tl.program_id(0) // num_pid_m).to(INDEX_TYPE)
    b, h = bh // H, bh % H
    hk = h // GROUP                                      # its key head
    start_m = pid_m * BLOCK_M
    rows = (start_m + tl.arange(0, BLOCK_M)).to(INDEX_TYPE)
    dims, dim_ok = real_dims(0, BLOCK_D, BLOCK_D, HEAD_DIM)
    mask = (rows[:, None] < seq_q) & dim_ok[None, :]
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn + dims[None, :] * stride_qd,
                mask=mask, other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_don + dims[None, :] * stride_dod,
                 mask=mask, other=0.0)
    lse = tl.load(lse_ptr + bh * seq_q + rows, mask=rows < seq_q, other=0.0)
    delta = tl.load(delta_ptr + bh * seq_q + rows, mask=rows < seq_q, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    sm_scale = tl.cast(sm_scale, tl.float32)  # float32 whoever launches (attention.py says why)
    qk_scale = sm_scale * LOG2E
    diag = seq_k - seq_q
    if CAUSAL:
        hi = tl.minimum(seq_k, start_m + BLOCK_M + diag)
        every_row_sees = tl.minimum(seq_k, start_m + 1 + diag)
    else:
        hi = seq_k
        every_row_sees = seq_k
    full_end = tl.maximum(every_row_sees, 0) // BLOCK_N * BLOCK_N
    k_head, v_head = k_ptr + b * stride_kb + hk * stride_kh, v_ptr + b * stride_vb + hk * stride_vh
    strides = (stride_kn, stride_kd, stride_vn, stride_vd)
    dq = dq_blocks(dq, q, do, lse, delta, k_head, v_head, *strides, rows, dims, dim_ok, seq_k, diag, qk_scale, 0,
                   full_end, BLOCK_N, HEAD_DIM, False, CAUSAL, INPUT_PRECISION, INDEX_TYPE)
    dq = dq_blocks(dq, q, do, lse, delta, k_head, v_head, *strides, rows, dims, dim_ok, seq_k, diag, qk_scale,
                   full_end, hi, BLOCK_N, HEAD_DIM, True, CAUSAL, INPUT_PRECISION, INDEX_TYPE)
    if TRACE:
        show("dQ program (query block, batch x head)", (pid_m, bh), indent=0)
        show("dQ", dq * sm_scale)
    offsets = b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqn + dims[None, :] * stride_dqd
    tl.store(dq_ptr + offsets, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=mask)


# Block sizes. dK and dV of a key block stay in registers for the whole walk (2 x BLOCK_N x BLOCK_D
# fp32), beside K and V, while blocks of queries stream past; each query block loaded is shared by
# the BLOCK_N keys, so big key blocks pay, as long as the registers hold them (8 warps for 128 keys).
# Deeper pipelines (num_stages: how many query blocks are in flight, each a copy of q and dO in
# shared memory) pay too, where they fit: a list holds configurations that only the GPUs with the
# most shared memory can run, and on the others the autotuner skips them. At head dim 256 (twice
# the registers and shared memory per row) smaller tiles, and the head dim split in two (DIM_SPLIT,
# in dkdv_kernel). The last of each list is what small problems run untimed: it fits every GPU's
# shared memory in float32 (tests/test_gpus.py). The dQ kernel is the forward's shape. Section 16
# (bench_configs, RESULTS.md "Backward designs and block sizes") times the candidates; the
# autotuner picks among them per (lengths, head dim, causal) and keeps its pick on disk; on a GPU
# model the course has recorded, a first run starts with that run's picks (common/tuned.py).
def configs(rows, dim_split: bool = True):
    """triton.Configs of (BLOCK_M, BLOCK_N, num_warps, num_stages, DIM_SPLIT) rows. Every dK/dV one
    names its DIM_SPLIT, 1 included: torch.compile's tracer fills a kernel's arguments from an
    autotuner's first configuration, and a parameter some configurations set is theirs to pass."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, **({"DIM_SPLIT": split} if dim_split else {})},
                          num_warps=w, num_stages=s) for bm, bn, w, s, split in rows]


NARROW_DKDV = configs([(64, 128, 8, 4, 1), (64, 128, 8, 3, 1), (128, 128, 8, 3, 1), (64, 64, 4, 3, 1),
                       (32, 64, 4, 2, 1), (16, 32, 4, 2, 1)])
WIDE_DKDV = configs([(64, 128, 8, 3, 1), (64, 128, 8, 1, 2), (32, 64, 4, 2, 1), (32, 32, 8, 2, 1),
                     (16, 16, 2, 1, 1)])  # the last, 2 warps: it fits a T4 at head dim 256 in fp32
NARROW_FUSED = configs([(64, 128, 8, 3, 1), (32, 128, 8, 3, 1), (32, 128, 4, 3, 1), (64, 64, 4, 3, 1),
                        (16, 32, 4, 2, 1)])  # dK, dV and dQ by atomics (atomic_dq=True: head dims to 128)
NARROW_DQ = configs([(128, 64, 8, 3, 1), (64, 64, 4, 3, 1), (128, 32, 4, 3, 1), (32, 16, 4, 1, 1)], dim_split=False)
WIDE_DQ = configs([(128, 64, 8, 3, 1), (64, 32, 4, 2, 1), (64, 32, 4, 1, 1), (32, 32, 4, 2, 1), (16, 16, 4, 1, 1)],
                  dim_split=False)
LISTS = {"dkdv": (NARROW_DKDV, WIDE_DKDV), "fused": (NARROW_FUSED, []), "dq": (NARROW_DQ, WIDE_DQ)}


def configs_for(kernel: str):
    """Autotune's early prune for one kernel's list: the configurations for this head dim, all of
    them from 512 x 512 (query, key) pairs up, else the last. float32 inputs get the last too: their
    products run on the CUDA cores (ieee, no tensor cores), and the larger configurations take tens
    of seconds each to compile there, for a dtype that checks the others
    rather than trains. (The autotuner's key holds the tensors' dtypes.)"""
    narrow, wide = LISTS[kernel]

    def prune(all_configs, named_args, **kwargs):
        chosen = [c for c in (narrow if kwargs["BLOCK_D"] <= 128 else wide) if c in all_configs] or all_configs
        small = named_args["seq_q"] * named_args["seq_k"] < 512 * 512 or named_args["q_ptr"].dtype == torch.float32
        return chosen[-1:] if small else chosen
    return {"early_config_prune": prune}


KEY = ["seq_q", "seq_k", "BLOCK_D", "CAUSAL"]


def tuned(kernel, name: str, key: list, **kwargs):
    narrow, wide = LISTS[name]
    interpreted = configs([(32, 32, 4, 1, 1)], dim_split=name != "dq")  # the interpreter: one small configuration
    return recorded(f"{name}_kernel_tuned", triton.autotune(interpreted if INTERPRET else narrow + wide, key=key,
                                                            prune_configs_by=configs_for(name), cache_results=True,
                                                            **kwargs)(kernel))


def traced_kernels(q) -> dict:
    """launch_backward's kernels while torch.compile traces: the plain dK/dV and dQ kernels, each with
    one configuration of its list (common.launch.traced_config says why): for dK/dV, from section 16's
    sweep (RESULTS.md), 64 x 64 with 4 warps at head dims to 64 (the fastest there, causal or not) and
    64 x 128 with 3 stages to 128 (the fastest causal, within a percent of the fastest without the
    mask); for dQ the list's first."""
    D = dot_block(q.shape[-1])
    dkdv = WIDE_DKDV if D > 128 else NARROW_DKDV[3:] if D <= 64 else NARROW_DKDV[1:]
    return dict(dkdv=dkdv_kernel, dq=dq_kernel, dkdv_meta=traced_config(dkdv, q.dtype),
                dq_meta=traced_config(WIDE_DQ if D > 128 else NARROW_DQ, q.dtype))


# The autotuner runs each candidate several times: the atomics' accumulator is zeroed before each run.
fused_kernel_tuned = tuned(dkdv_kernel, "fused", [*KEY, "parts", "TMA_DQ"], reset_to_zero=["dq_sum_ptr"])
dkdv_kernel_tuned = tuned(dkdv_kernel, "dkdv", [*KEY, "parts"])
dq_kernel_tuned = tuned(dq_kernel, "dq", KEY)


def dkdv_parts(batch_key_heads: int, seq_k: int, group: int) -> int:
    """How many programs share a key block's work in the dK/dV kernel: 1, unless the B x H_KV key
    heads' blocks of 128 keys (its largest BLOCK_N) give fewer than 4 programs per SM (multi-query
    attention: one key head for 32 query heads); then enough parts for that, each taking some of the
    GROUP query heads, at most GROUP."""
    return splits_to_fill(cdiv(seq_k, 128) * batch_key_heads, group)


def launch_backward(do, q, k, v, o, lse, causal: bool, sm_scale: float, *, atomic_dq: bool = False,
                    tma_dq: bool = False, parts: int | None = None, dkdv=None,
                    dq=dq_kernel_tuned, dkdv_meta=None, dq_meta=None, out: tuple | None = None) -> tuple:
    """dq, dk, dv for attention's output o (with its lse) and the gradient do, for every shape the
    forward takes: q (B, H, seq_q, D), k and v (B, H_KV, seq_k, D).

    By default three kernels: Delta; dK and dV, a program per key block, summed over the query heads
    that read it (where a key head's query heads run in parts, dkdv_parts or `parts`, sum_parts_kernel
    then adds the parts' float32 sums: a fourth launch); dQ, a program per query block. Deterministic:
    the same bits on every run. atomic_dq=True: FlashAttention-2's way, two kernels: the dK/dV pass
    also adds each key block's share of dQ with atomics into a float32 accumulator, cast to q's dtype
    at the end (the order of the additions varies from run to run, so the last bits do; under
    torch.use_deterministic_algorithms(True) the three kernels run instead). atomic_dq takes head
    dims to 128. tma_dq=True (with atomic_dq, on Hopper or newer, a head dim that is a power of two):
    FlashAttention-3's way of adding, a whole dQ tile per TMA reduce-add instead of an atomic per
    element (Triton's interpreter has no such copy engine: GPU only). atomic_dq and tma_dq are this
    function's only: attention() runs the default. Section 16 times all three (RESULTS.md).
    dkdv, dq: the kernels (autotuned by default: fused_kernel_tuned or dkdv_kernel_tuned for the
    dK/dV pass; the trace and the block-size sweep hand in plain ones, with their block sizes in
    dkdv_meta, dq_meta). The kernels read q, k, v, do and o through their strides, as the forward
    does: a view (q, k and v from one (B, seq, heads, D) projection, say) is read where it lies, not
    copied; the gradients are written contiguous, or where `out`'s three tensors lie."""
    B, H, seq_q, D = q.shape
    H_KV, seq_k = k.shape[1], k.shape[2]
    if flag("tma_dq", tma_dq) and not flag("atomic_dq", atomic_dq):
        raise ValueError("tma_dq=True is a way of adding dQ for atomic_dq=True; it needs atomic_dq=True too")
    if tma_dq and (INTERPRET or capability() < 90):
        raise ValueError("tma_dq=True needs TMA's reduce-add: a GPU of compute capability 9.0 or newer (Hopper); "
                         + ("Triton's interpreter has none" if INTERPRET else f"this one is {gpu_name()}"))
    if tma_dq and dot_block(D) != D:
        raise ValueError(f"tma_dq=True needs a head dim that is a power of two from 16 (a TMA tile's width), got {D}")
    if flag("atomic_dq", atomic_dq) and dot_block(D) > 128:
        raise ValueError(f"atomic_dq=True takes head dims to 128 (where section 16 times FlashAttention-2's design), "
                         f"got {D}")
    atomic_dq = atomic_dq and not torch.are_deterministic_algorithms_enabled()
    tma_dq = tma_dq and atomic_dq
    # out: where to write (dq, dk, dv), views of one buffer, say (dk and dv of one layout); else new, contiguous
    dq_out, dk_out, dv_out = out if out is not None else (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape))
    if q.numel() == 0 or k.numel() == 0:  # no query, or no key: nothing flows (every output was 0)
        return dq_out.zero_(), dk_out.zero_(), dv_out.zero_()
    q, k, v, do, o = (interpretable(t) for t in (q, k, v, do, o))  # any layout (bf16 as fp32 under the interpreter)
    delta = torch.empty_like(lse)
    index = index_type(q, k, v, do, o)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"  # as the forward's launcher says
    # (each launch names every argument of its kernel, TRACE too: attention.launch says why)
    dims = dict(HEAD_DIM=D, BLOCK_D=dot_block(D), INDEX_TYPE=index)
    rows = 64 if D <= 128 else 16
    preprocess_kernel[(cdiv(seq_q, rows) * B * H,)](o, do, delta, H, seq_q, *o.stride(), *do.stride(), BLOCK_M=rows,
                                                    **dims)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    group = H // H_KV
    parts = dkdv_parts(B * H_KV, seq_k, group) if parts is None else parts
    if parts == 1:
        dk_sums, dv_sums = dk_out, dv_out
    else:  # float32 partial sums, added up below (in a fixed order: the same bits on every run)
        dk_sums, dv_sums = (k.new_empty((parts, *k.shape), dtype=torch.float32) for _ in range(2))
    if dkdv is None:
        dkdv = fused_kernel_tuned if atomic_dq else dkdv_kernel_tuned
    if atomic_dq and "dq_sum_ptr" not in getattr(getattr(dkdv, "kernel", dkdv), "reset_to_zero", ["dq_sum_ptr"]):
        # an autotuner runs each candidate several times: without zeroing between, the sums pile up
        raise ValueError("atomic_dq=True takes a dK/dV kernel whose autotuner zeroes dq_sum_ptr between its trial "
                         "runs (fused_kernel_tuned), or a plain one (dkdv_kernel)")
    dq_sum = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if atomic_dq else dq_out  # (unused without)
    if tma_dq:  # each program builds its descriptors in memory Triton asks for at each launch (common.launch.scratch)
        triton.set_allocator(scratch)

    def key_blocks(meta):  # a program per key block, head-dim slice and part of each (batch, key head)
        return (cdiv(seq_k, meta["BLOCK_N"]) * meta.get("DIM_SPLIT", 1) * parts * B * H_KV,)

    dkdv[key_blocks](q, k, v, do, lse, delta, dk_sums, dv_sums, dq_sum, sm_scale, H_KV, group, seq_q, seq_k, parts,
                     k.numel(), *strides, *dk_sums.stride()[-4:], CAUSAL=causal, ATOMIC_DQ=atomic_dq, TMA_DQ=tma_dq, INPUT_PRECISION=precision,
                     **{"TRACE": False, **dims, **(dkdv_meta or {})})  # (the trace's BLOCK_D of 2: tl.dot's 16 is the GPU's)
    if parts > 1:  # the parts added up and cast, written where dk and dv lie: one launch for both
        rows, BLOCK_D = B * H_KV * seq_k, next_power_of_2(D)
        BLOCK_R = max(1, 4096 // BLOCK_D)
        sum_parts_kernel[(cdiv(rows, BLOCK_R),)](
            dk_sums, dv_sums, dk_out, dv_out, rows, H_KV, seq_k, *dk_out.stride(), *dv_out.stride(), PARTS=parts,
            HEAD_DIM=D, BLOCK_D=BLOCK_D, BLOCK_R=BLOCK_R, INDEX_TYPE=index_type(dk_sums, dv_sums, dk_out, dv_out))
    if atomic_dq:
        return dq_out.copy_(dq_sum), dk_out, dv_out
    dq[lambda meta: (cdiv(seq_q, meta["BLOCK_M"]) * B * H,)](
        q, k, v, do, lse, delta, dq_out, sm_scale, H, group, seq_q, seq_k, *strides, *dq_out.stride(), CAUSAL=causal,
        INPUT_PRECISION=precision,
        **{"TRACE": False, **dims, **(dq_meta or {})})
    return dq_out, dk_out, dv_out


def trace(q, k, v, o, lse, standard) -> None:
    """The backward on the chapter's tiny problem (seq 8, head_dim 2, blocks of 4, causal, sm_scale 1),
    given the forward's o and lse, with dO = 1 on the first output column, from inside the kernels;
    then the gradients of `standard` (standard attention) by torch's autograd, in float64."""
    do = torch.zeros_like(o)
    do[..., 0] = 1  # the loss: the sum of the outputs' first column
    print("Delta = rowsum(dO * O), per query row:", [round(x, 4) for x in (do * o).sum(-1).flatten().tolist()])
    tiny = dict(BLOCK_M=4, BLOCK_N=4, BLOCK_D=2, TRACE=True)
    grads = launch_backward(do, q, k, v, o, lse, True, 1.0, dkdv=dkdv_kernel, dq=dq_kernel, dkdv_meta=tiny,
                            dq_meta=tiny)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    standard(*leaves, causal=True, sm_scale=1.0).backward(do.double())
    print("Against torch's autograd of standard attention, in float64:")
    for name, ours, leaf in zip(("dQ", "dK", "dV"), grads, leaves):
        show(f"max |{name} - autograd's|", (ours.double() - leaf.grad).abs().max().item(), indent=4)


BACKWARD_NOTE = ("'µs': the GPU kernels' own time (profiler timestamps, L2 flushed between calls); the backward is "
                 "the gradient call, torch.autograd.grad(o, (q, k, v), dO). " + bench.SIDE_BY_SIDE_NOTE)


def bench_backward(impls: dict, seqs, shapes, dtype=torch.float16, *, kernel_of=None) -> list:
    """Forward and backward side by side, one table per (batch, heads, head_dim): impls = {name:
    fn(q, k, v, causal=...)}, attention.py's attention first, then SDPA's backends; kernel_of(q, k, v):
    the paths the first runs, forward and backward (attention.route's), for its rows. GPU only."""
    tables = []
    for B, H, D in shapes:
        rows = []
        for seq in seqs:
            for causal in (False, True):
                q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(3))
                do = torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype)
                outs = {name: fn(q, k, v, causal=causal) for name, fn in impls.items()}
                forward = bench.side_by_side({name: functools.partial(fn, q, k, v, causal=causal)
                                              for name, fn in impls.items()})
                backward = bench.side_by_side({name: functools.partial(torch.autograd.grad, o, (q, k, v), do,
                                                                       retain_graph=True) for name, o in outs.items()})
                flops = 4 * B * H * seq * seq * D / (2 if causal else 1)
                ref = backward["SDPA flash backend"]
                ours = next(iter(impls))
                for name in impls:
                    label = f"{name} ({kernel_of(q, k, v)})" if kernel_of and name == ours else name
                    rows.append((seq, causal, label, forward[name] * 1e3, backward[name] * 1e3,
                                 bench.tflops(flops, forward[name]), bench.tflops(2.5 * flops, backward[name]),
                                 ref / backward[name]))
                del q, k, v, do, outs
        tables.append(print_table(
            rows, ["seq", "causal", "implementation", "forward µs", "backward µs", "forward TFLOP/s",
                   "backward TFLOP/s", "backward x SDPA flash"],
            title=f"Forward and backward against SDPA's backends, {B} x {H} x {D}, {dtype_name(dtype)}", floatfmt=".2f",
            note=BACKWARD_NOTE + " attention(): the paths attention.route picks for the shape, forward and backward (in "
                 "brackets): 'triton', this file's three kernels for the backward; 'gluon', hopper.py's kernels "
                 "(lesson 7). TFLOP/s: forward 4 B H seq^2 head_dim (half when causal), backward 2.5 times that "
                 "(five matmuls to the forward's two: useful work); 'backward x SDPA flash': the SDPA flash "
                 "backend's backward time over this one's.",
            plot=dict(x="seq", y="backward TFLOP/s", series=["causal", "implementation"], ceiling=None)))
        print()
    return tables


def bench_configs(forward, seq: int = 4096, shapes=((4, 32, 64), (4, 16, 128)), causals=(False, True),
                  dtype=torch.float16):
    """Every candidate block size of both designs' kernels, timed side by side (the autotuner's
    job done by hand; its lists for head dims to 128 are NARROW_DKDV, NARROW_DQ and NARROW_FUSED).
    forward(q, k, v, causal, sm_scale): attention.py's launch
    with the autotuned kernel, which gives (o, lse). GPU only."""
    rows, left_out = [], set()
    for B, H, D in shapes:
        q, k, v, do = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(4))
        for causal in causals:
            o, lse = forward(q, k, v, causal, D ** -0.5)
            cases = {}
            kinds = [("dK, dV", NARROW_DKDV), ("dQ", NARROW_DQ), ("dK, dV + atomic dQ", NARROW_FUSED)]
            if not INTERPRET and capability() >= 90:  # Hopper and newer: TMA's reduce-add too
                kinds.append(("dK, dV + TMA reduce-add dQ", NARROW_FUSED))
            for kind, candidates in kinds:
                for config in candidates:  # this kernel plain, with `config`; the other autotuned
                    meta = config.all_kwargs()  # BLOCK_M, BLOCK_N, num_warps, num_stages...
                    varied = (dict(dq=dq_kernel, dq_meta=meta) if kind == "dQ" else
                              dict(dkdv=dkdv_kernel, dkdv_meta=meta, atomic_dq=kind != "dK, dV", tma_dq="TMA" in kind))
                    case = functools.partial(launch_backward, do, q, k, v, o, lse, causal, D ** -0.5, **varied)
                    try:  # the first call compiles it; a configuration needing more shared memory
                        case()  # than this GPU has fails here, and is left out as the autotuner leaves it
                    except triton.runtime.OutOfResources:
                        left_out.add(f"{kind} {config.kwargs['BLOCK_M']} x {config.kwargs['BLOCK_N']}, "
                                     f"{config.num_stages} stages at head_dim {D}")
                        continue
                    cases[kind, config] = case
            times = bench.side_by_side(cases)
            best = min(times.values())  # of both designs
            for (kind, config), ms in times.items():
                rows.append((D, causal, kind, f"{config.kwargs['BLOCK_M']} x {config.kwargs['BLOCK_N']}",
                             config.num_warps, config.num_stages, ms * 1e3, 100 * best / ms))
    return print_table(rows, ["head_dim", "causal", "kernel varied", "BLOCK_M x BLOCK_N", "num_warps",
                              "num_stages", "whole backward µs", "% of best"],
                       title=f"Backward designs and block sizes, seq {seq}, {dtype_name(dtype)}",
                       note=f"batch x heads = {' and '.join(f'{B} x {H}' for B, H, _ in shapes)}. Each row times the "
                            "whole backward with one kernel's configuration varied. 'dK, dV' and 'dQ': the three-kernel "
                            "backward (preprocess, dK/dV, dQ), the other kernel autotuned. 'dK, dV + atomic dQ': "
                            "atomic_dq=True, two kernels (preprocess, then dK/dV adding dQ with atomics; the accumulator's "
                            "zeroing and final cast included); '+ TMA reduce-add dQ': the same with tma_dq=True, a "
                            "dQ tile per TMA request (Hopper and newer). '% of best': against the fastest row of either design at "
                            f"that head_dim and mask. Kernel time (profiler timestamps, L2 flushed between calls). "
                            f"{bench.SIDE_BY_SIDE_NOTE}"
                            + (f" Left out, more shared memory than this GPU has: {'; '.join(sorted(left_out))}."
                               if left_out else ""))
