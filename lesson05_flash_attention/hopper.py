"""Lesson 5 on Hopper: the forward and backward passes written in Gluon, where the programmer, not
the compiler, decides which warps do what.

attention.py's attention_kernel says what one program computes and leaves the rest to Triton's
compiler: which threads load, how the loads are pipelined, when the tensor cores run. On an H100 or
H200 the fastest attention kernels (FlashAttention-3, cuDNN) split each program's warps by job
instead, and Gluon (triton.experimental.gluon, Triton's lower-level language) lets a kernel say so.
Each job is a *partition*: a function run by its own warps (gl.warp_specialize, at the end of the
kernel, hands them out).

- one *producer* warp issues the copies: TMA (the tensor memory accelerator, lesson 4's hopper.py)
  brings the queries once and each key/value block into a ring of shared-memory slots;
- two *consumer* warpgroups (a warpgroup: 4 warps, what Hopper's wgmma instruction runs on) own 64
  query rows each and do the work: S = Q K^T and O += P V on the tensor cores (`warpgroup_mma`,
  wgmma, asynchronous: it returns at once, `warpgroup_mma_wait` waits for it), the online softmax
  in registers between them;
- mbarriers, barrier objects in shared memory, say when a slot is full or free. An mbarrier counts
  arrivals (and, for TMA, bytes); when all have come in it completes a *phase* and starts the
  next, flipping a parity bit. `mbarrier.wait(bar, p)` returns once the phase of parity p is over,
  so a loop that uses a barrier once per round waits with parity round & 1;
- the two consumers take turns at issuing: each issues its two matmuls, then lets the other issue
  its own and does its softmax while they run (FlashAttention-3's "ping-pong"):

      consumer 0:  issue S(j), PV(j-1) | softmax(j)              | issue S(j+1), PV(j)  | ...
      consumer 1:  softmax(j-1)        | issue S(j), PV(j-1)     | softmax(j)           | ...
      tensor cores:  consumer 0's      | consumer 1's            | consumer 0's         | ...

  Inside one consumer, the S of block j is issued with the P V of block j - 1, and the code waits
  for S(j) alone before the softmax (FlashAttention-3's other overlap). Whether the machine code
  keeps that overlap is ptxas's choice: where it puts a wait for P V ahead of the softmax's
  exponentials (`WARPGROUP.DEPBAR.LE gsb0, 0x0` before the first `MUFU.EX2` in the SASS; lesson 7
  reads the backward's SASS the same way), the overlap that remains is the two consumers'.

The barriers, for key block j in slot s = j % NUM_BUFFERS (round r = j // NUM_BUFFERS):

    barrier       count  who arrives                                   who waits, parity
    q_bar           1    the producer (expect: the bytes of both Q     both consumers, 0
                         halves; the phase ends when TMA has them)
    k_ready[s]      1    the producer, with K(j)'s bytes               both consumers, r & 1
    v_ready[s]      1    the producer, with V(j)'s bytes               both consumers, r & 1
    kv_empty[s]     2    each consumer, once its P V(j) is done        the producer, before K(j + NB): (r & 1) ^ 1
    turns[c]        1    the other consumer, after issuing its         consumer c, before issuing block j: j & 1
                         matmuls (turns[0] once ahead of time)

(The producer's first round waits on parity 1 of a fresh barrier, which counts as complete: every
slot starts free. The last P V takes no turn, and consumer 1's last arrive on turns[0] has no
waiter: both harmless.)

What it costs to write: every layout is named (the wgmma accumulator's, the operand's that P must
be in, a row's), every barrier's phase is counted by hand, and a wrong count is a hang, not an
error. It runs on Hopper only (sm_90: wgmma and setmaxnreg), for float16 and bfloat16, q, k and v of
one contiguous shape, head_dim 64 or 128 and seq a multiple of 128 (takes()). Whether it pays is a
measurement: lesson 7 times it beside the Triton kernel and cuDNN (RESULTS.md), and attention.py's
route() sends it the head dims where it was the faster at every length and mask (FASTER_HEAD_DIMS),
everything else to the Triton kernel. Why the head dim matters: a turn's barriers and waits cost
the same at either head dim, while its tensor-core work (Q K^T and P V) halves at 64, so the
hand-made schedule's fixed cost is twice the share there.

The file's second kernel is the backward, in the same pieces (its comment block, "The backward in
Gluon", has its barriers, timeline and registers): FlashAttention-3's one kernel per key block, dQ
added by TMA's reduce-add; it reads q, k and v in any layout TMA reads as rows, a QKV projection's
views included (backward_takes). attention()'s backward, and attention_qkv's, run it where lesson
7's table found it faster than backward.py's Triton kernels (FASTER_BACKWARD_HEAD_DIMS).

This file is an op file: the kernels, their preconditions and their launchers, which attention.py's
route runs; lesson 7's chapter (lesson07_hopper/main.py) compiles them for sm_90 and times them.
"""
from common.device import INTERPRET, capability

import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from common.checks import index_type
from lesson05_flash_attention.backward import preprocess_kernel  # Delta's kernel

# TMA's copies, under whichever of the two names Triton's releases have given them the installed one has.
tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
tma_store = tma.async_store if hasattr(tma, "async_store") else tma.async_copy_shared_to_global

LOG2E = gl.constexpr(1.4426950408889634)  # exp(x) = exp2(x * LOG2E)
BLOCK_M = 128        # query rows per program: 64 per consumer warpgroup
BLOCK_N = 128        # keys per block
NUM_BUFFERS = 3      # key/value slots in the ring: as many as fit an H100's shared memory at head_dim 128
# Where attention() runs this kernel: the head dims where lesson 7's table (RESULTS.md, section 10) timed
# it faster than attention.py's at every length and mask.
FASTER_HEAD_DIMS = (128,)
# Registers per thread, by partition. An SM has 64K. setmaxnreg (Hopper: a warpgroup gives
# registers back or takes more, while the kernel runs) works on whole warpgroups, so the launch has
# 12 warps, 3 of them idle beside the producer's one; each starts with 168 (maxnreg: 12 x 32 x 168 =
# 64512), then the producer's warpgroup drops to 24 and each consumer's rises to 240 (128 threads x
# (240 + 240 + 24) = 64512). Per consumer thread at head_dim 128: S 64, O 64, P 32 and the next P 64
# registers. (BLOCK_N = 64 would halve S, P and the slots, but then the causal diagonal spans two
# key blocks: the kernel assumes BLOCK_N == BLOCK_M.)
MAXNREG = 168
CONSUMER_REGS = 240
PRODUCER_REGS = 24


@gluon.constexpr_function
def wgmma_layout(n):
    """Where each thread's values of a wgmma result live, n columns wide, over one warpgroup: the
    accumulator layout (NVMMADistributedLayout, version [3, 0]: Hopper's wgmma; instr_shape
    [16, n, 16]: 16 rows per warp, 4 warps down the 64 rows)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.jit
def producer(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, q_row, kv_row,
             n_blocks, BLOCK_N: gl.constexpr, NUM_BUFFERS: gl.constexpr):
    """One warp: the queries' two halves once, then key/value block j into slot j % NUM_BUFFERS as
    soon as both consumers have released that slot."""
    SPLIT_M: gl.constexpr = q_desc.block_type.shape[0]
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)  # the barrier completes when these bytes land
    tma_load(q_desc, [q_row, 0], q_bar, q_smem.index(0))
    tma_load(q_desc, [q_row + SPLIT_M, 0], q_bar, q_smem.index(1))
    for j in range(n_blocks):
        slot = j % NUM_BUFFERS
        phase = (j // NUM_BUFFERS) & 1
        # A new mbarrier's "previous phase" counts as complete, so the first round (phase 0)
        # waits on parity 1 and passes: every slot starts empty.
        mbarrier.wait(kv_empty.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma_load(k_desc, [kv_row + j * BLOCK_N, 0], k_ready.index(slot), k_bufs.index(slot))
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma_load(v_desc, [kv_row + j * BLOCK_N, 0], v_ready.index(slot), v_bufs.index(slot))


@gluon.jit
def softmax_step(s, m_i, l_i, qk_scale, rows, j, diagonal, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
                 s_layout: gl.constexpr):
    """attention.py's attend(), one key block: the running max and sum, P for this block, and alpha."""
    if CAUSAL:
        if j == diagonal:  # the one block that crosses the diagonal: keys after the query get -inf
            cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            s = gl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, m_new, l_i, alpha


@gluon.jit
def consumer(o_desc, lse_ptr, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, turns, q_row, first_row,
             n_blocks, qk_scale, WHICH: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
             NUM_BUFFERS: gl.constexpr, CAUSAL: gl.constexpr):
    """One warpgroup: query rows first_row + WHICH * 64 ... + 63 against every key block."""
    SPLIT_M: gl.constexpr = o_desc.block_type.shape[0]
    dtype: gl.constexpr = o_desc.dtype
    gl.static_assert(gl.num_warps() == 4, "a consumer is one warpgroup: the layouts below are for 4 warps")
    # Where each thread's values live. S = Q K^T comes out of wgmma in its accumulator layout
    # (wgmma_layout); O likewise; P must go back in as wgmma's A operand from registers
    # (DotOperandLayout), which for fp16/bf16 holds the same rows and columns per thread as the
    # accumulator did: the conversion moves nothing.
    s_layout: gl.constexpr = wgmma_layout(BLOCK_N)
    o_layout: gl.constexpr = wgmma_layout(HEAD_DIM)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)  # 2 fp16 per 32-bit register
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)  # one value per query row
    q = q_smem.index(WHICH)
    my_turn = turns.index(WHICH)
    other_turn = turns.index(1 - WHICH)
    rows = first_row + WHICH * SPLIT_M + gl.arange(0, SPLIT_M, layout=row_layout)  # (positions in the sequence)
    diagonal = n_blocks - 1  # causal: the last block is the diagonal one
    m_i = gl.full([SPLIT_M], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([SPLIT_M], gl.float32, row_layout)
    acc = gl.zeros([SPLIT_M, HEAD_DIM], gl.float32, o_layout)
    no_scores = gl.zeros([SPLIT_M, BLOCK_N], gl.float32, s_layout)  # (use_acc=False ignores its values)
    mbarrier.wait(q_bar, 0)

    # Block 0: S only (there is no P V before it).
    mbarrier.wait(k_ready.index(0), 0)
    mbarrier.wait(my_turn, 0)
    s = warpgroup_mma(q, k_bufs.index(0).permute((1, 0)), no_scores, use_acc=False, is_async=True)
    mbarrier.arrive(other_turn, count=1)  # the tensor cores are the other consumer's now
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    p, m_i, l_i, alpha = softmax_step(s, m_i, l_i, qk_scale, rows, 0, diagonal, BLOCK_N, CAUSAL, s_layout)
    p = gl.convert_layout(p.to(dtype), p_layout)

    for j in range(1, n_blocks):
        slot = j % NUM_BUFFERS
        prev = (j - 1) % NUM_BUFFERS
        mbarrier.wait(k_ready.index(slot), (j // NUM_BUFFERS) & 1)
        mbarrier.wait(v_ready.index(prev), ((j - 1) // NUM_BUFFERS) & 1)
        mbarrier.wait(my_turn, j & 1)
        # Issue S(j) = Q K_j^T, then O += P(j-1) V(j-1), both asynchronous; hand over the turn.
        s = warpgroup_mma(q, k_bufs.index(slot).permute((1, 0)), no_scores, use_acc=False, is_async=True)
        acc = warpgroup_mma(p, v_bufs.index(prev), acc, is_async=True)
        mbarrier.arrive(other_turn, count=1)
        # wgmma groups complete in order: at most one outstanding means S(j) is done (and P V may
        # run on under the softmax: what the code asks for; whether ptxas keeps it: the docstring).
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
        p_next, m_i, l_i, alpha = softmax_step(s, m_i, l_i, qk_scale, rows, j, diagonal, BLOCK_N, CAUSAL, s_layout)
        # P(j-1) rides along as a dependence: the running P V reads its registers until this wait.
        acc, _ = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))
        mbarrier.arrive(kv_empty.index(prev), count=1)  # this consumer is done with slot prev
        # The P V just finished was summed under the old max: rescale it, as attend() does.
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        p = gl.convert_layout(p_next.to(dtype), p_layout)

    last = (n_blocks - 1) % NUM_BUFFERS
    mbarrier.wait(v_ready.index(last), ((n_blocks - 1) // NUM_BUFFERS) & 1)
    acc = warpgroup_mma(p, v_bufs.index(last), acc, is_async=True)
    acc, _ = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))
    mbarrier.arrive(kv_empty.index(last), count=1)

    # The output: normalised once, through shared memory (the queries' slot, free now) and TMA.
    out = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    q.store(out.to(dtype))
    # Ordinary stores and TMA/wgmma reach shared memory by different paths ("proxies"): a fence
    # orders the store above before the TMA copy reads it.
    fence_async_shared()
    tma_store(o_desc, [q_row + WHICH * SPLIT_M, 0], q)
    # lse = m + log2(l), base 2, as attention.py's kernel stores it for the backward.
    gl.store(lse_ptr + q_row + WHICH * SPLIT_M + gl.arange(0, SPLIT_M, layout=row_layout), m_i + gl.log2(l_i))
    tma.store_wait(pendings=0)


@gluon.jit
def attention_kernel_hopper(q_desc, k_desc, v_desc, o_desc, lse_ptr, sm_scale, seq_len,
                            HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                            NUM_BUFFERS: gl.constexpr, CAUSAL: gl.constexpr,
                            CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """One program per BLOCK_M query rows of one (batch, head); q, k, v, o as (B * H * seq, D)."""
    gl.static_assert(BLOCK_M == BLOCK_N, "causal: the diagonal is one key block")
    pid = gl.program_id(0)
    num_pid_m = seq_len // BLOCK_M
    pid_m = pid % num_pid_m
    if CAUSAL:  # longest query blocks (most keys) first within each (batch, head), short ones last
        pid_m = num_pid_m - 1 - pid_m
    pid_bh = pid // num_pid_m
    first_row = pid_m * BLOCK_M                 # of this program's queries, in the sequence
    q_row = pid_bh * seq_len + first_row        # ... in the (B * H * seq, D) view
    kv_row = pid_bh * seq_len
    if CAUSAL:
        n_blocks = pid_m + 1                    # the key blocks up to the diagonal
    else:
        n_blocks = seq_len // BLOCK_N
    qk_scale = sm_scale * LOG2E

    dtype: gl.constexpr = q_desc.dtype
    SPLIT_M: gl.constexpr = BLOCK_M // 2
    q_smem = gl.allocate_shared_memory(dtype, [2, SPLIT_M, HEAD_DIM], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [NUM_BUFFERS, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [NUM_BUFFERS, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_BUFFERS, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_BUFFERS, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [NUM_BUFFERS, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NUM_BUFFERS):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=2)  # free once both consumers arrive
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)
    fence_async_shared()  # the barriers initialised, before TMA (the async proxy) signals them
    mbarrier.arrive(turns.index(0), count=1)  # consumer 0 goes first

    # The kernel's own warps (num_warps=4) become consumer 0; the workers get their warps and
    # registers here: consumer 1 (4 warps), the producer (1 warp).
    gl.warp_specialize([
        (consumer, (o_desc, lse_ptr, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, turns, q_row, first_row,
                    n_blocks, qk_scale, 0, HEAD_DIM, BLOCK_N, NUM_BUFFERS, CAUSAL)),
        (consumer, (o_desc, lse_ptr, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, turns, q_row, first_row,
                    n_blocks, qk_scale, 1, HEAD_DIM, BLOCK_N, NUM_BUFFERS, CAUSAL)),
        (producer, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, q_row, kv_row,
                    n_blocks, BLOCK_N, NUM_BUFFERS)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}
HEAD_DIMS = (64, 128)


def takes(q, k, v) -> bool:
    """Can attention_kernel_hopper compute this, on this machine? (attention.py's route asks.)"""
    return (HOPPER and q.is_cuda and q.dtype in GL_DTYPES
            and q.shape == k.shape == v.shape and q.dtype == k.dtype == v.dtype and q.shape[-1] in HEAD_DIMS
            and q.shape[-2] % BLOCK_M == 0 and q.numel() // q.shape[-1] < 2**31  # (TMA coordinates: int32)
            and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v)))  # (TMA: 16-byte aligned)


@functools.cache
def tile_layout(rows: int, head_dim: int, dtype: torch.dtype):
    """The shared-memory layout of a rows x head_dim tile (the swizzle wgmma reads it by), worked out
    once per shape and dtype: it costs microseconds, and every call would pay them four times."""
    return gl.NVMMASharedLayout.get_default_for([rows, head_dim], GL_DTYPES[dtype])


def descriptor(t2d: torch.Tensor, rows: int) -> TensorDescriptor:
    """A TMA descriptor over a (rows of the whole tensor, head_dim) view, one tile `rows` x head_dim."""
    return TensorDescriptor.from_tensor(t2d, [rows, t2d.shape[1]], tile_layout(rows, t2d.shape[1], t2d.dtype))


def launch(q, k, v, causal: bool, sm_scale: float, *, num_buffers: int = NUM_BUFFERS) -> tuple:
    """(o, lse) as attention.py's launch returns them, for inputs takes() accepts. num_buffers: the
    key/value ring's slots (2 or 3 fit an H100's shared memory at head_dim 128: 160 or 224 KB)."""
    B, H, seq_len, D = q.shape
    o = torch.empty_like(q)
    lse = q.new_empty((B, H, seq_len), dtype=torch.float32)
    q2, k2, v2, o2 = (t.view(B * H * seq_len, D) for t in (q, k, v, o))
    grid = (seq_len // BLOCK_M * B * H,)
    attention_kernel_hopper[grid](
        descriptor(q2, BLOCK_M // 2), descriptor(k2, BLOCK_N), descriptor(v2, BLOCK_N), descriptor(o2, BLOCK_M // 2),
        lse, sm_scale, seq_len, HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, NUM_BUFFERS=num_buffers,
        CAUSAL=causal, CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS, num_warps=4, maxnreg=MAXNREG)
    return o, lse


HOPPER = not INTERPRET and torch.cuda.is_available() and capability() == 90


def host_cases(attention, B=4, H=16, seq=1024, D=128) -> dict:
    """For lesson 5's host table (main.py, section 11), on an H100/H200: attention() at head_dim 128 (which runs this kernel)
    beside the kernel's own launch, its descriptors ready. Elsewhere none."""
    if not HOPPER:
        return {}
    q, k, v, o = torch.randn(4, B, H, seq, D, device="cuda", dtype=torch.float16)
    lse = torch.empty(B, H, seq, device="cuda")
    descs = [descriptor(t.view(-1, D), rows) for t, rows in ((q, BLOCK_M // 2), (k, BLOCK_N), (v, BLOCK_N),
                                                             (o, BLOCK_M // 2))]
    grid = (seq // BLOCK_M * B * H,)
    return {"attention_kernel_hopper[grid](...) alone, descriptors ready (head_dim 128)": lambda: attention_kernel_hopper[
                grid](*descs, lse, D ** -0.5, seq, HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, NUM_BUFFERS=NUM_BUFFERS,
                      CAUSAL=False, CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS, num_warps=4,
                      maxnreg=MAXNREG),
            "attention(q, k, v) at head_dim 128: the Gluon kernel": lambda: attention(q, k, v)}


# %% The backward in Gluon: FlashAttention-3's structure
# backward.py derives the gradients and runs them as three Triton kernels: Delta, then dK and dV
# (a program per key block), then dQ (a program per query block, which recomputes S and dP: 7
# matmuls for the 5 the maths needs). FlashAttention-3 (and cuDNN, on Hopper) run one kernel per key
# block that also makes each query block's share of dQ and adds it into a float32 dQ in memory: 5
# matmuls, bought with the additions' traffic. This is that kernel, with the forward's pieces:
#
# - one *producer* warp: K and V of the program's 128 keys once (two 64-row halves, one per
#   consumer), then for each query block Q, dO, and the block's values of lse and Delta, by TMA into
#   a ring of NUM_BUFFERS_BWD slots;
# - two *consumer* warpgroups, each owning 64 of the keys: its rows of dK and dV stay in registers
#   (float32) for the whole walk over the query blocks, BLOCK_M rows at a time (bwd_block_m: 64 at
#   head_dim 128, 128 at head_dim 64, FlashAttention-3's choices; below, M). Per query block, with
#   everything transposed so that the keys run down (wgmma's M, 64 rows per warpgroup):
#
#       S^T  = K Q^T            wgmma, both operands in shared memory       [64 keys, M queries]
#       dP^T = V dO^T           wgmma, issued at once behind it             [64 keys, M queries]
#       P^T  = exp2(S^T * qk_scale - lse),  dS^T = P^T * (dP^T - Delta)     registers, float32
#       dV  += P^T dO           wgmma, P^T from registers (as the forward's P)
#       dK  += dS^T Q           wgmma, dS^T from registers
#       dQ_i = dS K             wgmma, dS^T through shared memory (read transposed: wgmma's A operand
#                               may be MN-major in shared memory, never in registers)
#
#   dQ_i needs both consumers' halves of dS^T (its sum runs over all 128 keys), so each consumer
#   stores its half in shared memory and, once both are there, makes half of dQ_i, over all 128
#   keys: a 64 x 64 float32 tile (DQ_TILE), which it writes to shared memory and hands to TMA's
#   reduce-add (cp.reduce.async.bulk.tensor.add: the copy engine reads the tile and adds it into dQ
#   in memory, in L2, while the warps go on to the next step). Which half: at head_dim 128 its half
#   of the columns (K's, read from the second 128-byte swizzle column of its rows), at head_dim 64
#   its half of the block's 128 rows (dS's, read from the second 128 bytes of dS^T's rows). A half of
#   head_dim 64's columns would be 32, which wgmma would read from the middle of K's swizzled rows.
#   tma_add below is Gluon's tma.async_atomic_add, built as that function builds it where the
#   installed release does not name it.
#
# Who waits for whom, at step i: slot s = i % NUM_BUFFERS_BWD (round r = i // NUM_BUFFERS_BWD),
# parity p = i % 2 (its dS^T buffers: a pair per parity, so one step's can be read while the next
# step's are written; u = i // 2, the how-many-th use of the pair):
#
#     barrier       count  who arrives                                  who waits, parity
#     kv_bar          1    the producer (expect: K's and V's 4 halves)  both consumers, 0
#     qdo_ready[s]    1    the producer (expect: the bytes of Q(i),     both consumers, r & 1
#                          dO(i), lse(i), Delta(i))
#     qdo_empty[s]    2    each consumer, once its dV and dK matmuls    the producer, before Q(i + NB): (r & 1) ^ 1
#                          (which read dO(i) and Q(i)) are done
#     ds_ready[p]     2    each consumer, its dS^T half stored          both consumers, before dQ_i: u & 1
#     (TMA's own)          tma.store_wait(0): this consumer's last      the consumer, before it writes its dQ
#                          reduce-add has read its dQ tile              tile again
#
# (Waits on parity (r & 1) ^ 1 pass at once on a fresh barrier: every slot starts free.) No barrier
# says when a pair of dS^T buffers is free again: a consumer writes pair p at step i + 2 only after
# passing ds_ready at step i + 1, which the other consumer arrives at only after its dQ matmuls of
# step i, the last reads of pair p, are done (it waits for them within step i).
#
# Timeline of one consumer's step (S: S^T and dP^T issued; E: the exponentials and dS^T, with dV
# issued behind them; D: dS^T stored, both halves awaited; Q K: dQ_i's and dK's matmuls issued; A:
# dQ_i through shared memory to TMA; the slot released once dK is done):
#
#     consumer 0:  S(i) E(i) D(i) Q K(i) A(i) | S(i+1) E(i+1) D(i+1) Q K(i+1) A(i+1) | ...
#     consumer 1:  S(i) E(i) D(i) Q K(i) A(i) | S(i+1) ...
#     tensor cores: both consumers' wgmma, in the order issued
#
# The two meet at D every step, and the overlap is the tensor cores': while one consumer computes
# its exponentials, its A or its wait at D, the other's matmuls, already issued, run. At head_dim 64
# the steps are twice as long (M = 128) for the same barriers and waits. Within a consumer, the
# code asks for dP^T's matmul to run under the exponentials (it waits for S^T alone first); how
# much of that the machine code keeps is ptxas's choice, which may move the wait for dP^T up among
# the exponentials to interleave dS^T's arithmetic with them (`WARPGROUP.DEPBAR.LE gsb0, 0x0` among
# the `MUFU.EX2`: lesson 7's reading of the SASS counts the exponentials that run under dP^T).
#
# Layouts: q, k, v and dO are read as TMA reads a 2-D tensor, rows of their seq stride, each head's
# tile from its row and column (origin(): heads apart, contiguous; or side by side in one row, as
# the heads of a QKV projection lie, so that a transformer's backward reads them where they are and
# writes dK and dV into its d(QKV) buffer by their strides).
#
# Grouped-query heads: the walk goes over the query blocks of every query head that reads the key
# head, so dK and dV are summed in registers (no atomics for them); dQ's additions are per query
# head. Causal: a key block's walk starts at its own diagonal (query block start_n / M), whose
# blocks (128 keys span 128 / M of them) are masked; they come first, in a loop of their own (its
# own copy of the step), so that the rest of the walk carries no mask (a mask's indices cost
# registers, which one loop for every step would hold in every step). Not causal: the walk starts at
# the diagonal too and wraps round, so the programs of one head add into different rows of dQ at any
# moment.
#
# Registers (per consumer thread, of setmaxnreg's 240), at the exponentials, the peak: at head_dim
# 128, dK and dV 64 each (float32, 64 x 128 over 128 threads), S^T and dP^T 32 each, lse 16 (one per
# query column the thread holds): 208; at head_dim 64, dK and dV 32 each, S^T and dP^T 64 each
# ([64, 128]), lse 32: 224. Then Delta (16 or 32), P^T and dS^T as float16 operands (16 or 32
# each) and dQ_i's tile (32, once S^T and dP^T are gone). Lesson 7's compile table has what
# ptxas made of it: the bytes it spilled, if any.
# Deterministic? No: the reduce-adds' order varies, so dQ's last bits do. attention()'s backward
# takes this kernel only where torch.are_deterministic_algorithms_enabled() is False
# (backward_takes), and only at FASTER_BACKWARD_HEAD_DIMS.
BLOCK_N_BWD = 128        # keys per program: 64 per consumer warpgroup
NUM_BUFFERS_BWD = 2      # Q/dO slots in the ring: beside K, V, dS^T and the dQ tiles, two fit an H100's
                         # shared memory at both head dims (a third, at 128 only, with nothing to spare)
DQ_TILE = [64, 64]       # a consumer's share of dQ_i per step: half the columns (head_dim 128) or rows (64)
# Where attention()'s backward runs this kernel: the head dims where lesson 7 timed it faster than
# backward.py's Triton kernels at every length and mask (RESULTS.md: both of them). attention.py's
# route reads this, and the tests run the path with it set whatever it holds.
FASTER_BACKWARD_HEAD_DIMS = (64, 128)


def bwd_block_m(head_dim: int) -> int:
    """Query rows per step of the walk: 64 at head_dim 128, where S^T and dP^T ([64, 64]) beside dK
    and dV ([64, 128]) fill the registers; 128 at head_dim 64, twice the work per step for the same
    barriers and waits (FlashAttention-3's choices on Hopper)."""
    return 128 if head_dim == 64 else 64


if hasattr(tma, "async_atomic_add"):
    tma_add = tma.async_atomic_add
else:  # a release that does not name it: the same operation, built as async_atomic_add builds it
    from triton._C.libtriton import ir
    from triton.language.core import builtin

    @builtin
    def tma_add(tensor_desc, coord, src, _semantic=None):
        """Add the tile in shared memory `src` into the tensor behind tensor_desc at coord, by TMA."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@gluon.jit
def origin(bh, heads, stride_b, stride_h, stride_s):
    """Where head bh (batch * heads + head) of a (B, heads, seq, D) tensor starts among the rows TMA
    reads it as (rows stride_s elements apart: heads apart, or side by side in a row as in a QKV
    projection): (row, column)."""
    offset = (bh // heads).to(gl.int64) * stride_b + (bh % heads).to(gl.int64) * stride_h
    return (offset // stride_s).to(gl.int32), (offset % stride_s).to(gl.int32)


@gluon.jit
def bwd_step(i, per_head, first, n_qb, CAUSAL: gl.constexpr):
    """Step i of a key block's walk: (g, j, qb) = the query head within the group, the step within
    that head, and the query block."""
    g = i // per_head
    j = i % per_head
    if CAUSAL:
        qb = first + j
    else:
        qb = (first + j) % n_qb
    return g, j, qb


@gluon.jit
def bwd_producer(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, q_bufs, do_bufs, lse_bufs, delta_bufs,
                 k_smem, v_smem, kv_bar, qdo_ready, qdo_empty, k_row, k_col, q_head0, H, per_head, first, n_qb,
                 n_steps, stride_qb, stride_qh, stride_qs, stride_dob, stride_doh, stride_dos,
                 NUM_BUFFERS: gl.constexpr, CAUSAL: gl.constexpr):
    """One warp: the program's keys and values once (from row k_row, column k_col), then Q, dO, lse
    and Delta of each step's query block (lse and Delta seen as rows of BLOCK_M values: row b is
    query block b, over all heads)."""
    SPLIT_N: gl.constexpr = k_desc.block_type.shape[0]
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    mbarrier.expect(kv_bar, 4 * k_desc.block_type.nbytes)
    for c in gl.static_range(2):
        tma_load(k_desc, [k_row + c * SPLIT_N, k_col], kv_bar, k_smem.index(c))
        tma_load(v_desc, [k_row + c * SPLIT_N, k_col], kv_bar, v_smem.index(c))
    for i in range(n_steps):
        g, j, qb = bwd_step(i, per_head, first, n_qb, CAUSAL)
        block = (q_head0 + g) * n_qb + qb
        q_row, q_col = origin(q_head0 + g, H, stride_qb, stride_qh, stride_qs)
        do_row, do_col = origin(q_head0 + g, H, stride_dob, stride_doh, stride_dos)
        slot = i % NUM_BUFFERS
        mbarrier.wait(qdo_empty.index(slot), ((i // NUM_BUFFERS) & 1) ^ 1)  # (round 0: a fresh barrier passes)
        mbarrier.expect(qdo_ready.index(slot), 2 * q_desc.block_type.nbytes + 2 * lse_desc.block_type.nbytes)
        tma_load(q_desc, [q_row + qb * BLOCK_M, q_col], qdo_ready.index(slot), q_bufs.index(slot))
        tma_load(do_desc, [do_row + qb * BLOCK_M, do_col], qdo_ready.index(slot), do_bufs.index(slot))
        tma_load(lse_desc, [block, 0], qdo_ready.index(slot), lse_bufs.index(slot))
        tma_load(delta_desc, [block, 0], qdo_ready.index(slot), delta_bufs.index(slot))


@gluon.jit
def dq_share(dv, dk, pt, dst, q, k_smem, ds_smem, dq_tile, dq_desc, ds_ready, i, row, WHICH: gl.constexpr,
             sm_scale):
    """A consumer's share of dQ_i at step i, with dK's matmul: once both halves of dS^T are stored,
    its DQ_TILE of dQ_i = dS (both halves, read transposed) K over all 128 keys: its half of the
    columns (head_dim 128) or of the rows (64); then dK += dS^T Q, and the share, through shared
    memory (dq_tile), added into dQ by TMA while dK's matmul runs. dv: its matmul, issued; returns
    dv and dk, done."""
    DQ_M: gl.constexpr = dq_desc.block_type.shape[0]
    DQ_COLS: gl.constexpr = dq_desc.block_type.shape[1]
    BLOCK_M: gl.constexpr = q.shape[0]
    dq_layout: gl.constexpr = wgmma_layout(DQ_COLS)
    no_dq = gl.zeros([DQ_M, DQ_COLS], gl.float32, dq_layout)  # (use_acc=False ignores its values)
    par = i % 2
    mbarrier.wait(ds_ready.index(par), (i // 2) & 1)
    if DQ_M < BLOCK_M:  # its half of the rows: dS^T's columns WHICH * DQ_M ..., all of K's
        dq = warpgroup_mma(ds_smem.index(2 * par).slice(WHICH * DQ_M, DQ_M, dim=1).permute((1, 0)), k_smem.index(0),
                           no_dq, use_acc=False, is_async=True)
        dq = warpgroup_mma(ds_smem.index(2 * par + 1).slice(WHICH * DQ_M, DQ_M, dim=1).permute((1, 0)),
                           k_smem.index(1), dq, is_async=True)
        row += WHICH * DQ_M
        col = 0
    else:  # its half of the columns: all of dS^T, K's columns WHICH * DQ_COLS ...
        dq = warpgroup_mma(ds_smem.index(2 * par).permute((1, 0)), k_smem.index(0).slice(WHICH * DQ_COLS, DQ_COLS, dim=1),
                           no_dq, use_acc=False, is_async=True)
        dq = warpgroup_mma(ds_smem.index(2 * par + 1).permute((1, 0)),
                           k_smem.index(1).slice(WHICH * DQ_COLS, DQ_COLS, dim=1), dq, is_async=True)
        col = WHICH * DQ_COLS
    dk = warpgroup_mma(dst, q, dk, is_async=True)
    dv, dq, _ = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dq, pt))  # in order: dK runs on
    tma.store_wait(pendings=0)   # the last reduce-add has read this consumer's tile
    dq_tile.store(dq * sm_scale)
    fence_async_shared()  # ordinary stores, then the copy engine reads: a fence between
    tma_add(dq_desc, [row, col], dq_tile)
    dk, _ = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dst))
    return dv, dk


@gluon.jit
def bwd_consumer_step(i, g, qb, dk, dv, keys, q_bufs, do_bufs, lse_bufs, delta_bufs, k_smem, v_smem, ds_smem, dq_smem,
                      dq_desc, qdo_ready, qdo_empty, ds_ready, q_head0, n_qb, sm_scale, qk_scale,
                      WHICH: gl.constexpr, NUM_BUFFERS: gl.constexpr, MASK: gl.constexpr):
    """Step i of a consumer's walk, query block qb of query head q_head0 + g: adds its share to dK
    and dV (returned) and to dQ. MASK: causal, a block the diagonal crosses."""
    dtype: gl.constexpr = q_bufs.dtype
    BLOCK_M: gl.constexpr = q_bufs.shape[1]
    HEAD_DIM: gl.constexpr = q_bufs.shape[2]
    SPLIT_N: gl.constexpr = k_smem.shape[1]
    s_layout: gl.constexpr = wgmma_layout(BLOCK_M)     # S^T, dP^T
    acc_layout: gl.constexpr = wgmma_layout(HEAD_DIM)  # dK, dV
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)  # P^T, dS^T
    no_scores = gl.zeros([SPLIT_N, BLOCK_M], gl.float32, s_layout)  # (use_acc=False ignores its values)
    slot = i % NUM_BUFFERS
    mbarrier.wait(qdo_ready.index(slot), (i // NUM_BUFFERS) & 1)
    q = q_bufs.index(slot)
    do = do_bufs.index(slot)
    st = warpgroup_mma(k_smem.index(WHICH), q.permute((1, 0)), no_scores, use_acc=False, is_async=True)
    dpt = warpgroup_mma(v_smem.index(WHICH), do.permute((1, 0)), no_scores, use_acc=False, is_async=True)
    # lse and Delta, [1, BLOCK_M] from shared memory: one value per query, broadcast down the keys
    lse = lse_bufs.index(slot).load(s_layout)
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st,))   # in order: S^T is done, dP^T may run on
    pt = gl.exp2(st * qk_scale - lse)
    if MASK:  # a key gets nothing from a query before it: key <= qb * BLOCK_M + column
        cols = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        pt = gl.where(cols[None, :] >= (keys - qb * BLOCK_M)[:, None], pt, 0.0)
    delta = delta_bufs.index(slot).load(s_layout)
    dpt = warpgroup_mma_wait(num_outstanding=0, deps=(dpt,))
    dst = (pt * (dpt - delta)).to(dtype)
    pt = gl.convert_layout(pt.to(dtype), a_layout)
    dv = warpgroup_mma(pt, do, dv, is_async=True)   # dV += P^T dO runs while dS^T is stored
    # dS^T into this step's pair of buffers (step parity), this warpgroup's half; then both halves
    par = i % 2
    ds_smem.index(2 * par + WHICH).store(dst)
    fence_async_shared()  # the store above, before wgmma (the async proxy) reads it
    mbarrier.arrive(ds_ready.index(par), count=1)
    dst = gl.convert_layout(dst, a_layout)
    row = ((q_head0 + g) * n_qb + qb) * BLOCK_M   # the query block's first row of dQ
    dv, dk = dq_share(dv, dk, pt, dst, q, k_smem, ds_smem, dq_smem.index(WHICH), dq_desc, ds_ready, i, row, WHICH,
                      sm_scale)
    mbarrier.arrive(qdo_empty.index(slot), count=1)  # this warpgroup is done with Q(i), dO(i)
    return dk, dv


@gluon.jit
def bwd_consumer(dk_ptr, dv_ptr, dq_desc, q_bufs, do_bufs, lse_bufs, delta_bufs, k_smem, v_smem, ds_smem, dq_smem,
                 kv_bar, qdo_ready, qdo_empty, ds_ready, dk_head, stride_dks, q_head0, per_head, first, n_qb, GROUP,
                 start_n, sm_scale, qk_scale, WHICH: gl.constexpr, NUM_BUFFERS: gl.constexpr, CAUSAL: gl.constexpr):
    """One warpgroup: keys start_n + WHICH * 64 ... + 63 against every query block of the walk; their
    dK and dV stored at the end, rows stride_dks elements apart from dk_head (the key head's first)."""
    dtype: gl.constexpr = dk_ptr.dtype.element_ty
    BLOCK_M: gl.constexpr = q_bufs.shape[1]
    HEAD_DIM: gl.constexpr = q_bufs.shape[2]
    SPLIT_N: gl.constexpr = k_smem.shape[1]
    gl.static_assert(gl.num_warps() == 4, "a consumer is one warpgroup: the layouts below are for 4 warps")
    s_layout: gl.constexpr = wgmma_layout(BLOCK_M)     # S^T, dP^T
    acc_layout: gl.constexpr = wgmma_layout(HEAD_DIM)  # dK, dV
    keys = start_n + WHICH * SPLIT_N + gl.arange(0, SPLIT_N, layout=gl.SliceLayout(1, s_layout))
    dk = gl.zeros([SPLIT_N, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([SPLIT_N, HEAD_DIM], gl.float32, acc_layout)
    mbarrier.wait(kv_bar, 0)
    if CAUSAL:  # per query head: the blocks the diagonal crosses, masked, then the rest, unmasked
        N_MASKED: gl.constexpr = 2 * SPLIT_N // BLOCK_M   # 128 keys over BLOCK_M-query blocks
        for g in range(GROUP):
            for j in range(N_MASKED):
                dk, dv = bwd_consumer_step(g * per_head + j, g, first + j, dk, dv, keys, q_bufs, do_bufs, lse_bufs,
                                           delta_bufs, k_smem, v_smem, ds_smem, dq_smem, dq_desc, qdo_ready, qdo_empty,
                                           ds_ready, q_head0, n_qb, sm_scale, qk_scale, WHICH, NUM_BUFFERS, True)
            for j in range(N_MASKED, per_head):
                dk, dv = bwd_consumer_step(g * per_head + j, g, first + j, dk, dv, keys, q_bufs, do_bufs, lse_bufs,
                                           delta_bufs, k_smem, v_smem, ds_smem, dq_smem, dq_desc, qdo_ready, qdo_empty,
                                           ds_ready, q_head0, n_qb, sm_scale, qk_scale, WHICH, NUM_BUFFERS, False)
    else:  # one loop over every query head's blocks (not one per head: one copy of the step to allocate)
        for i in range(GROUP * per_head):
            g, j, qb = bwd_step(i, per_head, first, n_qb, CAUSAL)
            dk, dv = bwd_consumer_step(i, g, qb, dk, dv, keys, q_bufs, do_bufs, lse_bufs, delta_bufs, k_smem, v_smem,
                                       ds_smem, dq_smem, dq_desc, qdo_ready, qdo_empty, ds_ready, q_head0, n_qb,
                                       sm_scale, qk_scale, WHICH, NUM_BUFFERS, False)
    tma.store_wait(pendings=0)
    key_rows = start_n + WHICH * SPLIT_N + gl.arange(0, SPLIT_N, layout=gl.SliceLayout(1, acc_layout))
    dims = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    # (rows fit 32 bits, as TMA's coordinates must; their elements may not: 64-bit offsets, once)
    offsets = dk_head + key_rows.to(gl.int64)[:, None] * stride_dks + dims[None, :]
    gl.store(dk_ptr + offsets, (dk * sm_scale).to(dtype))
    gl.store(dv_ptr + offsets, dv.to(dtype))


@gluon.jit
def attention_bwd_kernel_hopper(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dq_desc, dk_ptr, dv_ptr,
                                sm_scale, seq_len, H_KV, GROUP, stride_qb, stride_qh, stride_qs, stride_kb, stride_kh,
                                stride_ks, stride_dob, stride_doh, stride_dos, stride_dkb, stride_dkh, stride_dks,
                                HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, NUM_BUFFERS: gl.constexpr,
                                CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """One program per BLOCK_N keys of one (batch, key head): its rows of dK and dV, summed over the
    GROUP query heads that read them, and their share of every dQ row, added into dQ (float32,
    zeroed) by TMA. q, k, v and do, (B, heads, seq, D) with their strides, as the rows TMA reads
    (origin(): each head's tile from its row and column); dq as (B * H_KV * GROUP * seq, D); dk and
    dv, k's shape, with their strides (v's and dv's: k's and dk's); lse and Delta as (B * H_KV *
    GROUP * seq / BLOCK_M, BLOCK_M), BLOCK_M the query rows of q_desc's tile."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    SPLIT_N: gl.constexpr = k_desc.block_type.shape[0]
    gl.static_assert(BLOCK_N == 2 * SPLIT_N, "two consumers, half the keys each")
    gl.static_assert(BLOCK_N % BLOCK_M == 0, "causal: the diagonal crosses whole query blocks")
    pid = gl.program_id(0)
    n_kb = seq_len // BLOCK_N
    pid_n = pid % n_kb
    bhk = pid // n_kb
    start_n = pid_n * BLOCK_N
    k_row, k_col = origin(bhk, H_KV, stride_kb, stride_kh, stride_ks)
    k_row += start_n
    dk_head = (bhk // H_KV).to(gl.int64) * stride_dkb + (bhk % H_KV).to(gl.int64) * stride_dkh
    q_head0 = (bhk // H_KV) * (H_KV * GROUP) + (bhk % H_KV) * GROUP   # the first query head reading key head bhk
    n_qb = seq_len // BLOCK_M
    first = start_n // BLOCK_M
    if CAUSAL:
        per_head = n_qb - first    # the query blocks from the diagonal on
    else:
        per_head = n_qb
    sm_scale = sm_scale.to(gl.float32)
    qk_scale = sm_scale * LOG2E

    dtype: gl.constexpr = q_desc.dtype
    q_bufs = gl.allocate_shared_memory(dtype, [NUM_BUFFERS, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_bufs = gl.allocate_shared_memory(dtype, [NUM_BUFFERS, BLOCK_M, HEAD_DIM], do_desc.layout)
    lse_bufs = gl.allocate_shared_memory(gl.float32, [NUM_BUFFERS, 1, BLOCK_M], lse_desc.layout)
    delta_bufs = gl.allocate_shared_memory(gl.float32, [NUM_BUFFERS, 1, BLOCK_M], delta_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [2, SPLIT_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, SPLIT_N, HEAD_DIM], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [4, SPLIT_N, BLOCK_M],  # [step parity x consumer]
                                        gl.NVMMASharedLayout.get_default_for([SPLIT_N, BLOCK_M], dtype))
    dq_smem = gl.allocate_shared_memory(gl.float32, [2] + dq_desc.block_type.shape, dq_desc.layout)  # a tile each
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    qdo_ready = gl.allocate_shared_memory(gl.int64, [NUM_BUFFERS, 1], mbarrier.MBarrierLayout())
    qdo_empty = gl.allocate_shared_memory(gl.int64, [NUM_BUFFERS, 1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for p in gl.static_range(2):
        mbarrier.init(ds_ready.index(p), count=2)      # both halves of dS^T
    for s in gl.static_range(NUM_BUFFERS):
        mbarrier.init(qdo_ready.index(s), count=1)
        mbarrier.init(qdo_empty.index(s), count=2)  # free once both consumers arrive
    fence_async_shared()

    gl.warp_specialize([
        (bwd_consumer, (dk_ptr, dv_ptr, dq_desc, q_bufs, do_bufs, lse_bufs, delta_bufs, k_smem, v_smem, ds_smem,
                        dq_smem, kv_bar, qdo_ready, qdo_empty, ds_ready, dk_head, stride_dks, q_head0, per_head, first,
                        n_qb, GROUP, start_n, sm_scale, qk_scale, 0, NUM_BUFFERS, CAUSAL)),
        (bwd_consumer, (dk_ptr, dv_ptr, dq_desc, q_bufs, do_bufs, lse_bufs, delta_bufs, k_smem, v_smem, ds_smem,
                        dq_smem, kv_bar, qdo_ready, qdo_empty, ds_ready, dk_head, stride_dks, q_head0, per_head, first,
                        n_qb, GROUP, start_n, sm_scale, qk_scale, 1, NUM_BUFFERS, CAUSAL)),
        (bwd_producer, (q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, q_bufs, do_bufs, lse_bufs, delta_bufs,
                        k_smem, v_smem, kv_bar, qdo_ready, qdo_empty, k_row, k_col, q_head0, H_KV * GROUP, per_head,
                        first, n_qb, per_head * GROUP, stride_qb, stride_qh, stride_qs, stride_dob, stride_doh,
                        stride_dos, NUM_BUFFERS, CAUSAL)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def rows_readable(t) -> bool:
    """Can TMA read (B, heads, seq, D) tensor t as rows of its seq stride (rows_descriptor)? Its
    elements in a row contiguous, the rows 16-byte aligned, and each head's rows either apart
    (contiguous heads) or side by side in one row (the heads of a QKV projection, viewed by head)."""
    B, heads, seq, D = t.shape
    sb, sh, ss, sd = t.stride()
    return (sd == 1 and t.data_ptr() % 16 == 0 and ss * t.element_size() % 16 == 0 and ss >= D and sb % ss == 0
            and (sh % ss == 0 or (heads - 1) * sh + D <= ss)
            and ((B - 1) * sb + (heads - 1) * sh) // ss + seq < 2**31)  # (TMA coordinates: int32)


def backward_takes(q, k, v) -> bool:
    """Can attention_bwd_kernel_hopper compute these inputs' gradients, here and now? q, k, v of one
    dtype, float16 or bfloat16, k and v of one shape and layout, their heads dividing q's (grouped-
    query heads), in any layout TMA can read (rows_readable: contiguous, or the views of one QKV
    projection), seq a multiple of 128, and never where deterministic algorithms are asked for."""
    return (HOPPER and q.is_cuda and q.dtype in GL_DTYPES and q.dtype == k.dtype == v.dtype and q.numel() > 0
            and k.shape == v.shape and k.stride() == v.stride() and q.shape[0] == k.shape[0]
            and q.shape[2:] == k.shape[2:] and k.shape[1] > 0 and q.shape[1] % k.shape[1] == 0
            and q.shape[-1] in HEAD_DIMS and q.shape[-2] % BLOCK_N_BWD == 0
            and all(rows_readable(t) for t in (q, k, v)) and not torch.are_deterministic_algorithms_enabled())


def rows_descriptor(t, rows: int) -> TensorDescriptor:
    """A TMA descriptor over (B, heads, seq, D) tensor t seen as rows of its seq stride, tiles of
    `rows` x D: head h of batch b starts at row (b * stride_b + h * stride_h) // stride_s, column
    (...) % stride_s (the kernel's origin()); the descriptor spans up to the last head's end."""
    B, heads, seq, D = t.shape
    sb, sh, ss, _ = t.stride()
    last = (B - 1) * sb + (heads - 1) * sh  # where the last head starts
    return TensorDescriptor(base=t, shape=[last // ss + seq, last % ss + D], strides=[ss, 1], block_shape=[rows, D],
                            layout=tile_layout(rows, D, t.dtype))


# The layout of a row of lse or Delta in shared memory: plain, no swizzle (nothing reads it by wgmma).
ROW_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
# A dQ tile's: float32, 128-byte swizzled rows (TMA reads each 256-byte row as two 128-byte boxes).
DQ_LAYOUT = gl.NVMMASharedLayout.get_default_for(DQ_TILE, gl.float32)


def launch_backward(do, q, k, v, o, lse, causal: bool, sm_scale: float, *, out: tuple | None = None) -> tuple:
    """(dq, dk, dv) as backward.launch_backward returns them, for inputs backward_takes() accepts:
    Delta by backward.py's preprocess kernel, then this file's kernel; dQ summed in float32. out:
    where to write them (views of one d(QKV) buffer, say: dk and dv of one layout), else new."""
    B, H, seq_len, D = q.shape
    H_KV = k.shape[1]
    block_m = bwd_block_m(D)
    lse = lse.contiguous()  # (the descriptors read rows of it; Delta's kernel reads o's strides)
    do = do if rows_readable(do) else do.contiguous()
    delta = torch.empty_like(lse)
    preprocess_kernel[(seq_len // 64 * B * H,)](o, do, delta, H, seq_len, *o.stride(), *do.stride(), HEAD_DIM=D,
                                                BLOCK_D=D, BLOCK_M=64,
                                                INDEX_TYPE=index_type(o, do))
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk, dv = out[1:] if out is not None else (k.new_empty(k.shape), v.new_empty(v.shape))
    if dk.stride() != dv.stride():
        raise ValueError(f"out: dk and dv of one layout, got strides {dk.stride()} and {dv.stride()}")
    rows = [TensorDescriptor.from_tensor(t.view(-1, block_m), [1, block_m], ROW_LAYOUT) for t in (lse, delta)]
    dq_desc = TensorDescriptor.from_tensor(dq.view(-1, D), DQ_TILE, DQ_LAYOUT)
    grid = (seq_len // BLOCK_N_BWD * B * H_KV,)
    attention_bwd_kernel_hopper[grid](
        rows_descriptor(q, block_m), rows_descriptor(k, BLOCK_N_BWD // 2), rows_descriptor(v, BLOCK_N_BWD // 2),
        rows_descriptor(do, block_m), *rows, dq_desc, dk, dv, sm_scale, seq_len, H_KV, H // H_KV,
        *q.stride()[:3], *k.stride()[:3], *do.stride()[:3], *dk.stride()[:3], HEAD_DIM=D, BLOCK_N=BLOCK_N_BWD,
        NUM_BUFFERS=NUM_BUFFERS_BWD, CAUSAL=causal, CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS,
        num_warps=4, maxnreg=MAXNREG)
    if out is None:
        return dq.to(q.dtype), dk, dv
    out[0].copy_(dq)  # (the cast to q's dtype, written where out's dq lies)
    return out
