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

Both are here. The default is the tutorial's three kernels: deterministic, and on an H200 the
fastest in three of the four cases of section 15's table and within 2% of the fastest in the
fourth (RESULTS.md): atomics buy no speed worth giving up the same bits on every run.
atomic_dq=True is FlashAttention-2's way: the dK/dV pass also computes dQ's share, dS K, and adds
it with tl.atomic_add into a float32 accumulator (5 tl.dots, no dQ pass). What that saves in
matmuls it pays in memory traffic: every (key block, query block) pair adds a BLOCK_M x HEAD_DIM
float32 tile through the L2 cache's atomic units (BLOCK_M = BLOCK_N = HEAD_DIM = 64: 64 x 64 x 4
bytes = 16 KB for the pair's 5 matmuls of 2 x 64 x 64 x 64 flops, 2.6 MFLOP), and additions to
one address wait for each other.
FlashAttention-2 (written for the A100) pays that traffic to save the matmuls; FlashAttention-3
on Hopper makes it cheaper to issue: the tile goes to shared memory and one thread asks TMA
(Hopper's copy engine: lesson 4's hopper.py) to add all of it in memory, asynchronously, where
atomics take an instruction per element from every thread. tma_dq=True does that (Hopper and
newer; Triton's interpreter has no copy engine). Section 15 times the designs side by side
(RESULTS.md, "Backward designs and block sizes").

Causal: key j gets gradient only from queries i >= j, so a key block's walk starts at its own
diagonal; as in the forward, only the diagonal block (and the ragged last block) pays for masks.

main.py imports this file and hands it what it needs of the forward (the launcher, the public
function, the reference) as arguments: sections 12-15 of the chapter run the functions below.
"""
import functools

from common.device import DEVICE, INTERPRET, capability, gpu_name, interpretable  # first: it decides how triton is imported

import torch
import triton
import triton.language as tl

from common import bench
from common.checks import dtype_name, flag, index_type
from common.launch import cdiv, traceable
from common.table import print_table
from common.trace import show
from lesson04_matmul.hopper import scratch  # the memory device-side TMA descriptors live in (tma_dq=True)

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def preprocess_kernel(o_ptr, do_ptr, delta_ptr, seq_len, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                      INDEX_TYPE: tl.constexpr = tl.int32):
    """Delta = rowsum(dO * O), one number per query row, in fp32."""
    num_pid_m = tl.cdiv(seq_len, BLOCK_M)  # one grid axis, as the forward's: blocks of head 0, then head 1, ...
    rows = ((tl.program_id(0) % num_pid_m) * BLOCK_M + tl.arange(0, BLOCK_M)).to(INDEX_TYPE)
    bh = (tl.program_id(0) // num_pid_m).to(INDEX_TYPE)
    dims = tl.arange(0, HEAD_DIM)
    offsets = bh * seq_len * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]  # contiguous (B, H, seq, D)
    o = tl.load(o_ptr + offsets, mask=rows[:, None] < seq_len, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + offsets, mask=rows[:, None] < seq_len, other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * seq_len + rows, tl.sum(o * do, axis=1), mask=rows < seq_len)


@triton.jit
def dkdv_blocks(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, dq_sum, keys, seq_len, sm_scale, qk_scale, lo, hi,
                BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                ATOMIC_DQ: tl.constexpr, TMA_DQ: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                INDEX_TYPE: tl.constexpr, TRACE: tl.constexpr):
    """Add query blocks lo..hi into one key block's dk, dv ([BLOCK_N, HEAD_DIM], fp32), and with
    ATOMIC_DQ each query block's share of dQ into the float32 dq accumulator in memory, dq_sum (a
    pointer, or with TMA_DQ a tensor descriptor). The pointers address row 0 of this (batch, head);
    everything is computed transposed, keys down."""
    dims = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        rows = (start_m + tl.arange(0, BLOCK_M)).to(INDEX_TYPE)  # the query rows of this block
        if MASKED:  # rows past the end: q = dO = 0, and P^T is zeroed below
            q = tl.load(q_ptr + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)
            do = tl.load(do_ptr + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)
            lse = tl.load(lse_ptr + rows, mask=rows < seq_len, other=0.0)
            delta = tl.load(delta_ptr + rows, mask=rows < seq_len, other=0.0)
        else:
            q = tl.load(q_ptr + rows[:, None] * HEAD_DIM + dims[None, :])
            do = tl.load(do_ptr + rows[:, None] * HEAD_DIM + dims[None, :])
            lse = tl.load(lse_ptr + rows)
            delta = tl.load(delta_ptr + rows)
        # P^T, recomputed: [BLOCK_N, BLOCK_M], the forward's probabilities (lse folds in m and l)
        pT = tl.exp2(tl.dot(k, tl.trans(q), input_precision=INPUT_PRECISION) * qk_scale - lse[None, :])
        if MASKED:
            keep = rows[None, :] < seq_len
            if CAUSAL:
                keep = keep & (keys[:, None] <= rows[None, :])  # query i sees keys j <= i
            pT = tl.where(keep, pT, 0.0)
        dv += tl.dot(pT.to(do.dtype), do, input_precision=INPUT_PRECISION)            # dV += P^T dO
        dpT = tl.dot(v, tl.trans(do), input_precision=INPUT_PRECISION)                # dP^T = V dO^T
        dsT = pT * (dpT - delta[None, :])                                             # dS^T
        dk += tl.dot(dsT.to(q.dtype), q, input_precision=INPUT_PRECISION)            # dK += dS^T Q (scaled later)
        if ATOMIC_DQ:  # this key block's share of these rows' dQ = dS K * sm_scale, added in memory
            dq = tl.dot(tl.trans(dsT.to(k.dtype)), k, input_precision=INPUT_PRECISION) * sm_scale
            if TMA_DQ:  # Hopper: the tile goes to shared memory, then one request to the copy engine
                # adds all of it in memory (cp.reduce.async.bulk.tensor); rows past the end are clipped
                dq_sum.atomic_add([start_m, 0], dq)
            else:
                dq_sum_ptrs = dq_sum + rows[:, None] * HEAD_DIM + dims[None, :]
                # sem="relaxed": no ordering with other memory operations (nothing reads dq_sum until
                # the kernel is over), the cheapest kind; lesson 3's atomics take the default, acq_rel
                if MASKED:
                    tl.atomic_add(dq_sum_ptrs, dq, mask=rows[:, None] < seq_len, sem="relaxed")
                else:
                    tl.atomic_add(dq_sum_ptrs, dq, sem="relaxed")
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
def dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_sum_ptr, sm_scale, seq_len,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                ATOMIC_DQ: tl.constexpr = False, TMA_DQ: tl.constexpr = False, INPUT_PRECISION: tl.constexpr = "tf32",
                INDEX_TYPE: tl.constexpr = tl.int32, TRACE: tl.constexpr = False):
    """One program per block of BLOCK_N keys of one (batch, head): its rows of dK and dV, and with
    ATOMIC_DQ their share of every dQ row, added into dq_sum_ptr (float32, zeroed) with atomics,
    with TMA_DQ (Hopper) a tile at a time by TMA's reduce-add."""
    tl.static_assert(BLOCK_N % BLOCK_M == 0)  # so the causal diagonal ends on a query-block boundary
    # One grid axis, as the forward's (axes 1 and 2 stop at 65535 programs; B x H can pass that)
    num_pid_n = tl.cdiv(seq_len, BLOCK_N)
    pid_n, bh = tl.program_id(0) % num_pid_n, (tl.program_id(0) // num_pid_n).to(INDEX_TYPE)
    start_n = pid_n * BLOCK_N
    base = bh * seq_len * HEAD_DIM                         # every tensor is contiguous (B, H, seq, D)
    q_ptr, k_ptr, v_ptr, do_ptr, dq_sum_ptr = q_ptr + base, k_ptr + base, v_ptr + base, do_ptr + base, dq_sum_ptr + base
    lse_ptr, delta_ptr = lse_ptr + bh * seq_len, delta_ptr + bh * seq_len
    if TMA_DQ:  # this head's dQ as a [seq_len, HEAD_DIM] matrix, in tiles of BLOCK_M rows (lesson 4's hopper.py)
        dq_sum = tl.make_tensor_descriptor(dq_sum_ptr, shape=[seq_len, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
    else:
        dq_sum = dq_sum_ptr
    keys = (start_n + tl.arange(0, BLOCK_N)).to(INDEX_TYPE)
    dims = tl.arange(0, HEAD_DIM)
    # Keys past the end load as 0; their rows of dk, dv are never stored. (Their P^T is not masked
    # when not causal, so with ATOMIC_DQ they add dS^T-rows times k = 0 to dQ: nothing.)
    k = tl.load(k_ptr + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < seq_len, other=0.0)
    v = tl.load(v_ptr + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < seq_len, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    sm_scale = tl.cast(sm_scale, tl.float32)  # float32 whoever launches (main.py says why)
    qk_scale = sm_scale * LOG2E
    # Stages, in query rows (lo, mid, ... are row offsets, stepped by BLOCK_M). Causal: the
    # diagonal block, rows start_n .. start_n + BLOCK_N (masked); the whole query blocks after it
    # (no mask); the ragged last block (masked). Not causal: no diagonal (its call is an empty loop,
    # lo = mid), and the walk starts at the key block's own row, start_n (never past full_end), then
    # wraps round to rows 0 .. start_n. So the programs of one head, running side by side, start on
    # different query rows: with ATOMIC_DQ they add into different rows of dQ at any moment (atomics
    # on one address wait for each other). The causal walks start on different diagonals anyway.
    # Both designs walk this way, one code path; without atomics the order only changes which rows
    # a program reads first.
    full_end = (seq_len // BLOCK_M) * BLOCK_M
    if CAUSAL:
        lo, mid = start_n, start_n + BLOCK_N
    else:
        lo, mid = start_n, start_n
    if TRACE:
        show("dK, dV program (key block, batch x head)", (pid_n, bh), indent=0)
    dk, dv = dkdv_blocks(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, dq_sum, keys, seq_len, sm_scale, qk_scale,
                         lo, mid, BLOCK_M, HEAD_DIM, True, CAUSAL, ATOMIC_DQ, TMA_DQ, INPUT_PRECISION, INDEX_TYPE,
                         TRACE)
    dk, dv = dkdv_blocks(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, dq_sum, keys, seq_len, sm_scale, qk_scale,
                         mid, full_end, BLOCK_M, HEAD_DIM, False, CAUSAL, ATOMIC_DQ, TMA_DQ, INPUT_PRECISION,
                         INDEX_TYPE, TRACE)
    dk, dv = dkdv_blocks(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, dq_sum, keys, seq_len, sm_scale, qk_scale,
                         tl.maximum(full_end, mid), seq_len, BLOCK_M, HEAD_DIM, True, CAUSAL, ATOMIC_DQ, TMA_DQ,
                         INPUT_PRECISION, INDEX_TYPE, TRACE)
    if not CAUSAL:  # the wrap: whole blocks 0 .. lo (none when lo = 0)
        dk, dv = dkdv_blocks(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, dq_sum, keys, seq_len, sm_scale,
                             qk_scale, 0, lo, BLOCK_M, HEAD_DIM, False, CAUSAL, ATOMIC_DQ, TMA_DQ, INPUT_PRECISION,
                             INDEX_TYPE, TRACE)
    offsets = base + keys[:, None] * HEAD_DIM + dims[None, :]
    tl.store(dk_ptr + offsets, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=keys[:, None] < seq_len)
    tl.store(dv_ptr + offsets, dv.to(dv_ptr.dtype.element_ty), mask=keys[:, None] < seq_len)


@triton.jit
def dq_blocks(dq, q, do, lse, delta, k_ptr, v_ptr, rows, seq_len, qk_scale, lo, hi, BLOCK_N: tl.constexpr,
              HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
              INDEX_TYPE: tl.constexpr):
    """Add key blocks lo..hi into one query block's dq ([BLOCK_M, HEAD_DIM], fp32)."""
    dims = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        keys = (start_n + tl.arange(0, BLOCK_N)).to(INDEX_TYPE)
        if MASKED:
            k = tl.load(k_ptr + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < seq_len, other=0.0)
            v = tl.load(v_ptr + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < seq_len, other=0.0)
        else:
            k = tl.load(k_ptr + keys[:, None] * HEAD_DIM + dims[None, :])
            v = tl.load(v_ptr + keys[:, None] * HEAD_DIM + dims[None, :])
        p = tl.exp2(tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * qk_scale - lse[:, None])
        if MASKED:
            keep = keys[None, :] < seq_len
            if CAUSAL:
                keep = keep & (keys[None, :] <= rows[:, None])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=INPUT_PRECISION)                 # dP = dO V^T
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=INPUT_PRECISION)             # dQ += dS K (scaled later)
    return dq


@triton.jit
def dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, sm_scale, seq_len,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
              INPUT_PRECISION: tl.constexpr = "tf32", INDEX_TYPE: tl.constexpr = tl.int32,
              TRACE: tl.constexpr = False):
    """One program per block of BLOCK_M queries of one (batch, head): its rows of dQ. The stages
    are the forward's: whole key blocks below the diagonal (or all whole ones), then the rest, masked."""
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    num_pid_m = tl.cdiv(seq_len, BLOCK_M)  # one grid axis, as dkdv_kernel's
    pid_m, bh = tl.program_id(0) % num_pid_m, (tl.program_id(0) // num_pid_m).to(INDEX_TYPE)
    start_m = pid_m * BLOCK_M
    base = bh * seq_len * HEAD_DIM
    rows = (start_m + tl.arange(0, BLOCK_M)).to(INDEX_TYPE)
    dims = tl.arange(0, HEAD_DIM)
    offsets = base + rows[:, None] * HEAD_DIM + dims[None, :]
    q = tl.load(q_ptr + offsets, mask=rows[:, None] < seq_len, other=0.0)
    do = tl.load(do_ptr + offsets, mask=rows[:, None] < seq_len, other=0.0)
    lse = tl.load(lse_ptr + bh * seq_len + rows, mask=rows < seq_len, other=0.0)
    delta = tl.load(delta_ptr + bh * seq_len + rows, mask=rows < seq_len, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    sm_scale = tl.cast(sm_scale, tl.float32)  # float32 whoever launches (main.py says why)
    qk_scale = sm_scale * LOG2E
    if CAUSAL:
        full_end, masked_end = start_m, tl.minimum(start_m + BLOCK_M, seq_len)
    else:
        full_end, masked_end = (seq_len // BLOCK_N) * BLOCK_N, seq_len
    dq = dq_blocks(dq, q, do, lse, delta, k_ptr + base, v_ptr + base, rows, seq_len, qk_scale, 0, full_end,
                   BLOCK_N, HEAD_DIM, False, CAUSAL, INPUT_PRECISION, INDEX_TYPE)
    dq = dq_blocks(dq, q, do, lse, delta, k_ptr + base, v_ptr + base, rows, seq_len, qk_scale, full_end, masked_end,
                   BLOCK_N, HEAD_DIM, True, CAUSAL, INPUT_PRECISION, INDEX_TYPE)
    if TRACE:
        show("dQ program (query block, batch x head)", (pid_m, bh), indent=0)
        show("dQ", dq * sm_scale)
    tl.store(dq_ptr + offsets, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=rows[:, None] < seq_len)


# Block sizes. dK and dV of a key block stay in registers for the whole walk (2 x BLOCK_N x HEAD_DIM
# fp32), beside K and V, while blocks of queries stream past; each query block loaded is shared by
# the BLOCK_N keys, so big key blocks pay at head_dim 128, as long as the registers hold (8 warps
# for 128 keys; 4 warps spill there). Deeper pipelines (num_stages: how many query blocks are in
# flight, each a copy of q and dO in shared memory) pay: on the H200 at seq 4096 and 16384
# the 4-stage 64 x 128 took 7-10% off the 3-stage's dK/dV time at head_dim 128, and the 128 x 128
# was the fastest at head_dim 64, causal. Neither fits every GPU: the 4 stages need 194 KB of shared
# memory at head_dim 128 (an A100 has 163: the 3-stage one is its), the 128 x 128 258 KB there (more
# than Hopper's 227): where a configuration does not fit, the autotuner skips it. The dQ kernel is
# the forward's shape. Section 15 (bench_configs, RESULTS.md "Backward designs and block sizes")
# times the candidates; the autotuner picks among them per (seq_len, head_dim, causal).
GPU_FUSED_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)  # dK, dV and dQ
                     for bm, bn, w, s in [(64, 128, 8, 3), (32, 128, 8, 3), (32, 128, 4, 3), (64, 64, 4, 3),
                                          (16, 32, 4, 2)]]
GPU_DKDV_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                    for bm, bn, w, s in [(64, 128, 8, 4), (64, 128, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3),
                                         (32, 64, 4, 2), (16, 32, 4, 2)]]  # the last fits a T4 in fp32
GPU_DQ_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                  for bm, bn, w, s in [(128, 64, 8, 3), (64, 64, 4, 3), (128, 32, 4, 3), (32, 16, 4, 1)]]
INTERPRETED = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32})]  # the interpreter: one small configuration
FUSED_CONFIGS, DKDV_CONFIGS, DQ_CONFIGS = ((INTERPRETED,) * 3 if INTERPRET else
                                           (GPU_FUSED_CONFIGS, GPU_DKDV_CONFIGS, GPU_DQ_CONFIGS))


def small_problems_untuned(configs, named_args, **kwargs):
    """As the forward's: every configuration from seq_len 512 up, else the last. float32 inputs get
    the last too: their products run on the CUDA cores (ieee, no tensor cores), and the larger
    configurations each take 30 to 90 s to compile there (sm_90, head_dim 64 and 128), for a dtype
    that checks the others rather than trains. (The autotuner's key holds the tensors' dtypes.)"""
    small = named_args["seq_len"] < 512 or named_args["q_ptr"].dtype == torch.float32
    return configs[-1:] if small else configs


PRUNE = {"early_config_prune": small_problems_untuned}
KEY = ["seq_len", "HEAD_DIM", "CAUSAL"]
# The autotuner runs each candidate several times: the atomics' accumulator is zeroed before each run.
fused_kernel_tuned = triton.autotune(FUSED_CONFIGS, key=[*KEY, "TMA_DQ"], prune_configs_by=PRUNE,
                                   reset_to_zero=["dq_sum_ptr"])(dkdv_kernel)
dkdv_kernel_tuned = triton.autotune(DKDV_CONFIGS, key=KEY, prune_configs_by=PRUNE)(dkdv_kernel)
dq_kernel_tuned = triton.autotune(DQ_CONFIGS, key=KEY, prune_configs_by=PRUNE)(dq_kernel)


def launch_backward(do, q, k, v, o, lse, causal: bool, sm_scale: float, *, atomic_dq: bool = False,
                    tma_dq: bool = False, preprocess=preprocess_kernel, dkdv=None, dq=dq_kernel_tuned,
                    dkdv_meta=None, dq_meta=None) -> tuple:
    """dq, dk, dv for attention's output o (with its lse) and the gradient do.

    By default three kernels: Delta; dK and dV, a program per key block; dQ, a program per query
    block. Deterministic: the same bits on every run. atomic_dq=True: FlashAttention-2's way, two
    kernels: the dK/dV pass also adds each key block's share of dQ with atomics into a float32
    accumulator, cast to q's dtype at the end (the order of the additions varies from run to run, so
    the last bits do; under torch.use_deterministic_algorithms(True) the three kernels run instead).
    tma_dq=True (with atomic_dq, on Hopper or newer): FlashAttention-3's way of adding, a whole
    dQ tile per TMA reduce-add instead of an atomic per element (Triton's interpreter has no such
    copy engine: GPU only). atomic_dq and tma_dq are this function's only: attention() and its
    operator run the default. Section 15 times all three (RESULTS.md).
    preprocess, dkdv, dq: the kernels (autotuned by default: fused_kernel_tuned or dkdv_kernel_tuned
    for the dK/dV pass; the operator hands in their traceable forms; the trace and the block-size
    sweep plain ones, with their block sizes in dkdv_meta, dq_meta). The kernels read contiguous
    tensors; a view (q from a (B, seq, H, D) layout, say) is copied once here."""
    B, H, seq_len, D = q.shape
    if flag("tma_dq", tma_dq) and not flag("atomic_dq", atomic_dq):
        raise ValueError("tma_dq=True is a way of adding dQ for atomic_dq=True; it needs atomic_dq=True too")
    if tma_dq and (INTERPRET or capability() < 90):
        raise ValueError("tma_dq=True needs TMA's reduce-add: a GPU of compute capability 9.0 or newer (Hopper); "
                         + ("Triton's interpreter has none" if INTERPRET else f"this one is {gpu_name()}"))
    atomic_dq = flag("atomic_dq", atomic_dq) and not torch.are_deterministic_algorithms_enabled()
    tma_dq = tma_dq and atomic_dq
    dq_out, dk_out, dv_out = (q.new_empty(q.shape) for _ in range(3))  # contiguous, in q's dtype
    if q.numel() == 0:
        return dq_out, dk_out, dv_out
    q, k, v, do, o = (interpretable(t.contiguous()) for t in (q, k, v, do, o))  # (bf16 as fp32 under the interpreter)
    delta = torch.empty_like(lse)
    index = index_type(q, k, v, do, o)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"  # as the forward's launcher says
    preprocess[(cdiv(seq_len, 64) * B * H,)](o, do, delta, seq_len, HEAD_DIM=D, BLOCK_M=64, INDEX_TYPE=index)

    def key_blocks(meta):  # one program per block of keys per (batch, head), for dK and dV
        return (cdiv(seq_len, meta["BLOCK_N"]) * B * H,)

    def query_blocks(meta):  # one program per block of queries per (batch, head), for dQ
        return (cdiv(seq_len, meta["BLOCK_M"]) * B * H,)

    if dkdv is None:
        dkdv = fused_kernel_tuned if atomic_dq else dkdv_kernel_tuned
    if atomic_dq and "dq_sum_ptr" not in getattr(getattr(dkdv, "kernel", dkdv), "reset_to_zero", ["dq_sum_ptr"]):
        # an autotuner runs each candidate several times: without zeroing between, the sums pile up
        raise ValueError("atomic_dq=True takes a dK/dV kernel whose autotuner zeroes dq_sum_ptr between its trial "
                         "runs (fused_kernel_tuned), or a plain one (dkdv_kernel)")
    dq_sum = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if atomic_dq else dq_out  # (unused without)
    if tma_dq:  # each program builds its descriptor in memory Triton asks for at each launch (lesson 4's hopper.py)
        triton.set_allocator(scratch)
    dkdv[key_blocks](q, k, v, do, lse, delta, dk_out, dv_out, dq_sum, sm_scale, seq_len, HEAD_DIM=D, CAUSAL=causal,
                     ATOMIC_DQ=atomic_dq, TMA_DQ=tma_dq, INPUT_PRECISION=precision, INDEX_TYPE=index,
                     **(dkdv_meta or {}))
    if atomic_dq:
        return dq_sum.to(dq_out.dtype), dk_out, dv_out
    dq[query_blocks](q, k, v, do, lse, delta, dq_out, sm_scale, seq_len, HEAD_DIM=D, CAUSAL=causal,
                     INPUT_PRECISION=precision, INDEX_TYPE=index, **(dq_meta or {}))
    return dq_out, dk_out, dv_out


def keep_for_backward(ctx, inputs, output):
    """main.py's attention_op's setup_context: what the backward needs from the forward."""
    q, k, v, ctx.causal, ctx.sm_scale, _ = inputs  # (the last: which forward kernel ran)
    ctx.save_for_backward(q, k, v, *output)
    ctx.mark_non_differentiable(output[1])  # lse is for the backward only: no gradient flows through it


def attention_grad(ctx, do, dlse):
    """main.py's attention_op's backward: (dq, dk, dv, and none for causal, sm_scale, gluon)."""
    q, k, v, o, lse = ctx.saved_tensors
    return *attention_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale), None, None, None


@torch.library.triton_op("lessons::attention_backward", mutates_args=())
def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                       lse: torch.Tensor, causal: bool, sm_scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv): the gradients of attention for dO = do. An operator too: torch.compile traces
    backward passes, so each launch inside is traceable(kernel)[grid](...) (lesson 1, section 5)."""
    return launch_backward(do, q, k, v, o, lse, causal, sm_scale, preprocess=traceable(preprocess_kernel),
                           dkdv=traceable(dkdv_kernel_tuned), dq=traceable(dq_kernel_tuned))


def trace(q, k, v, o, lse, standard) -> None:
    """The backward on the chapter's tiny problem (seq 8, head_dim 2, blocks of 4, causal, sm_scale 1),
    given the forward's o and lse, with dO = 1 on the first output column, from inside the kernels;
    then the gradients of `standard` (standard attention) by torch's autograd, in float64."""
    do = torch.zeros_like(o)
    do[..., 0] = 1  # the loss: the sum of the outputs' first column
    print("Delta = rowsum(dO * O), per query row:", [round(x, 4) for x in (do * o).sum(-1).flatten().tolist()])
    tiny = dict(BLOCK_M=4, BLOCK_N=4, TRACE=True)
    grads = launch_backward(do, q, k, v, o, lse, True, 1.0, dkdv=dkdv_kernel, dq=dq_kernel, dkdv_meta=tiny,
                            dq_meta=tiny)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    standard(*leaves, causal=True, sm_scale=1.0).backward(do.double())
    for name, ours, leaf in zip(("dQ", "dK", "dV"), grads, leaves):
        print(f"{name}: kernel   {[[round(x, 4) for x in row] for row in ours[0, 0].tolist()]}")
        print(f"    autograd {[[round(x, 4) for x in row] for row in leaf.grad[0, 0].tolist()]}")
        show(f"max |{name} - autograd's|", (ours.double() - leaf.grad).abs().max().item(), indent=4)


BACKWARD_NOTE = ("'µs': the GPU kernels' own time (profiler timestamps, L2 flushed between calls); the backward is "
                 "the gradient call, torch.autograd.grad(o, (q, k, v), dO). " + bench.SIDE_BY_SIDE_NOTE)


def bench_backward(impls: dict, seqs, shapes, dtype=torch.float16) -> list:
    """Forward and backward side by side, one table per (batch, heads, head_dim): impls = {name:
    fn(q, k, v, causal=...)}, main.py's attention first, then SDPA's backends. GPU only."""
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
                for name in impls:
                    rows.append((seq, causal, name, forward[name] * 1e3, backward[name] * 1e3,
                                 bench.tflops(flops, forward[name]), bench.tflops(2.5 * flops, backward[name]),
                                 ref / backward[name]))
                del q, k, v, do, outs
        tables.append(print_table(
            rows, ["seq", "causal", "implementation", "forward µs", "backward µs", "forward TFLOP/s",
                   "backward TFLOP/s", "backward x SDPA flash"],
            title=f"Forward and backward against SDPA's backends, {B} x {H} x {D}, {dtype_name(dtype)}", floatfmt=".2f",
            note=BACKWARD_NOTE + " 'Triton flash': attention(), its backward the default design (three kernels). "
                 "TFLOP/s: forward 4 B H seq^2 head_dim (half when causal), backward 2.5 times that (five matmuls to "
                 "the forward's two: useful work; the three kernels execute seven); 'backward x SDPA flash': the "
                 "SDPA flash backend's backward time over this one's.",
            plot=dict(x="seq", y="backward TFLOP/s", series=["causal", "implementation"], ceiling=None)))
        print()
    return tables


def bench_configs(forward, seq: int = 4096, shapes=((4, 32, 64), (4, 16, 128)), causals=(False, True),
                  dtype=torch.float16):
    """Every candidate block size of both designs' kernels, timed side by side (the autotuner's
    job done by hand; its lists are DKDV_CONFIGS, DQ_CONFIGS and FUSED_CONFIGS). forward(q, k, v, causal, sm_scale):
    main.py's launcher with the autotuned kernel, which gives (o, lse). GPU only."""
    rows, left_out = [], set()
    for B, H, D in shapes:
        q, k, v, do = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(4))
        for causal in causals:
            o, lse = forward(q, k, v, causal, D ** -0.5)
            cases = {}
            kinds = [("dK, dV", DKDV_CONFIGS), ("dQ", DQ_CONFIGS), ("dK, dV + atomic dQ", FUSED_CONFIGS)]
            if not INTERPRET and capability() >= 90:  # Hopper and newer: TMA's reduce-add too
                kinds.append(("dK, dV + TMA reduce-add dQ", FUSED_CONFIGS))
            for kind, configs in kinds:
                for config in configs:  # this kernel plain, with `config`; the other autotuned
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
