"""Lesson 5: flash attention (forward). Online softmax plus tiled matmul, without the seq x seq matrix.

Standard attention computes S = Q K^T (seq x seq), P = softmax(S), O = P V. For 32 heads of a 16K
sequence that S is 16 GiB per batch element, written to memory and read back, when all anyone
wants is O, the size of Q. Flash attention never forms S: a program owns a block of query rows
and walks the keys and values block by block (lesson 3's tiles), computing each tile of scores
with tl.dot (lesson 4) and folding it into a running softmax (lesson 2's online softmax): a
running max m, a running sum l, and an output accumulator that is rescaled whenever the max
grows. Memory stays linear in the sequence length, and the seq x seq scores never touch HBM.

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
if __name__ == "__main__":  # run as a script: be the module tuning.py imports, not a second copy of it
    sys.modules.setdefault("lesson05_flash_attention.main", sys.modules[__name__])

from common.device import DEVICE, INTERPRET, interpretable

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common import bench, roofline
from common.checks import check_tensors, dtype_name, index_type, rel_error
from common.launch import cdiv, launch as launch_tuned, needs_op  # launch_tuned: the autotuner's pick, remembered
from common.cli import (lesson_parser, positive_int, run_sections, sizes,
                        sizes_help, start_lesson, trace_section)
from common.results import print_recorded
from common.trace import show
from lesson05_flash_attention import backward  # the backward pass, in the lesson's second part

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (16, 32, 64, 128)
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) = exp2(x * LOG2E)
SHAPES = {"cpu": [(1, 2, 64)], "gpu": [(4, 16, 128)], "full": [(4, 32, 64), (4, 16, 128)]}  # B, H, head_dim
SIZES = {"cpu": [64, 128], "gpu": [4096], "full": [512, 1024, 2048, 4096, 8192, 16384]}  # sequence lengths

# %% [markdown]
# ## 1. Standard attention, and what it costs in memory


# %%
def attention_standard(q, k, v, causal=False, sm_scale=None):
    """The textbook version. It writes the whole (B, H, seq, seq) score matrix, several times over."""
    sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-2, -1)).float() * sm_scale          # (B, H, seq, seq): write seq^2 per head
    if causal:
        seq = q.shape[-2]
        s = s.masked_fill(torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.softmax(s, dim=-1).to(q.dtype)                  # read seq^2, write seq^2 again
    return p @ v                                              # read seq^2


def score_bytes(B, H, seq, dtype=torch.float16) -> int:
    """Bytes of one (B, H, seq, seq) score matrix in `dtype`."""
    return B * H * seq * seq * torch.tensor([], dtype=dtype).element_size()


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
# Program pid works on one block of BLOCK_M query rows of one (batch, head): it loads its queries
# once, then for each block of BLOCK_N keys computes the scores qk = q @ k^T (tl.dot), folds them
# into the running softmax, and adds p @ v into the accumulator (tl.dot again). All of it in
# registers and shared memory; only q, k, v are read and only o is written.
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
#   tensor-core flops, and an H100/H200 SM does about 4096 of those per clock: 16 scores per clock,
#   while its special-function units manage 16 exp2 per clock. So every instruction per score
#   counts: the unmasked blocks fold the scale into one multiply-add, and only the last or
#   diagonal block pays for masks (on the loads too).
# - Block sizes: BLOCK_M query rows share each K/V block loaded, so bigger is better until the
#   registers run out (the fp32 score tile and the BLOCK_M x HEAD_DIM accumulator live there);
#   num_stages = 3 keeps the next K/V blocks loading while the tensor cores work. bench_configs()
#   (section 8) times the candidates side by side.


# %%
@triton.jit
def attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, rows, seq_len, qk_scale, lo, hi,
           BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
           INPUT_PRECISION: tl.constexpr, INDEX_TYPE: tl.constexpr, TRACE: tl.constexpr):
    """Fold the key/value blocks lo..hi into the running softmax (m_i, l_i) and the output acc.
    k_ptrs, v_ptrs address key/value block 0: k^T as [HEAD_DIM, BLOCK_N], v as [BLOCK_N, HEAD_DIM]."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)             # the keys of this block
        start = tl.cast(start_n, INDEX_TYPE)               # 64-bit if start * stride can pass 2^31
        if MASKED:  # only the last block can run past the end of the keys
            kT = tl.load(k_ptrs + start * stride_kn, mask=cols[None, :] < seq_len, other=0.0)
            v = tl.load(v_ptrs + start * stride_vn, mask=cols[:, None] < seq_len, other=0.0)
        else:
            kT = tl.load(k_ptrs + start * stride_kn)
            v = tl.load(v_ptrs + start * stride_vn)
        qk = tl.dot(q, kT, input_precision=INPUT_PRECISION)  # [BLOCK_M, BLOCK_N]: q . k, not yet scaled
        if MASKED:
            # Keys past the end, and (causal) keys after the query, get -inf: exp2 turns them into 0.
            keep = cols[None, :] < seq_len
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None])
            s = tl.where(keep, qk * qk_scale, float("-inf"))  # the scores, in base-2 units
            m_new = tl.maximum(m_i, tl.max(s, axis=1))        # the running max, per query row
            p = tl.exp2(s - m_new[:, None])
        else:
            # qk_scale > 0, so the max of the scaled scores is the scaled max: one multiply per
            # row here, and qk * qk_scale - m below is one fused multiply-add per score.
            m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)
            p = tl.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)                          # how much the old max overstated
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)  # acc*alpha + p@v
        m_i = m_new
        if TRACE:
            show("key block", start_n // BLOCK_N, indent=2)
            show("scores (natural units)", s / LOG2E if MASKED else qk * (qk_scale / LOG2E))
            show("m (natural units)", m_i / LOG2E)
            show("alpha", alpha)
            show("l", l_i)
            show("acc", acc)
    return acc, l_i, m_i


@triton.jit
def attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    lse_ptr,                                            # per query row, for the backward (below)
    sm_scale, H, seq_len,                               # heads, sequence length
    stride_qb, stride_qh, stride_qn, stride_qd,         # strides of q, in elements
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    INPUT_PRECISION: tl.constexpr = "tf32",  # float32 inputs: the launcher asks for "ieee"
    INDEX_TYPE: tl.constexpr = tl.int32,     # of the offsets: int64 past 2**31 elements (lesson 2)
    TRACE: tl.constexpr = False,
):
    tl.static_assert(BLOCK_M % BLOCK_N == 0)  # so the causal stages split at a key-block boundary
    # Which query block of which (batch, head)? One grid axis: the query blocks of head 0, then of
    # head 1, ... (consecutive programs share their keys and values in the L2 cache).
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(seq_len, BLOCK_M)
    pid_m = pid % num_pid_m                    # which block of query rows
    pid_bh = pid // num_pid_m                  # which (batch, head)
    b = (pid_bh // H).to(INDEX_TYPE)           # which batch
    h = (pid_bh % H).to(INDEX_TYPE)            # which head
    rows = pid_m.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)  # query rows (causal: the last key each sees)
    dims = tl.arange(0, HEAD_DIM).to(INDEX_TYPE)
    keys = tl.arange(0, BLOCK_N).to(INDEX_TYPE)
    # The queries, once: [BLOCK_M, HEAD_DIM]. The keys as k^T, [HEAD_DIM, BLOCK_N] (dims down, keys
    # across: the strides do the transpose), and the values, [BLOCK_N, HEAD_DIM], of key block 0.
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn + dims[None, :] * stride_qd,
                mask=rows[:, None] < seq_len, other=0.0)
    k_ptrs = k_ptr + b * stride_kb + h * stride_kh + dims[:, None] * stride_kd + keys[None, :] * stride_kn
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd
    # The running softmax per query row: max m_i (base 2), sum l_i, and the unnormalised output acc.
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # fold log2(e) in (exp2 below is exp), in float32 whoever launches: torch.compile's generated
    # code passes a Python float as float64, which would carry float64 through every score.
    qk_scale = tl.cast(sm_scale, tl.float32) * LOG2E
    # Stage 1 walks the key blocks that need no mask, stage 2 the one or two that do.
    if CAUSAL:
        full_end = pid_m * BLOCK_M                                # keys below the diagonal block
        masked_end = tl.minimum((pid_m + 1) * BLOCK_M, seq_len)   # the diagonal block; beyond: skipped
    else:
        full_end = (seq_len // BLOCK_N) * BLOCK_N                 # whole key blocks
        masked_end = seq_len                                      # the ragged last block
    if TRACE:
        show("program (query block, batch x head)", (pid_m, pid_bh), indent=0)
    acc, l_i, m_i = attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, rows, seq_len, qk_scale,
                           0, full_end, BLOCK_N=BLOCK_N, MASKED=False, CAUSAL=CAUSAL,
                           INPUT_PRECISION=INPUT_PRECISION, INDEX_TYPE=INDEX_TYPE, TRACE=TRACE)
    acc, l_i, m_i = attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, rows, seq_len, qk_scale,
                           full_end, masked_end, BLOCK_N=BLOCK_N, MASKED=True, CAUSAL=CAUSAL,
                           INPUT_PRECISION=INPUT_PRECISION, INDEX_TYPE=INDEX_TYPE, TRACE=TRACE)
    out = acc / l_i[:, None]                    # the normalisation, once, at the end
    # For the backward (backward.py): lse = m + log2(l), the log of the softmax's sum (the max
    # folded in, base 2), from which exp2(scores - lse) gives back any tile of P. One float per row.
    tl.store(lse_ptr + pid_bh.to(INDEX_TYPE) * seq_len + rows, m_i + tl.log2(l_i), mask=rows < seq_len)
    if TRACE:
        show("output", out)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_on + dims[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=rows[:, None] < seq_len)


# %% [markdown]
# ## 4. The launcher
# One launch path: checks, then the autotuned kernel. The rule for the block sizes: on a GPU the
# autotuner picks among three configurations per (sequence length, head dim, causal), except
# below 512 queries, where timing them costs more than it saves and the last (the smallest) runs
# untimed; under the interpreter one small configuration runs. The K/V blocks in
# flight wait in shared memory, and GPUs have 64 KB (T4) to 227 KB (H100) of it per program: the
# autotuner skips a configuration that does not fit, and the last fits them all (in float32 at
# head_dim 128: 72 KB, 64 KB on a T4, which has no tensor cores that Triton uses).


# %%
GPU_CONFIGS = [  # the winners of the block-size sweep (bench_configs, RESULTS.md "Block sizes"), then
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2),  # one that fits every GPU
]
CONFIGS = GPU_CONFIGS if not INTERPRET else [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16})]


def small_problems_untuned(configs, named_args, **kwargs):
    """Autotune's early prune: every configuration from seq_len 512 up, else the last. It reads
    only what the autotuner's key holds: the choice is kept per key, so a rule on the batch size
    too would let a first, small batch fix the smallest configuration for every later one."""
    return configs if named_args["seq_len"] >= 512 else configs[-1:]


attention_kernel_tuned = triton.autotune(CONFIGS, key=["seq_len", "HEAD_DIM", "CAUSAL"],
                                         prune_configs_by={"early_config_prune": small_problems_untuned}
                                         )(attention_kernel)


def launch(kernel, q, k, v, causal, sm_scale, **meta) -> tuple[torch.Tensor, torch.Tensor]:
    """o = attention(q, k, v) and its lse per row, by `kernel`: attention_kernel with block sizes in
    `meta`, or the autotuned one. One program per block of query rows per (batch, head)."""
    B, H, seq_len, D = q.shape
    o = torch.empty_like(q)  # q's layout (a view of (B, seq, H, D) memory gives o the same strides)
    lse = q.new_empty((B, H, seq_len), dtype=torch.float32)
    # float32 in, float32 products: a TF32 tensor-core dot (10-bit mantissa) would put errors of
    # about 1e-3 * |score| into the scores, which the softmax turns into relative errors of p.
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    q, k, v = interpretable(q), interpretable(k), interpretable(v)
    meta.setdefault("INDEX_TYPE", index_type(q, k, v, o))

    def grid(meta):  # the block sizes in use: given, or the autotuner's pick
        return (cdiv(seq_len, meta["BLOCK_M"]) * B * H,)

    launch_tuned(kernel, grid, (seq_len, D, causal, q.dtype), q, k, v, o, lse, sm_scale, H, seq_len, *q.stride(),
                 *k.stride(), *v.stride(), *o.stride(), HEAD_DIM=D, CAUSAL=causal, INPUT_PRECISION=precision, **meta)
    return o, lse


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * sm_scale [+ causal mask]) v for q, k, v of shape (batch, heads, seq, head_dim).

    float16, bfloat16 or float32 (fp32 softmax and accumulation inside; output in the input dtype);
    head_dim 16, 32, 64 or 128; any sequence length; sm_scale defaults to 1/sqrt(head_dim).
    """
    q, k, v = check_tensors({"q": q, "k": k, "v": v}, DTYPES, ndim=4, same_shape=True)
    B, H, seq_len, D = q.shape
    if D not in HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {D}")
    if causal not in (True, False):  # a string such as "False" would be truthy: causal attention
        raise TypeError(f"causal must be True or False, got {causal!r}")
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    if sm_scale < 0:  # the kernel's fused max needs a scale >= 0: (-c) q.k = c (-q).k
        q, sm_scale = -q, -sm_scale
    if needs_op(q, k, v):  # autograd or torch.compile: through the registered operator, below
        return attention_op(q, k, v, causal, sm_scale)[0]
    return run(q, k, v, causal, sm_scale)[0]


def run(q, k, v, causal: bool, sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    if q.numel() == 0:
        return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)
    return launch(attention_kernel_tuned, q, k, v, causal, sm_scale)


# Training (lesson 1, section 5, registers an operator; backward.py holds the backward: kernels,
# launcher, and what autograd keeps). The operator returns lse beside O: autograd keeps both, and
# q, k, v, for the backward.
@torch.library.triton_op("lessons::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    return run(q, k, v, causal, sm_scale)


attention_op.register_autograd(backward.attention_grad, setup_context=backward.keep_for_backward)


# %% [markdown]
# ## 5. The trace: online softmax on one row, then the kernel on a tiny problem


# %%
def trace() -> None:
    torch.set_printoptions(precision=4, sci_mode=False)
    print("Online softmax, one row of 8 scores in blocks of 4; values are 2-D (d = 2):")
    scores = torch.tensor([1.0, 3.0, 0.0, 2.0, 5.0, 1.0, 4.0, 0.0])
    values = torch.tensor([[1.0, 0], [0, 1], [1, 1], [2, 0], [0, 2], [1, 0], [0, 1], [1, 1]])
    online_softmax_demo(scores, values, 4)

    print("\nThe kernel: batch 1, 1 head, seq 8, head_dim 2, blocks of 4 queries x 4 keys, sm_scale 1.")
    print("Query 0 is [1, 0] and key j is [scores_j, ...]: so row 0 of the scores is the row above.")
    q = torch.zeros(1, 1, 8, 2, device=DEVICE)
    q[0, 0, :, 0] = torch.tensor([1.0, 0.5, 0, 1, 0, 0.5, 1, 0])
    q[0, 0, :, 1] = torch.tensor([0.0, 1, 1, 0, 0.5, 0, 1, 1])
    k = torch.zeros(1, 1, 8, 2, device=DEVICE)
    k[0, 0, :, 0] = scores
    k[0, 0, :, 1] = torch.tensor([0.0, 1, 2, 0, 1, 0, 1, 2])
    v = values.reshape(1, 1, 8, 2).to(DEVICE)
    o, _ = launch(attention_kernel, q, k, v, False, 1.0, BLOCK_M=4, BLOCK_N=4, TRACE=True)
    ref = attention_standard(q, k, v, sm_scale=1.0)
    print(f"kernel output row 0 = {o[0, 0, 0].tolist()}, standard attention: {ref[0, 0, 0].tolist()}; "
          f"max |difference| over all rows = {(o - ref).abs().max().item():.1e}")

    print("\nCausal, the same problem: query block 0 stops after key block 0 (block 1 lies wholly")
    print("above the diagonal and is skipped); query block 1 takes key block 0 unmasked, then block 1")
    print("masked, where the scores of later keys are -inf.")
    oc, _ = launch(attention_kernel, q, k, v, True, 1.0, BLOCK_M=4, BLOCK_N=4, TRACE=True)
    refc = attention_standard(q, k, v, causal=True, sm_scale=1.0)
    print(f"causal: max |difference| from standard attention = {(oc - refc).abs().max().item():.1e}")

    print("\nThe backward (backward.py), the same problem, causal, the loss the sum of the outputs' first")
    print("column: the key blocks' kernel first (dK, dV), then the query blocks' (dQ); torch's autograd beside.")
    backward.trace(q, k, v, attention_standard)


# %% [markdown]
# ## 6. Correctness


# %%
TOLERANCE = {torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}  # relative; float32: "ieee" dots


def check() -> bench.Table:
    rows = []
    cases = [(1, 1, 1, 64), (2, 3, 50, 64), (1, 2, 129, 64)]  # B, H, seq, head_dim (the tests take every head_dim)
    for dtype in DTYPES:
        for B, H, seq, D in cases:
            q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
            for causal in (False, True):
                err = rel_error(attention(q, k, v, causal), attention_standard(q.double(), k.double(), v.double(), causal))
                rows.append((dtype_name(dtype), f"{B} x {H} x {seq} x {D}", causal, err, err < TOLERANCE[dtype]))
    return bench.print_table(rows, ["dtype", "B x H x seq x head_dim", "causal", "relative error", "ok"],
                             floatfmt=".1e", title="Check: attention against float64 standard attention",
                             note='float32 inputs multiply in full fp32 ("ieee").')


# %% [markdown]
# ## 7. Memory: the quadratic term against the linear one
# q, k, v and o grow as seq; the scores, in fp32 and again as p, as seq^2 (score_bytes, section 1).
# tuning.memory_table sets the two side by side and, on a GPU, measures each implementation's peak:
# standard attention's grows with the scores until it runs out of memory; flash attention's is o.


# %% [markdown]
# ## 8. Timing: the block sizes, then against PyTorch's scaled_dot_product_attention
# First the autotuner's job done by hand (tuning.py, with --full): every candidate configuration,
# timed side by side.
# Then the comparison. SDPA's flash backend is FlashAttention-2; its default on an H100/H200 is
# cuDNN's Hopper kernel, which, like FlashAttention-3, gives the loads to producer warps and lets
# two consumer warpgroups take turns, one running its exp2s while the other's matmuls run. This
# kernel has no such overlap; RESULTS.md shows where that leaves it against both.


# %%
def sdpa_flash(q, k, v, causal=False, backend="FLASH_ATTENTION"):
    """PyTorch's SDPA with one backend forced: by default its flash-attention backend
    (FlashAttention-2); "CUDNN_ATTENTION" is cuDNN's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, backend)):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def bench_all(seqs, shapes=((4, 32, 64), (4, 16, 128)), dtypes=(torch.float16, torch.bfloat16)) -> bench.Table:
    rows = []
    for dtype in dtypes:
        for B, H, D in shapes:
            for seq in seqs:
                for causal in (False, True):
                    q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
                    cases = {"Triton flash": lambda: attention(q, k, v, causal),
                             "SDPA default": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
                    if not INTERPRET:
                        cases["SDPA flash backend"] = lambda: sdpa_flash(q, k, v, causal)
                    if score_bytes(B, H, seq, torch.float32) * 2 < (40 << 30) or INTERPRET:
                        cases["standard"] = lambda: attention_standard(q, k, v, causal)
                    times = bench.side_by_side(cases)
                    flops = 4 * B * H * seq * seq * D / (2 if causal else 1)
                    ref = times.get("SDPA flash backend", times["SDPA default"])
                    for name, ms in times.items():
                        rows.append((dtype_name(dtype), f"{B} x {H} x {D}", seq, causal, name, ms * 1e3,
                                     bench.tflops(flops, ms), 100 * ref / ms))
    note = (f"{bench.stamp()}. {bench.TIMING_NOTE}{bench.SIDE_BY_SIDE_NOTE} TFLOP/s = 4 B H seq^2 head_dim "
            "(half when causal) / kernel time; '% of SDPA flash' compares with torch's flash backend "
            "(SDPA default on the CPU).")
    return bench.print_table(rows, ["dtype", "B x H x head_dim", "seq", "causal", "implementation", "kernel µs",
                                    "TFLOP/s", "% of SDPA flash"], title="Timing against PyTorch's SDPA", note=note)


# %% The script
def main(argv=None) -> None:
    from lesson05_flash_attention import tuning  # what most readers skip, in the lesson's second file

    def configs():
        if args.full:
            tuning.bench_configs()
            backward.bench_configs()
        else:  # a sweep of minutes on a GPU; the interpreter ignores num_warps and num_stages
            print_recorded(__file__, "Block sizes", keep=lambda row: row["causal"] == "False")

    def timing():
        bench_all(args.seqs or sizes(args, SIZES), shapes=sizes(args, SHAPES),
                  dtypes=(torch.float32,) if INTERPRET else (torch.float16, torch.bfloat16) if args.full
                  else (torch.float16,))
        backward.bench_backward(args.seqs or ([4096, 16384] if args.full else sizes(args, SIZES)[:1 if INTERPRET else None]),
                                sizes(args, SHAPES), torch.float32 if INTERPRET else torch.float16)
        if INTERPRET:  # beside the interpreter's numbers, the H200's
            print_recorded(__file__, "Timing", keep=lambda row: row["dtype"] == "float16" and row["seq"] == "4096"
                           and row["causal"] == "True")
        B, H, seq, D = 4, 16, 4096, 128  # the roofline (README): FLOPs per byte, measured on a GPU
        q, k, v = torch.randn(3, B, H, seq, D, device=DEVICE, dtype=torch.float16) if not INTERPRET else [None] * 3
        flops, nbytes = 4 * B * H * seq * seq * D, 2 * 4 * B * H * seq * D  # two matmuls; q, k, v read, o written
        roofline.points({("Triton attention", f"{B} x {H} x {seq} x {D} fp16"): (lambda: attention(q, k, v), flops, nbytes),
                         ("SDPA flash backend", f"{B} x {H} x {seq} x {D} fp16"):
                             (lambda: sdpa_flash(q, k, v), flops, nbytes)}, __file__)

        bench.offsets_cost(tuning.offsets_cases, __file__, run=args.full)  # int64 offsets' cost (lesson 2)

    sections = {
        "trace": ("Trace: online softmax, then attention_kernel block by block (interpreter)",
                  lambda: trace_section(trace, __file__, args.child)),
        "memory": ("Memory (tuning.py)", lambda: tuning.memory_table([1024, 4096, 8192, 16384, 32768] if args.full else [1024, 4096, 16384])),
        "check": ("Check: against float64 standard attention", check),
        "grad": ("Training: the gradients (backward.py)", backward.grad_check),
        "configs": ("Block sizes, side by side", configs),
        "bench": ("Timing", timing),
        "host": ("What a call costs the host (lesson 1, 'What a launch costs')",
                 lambda: bench.host_costs("lesson05_flash_attention.tuning:host_cases", __file__)),
    }
    p = lesson_parser(__doc__, list(sections))
    p.add_argument("--seqs", type=positive_int, nargs="+", metavar="SEQ", help=sizes_help("sequence lengths", SIZES))
    args = start_lesson(p, argv)
    run_sections(args, sections)

if __name__ == "__main__":
    main()
