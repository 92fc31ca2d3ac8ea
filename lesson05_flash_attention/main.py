"""Lesson 5: flash attention (forward). Online softmax plus tiled matmul, without the N x N matrix.

Standard attention computes S = Q K^T (seq x seq), P = softmax(S), O = P V. For 32 heads of a 16K
sequence that S is 16 GiB per batch element, written to memory and read back, when all anyone
wants is O, the size of Q. Flash attention never forms S: a program owns a block of query rows
and walks the keys and values block by block (lesson 3's tiles), computing each tile of scores
with tl.dot (lesson 4) and folding it into a running softmax (lesson 2's online softmax): a
running max m, a running sum l, and an output accumulator that is rescaled whenever the max
grows. Memory stays linear in the sequence length, and the N x N scores never touch HBM.

Run:   python lesson05_flash_attention/main.py            (all sections)
       python lesson05_flash_attention/main.py --help
Without a CUDA GPU the kernel runs under Triton's interpreter on small problems; timings then
measure the interpreter. Real H200 numbers: lesson05_flash_attention/RESULTS.md.
"""
# %% Set-up: choose GPU or interpreter before triton is imported
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # `common` from anywhere

from common.device import DEVICE, INTERPRET, check_tensor, stamp

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common import bench
from common.cli import lesson_parser, start
from common.trace import show

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (16, 32, 64, 128)
LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e))

# %% [markdown]
# ## 1. Standard attention, and what it costs in memory


# %%
def attention_standard(q, k, v, causal=False, sm_scale=None):
    """The textbook version. It writes the whole (B, H, N, N) score matrix, twice."""
    sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-2, -1)).float() * sm_scale          # (B, H, N, N): write N^2 per head
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.softmax(s, dim=-1).to(q.dtype)                  # read N^2, write N^2 again
    return p @ v                                              # read N^2


def score_bytes(B, H, N, dtype=torch.float16) -> int:
    """Bytes of one (B, H, N, N) score matrix in `dtype`."""
    return B * H * N * N * torch.tensor([], dtype=dtype).element_size()


# %% [markdown]
# ## 2. Online softmax, on its own: one row of scores in blocks
# Lesson 2 walked a long row keeping m (the max so far) and l (the sum of exp(x - m) so far),
# rescaling l by alpha = exp(m_old - m_new) whenever the max grew. Attention needs softmax(s) @ v,
# not the softmax itself, so the same rescaling applies to an output accumulator o = sum of
# exp(s_j - m) v_j: when m grows, o is multiplied by alpha too. At the end, O = o / l.


# %%
def online_softmax_demo(scores, values, block: int) -> dict:
    """One query row: scores (N,) and values (N, D), walked `block` keys at a time, printed."""
    m, l = float("-inf"), 0.0
    o = torch.zeros(values.shape[1], dtype=torch.float64)
    for start in range(0, len(scores), block):
        s = scores[start:start + block].double()
        m_new = max(m, s.max().item())
        alpha = math.exp(m - m_new)          # exp(-inf) = 0 on the first block: nothing to rescale
        p = torch.exp(s - m_new)
        l = l * alpha + p.sum().item()
        o = o * alpha + p @ values[start:start + block].double()
        m = m_new
        print(f"    keys {start}..{start + len(s) - 1}: scores {s.tolist()}  m = {m:g}  alpha = {alpha:.4f}"
              f"  l = {l:.4f}  o = {[round(x, 4) for x in o.tolist()]}")
    full = torch.softmax(scores.double(), dim=0)
    print(f"    o / l = {[round(x, 4) for x in (o / l).tolist()]};  softmax(scores) @ values = "
          f"{[round(x, 4) for x in (full @ values.double()).tolist()]}")
    return {"m": m, "l": l, "out": (o / l).tolist(), "ref": (full @ values.double()).tolist(),
            "l_ref": torch.exp(scores.double() - scores.max()).sum().item()}


# %% [markdown]
# ## 3. The kernel
# Grid: (query blocks, batch x heads). Program (pid_m, pid_bh) loads its BLOCK_M query rows once,
# then for each block of BLOCK_N keys: scores = q @ k^T (tl.dot), the online softmax update, and
# acc = acc * alpha + p @ v (tl.dot again). All of it in registers and shared memory.
#
# Choices, and why:
# - exp2 instead of exp: the GPU's fast exponential is base 2 (ex2). exp(x) = exp2(x log2 e), so
#   log2(e) is folded into the score scale once (qk_scale = sm_scale * log2 e) and m, l live in
#   base-2 units; the softmax is unchanged.
# - Causal attention: query i sees keys 0..i. Key blocks wholly above the diagonal are skipped
#   (the loop stops at the query block's end: about half the work), blocks wholly below it need
#   no mask, and only the blocks on the diagonal (and the ragged last block) pay for a mask. So
#   the loop runs in two stages through one helper, `attend`, with MASKED known at compile time.
# - fp32 for m, l and acc; p is cast to the input dtype for the second tl.dot (tensor cores).
#   float32 inputs multiply in full fp32 ("ieee"), not TF32: scores feed an exponential.
# - The softmax, not the matmuls, is the tight part. At head_dim 64 one score costs 4 x 64 = 256
#   tensor-core flops, and an H200 SM does about 4096 of those per clock: 16 scores per clock, while
#   its special-function units manage 16 exp2 per clock. So every instruction per score counts:
#   the unmasked blocks fold the scale into one multiply-add, and only the last or diagonal block
#   pays for masks (on the loads too). In a one-off comparison on the H200 the multiply-add was a
#   few percent faster at head_dim 64 than a multiply, then a subtract.
# - Block sizes: BLOCK_M query rows share each K/V block loaded, so bigger is better until the
#   registers run out (the 128 x 64 fp32 score tile and the 128 x HEAD_DIM accumulator live in
#   registers); num_stages = 3 keeps the next K/V blocks loading while the tensor cores work.
#   bench_configs() (section 8) times the candidates side by side; on the H200 (RESULTS.md,
#   "Block sizes", seq 4096) 64 x 64 with 4 warps and 128 x 64 with 8 warps came out on top,
#   within 2-7% of each other. BLOCK_N = 128 (its fp32 score tile takes twice the registers) came
#   within 2-6% of the best at head_dim 128 and lost 18-24% at head_dim 64; 2 stages lost 10-35%.
#   Loading K and V through Hopper's TMA engine (tensor descriptors, lesson 4's section 5) was,
#   in one-off comparisons on the H200, within 2% either way: not worth a second path.


# %%
@triton.jit
def attend(acc, l_i, m_i, q, k_base, v_base, rows, dims, N, stride_kn, stride_kd, stride_vn, stride_vd,
           qk_scale, lo, hi, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
           DOT_IN_FP32: tl.constexpr, PRECISION: tl.constexpr, TRACE: tl.constexpr,
           WARP_SPECIALIZE: tl.constexpr = False):
    """Fold key/value blocks lo..hi into (acc, l_i, m_i)."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):  # (section 8)
        cols = start_n + tl.arange(0, BLOCK_N)
        # k^T as a [HEAD_DIM, BLOCK_N] tile: dims down, keys across (the strides do the transpose)
        kT_ptrs = k_base + dims[:, None] * stride_kd + cols[None, :] * stride_kn
        v_ptrs = v_base + cols[:, None] * stride_vn + dims[None, :] * stride_vd
        if MASKED:  # only the last block can run past the end of the keys
            kT = tl.load(kT_ptrs, mask=cols[None, :] < N, other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None] < N, other=0.0)
        else:
            kT = tl.load(kT_ptrs)
            v = tl.load(v_ptrs)
        if DOT_IN_FP32:  # the interpreter's tl.dot on bfloat16 is garbage (lesson 4)
            s = tl.dot(q.to(tl.float32), kT.to(tl.float32))
        else:
            s = tl.dot(q, kT, input_precision=PRECISION)  # [BLOCK_M, BLOCK_N]: q . k, not yet scaled
        if MASKED:  # keys past the end; for causal, keys after the query: -inf, so exp2 gives 0
            keep = cols[None, :] < N
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None])
            s = tl.where(keep, s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))    # the running max, per query row
            p = tl.exp2(s - m_new[:, None])
        else:
            # qk_scale > 0, so the max of the scaled scores is the scaled max: one multiply per
            # row here, and s * qk_scale - m below is one fused multiply-add per score.
            m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
            p = tl.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)                      # how much the old max overstated
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if DOT_IN_FP32:
            acc = tl.dot(p, v.to(tl.float32), acc * alpha[:, None])
        else:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)  # acc*alpha + p@v
        m_i = m_new
        if TRACE:
            show("key block", start_n // BLOCK_N, 2)
            show("scores (natural units)", s / 1.4426950408889634 if MASKED else s * (qk_scale / 1.4426950408889634))
            show("m (natural units)", m_i / 1.4426950408889634)
            show("alpha", alpha)
            show("l", l_i)
            show("acc", acc)
    return acc, l_i, m_i


@triton.jit
def attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    sm_scale, H, N,                                     # heads, sequence length
    stride_qb, stride_qh, stride_qn, stride_qd,         # strides of q, in elements
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, DOT_IN_FP32: tl.constexpr = False,
    PRECISION: tl.constexpr = "tf32",    # float32 inputs: the launcher asks for "ieee"
    TRACE: tl.constexpr = False,
    WARP_SPECIALIZE: tl.constexpr = False,  # section 8: tried, not kept
):
    pid_m = tl.program_id(axis=0)          # which block of query rows
    pid_bh = tl.program_id(axis=1)         # which (batch, head)
    tl.static_assert(BLOCK_M % BLOCK_N == 0)  # so the causal stages split at a key-block boundary
    b = (pid_bh // H).to(tl.int64)         # 64-bit: b * stride_qb can pass 2^31 elements
    h = (pid_bh % H).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn + dims[None, :] * stride_qd,
                mask=rows[:, None] < N, other=0.0)
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634   # fold log2(e) in: exp2 below is exp
    if CAUSAL:
        full_end = pid_m * BLOCK_M                            # keys below the diagonal block
        masked_end = tl.minimum((pid_m + 1) * BLOCK_M, N)     # the diagonal block; beyond: skipped
    else:
        full_end = (N // BLOCK_N) * BLOCK_N                   # whole key blocks
        masked_end = N                                        # the ragged last block
    if TRACE:
        show("program (query block, batch x head)", (pid_m, pid_bh), 0)
    acc, l_i, m_i = attend(acc, l_i, m_i, q, k_base, v_base, rows, dims, N, stride_kn, stride_kd,
                           stride_vn, stride_vd, qk_scale, 0, full_end,
                           BLOCK_N, False, CAUSAL, DOT_IN_FP32, PRECISION, TRACE, WARP_SPECIALIZE)
    acc, l_i, m_i = attend(acc, l_i, m_i, q, k_base, v_base, rows, dims, N, stride_kn, stride_kd,
                           stride_vn, stride_vd, qk_scale, full_end, masked_end,
                           BLOCK_N, True, CAUSAL, DOT_IN_FP32, PRECISION, TRACE)
    out = acc / l_i[:, None]               # the normalisation, once, at the end
    if TRACE:
        show("output", out)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_on + dims[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=rows[:, None] < N)


# %% [markdown]
# ## 4. The launcher
# Block sizes: on a GPU, two configurations are tuned per (sequence length, head dim, causal),
# except for small problems, where one fixed configuration saves the tuning (and the compiles);
# under the interpreter, small blocks keep the suite fast.


# %%
GPU_CONFIGS = [  # the winners of a sweep over tiles, num_warps and num_stages on the H200 (above)
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3),
]
SMALL_CONFIG = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)
INTERPRETER_CONFIG = dict(BLOCK_M=16, BLOCK_N=16)
TUNE_FROM = 2**30  # B * H * seq^2 * head_dim below which tuning costs more than it saves (the tests)
if not INTERPRET:
    attention_kernel_tuned = triton.autotune(GPU_CONFIGS, key=["N", "HEAD_DIM", "CAUSAL"])(attention_kernel)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * sm_scale [+ causal mask]) v for q, k, v of shape (batch, heads, seq, head_dim).

    float16, bfloat16 or float32 (fp32 softmax and accumulation inside; output in the input dtype);
    head_dim 16, 32, 64 or 128; any sequence length; sm_scale defaults to 1/sqrt(head_dim).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name, DTYPES, ndim=4)
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k, v must have one shape (batch, heads, seq, head_dim), got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, N, D = q.shape
    if D not in HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {D}")
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    if sm_scale < 0:  # the kernel's fused max needs a scale >= 0: (-c) q.k = c (-q).k
        q, sm_scale = -q, -sm_scale
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    if B * H * N == 0:
        return o
    strides = (*q.stride(), *k.stride(), *v.stride(), *o.stride())
    # float32 in, float32 products: a TF32 tensor-core dot (10-bit mantissa) would put errors of
    # about 1e-3 * |score| into the scores, which the softmax turns into relative errors of p.
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    if INTERPRET or B * H * N * N * D < TUNE_FROM:  # one fixed configuration, no tuning
        cfg = INTERPRETER_CONFIG if INTERPRET else SMALL_CONFIG
        attention_kernel[(triton.cdiv(N, cfg["BLOCK_M"]), B * H)](
            q, k, v, o, sm_scale, H, N, *strides, HEAD_DIM=D, CAUSAL=causal, PRECISION=precision,
            DOT_IN_FP32=INTERPRET and q.dtype == torch.bfloat16, **cfg)
        return o

    def grid(meta):
        return (triton.cdiv(N, meta["BLOCK_M"]), B * H)

    attention_kernel_tuned[grid](q, k, v, o, sm_scale, H, N, *strides, HEAD_DIM=D, CAUSAL=causal,
                                 PRECISION=precision)
    return o


# %% [markdown]
# ## 5. The trace: online softmax on one row, then the kernel on a tiny problem


# %%
def trace() -> dict:
    torch.set_printoptions(precision=4, sci_mode=False)
    print("Online softmax, one row of 8 scores in blocks of 4; values are 2-D (d = 2):")
    scores = torch.tensor([1.0, 3.0, 0.0, 2.0, 5.0, 1.0, 4.0, 0.0])
    values = torch.tensor([[1.0, 0], [0, 1], [1, 1], [2, 0], [0, 2], [1, 0], [0, 1], [1, 1]])
    demo = online_softmax_demo(scores, values, 4)

    print("\nThe kernel: batch 1, 1 head, seq 8, head_dim 2, blocks of 4 queries x 4 keys, sm_scale 1.")
    print("Query 0 is [1, 0] and key j is [scores_j, 0]: so row 0 of the scores is the row above.")
    q = torch.zeros(1, 1, 8, 2, device=DEVICE)
    q[0, 0, :, 0] = torch.tensor([1.0, 0.5, 0, 1, 0, 0.5, 1, 0])
    q[0, 0, :, 1] = torch.tensor([0.0, 1, 1, 0, 0.5, 0, 1, 1])
    k = torch.zeros(1, 1, 8, 2, device=DEVICE)
    k[0, 0, :, 0] = scores
    k[0, 0, :, 1] = torch.tensor([0.0, 1, 2, 0, 1, 0, 1, 2])
    v = values.reshape(1, 1, 8, 2).to(DEVICE)
    o = torch.empty_like(q)
    strides = (*q.stride(), *k.stride(), *v.stride(), *o.stride())
    attention_kernel[(2, 1)](q, k, v, o, 1.0, 1, 8, *strides, HEAD_DIM=2, BLOCK_M=4, BLOCK_N=4,
                             CAUSAL=False, TRACE=True)
    ref = attention_standard(q, k, v, sm_scale=1.0)
    print(f"kernel output row 0 = {o[0, 0, 0].tolist()}, standard attention: {ref[0, 0, 0].tolist()}; "
          f"max |difference| over all rows = {(o - ref).abs().max().item():.1e}")

    print("\nCausal, the same problem: query block 0 stops after key block 0 (block 1 lies wholly")
    print("above the diagonal and is skipped); query block 1 takes key block 0 unmasked, then block 1")
    print("masked. Key blocks each program visits:")
    oc = torch.empty_like(q)
    from common import trace as t
    before = len(t.LOG)
    attention_kernel[(2, 1)](q, k, v, oc, 1.0, 1, 8, *strides, HEAD_DIM=2, BLOCK_M=4, BLOCK_N=4,
                             CAUSAL=True, TRACE=True)
    visits = [v for name, v in t.LOG[before:] if name in ("program (query block, batch x head)", "key block")]
    refc = attention_standard(q, k, v, causal=True, sm_scale=1.0)
    print(f"causal: max |difference| from standard attention = {(oc - refc).abs().max().item():.1e}")
    return {"demo": demo, "out": o[0, 0].tolist(), "ref": ref[0, 0].tolist(),
            "causal_err": (oc - refc).abs().max().item(), "visits": [list(x) if isinstance(x, tuple) else x
                                                                    for x in visits]}


# %% [markdown]
# ## 6. Correctness


# %%
def check() -> bench.Table:
    rows = []
    cases = [(1, 1, 1, 16), (2, 3, 50, 32), (1, 2, 129, 64), (2, 2, 100, 128), (1, 1, 300, 64)]
    for dtype in DTYPES:
        for B, H, N, D in cases:
            q, k, v = (torch.randn(B, H, N, D, device=DEVICE, dtype=dtype) for _ in range(3))
            for causal in (False, True):
                ref = attention_standard(q.double(), k.double(), v.double(), causal)
                err = (attention(q, k, v, causal).double() - ref).abs().max().item()
                rows.append((str(dtype)[6:], f"{B} x {H} x {N} x {D}", causal, err))
    return bench.print_table(rows, ["dtype", "B x H x seq x head_dim", "causal", "max |error|"], floatfmt=".1e",
                             title='Against float64 standard attention (float32 inputs multiply in full fp32, "ieee")')


# %% [markdown]
# ## 7. Memory: the quadratic term against the linear one


# %%
def memory_table(seqs, B=4, H=32, D=64, dtype=torch.float16) -> bench.Table:
    rows = []
    for N in seqs:
        qkv_out = 4 * B * H * N * D * torch.tensor([], dtype=dtype).element_size()
        scores = score_bytes(B, H, N, torch.float32) + score_bytes(B, H, N, dtype)  # s in fp32, p
        measured = ["-", "-"]
        if not INTERPRET:
            for i, fn in enumerate((attention_standard, attention)):
                q, k, v = (torch.randn(B, H, N, D, device=DEVICE, dtype=dtype) for _ in range(3))
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                try:
                    fn(q, k, v)
                    torch.cuda.synchronize()
                    measured[i] = f"{(torch.cuda.max_memory_allocated() - base) / 2**30:.2f}"
                except torch.OutOfMemoryError:
                    measured[i] = "out of memory"
                del q, k, v
                torch.cuda.empty_cache()
        rows.append((N, qkv_out / 2**30, scores / 2**30, *measured))
    return bench.print_table(rows, ["seq", "q, k, v, o (GiB)", "scores s and p (GiB)",
                                    "standard: peak extra GiB", "flash: peak extra GiB"], floatfmt=".2f",
                             title=f"Memory, batch {B}, {H} heads, head_dim {D}, {str(dtype)[6:]}: the scores "
                                   "grow as seq^2, everything else as seq")


# %% [markdown]
# ## 8. Timing: the block sizes, then against PyTorch's scaled_dot_product_attention
# First the autotuner's job done by hand: every candidate configuration, timed side by side.
# Then the comparison. SDPA's flash backend is FlashAttention-2; its default on an H200 is
# cuDNN's Hopper kernel. On the H200 (RESULTS.md, seq 4096-16384) this kernel runs at 1.40-1.58x
# the first, and at 0.92-0.99x (head_dim 64) and 0.74-0.81x (head_dim 128) of the second. The gap
# is overlap: cuDNN, like FlashAttention-3, gives the loads to producer warps and lets two
# consumer warpgroups take turns, one running its exp2s while the other's matmuls run. Triton's
# spelling of that is tl.range(..., warp_specialize=True), which attend() takes as WARP_SPECIALIZE.
# With triton 3.6 on the H200 it fails to compile for 4-warp configurations, and for 8-warp ones
# bench_configs() found no difference (RESULTS.md, "Block sizes": within 0.4% either way). Other
# one-off tries did not close the gap either: TMA loads, warp specialization with TMA loads,
# computing the next block's scores before this block's softmax by hand (slower), and capping
# registers at 128 so two programs share an SM (at head_dim 128 the tiles then spill to memory).
# Read single timings with care: a GPU's clock drifts (the same kernel timed minutes apart
# differed by 5-15% on the H200 here), which is why the implementations here are timed in turns
# (bench.side_by_side).


# %%
SWEEP = [(128, 64, 8, 3), (128, 64, 4, 3), (128, 64, 8, 2), (128, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3),
         (128, 32, 4, 3),  # (BLOCK_M, BLOCK_N, num_warps, num_stages[, warp_specialize])
         (128, 64, 8, 3, True), (128, 128, 8, 3, True)]  # 4-warp ones fail to compile with triton 3.6


def bench_configs(seq: int = 4096, configs=SWEEP, shapes=((4, 32, 64), (4, 16, 128)),
                  dtype=torch.float16) -> bench.Table:
    rows = []
    for B, H, D in shapes:
        q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
        o = torch.empty_like(q)
        strides = (*q.stride(), *k.stride(), *v.stride(), *o.stride())
        for causal in (False, True):
            def launch(BLOCK_M, BLOCK_N, num_warps, num_stages, ws=False):
                attention_kernel[(triton.cdiv(seq, BLOCK_M), B * H)](
                    q, k, v, o, 1.0 / math.sqrt(D), H, seq, *strides, HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                    CAUSAL=causal, WARP_SPECIALIZE=ws, num_warps=num_warps, num_stages=num_stages)

            times = bench.side_by_side({cfg: (lambda cfg=cfg: launch(*cfg)) for cfg in configs})
            flops = 4 * B * H * seq * seq * D / (2 if causal else 1)
            best = min(times.values())
            for cfg, ms in times.items():
                bm, bn, warps, stages = cfg[:4]
                ws = len(cfg) == 5 and cfg[4]  # the optional fifth entry
                rows.append((D, causal, f"{bm} x {bn}", warps, stages, "yes" if ws else "no", ms * 1e3,
                             bench.tflops(flops, ms), 100 * best / ms))
    return bench.print_table(rows, ["head_dim", "causal", "BLOCK_M x BLOCK_N", "num_warps", "num_stages",
                                    "warp_specialize", "kernel µs", "TFLOP/s", "% of best"],
                             title=f"Block sizes, seq {seq}, {str(dtype)[6:]}, batch x heads = "
                                   f"{' and '.join(f'{B} x {H}' for B, H, _ in shapes)}{bench.SIDE_BY_SIDE_NOTE}"
                                   + (f"\n{bench.TIMING_NOTE}" if INTERPRET else ""))


# %%
def bench_all(seqs, configs=((4, 32, 64), (4, 16, 128)), dtypes=(torch.float16, torch.bfloat16)) -> bench.Table:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa_flash(q, k, v, causal):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    rows = []
    for dtype in dtypes:
        for B, H, D in configs:
            for N in seqs:
                for causal in (False, True):
                    q, k, v = (torch.randn(B, H, N, D, device=DEVICE, dtype=dtype) for _ in range(3))
                    cases = {"Triton flash": lambda: attention(q, k, v, causal),
                             "SDPA default": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
                    if not INTERPRET:
                        cases["SDPA flash backend"] = lambda: sdpa_flash(q, k, v, causal)
                    if score_bytes(B, H, N, torch.float32) * 2 < (40 << 30) or INTERPRET:
                        cases["standard"] = lambda: attention_standard(q, k, v, causal)
                    times = bench.side_by_side(cases)
                    flops = 4 * B * H * N * N * D / (2 if causal else 1)
                    ref = times.get("SDPA flash backend", times["SDPA default"])
                    for name, ms in times.items():
                        rows.append((str(dtype)[6:], f"{B} x {H} x {D}", N, causal, name, ms * 1e3,
                                     bench.tflops(flops, ms), 100 * ref / ms))
    title = (f"Timing: {stamp()}\n{bench.TIMING_NOTE}{bench.SIDE_BY_SIDE_NOTE} TFLOP/s = 4 B H seq^2 head_dim "
             "(half when causal) / kernel time; '% of SDPA flash' compares with torch's flash backend "
             "(SDPA default on the CPU).")
    return bench.print_table(rows, ["dtype", "B x H x head_dim", "seq", "causal", "implementation", "kernel µs",
                                    "TFLOP/s", "% of SDPA flash"], title=title)


def results() -> list:
    """What common/results.py writes to RESULTS.md (on a GPU)."""
    return [(bench_configs(), None), (bench_all([512, 1024, 2048, 4096, 8192, 16384]), None),
            (memory_table([1024, 4096, 8192, 16384, 32768]), None), (check(), None)]


# %% The script
def main(argv=None) -> None:
    p = lesson_parser(__doc__, ["trace", "memory", "check", "configs", "bench"])
    p.add_argument("--seqs", type=int, nargs="+", metavar="N",
                   help="sequence lengths for the bench (default 512 ... 16384 on a GPU, 64 128 interpreted)")
    args = start(p, argv, trace, __file__, "Trace: online softmax, then attention_kernel block by block (interpreter)")
    if "memory" in args.sections:
        print("\n=== Memory ===")
        memory_table([1024, 4096, 8192, 16384, 32768] if not INTERPRET else [1024, 16384, 131072])
    if "check" in args.sections:
        print("\n=== Check: against float64 standard attention ===")
        check()
    if "configs" in args.sections:
        print("\n=== Block sizes, side by side ===")
        if INTERPRET:  # the interpreter ignores num_warps and num_stages: two tiles on a small problem
            bench_configs(64, configs=[(16, 16, 4, 3), (32, 16, 4, 3)], shapes=((1, 2, 64),), dtype=torch.float32)
        else:
            bench_configs()
    if "bench" in args.sections:
        print("\n=== Timing ===")
        if INTERPRET:
            bench_all(args.seqs or [64, 128], configs=((1, 2, 64),), dtypes=(torch.float32,))
        else:
            bench_all(args.seqs or [512, 1024, 2048, 4096, 8192, 16384])


if __name__ == "__main__":
    main()
