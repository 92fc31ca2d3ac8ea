"""Lesson 5: flash attention. Online softmax plus tiled matmul, without the seq x seq matrix.

Standard attention computes S = Q K^T (seq x seq), P = softmax(S), O = P V. For 32 heads of a 16K
sequence that S is 16 GiB per batch element, written to memory and read back, when all anyone
wants is O, the size of Q. Flash attention never forms S: a program owns a block of query rows
and walks the keys and values block by block (lesson 3's tiles), computing each tile of scores
with tl.dot (lesson 4) and folding it into a running softmax (lesson 2's online softmax): a
running max m, a running sum l, and an output accumulator that is rescaled whenever the max
grows. Memory stays linear in the sequence length, and the seq x seq scores never touch HBM.

The chapter builds that from the smallest kernel that does it. Sections 1-2: what standard
attention costs, and the online softmax on one row of scores. Section 3: the teaching kernel,
flash_kernel, in this file: one block of queries, two tl.dots, causal or not, traced on a tiny
problem. Section 4: what models pass that it cannot take (views, grouped-query heads, a KV cache's
two lengths, head dims such as 80, tensors past 2**31 elements, decoding, training), and what
attention_kernel, the kernel the op runs (attention.py, the file a model imports), does for each;
section 5 traces it. Section 6: the op's route, which kernel runs; section 7 checks the op on every
shape. A first reading can stop there. Sections 8-12 measure the forward on a GPU (memory, time
against PyTorch's SDPA, block sizes, the host's cost, 64-bit offsets: tuning.py holds most of their
code); sections 13-16 are the backward pass, for training (backward.py); section 17 times the shapes
models pass, and section 18 a forward and backward together at CS336's leaderboard shape. On an H100
or H200 attention() runs, where they were timed faster, a forward and backward written for Hopper in
Gluon (hopper.py; Gluon is Triton's lower-level language, in which a kernel says which warps load,
which multiply and how tiles lie in shared memory): lesson 7 (lesson07_hopper/main.py) takes them
apart.

Run:   python lesson05_flash_attention/main.py            (every section)
       python lesson05_flash_attention/main.py --help     (sections, sequence lengths)
Without a CUDA GPU the kernels run under Triton's interpreter on the CPU, on small problems: exact
results, the traces; the sections that need a GPU show what a GPU printed (RESULTS.md, which names
it).
"""
# %% Set-up: common.device chooses GPU or interpreter before triton is imported
import functools
import math

from common.device import DEVICE, interpretable

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common import bench, checks, roofline
from common.chapter import Chapter, positive_int
from common.checks import GRAD_NOTE, dtype_name, grad_errors, grad_ok, rel_error
from common.launch import cdiv
from common.table import print_table
from common.trace import show
from lesson05_flash_attention import backward, decode, hopper, tuning  # the lesson's other files
from lesson05_flash_attention.attention import (DTYPES, ROUTES, attention, attention_kernel,  # the op
                                                attention_kernel_tuned, launch, route)

SECTIONS = {  # the chapter, in reading order: `--sections` picks some, `--skip` leaves some out
    "memory": "1. Standard attention, and what its scores cost in memory",
    "online": "2. Online softmax, on its own: one row of scores in blocks",
    "trace": "3. The teaching kernel: one block of queries, two tl.dots, traced",
    "steps": "4. What models pass: from the teaching kernel to attention_kernel",
    "stages": "5. attention_kernel traced: causal, in two stages",
    "route": "6. The launcher, and which kernel runs: attention's route (attention.py)",
    "check": "7. Correctness: against float64 standard attention",
    "peak": "8. Memory, measured: each implementation's peak (tuning.py)",
    "bench": "9. Timing: against PyTorch's scaled_dot_product_attention",
    "configs": "10. Block sizes, side by side (tuning.py)",
    "host": "11. What a call costs the host (tuning.py)",
    "offsets": "12. 64-bit offsets: what they cost here (tuning.py)",
    "backward": "13. The backward (backward.py): the tiny problem again, traced beside autograd",
    "grad": "14. Training: the gradients against float64 autograd",
    "bench_backward": "15. Timing the backward against SDPA's backends (backward.py)",
    "configs_backward": "16. The backward's two designs and their block sizes (backward.py)",
    "bench_general": "17. The shapes models pass, timed against SDPA's backends (tuning.py)",
    "leaderboard": "18. CS336's leaderboard shape, forward and backward (tuning.py)",
}
# The GPU sections' sizes: a quick look, or with --full what RESULTS.md holds (minutes). seqs: section
# 9's sequence lengths; shapes: the (batch, heads, head_dim) of sections 9, 12 and 15; dtypes: section
# 9's; checked: the dtypes sections 7 and 14 check; memory: section 8's sequence lengths (section 1
# takes the full list); backward: section 15's sequence lengths; general: section 17's shapes
# (tuning.BENCH_CASES: (B, H, H_KV, seq_q, seq_k, head_dim, causal)). The block-size sweeps (sections
# 10 and 16) run with --full only.
SIZES = {
    "quick": dict(seqs=[4096], shapes=[(4, 16, 128)], dtypes=[torch.float16], checked=[torch.float16],
                  memory=[1024, 4096, 16384], backward=[4096], general=[tuning.BENCH_CASES[1], tuning.BENCH_CASES[6]]),
    "full": dict(seqs=[512, 1024, 2048, 4096, 8192, 16384], shapes=[(4, 32, 64), (4, 16, 128)],
                 dtypes=[torch.float16, torch.bfloat16], checked=DTYPES, memory=[1024, 4096, 8192, 16384, 32768],
                 backward=[4096, 16384], general=tuning.BENCH_CASES),
}
chapter = Chapter("lesson05_flash_attention", __doc__, SECTIONS, running=__name__ == "__main__")
chapter.parser.add_argument("--seqs", type=positive_int, nargs="+", metavar="SEQ",
                            help=f"the sequence lengths of sections 9 and 15 (default {SIZES['quick']['seqs']}; with "
                                 f"--full {SIZES['full']['seqs']} and {SIZES['full']['backward']})")
args = chapter.start()

# %% [markdown]
# ## 1. Standard attention, and what its scores cost in memory
# The textbook version writes the whole (batch, heads, seq, seq) score matrix to memory, in float32,
# then the probabilities p beside it, and reads both back: the cost grows as seq^2, while q, k, v
# and the output o grow as seq.


# %%
def attention_standard(q, k, v, *, causal=False, sm_scale=None):
    """The textbook version, for every shape attention() takes: q (B, H, seq_q, head_dim); k and v
    (B, H_KV, seq_k, head_dim), q's heads a multiple of theirs (grouped-query attention: query head h
    reads key head h // (H / H_KV), here by repeating k and v, which the kernel never does). Causal
    aligns the mask bottom-right: query i sees keys j <= i + seq_k - seq_q, so the last query sees
    every key, as a KV cache needs (PyTorch's is_causal=True aligns top-left; the two agree where
    seq_q = seq_k); a query that sees no key (seq_q > seq_k) gives 0. It writes the whole
    (B, H, seq_q, seq_k) score matrix, several times over."""
    sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    group = q.shape[1] // k.shape[1]
    if group > 1:  # grouped-query heads: copies of k and v, one per query head
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-2, -1)).to(torch.promote_types(q.dtype, torch.float32)) * sm_scale  # seq_q x seq_k per head
    if causal:
        seq_q, seq_k = s.shape[-2:]
        hidden = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device).triu(seq_k - seq_q + 1)  # j > i + seq_k - seq_q
        sees = ~hidden.all(dim=-1, keepdim=True)  # the queries that see a key at all
        s = torch.where(sees, s.masked_fill(hidden, float("-inf")), 0.0)
        return torch.where(sees, torch.softmax(s, dim=-1), 0.0).to(q.dtype) @ v
    p = torch.softmax(s, dim=-1).to(q.dtype)                  # read seq^2, write seq^2 again
    return p @ v                                              # read seq^2

def score_bytes(B, H, seq, dtype=torch.float16) -> int:
    """Bytes of one (B, H, seq, seq) score matrix in `dtype`."""
    return B * H * seq * seq * torch.tensor([], dtype=dtype).element_size()


def memory_cost(seqs=SIZES["full"]["memory"], B=4, H=32, D=64, dtype=torch.float16):
    """The arithmetic: q, k, v and o against the scores s (float32) and p (the inputs' dtype)."""
    rows = []
    for seq in seqs:
        linear = 4 * B * H * seq * D * torch.tensor([], dtype=dtype).element_size()
        scores = score_bytes(B, H, seq, torch.float32) + score_bytes(B, H, seq, dtype)
        rows.append((seq, linear / 2**30, scores / 2**30, scores / linear))
    return print_table(rows, ["seq", "q, k, v, o (GiB)", "scores s and p (GiB)", "scores / (q, k, v, o)"],
                       floatfmt=".2f", title=f"Memory, by arithmetic: batch {B}, {H} heads, head_dim {D}, "
                                             f"{dtype_name(dtype)}",
                       note="The scores grow as seq^2, everything else as seq: at 32K the scores alone would fill "
                            "several GPUs. Section 8 measures what each implementation really allocates.")


# %%
chapter.run("memory", memory_cost)

# %% [markdown]
# ## 2. Online softmax, on its own: one row of scores in blocks
# Lesson 2 walked a long row keeping m (the max so far) and l (the sum of exp(x - m) so far),
# rescaling l by alpha = exp(m_old - m_new) whenever the max grew. Attention needs softmax(s) @ v,
# not the softmax itself, so the same rescaling applies to an output accumulator o = sum of
# exp(s_j - m) v_j: when m grows, o is multiplied by alpha too. At the end, O = o / l.
# The worked example: one query's row of 8 scores, its 8 values of 2 numbers each, in blocks of 4.


# %%
SCORES = torch.tensor([1.0, 3.0, 0.0, 2.0, 5.0, 1.0, 4.0, 0.0])  # one query's scores
VALUES = torch.tensor([[1.0, 0], [0, 1], [1, 1], [2, 0], [0, 2], [1, 0], [0, 1], [1, 1]])  # one value per key, d = 2


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


def online_softmax() -> dict:
    print("One row of 8 scores in blocks of 4; values are 2-D (d = 2):")
    return online_softmax_demo(SCORES, VALUES, 4)


# %%
chapter.run("online", online_softmax)

# %% [markdown]
# ### Your turn, before the kernel
# lesson05_flash_attention/exercises/, each checked when you run its file (`--hint` for a hint):
# score_memory (predict section 1's gigabytes), attend (write section 2's update inside a kernel
# that walks the key blocks), causal (make that kernel causal, the key blocks above the diagonal
# never read: a budget) and causal_blocks (predict how many key blocks a causal pass reads).
# Section 3's kernel is their answer: try them first.

# %% [markdown]
# ## 3. The teaching kernel: one block of queries, two tl.dots, traced
# Section 2's loop, for BLOCK_M query rows at once. Program (pid_m, bh) loads its block of queries
# once; then for each block of BLOCK_N keys it computes the scores s = q @ k^T, a [BLOCK_M, BLOCK_N]
# tile (the first tl.dot), folds them into each row's running max and sum, and adds p @ v into the
# accumulator (the second tl.dot). All of it in registers and shared memory (each SM's scratchpad:
# lesson 1, section 7): q, k and v are read, o is written, and nothing else touches memory. m, l
# and acc are float32; p is cast to v's dtype for the second tl.dot, which runs on the tensor cores
# (the units that multiply small matrices in one instruction: lesson 4 builds a matmul on them).
#
# Causal attention: query i sees keys 0..i. The last row of a query block sees the most keys, so
# the loop stops at the block's end: the key blocks wholly above the diagonal are never read (about
# half the work), and in the blocks it reads, a key after its query gets a score of -inf.
#
# The kernel takes q, k and v of one shape (batch, heads, seq, head_dim), contiguous, head_dim a
# power of two (tl.arange's rule; on a GPU at least 16, tl.dot's); its launcher refuses anything
# else, and section 4 lifts each limit. The trace: batch 1, 1 head, seq 8, head_dim 2, blocks of
# 4 queries x 4 keys, sm_scale 1. Query 0 is [1, 0] and key j is [SCORES[j], ...], so row 0 of the
# scores is section 2's row, and row 0 of the output its o / l.


# %%
@triton.jit
def flash_kernel(q_ptr, k_ptr, v_ptr, o_ptr,  # q, k, v, o: contiguous (batch, heads, seq, HEAD_DIM)
                 sm_scale, seq,               # the scale of the scores, the sequence length
                 HEAD_DIM: tl.constexpr,      # a power of two
                 BLOCK_M: tl.constexpr,       # query rows per program
                 BLOCK_N: tl.constexpr,       # keys per step of the loop
                 CAUSAL: tl.constexpr,        # query i sees keys 0..i only
                 TRACE: tl.constexpr):        # print what each program holds (under the interpreter)
    pid_m = tl.program_id(axis=0)                       # which block of query rows
    bh = tl.program_id(axis=1)                          # which (batch, head)
    head = bh * seq * HEAD_DIM                          # where that head starts, in q, k, v and o
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)      # my query rows
    dims = tl.arange(0, HEAD_DIM)
    # My queries, once: [BLOCK_M, HEAD_DIM] (rows past the end load as 0 and are never stored)
    q = tl.load(q_ptr + head + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq, other=0.0)
    # Each row's running softmax, in float32: its max m_i, its sum l_i, its output not yet divided by l_i
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    end = seq
    if CAUSAL:  # no row of mine sees a key past my last row: the key blocks after it are never read
        end = tl.minimum((pid_m + 1) * BLOCK_M, seq)
    if TRACE:
        show("program (query block, batch x head)", (pid_m, bh), indent=0)
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)          # the keys of this block
        # k^T, [HEAD_DIM, BLOCK_N] (dims down, keys across: the addresses do the transpose), and v
        kT = tl.load(k_ptr + head + cols[None, :] * HEAD_DIM + dims[:, None], mask=cols[None, :] < seq, other=0.0)
        v = tl.load(v_ptr + head + cols[:, None] * HEAD_DIM + dims[None, :], mask=cols[:, None] < seq, other=0.0)
        s = tl.dot(q, kT) * sm_scale                    # the first dot: [BLOCK_M, BLOCK_N] scores
        keep = cols[None, :] < seq                      # keys past the end get no weight,
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])  # nor keys after the query
        s = tl.where(keep, s, float("-inf"))            # exp(-inf) = 0
        # Section 2's update, for BLOCK_M rows at once
        m_new = tl.maximum(m_i, tl.max(s, axis=1))      # the running max, with this block's
        alpha = tl.exp(m_i - m_new)                     # what the sums so far are worth under it
        p = tl.exp(s - m_new[:, None])                  # this block's weights
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  # the second dot: p @ v
        m_i = m_new
        if TRACE:
            show("key block", start_n // BLOCK_N, indent=2)
            show("scores", s)
            show("m", m_i)
            show("alpha", alpha)
            show("l", l_i)
            show("acc", acc)
    out = acc / l_i[:, None]                            # the division, once, at the end
    if TRACE:
        show("output", out)
    tl.store(o_ptr + head + rows[:, None] * HEAD_DIM + dims[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq)


def flash_attention(q, k, v, *, causal: bool = False, sm_scale: float | None = None, BLOCK_M: int = 16,
                    BLOCK_N: int = 16, trace: bool = False) -> torch.Tensor:
    """The teaching kernel's launcher: softmax(q k^T * sm_scale [+ causal mask]) v for q, k, v of one
    shape (batch, heads, seq, head_dim), contiguous, head_dim a power of two. It refuses anything
    else, which its kernel would get wrong (attention() takes it all)."""
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k and v of one shape only: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        raise ValueError("contiguous tensors only, got a view")
    B, H, seq, D = q.shape
    if D & (D - 1):
        raise ValueError(f"a head_dim that is a power of two, got {D}")
    o = torch.empty_like(q)
    q, k, v = interpretable(q), interpretable(k), interpretable(v)  # (bf16 as fp32 under the interpreter)
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    flash_kernel[(cdiv(seq, BLOCK_M), B * H)](q, k, v, o, sm_scale, seq, HEAD_DIM=D, BLOCK_M=BLOCK_M,
                                               BLOCK_N=BLOCK_N, CAUSAL=causal, TRACE=trace)
    return o


def tiny_problem() -> tuple:
    """q, k, v of the worked example: (1, 1, 8, 2) each."""
    q = torch.zeros(1, 1, 8, 2, device=DEVICE)
    q[0, 0, :, 0] = torch.tensor([1.0, 0.5, 0, 1, 0, 0.5, 1, 0])
    q[0, 0, :, 1] = torch.tensor([0.0, 1, 1, 0, 0.5, 0, 1, 1])
    k = torch.zeros(1, 1, 8, 2, device=DEVICE)
    k[0, 0, :, 0] = SCORES
    k[0, 0, :, 1] = torch.tensor([0.0, 1, 2, 0, 1, 0, 1, 2])
    v = VALUES.reshape(1, 1, 8, 2).to(DEVICE)
    return q, k, v


def trace() -> None:
    torch.set_printoptions(precision=4, sci_mode=False)
    q, k, v = tiny_problem()
    print("Two query blocks, each over key blocks 0 and 1:")
    o = flash_attention(q, k, v, sm_scale=1.0, BLOCK_M=4, BLOCK_N=4, trace=True)
    causal = flash_attention(q, k, v, causal=True, sm_scale=1.0, BLOCK_M=4, BLOCK_N=4)
    print(f"Row 0 is section 2's o / l. Against standard attention: max |difference| "
          f"{(o - attention_standard(q, k, v, sm_scale=1.0)).abs().max().item():.1e}; causal, "
          f"{(causal - attention_standard(q, k, v, causal=True, sm_scale=1.0)).abs().max().item():.1e}.")


# %%
chapter.run("trace", trace, trace=True)

# %% [markdown]
# ## 4. What models pass: from the teaching kernel to attention_kernel
# The teaching kernel is flash attention; what models hand it is not what it takes. Each step below
# is one thing it cannot take, what would break, and what attention.py's attention_kernel, the kernel
# attention() runs, does instead (the parameters that adds, in brackets). The section checks the
# teaching kernel on random inputs, then runs a case of each step through both, against float64
# standard attention.
#
# ### Any layout [stride_qb ... stride_od]
# A model makes q, k and v in one projection, (batch, seq, heads, head_dim), and transposes it: a
# view whose rows lie heads x head_dim apart. The teaching kernel's addresses (head * seq * HEAD_DIM
# + row * HEAD_DIM + dim) hold for contiguous tensors only, and a copy would read and write q, k
# and v once more per call. attention_kernel takes each tensor's four strides, in elements, and
# addresses an element as b * stride_b + h * stride_h + row * stride_n + dim * stride_d.
#
# ### Grouped-query heads [H, GROUP]
# Llama 3 and Mistral give k and v fewer heads than q, GROUP query heads sharing each, so that the
# KV cache is GROUP times smaller. The teaching kernel would need k and v repeated GROUP times:
# copies of the cache that sharing was meant to save. attention_kernel reads the shared head where
# it lies: query head h reads key head h // GROUP. Its grid is one axis, the query blocks of one
# head after another (a grid's axes 1 and 2 stop at 65535 programs, which batch x heads can pass),
# so the programs that read one key head run close together and find its blocks in the L2 cache.
#
# ### Queries and keys of different lengths: the mask bottom-right [seq_q, seq_k]
# A KV cache holds seq_k keys and values, and the seq_q new queries are its last positions: query i
# is position i + seq_k - seq_q and sees the keys j <= i + seq_k - seq_q. The teaching kernel's mask,
# j <= i, aligns the diagonal top-left (as PyTorch's is_causal=True does): right where the lengths
# agree, and against a cache it would hide from every new query all but its first few keys.
# attention_kernel takes both lengths and shifts the diagonal by diag = seq_k - seq_q; a query that
# sees no key (seq_q > seq_k) gets 0.
#
# ### Head dims such as 80, and to 256 [BLOCK_D]
# tl.arange takes powers of two (and tl.dot at least 16): at head dim 80 the teaching kernel does not
# compile. The launcher pads it, BLOCK_D = 128, and the kernel loads the padding as 0 (dim_ok), where
# it adds nothing to q . k, and never stores it. At 256 a row's tiles are twice as wide: smaller
# blocks (section 6).
#
# ### Float32 inputs [INPUT_PRECISION]
# On a GPU, tl.dot multiplies float32 in TF32 by default (the tensor cores' float32 format, with a
# 10-bit mantissa): errors of about 1e-3 of each score, which the exponential turns into relative
# errors of p. The launcher asks for "ieee", full float32, when the inputs are float32. (Under the
# interpreter the dots are numpy's float32: on a CPU the table shows float32's own rounding, about
# 1e-7, for both kernels.)
#
# ### Tensors past 2**31 elements [INDEX_TYPE]
# Offsets computed in int32 wrap past 2**31 - 1 (lesson 2): 9 sequences of 65536 tokens, 32 heads
# of 128, hold more elements than that, and the last ones would be read from memory that is not
# the tensor's. The launcher makes the offsets int64 where a tensor needs it
# (common.checks.index_type), int32 elsewhere; section 12 measures what int64 costs.
#
# ### Decoding: the rows packed, the keys split (decode.py) [PACKED, share_len, stride_os, stride_ls]
# Generating text runs attention once per new token: one query per head against every cached key.
# The teaching kernel's grid gives each (batch, query head) a program whose tile of 16 rows (tl.dot's
# least) holds one real query, and every query head reads its key head again. decode.py launches
# attention_kernel PACKED, the GROUP query heads of a key head as the rows of one tile (K and V read
# once per key head), and with the keys split in shares of share_len: each program walks one share
# and writes its partial output and lse (its rows' log-sum-exp of the scores, m + log2(l) in base 2:
# Training, below) where stride_os and stride_ls say, and a second kernel,
# decode.combine_splits_kernel, merges each row's shares by their lse (flash-decoding).
#
# ### Training [lse_ptr]
# The backward needs P again. Keeping it would be the seq x seq matrix that flash attention avoids,
# and the teaching kernel keeps nothing else. attention_kernel writes one float per query row, lse
# = m + log2(l), from which the backward recomputes any tile of P (section 13).
#
# ### Speed: exp2, and masks only where they are needed (no new parameter)
# - The GPU's fast exponential is base 2 (ex2): exp(x) = exp2(x log2 e), so log2 e is folded into the
#   scale once (qk_scale = sm_scale * log2 e) and m and l live in base-2 units; the softmax is the same.
# - The softmax, not the matmuls, is the tight part. At head_dim 64 a score costs 4 x 64 = 256
#   tensor-core flops, and an H100/H200 SM does about 4096 of those per clock: 16 scores per clock,
#   while its special-function units (for exp2, log2 and reciprocals) manage 16 exp2 per clock. So
#   every instruction per score counts: the key loop runs in two stages through one helper, attend,
#   with MASKED known at compile time. First the key blocks that every row of the query block sees
#   whole, with no mask on the scores or the loads and the scale folded into one multiply-add per
#   score; then the diagonal's blocks and the ragged last one, masked. Section 5 traces the stages.
#
# attention_kernel is the teaching kernel with these steps: open attention.py beside this chapter.
# It keeps the teaching kernel's parameters (its seq becomes seq_q and seq_k), and each of the others
# comes from a step: the table's last column, the whole list.


# %%
TOLERANCE = {torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}  # relative; float32: "ieee" dots
# attention_kernel's parameters beyond the teaching kernel's, by the step that brings them
STEP_PARAMETERS = {
    "any layout": [f"stride_{t}{d}" for t in "qkvo" for d in "bhnd"],
    "grouped-query heads": ["H", "GROUP"],
    "a KV cache: two lengths": ["seq_q", "seq_k"],
    "head dim 80": ["BLOCK_D"],
    "float32 inputs": ["INPUT_PRECISION"],
    "past 2**31 elements": ["INDEX_TYPE"],
    "decoding": ["PACKED", "share_len", "stride_os", "stride_ls"],
    "training": ["lse_ptr"],
}


def outcome(fn, q, k, v, **kwargs) -> str:
    """fn's relative error against float64 standard attention, or why it refused the inputs."""
    try:
        out = fn(q, k, v, **kwargs)
    except ValueError as refusal:
        return f"refuses: {refusal}"
    return f"relative error {rel_error(out, attention_standard(q.double(), k.double(), v.double(), **kwargs)):.1e}"


def steps() -> list:
    """The teaching kernel against standard attention; then a case of each step through it and attention()."""
    rows = []
    for seq in (1, 50, 129):
        q, k, v = (torch.randn(1, 2, seq, 64, device=DEVICE, dtype=torch.float16) for _ in range(3))
        for causal in (False, True):
            exact = attention_standard(q.double(), k.double(), v.double(), causal=causal)
            err = rel_error(flash_attention(q, k, v, causal=causal), exact)
            rows.append((f"1 x 2 x {seq} x 64", causal, err, err < TOLERANCE[torch.float16]))
    teaching = print_table(rows, ["B x H x seq x head_dim", "causal", "relative error", "ok"], floatfmt=".1e",
                           title="Check: the teaching kernel against float64 standard attention, float16",
                           note="Blocks of 16 x 16; seq 50 and 129 end in a ragged block. ok: below float16's "
                                f"tolerance, {TOLERANCE[torch.float16]:g} (section 7).")

    def randn(*shape, dtype=torch.float16):
        return torch.randn(*shape, device=DEVICE, dtype=dtype)

    rows = []
    views = [randn(1, 20, 2, 16).transpose(1, 2) for _ in range(3)]  # (B, H, seq, D) views of (B, seq, H, D)
    rows.append(("any layout", "q, k, v: (1, 20, 2, 16) tensors, transposed", outcome(flash_attention, *views),
                 outcome(attention, *views)))
    grouped = randn(1, 4, 20, 16), randn(1, 1, 20, 16), randn(1, 1, 20, 16)
    rows.append(("grouped-query heads", "4 query heads, 1 key head", outcome(flash_attention, *grouped),
                 outcome(attention, *grouped)))
    q, k, v = tiny_problem()  # its last 4 queries against its 8 keys: a KV cache's new queries
    square = attention(q, k, v, causal=True)[:, :, 4:]
    cache = attention(q[:, :, 4:], k, v, causal=True)
    rows.append(("a KV cache: two lengths", "section 3's last 4 queries, its 8 keys, causal",
                 outcome(flash_attention, q[:, :, 4:], k, v, causal=True),
                 outcome(attention, q[:, :, 4:], k, v, causal=True)
                 + f", = rows 4-7 of the same causal call on all 8 queries to "
                   f"{(cache - square).abs().max().item():.0e}"))
    wide = [randn(1, 2, 20, 80) for _ in range(3)]
    rows.append(("head dim 80", "1 x 2 x 20 x 80", outcome(flash_attention, *wide), outcome(attention, *wide)))
    full = [randn(1, 2, 64, 64, dtype=torch.float32) for _ in range(3)]
    rows.append(("float32 inputs", "1 x 2 x 64 x 64, float32", outcome(flash_attention, *full),
                 outcome(attention, *full)))
    big = torch.empty(9, 32, 65536, 128, device="meta")  # shapes only: nothing allocated
    last = torch.tensor(big.numel() - 1).to(torch.int32).item()  # the last element's offset, wrapped to int32
    rows.append(("past 2**31 elements", f"9 x 32 x 65536 x 128: {big.numel():,} elements",
                 f"its last offset in int32: {last:,}", f"offsets in {checks.index_type(big)}"))
    B, H, H_KV, seq_k = 16, 32, 8, 8192  # one new token per sequence, against a cache of 8192
    q, k = torch.empty(B, H, 1, 128, device="meta"), torch.empty(B, H_KV, seq_k, 128, device="meta")
    shares = decode.choose_splits(B * H_KV, seq_k)
    rows.append(("decoding", f"{B} x {H}/{H_KV} heads, 1 query, {seq_k} keys",
                 f"k, v repeated: {B * H} programs, 1 real row of 16 each; each key head read {H // H_KV} times",
                 f"{route(q, k, k)}: {B * H_KV * shares} programs ({shares} shares per key head), {H // H_KV} "
                 "real rows each; each key head read once, then the shares merged"))
    B, H, seq = 4, 32, 4096
    rows.append(("training", f"the backward, {B} x {H} x {seq}",
                 f"P kept for it: {score_bytes(B, H, seq) / 2**30:.1f} GiB in float16",
                 f"lse kept: {B * H * seq * 4 / 2**20:.1f} MiB, one float per query row"))
    for i, row in enumerate(rows):  # the parameters each step adds, a long list abbreviated
        names = STEP_PARAMETERS[row[0]]
        rows[i] = (*row, ", ".join(names) if len(names) <= 4 else f"{names[0]} ... {names[-1]} ({len(names)})")
    table = print_table(rows, ["step", "a case models pass", "the teaching kernel (flash_attention)",
                               "attention() (attention_kernel)", "attention_kernel's parameters for it"],
                        title="What models pass: the teaching kernel and attention_kernel",
                        note="float16 unless a row says. Relative errors against float64 standard attention. On a "
                             "CPU the interpreter multiplies float32 exactly: TF32's error shows on a GPU only.")
    return [teaching, table]


# %%
chapter.run("steps", steps)

# %% [markdown]
# ### Your turn, after the steps
# grouped_heads (write grouped-query attention: k and v with fewer heads than q, no copies, through
# the tensors' own strides), merge_splits (write decode.py's merge: the partial softmaxes of a row's
# key shares, by their lse) and sliding_window (a stretch: each query sees its last W keys, the
# blocks outside the window skipped).

# %% [markdown]
# ## 5. attention_kernel traced: causal, in two stages
# Section 3's problem, causal, now inside attention_kernel. Query block 0 takes key block 0 masked
# (it holds the diagonal) and stops: key block 1 lies wholly above the diagonal. Query block 1 takes
# key block 0 in the first stage, unmasked (each of its rows sees all four keys), then key block 1
# masked, where a key after its query scores -inf. The scores, m and l print in natural units (the
# kernel's are base 2: section 4). Rows 4-7 of the output are also a KV cache's: section 4's table
# ran its last four queries alone against all eight keys, with the diagonal shifted bottom-right.


# %%
def trace_stages() -> None:
    torch.set_printoptions(precision=4, sci_mode=False)
    q, k, v = tiny_problem()
    o, _ = launch(attention_kernel, q, k, v, True, 1.0, BLOCK_M=4, BLOCK_N=4, BLOCK_D=2, TRACE=True)
    teaching = flash_attention(q, k, v, causal=True, sm_scale=1.0, BLOCK_M=4, BLOCK_N=4)
    print(f"max |difference| from the teaching kernel: {(o - teaching).abs().max().item():.1e}, from standard "
          f"attention: {(o - attention_standard(q, k, v, causal=True, sm_scale=1.0)).abs().max().item():.1e}")


# %%
chapter.run("stages", trace_stages, trace=True)

# %% [markdown]
# ## 6. The launcher, and which kernel runs
# One launch path: attention.py's launch(), `kernel[grid](...)` of the autotuned kernel, whose grid
# is a function of the block sizes it picks. The rule for the block sizes: on a GPU the autotuner
# (lesson 4) times three configurations on the first call per (lengths, head dim, causal) and keeps
# the fastest (on disk too: a second run starts with the choice made; on a GPU model the course has
# recorded, so does a first: common/tuned.py, lesson 4 section 6), except below 512 x 512 (query,
# key) pairs, where timing them costs more than it saves and the smallest runs untimed; under the
# interpreter one small configuration runs. BLOCK_M query rows share each K/V block loaded, so
# bigger is better until the registers run out (the float32 score tile and the BLOCK_M x HEAD_DIM
# accumulator live there); num_stages = 3 has the loads of the next K/V blocks issued while the
# tensor cores work on this one (software pipelining: the blocks in flight wait in shared memory);
# num_warps sets the warps (groups of 32 threads that run in lockstep: lesson 1, section 1) that
# share a program's work. A configuration that needs more shared memory than the GPU has is skipped
# by the autotuner, and the one small problems run untimed fits every GPU the course runs on
# (tests/test_gpus.py compiles them for each). The lists: attention.py's NARROW, to head dim 128,
# and WIDE, at 256, where a row's tiles are twice as wide; section 10 times the candidates.
#
# Which kernel runs is one function's choice, attention.py's route(), made on the real tensors:
# attention_kernel; for decoding, decode.py's launch of it, PACKED and the keys split, then the
# merge (section 4); on an H100 or H200, at head_dim 128 with q, k and v of one shape (no grouped
# heads), contiguous, hopper.py's Gluon kernel, which decides by
# hand what attention_kernel leaves to Triton's compiler (which warps load, which multiply, which do
# the softmax): lesson 7 says how. The backward asks route() too, when it runs: backward.py's Triton
# kernels (section 13), or on an H100 or H200 hopper.py's Gluon backward where lesson 7 timed it
# faster. While torch.compile traces, only Triton kernels run. The table is the route's own list,
# attention.py's ROUTES, with an example of each path and what route() makes of that example on
# this machine.
#
# The op has the course's one shape (lesson 1, section 5): attention() checks its inputs and asks
# route() for the path; Attention, an autograd function (torch.autograd.Function), launches it in
# its forward and keeps q, k, v, O and lse for the backward, the same whichever forward ran; its
# backward launches the backward's kernels. From attention() to a kernel a call passes three of the
# course's functions: the op, Attention.forward (or .backward) and a launcher.


# %%
def route_table():
    """attention.py's ROUTES as a table: each path, forward and backward, its condition and kernels,
    an example, and the path route() gives that example here (float16 tensors of its shape, empty)."""
    rows = []
    for direction, path, condition, kernels, (B, H, H_KV, seq_q, seq_k, D) in ROUTES:
        q = torch.empty(B, H, seq_q, D, device=DEVICE, dtype=torch.float16)
        k = torch.empty(B, H_KV, seq_k, D, device=DEVICE, dtype=torch.float16)
        rows.append((direction, path, condition, kernels, f"{B} x {H}/{H_KV} x {seq_q}/{seq_k} x {D}",
                     route(q, k, k, direction)))
    return print_table(rows, ["direction", "path", "condition", "kernels",
                              "example: B x heads q/kv x seq q/kv x head_dim", "route() here"],
                       title="attention's route: which kernel runs",
                       note="In the order route() tries them; an example float16. 'route() here': the path route() "
                            "takes for the example on this machine (the Gluon paths need an H100 or H200; the Gluon "
                            f"backward takes the head dims hopper.FASTER_BACKWARD_HEAD_DIMS = "
                            f"{hopper.FASTER_BACKWARD_HEAD_DIMS}, those where lesson 7 timed it faster).")


# %%
chapter.run("route", route_table)

# %% [markdown]
# ## 7. Correctness: against float64 standard attention
# attention(), whichever kernel its route takes. Lengths of one row, below a block and past one
# (50, 129: the masks), causal and not; then the shapes of section 4. In float16, the dtype the
# timings use; --full (RESULTS.md) and the tests check bfloat16 and float32 too, each a compile of
# every kernel again. Each dtype has its tolerance, relative to the size of the output: float16
# keeps 11 significant bits and bfloat16 8 (p is rounded to them for the second tl.dot); float32
# inputs multiply in full fp32, so only the summation order differs from float64.


# %%
def check():
    rows = []
    cases = [(1, 1, 1, 64), (2, 3, 50, 64), (1, 2, 129, 64)]  # B, H, seq, head_dim (the tests take every head_dim)
    for dtype in chapter.sizes(SIZES)["checked"]:
        for B, H, seq, D in cases:
            q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
            for causal in (False, True):
                exact = attention_standard(q.double(), k.double(), v.double(), causal=causal)
                err = rel_error(attention(q, k, v, causal=causal), exact)
                rows.append((dtype_name(dtype), f"{B} x {H} x {seq} x {D}", causal, err, err < TOLERANCE[dtype]))
    plain = print_table(rows, ["dtype", "B x H x seq x head_dim", "causal", "relative error", "ok"],
                        floatfmt=".1e", title="Check: attention against float64 standard attention",
                        note="ok: below the dtype's tolerance, relative: "
                             + ", ".join(f"{dtype_name(d)} {t:g}" for d, t in TOLERANCE.items())
                             + '. float32 inputs multiply in full fp32 ("ieee").')
    # The shapes real models pass (grouped-query heads, q and k/v of different lengths, other head
    # dims, decoding's few queries against many keys), against standard attention
    rows = []
    for dtype in chapter.sizes(SIZES)["checked"]:
        for B, H, H_KV, seq_q, seq_k, D in [(1, 4, 2, 20, 20, 64), (1, 2, 1, 7, 30, 80), (1, 1, 1, 17, 9, 256),
                                            (1, 4, 1, 2, 1100, 64)]:  # the last: decoding (decode.py)
            q = torch.randn(B, H, seq_q, D, device=DEVICE, dtype=dtype)
            k, v = (torch.randn(B, H_KV, seq_k, D, device=DEVICE, dtype=dtype) for _ in range(2))
            for causal in (False, True):
                exact = attention_standard(q.double(), k.double(), v.double(), causal=causal)
                err = rel_error(attention(q, k, v, causal=causal), exact)
                rows.append((dtype_name(dtype), f"{H} / {H_KV}", f"{seq_q} x {seq_k}", D, causal,
                             route(q, k, v), err, err < TOLERANCE[dtype]))
    shapes = print_table(rows, ["dtype", "heads q / kv", "seq q x k", "head_dim", "causal", "kernel",
                                "relative error", "ok"],
                         floatfmt=".1e", title="Check: grouped heads, two lengths, other head dims, decoding",
                         note="Causal aligned bottom-right: query i sees keys j <= i + seq_k - seq_q. 'kernel': "
                              "route()'s. Against attention_standard in float64; the same tolerances.")
    return [plain, shapes]


# %%
chapter.run("check", check)

# %% [markdown]
# ## 8. Memory, measured: each implementation's peak (tuning.py)
# Section 1's arithmetic, against what torch.cuda's allocator saw: standard attention's peak grows
# with the scores until it runs out of memory; flash attention's is o and lse, linear in the length.


# %%
chapter.run("peak", lambda: tuning.peak_memory({"standard": attention_standard, "flash": attention},
                                               chapter.sizes(SIZES)["memory"]), gpu=True)

# %% [markdown]
# ## 9. Timing: against PyTorch's scaled_dot_product_attention
# SDPA's flash backend is FlashAttention-2; its default on an H100/H200 is cuDNN's Hopper kernel,
# which, like FlashAttention-3, gives the loads to producer warps (warps that only load) and lets
# two consumer warpgroups (a warpgroup: 4 warps, which Hopper's largest matrix instruction, wgmma,
# takes together) take turns, one running its exp2s while the other's matmuls run. attention_kernel
# has no such overlap; at head_dim 128 on an H100/H200 attention() runs the Gluon kernel, which has
# it (lesson 7). The tables show where each leaves attention() against both. Then the roofline's points
# (README). Without a GPU the chapter prints the table at head_dim 64, attention_kernel's own: at
# 128 an H100/H200 runs the Gluon kernel (lesson 7), and RESULTS.md holds that table too.


# %%
def sdpa_flash(q, k, v, *, causal=False, backend="FLASH_ATTENTION"):
    """PyTorch's scaled_dot_product_attention with one backend forced: by default its flash-attention
    backend (FlashAttention-2); "CUDNN_ATTENTION" is cuDNN's. On every shape attention() takes: k and
    v's heads repeated by SDPA itself (enable_gqa), the causal mask bottom-right (causal_lower_right)
    where the lengths differ, as attention()'s."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(q.shape[-2], k.shape[-2]) if causal and q.shape[-2] != k.shape[-2] else None
    with sdpa_kernel(getattr(SDPBackend, backend)):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                              enable_gqa=k.shape[1] != q.shape[1])


TIMING_NOTE = ("'kernel µs': the GPU kernels' own time (profiler timestamps, L2 flushed between calls). "
               + bench.SIDE_BY_SIDE_NOTE + " TFLOP/s = 4 B H seq^2 head_dim (half when causal) / kernel time; "
               "'% of SDPA flash': the SDPA flash backend's time over this one's. 'attention(): ...' names the "
               "kernel attention() ran (route()). 'standard' runs where twice its float32 scores fit in 40 GiB.")


def bench_all(seqs, shapes, dtypes) -> list:
    """One table per dtype and (batch, heads, head_dim): every implementation at each seq, causal and not."""
    tables = []
    for dtype in dtypes:
        for B, H, D in shapes:
            rows = []
            for seq in seqs:
                for causal in (False, True):
                    q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
                    cases = {f"attention(): {route(q, k, v)}": lambda: attention(q, k, v, causal=causal),
                             "SDPA default": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                             "SDPA flash backend": lambda: sdpa_flash(q, k, v, causal=causal)}
                    if 2 * score_bytes(B, H, seq, torch.float32) < (40 << 30):
                        cases["standard"] = lambda: attention_standard(q, k, v, causal=causal)
                    ms = bench.side_by_side(cases)
                    flops = 4 * B * H * seq * seq * D / (2 if causal else 1)
                    for name, t in ms.items():
                        rows.append((seq, causal, name, t * 1e3, bench.tflops(flops, t),
                                     100 * ms["SDPA flash backend"] / t))
            tables.append(print_table(rows, ["seq", "causal", "implementation", "kernel µs", "TFLOP/s",
                                             "% of SDPA flash"],
                                      title=f"Timing against PyTorch's SDPA, {B} x {H} x {D}, {dtype_name(dtype)}",
                                      note=TIMING_NOTE,
                                      plot=dict(x="seq", y="TFLOP/s", series=["causal", "implementation"],
                                                ceiling=None)))
            print()
    return tables


def timing() -> list:
    sizes = chapter.sizes(SIZES)
    tables = bench_all(args.seqs or sizes["seqs"], sizes["shapes"], sizes["dtypes"])
    B, H, seq, D = 4, 16, 4096, 128  # the roofline (README): FLOPs per byte, at one size
    q, k, v = torch.randn(3, B, H, seq, D, device=DEVICE, dtype=torch.float16)
    flops, nbytes = 4 * B * H * seq * seq * D, 2 * 4 * B * H * seq * D  # two matmuls; q, k, v read, o written
    size = f"{B} x {H} x {seq} x {D} fp16"
    points = roofline.points({(f"attention(): {route(q, k, v)}", size): (lambda: attention(q, k, v), flops, nbytes),
                              ("SDPA flash backend", size): (lambda: sdpa_flash(q, k, v), flops, nbytes)})
    return [*tables, points]


# %%
chapter.run("bench", timing, gpu=True, stand_in=("x 64, float16", "Roofline"))

# %% [markdown]
# ## 10. Block sizes, side by side (tuning.py)
# The autotuner's job done by hand: every candidate configuration of the sweep (BLOCK_M, BLOCK_N,
# num_warps, num_stages) timed in turns, at seq 4096. NARROW (section 6) holds the winners. Each
# candidate compiles for each head dim and mask: the sweep runs with --full, and a default run names
# its table, which RESULTS.md holds.


# %%
chapter.run("configs", lambda: tuning.bench_configs(launch, attention_kernel), gpu=True, full=True, stand_in=())

# %% [markdown]
# ## 11. What a call costs the host (tuning.py)
# Lesson 1, section 12, takes a call's host cost apart; here: attention's, against SDPA's and the
# bare launch of the autotuned attention_kernel (the autotuner's bookkeeping, its key rebuilt from
# the arguments and the chosen configuration's settings merged in, added to Triton's launch); on an
# H100/H200 also at head_dim 128, where attention() runs the Gluon kernel, beside its bare launch.
# What attention() adds to the bare launch is Python: its input checks (dtypes, shapes, strides),
# the route, the autograd function's bookkeeping and the offsets' index type, before the same launch.


# %%
def host_cases() -> dict:  # bench.host_costs calls it in fresh processes
    return {**tuning.host_cases(attention, attention_kernel_tuned), **hopper.host_cases(attention)}


# %%
chapter.run("host", lambda: bench.host_cost_table("lesson05_flash_attention.main:host_cases", 3 if args.full else 1), gpu=True)

# %% [markdown]
# ## 12. 64-bit offsets: what they cost here (tuning.py)
# The launcher picks int32 offsets unless a tensor passes 2**31 elements (lesson 2 explains why and
# when); here the same calls with int32, then int64, side by side.


# %%
chapter.run("offsets", lambda: bench.offsets_cost(tuning.offsets_cases(launch, attention_kernel_tuned,
                                                                       chapter.sizes(SIZES)["shapes"])), gpu=True)

# %% [markdown]
# ## 13. The backward (backward.py): the tiny problem again, traced beside autograd
# Training needs dQ, dK, dV. backward.py's docstring derives them (FlashAttention-2's
# recomputation: P from q, k and the forward's lse, never stored); here its default kernels run on
# section 3's problem, causal, the loss the sum of the outputs' first column: the key blocks'
# kernel first (dK, dV), then the query blocks' (dQ, in a pass of its own as in Triton's
# tutorial), with torch's autograd of standard attention beside them. The other design, dQ by
# atomics (atomic_dq=True), is timed in section 16 and checked in tests/test_training.py.
# The backward's kernels take strides as the forward's do (section 4, "Any layout"): a model's q, k
# and v, views of one QKV projection, are read where they lie. And where a model hands attention
# that projection itself, attention_qkv(qkv, heads) (attention.py), the gradients are written
# through the same views into one d(qkv) buffer: handed q, k and v as three views, autograd would
# join their three gradients with a copy (split's backward is a torch.cat). Lesson 6's model calls it.
# (Under torch.compile it writes them contiguous and joins them: inductor mishandles a kernel that
# writes into a strided view, as AttentionQKV says.) In the trace, dS = P * (dP - Delta) shows -0.
# where the mask made P zero and dP - Delta is negative: zero, with the sign of the product.


# %%
def trace_backward() -> None:
    torch.set_printoptions(precision=4, sci_mode=False)
    q, k, v = tiny_problem()
    o, lse = launch(attention_kernel, q, k, v, True, 1.0, BLOCK_M=4, BLOCK_N=4, BLOCK_D=2)
    backward.trace(q, k, v, o, lse, attention_standard)


# %%
chapter.run("backward", trace_backward, trace=True)

# %% [markdown]
# ## 14. Training: the gradients against float64 autograd
# dQ, dK, dV through attention (its autograd function: section 6) on awkward sizes: one row,
# lengths that are not a multiple of any block, causal and not, in section 7's dtypes (more in
# tests/test_training.py).


# %%
def grad_check():
    """Gradients through attention against torch's autograd of standard attention (common.checks.grad_errors)."""
    rows = []
    for dtype in chapter.sizes(SIZES)["checked"]:
        for B, H, seq, D in [(1, 1, 1, 64), (2, 3, 50, 32)]:
            q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
            for causal in (False, True):
                errs = grad_errors(attention, attention_standard, [q, k, v], causal=causal)
                rows.append((dtype_name(dtype), f"{B} x {H} x {seq} x {D}", causal,
                             *(f"{e:.1e} ({t:.1e})" for e, t in errs), all(grad_ok(e, t) for e, t in errs)))
    return print_table(rows, ["dtype", "B x H x seq x head_dim", "causal", "dQ", "dK", "dV", "ok"],
                       title="Check: attention's gradients against float64 autograd",
                       note=GRAD_NOTE + " torch's: standard attention (section 1) in the inputs' dtype.")


# %%
chapter.run("grad", grad_check)

# %% [markdown]
# ## 15. Timing the backward against SDPA's backends (backward.py)
# Forward and backward side by side, against SDPA's FlashAttention-2 backend and cuDNN's (which on
# Hopper works in FlashAttention-3's style, section 9). The backward is the gradient call, by the
# kernels route() chooses: backward.py's on most GPUs; on an H100 or H200 at head dims 64 and 128,
# hopper.py's Gluon backward (the route, section 6; lesson 7 takes it apart). Each row names the one
# it ran. Without a GPU the chapter prints the table at head_dim 64, as in section 9.


# %%
def paths(q, k, v) -> str:
    """The kernels attention() runs on these inputs, forward and backward (route's names), for a row's label."""
    return f"{route(q, k, v)} forward, {route(q, k, v, 'backward')} backward"


def timing_backward() -> list:
    impls = {"attention()": attention, "SDPA flash backend": sdpa_flash,
             "SDPA cuDNN": functools.partial(sdpa_flash, backend="CUDNN_ATTENTION")}
    sizes = chapter.sizes(SIZES)
    return backward.bench_backward(impls, args.seqs or sizes["backward"], sizes["shapes"], kernel_of=paths)


# %%
chapter.run("bench_backward", timing_backward, gpu=True, stand_in=("x 64, float16",))

# %% [markdown]
# ## 16. The backward's two designs and their block sizes (backward.py)
# Each candidate of the backward kernels' lists, timed as the whole backward, all ranked
# together: the three-kernel default (a dQ pass of its own; a row varies one kernel, the other
# autotuned), atomic_dq=True (FlashAttention-2's dQ by atomics in the one dK/dV pass, so nothing
# else to tune) and, on Hopper, tma_dq=True (the same, each dQ tile added by one TMA request).
# backward.py's default is the three kernels: of its designs the faster where it was timed
# (RESULTS.md), and the same bits on every run. attention() runs it where the Gluon backward does
# not (section 6's route). A sweep, as section 10's: it runs with --full, and a default run names
# its table, which RESULTS.md holds.


# %%
chapter.run("configs_backward", lambda: backward.bench_configs(functools.partial(launch, attention_kernel_tuned)),
            gpu=True, full=True, stand_in=())

# %% [markdown]
# ## 17. The shapes models pass, timed against SDPA's backends (tuning.py)
# The same kernels, forward and backward, on grouped-query and multi-query heads, head dims 80, 96
# and 256, queries against a longer KV cache, and decoding (one query, and four) by decode.py's
# split keys, against SDPA's flash and cuDNN backends given the same shapes (enable_gqa, the causal
# mask bottom-right). At head dim 256 the block sizes are smaller, and the dK/dV kernel splits the
# head dim between two programs (its float32 accumulators would not fit in registers whole).
# Decoding reads every key and value once and computes little: its time is memory traffic, and the
# measure is against cuDNN's, not TFLOP/s. A quick look times two of the shapes (grouped-query
# causal, and queries against a longer KV cache); --full (RESULTS.md) times them all. Read the page
# for where each stands: SDPA's cuDNN backend, written for Hopper (section 9), is the faster on most
# shapes; against FlashAttention-2, attention()'s backward is the slower, or about level, where one
# key head serves all 32 query heads, and the slower at head dim 256. Decoding's backward is timed
# as the shape's, though no model trains on one query at a time.


# %%
chapter.run("bench_general", lambda: tuning.bench_general({
    "attention()": attention, "SDPA flash backend": sdpa_flash,
    "SDPA cuDNN": functools.partial(sdpa_flash, backend="CUDNN_ATTENTION")}, chapter.sizes(SIZES)["general"],
    kernel_of=paths), gpu=True)

# %% [markdown]
# ## 18. CS336's leaderboard shape, forward and backward (tuning.py)
# Stanford's CS336 (assignment 2) ranks FlashAttention-2 implementations in Triton by one number:
# a forward and its backward, together, at batch 1, 16 heads, seq 16384, head_dim 64, bfloat16,
# causal. The same two calls here, attention() and its gradient, beside SDPA's two backends: what a
# course kernel is worth against the libraries at the shape a class competes on.


# %%
chapter.run("leaderboard", lambda: tuning.bench_leaderboard({
    "attention()": attention, "SDPA flash backend": sdpa_flash,
    "SDPA cuDNN": functools.partial(sdpa_flash, backend="CUDNN_ATTENTION")}), gpu=True)

# %% [markdown]
# ### On Hopper: lesson 7
# On an H100 or H200, route() sends two paths to hopper.py's kernels, written in Gluon, Triton's
# lower-level language, where the programmer and not the compiler decides which warps do what: the
# forward at head_dim 128, and the backward, in FlashAttention-3's structure, at the head dims where
# it was timed faster. One warp only brings tiles by TMA; two warpgroups only compute, taking turns
# at the tensor cores; barriers in shared memory say when a tile has landed and when a slot is free.
# Lesson 7 (lesson07_hopper/main.py) takes them apart: warp specialization, the barriers and their
# phases, the register budget, the machine code, and the tables that decided the route.
