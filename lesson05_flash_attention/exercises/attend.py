"""Exercise 5.1 (write): the online-softmax update, inside a kernel that walks the key blocks.

The statement. q, k, v are (batch, heads, seq, HEAD_DIM) tensors, contiguous, float32 or float16,
HEAD_DIM 16; sm_scale a positive float. o = softmax(q k^T * sm_scale) v, row by row, in o's shape
and dtype. The kernel below is given, but for its heart: one program owns BLOCK_M query rows of
one (batch, head), loads them once, and walks the keys BLOCK_N at a time; for each key block it
hands you s, the [BLOCK_M, BLOCK_N] tile of scores (natural units, sm_scale applied, -inf for keys
past the end), and v, the block's [BLOCK_N, HEAD_DIM] values. Write lesson 5 section 2 (and the
core of the lesson's `attend`), per query row, in float32:
- before the loop: the running max m_i = -inf, the running sum l_i = 0, the accumulator acc = 0
  ([BLOCK_M, HEAD_DIM]);
- for each block: m_new = max(m_i, the row's max of s); alpha = exp(m_i - m_new); p = exp(s - m_new);
  l_i = l_i * alpha + the row's sum of p; acc = acc * alpha + p @ v; m_i = m_new;
- after the loop: out = acc / l_i.
Use tl.dot for p @ v, with p cast to v's dtype and input_precision=INPUT_PRECISION (the launcher
makes it "ieee" for float32 inputs: TF32 would round p to 10 bits on a GPU). tl.exp, or tl.exp2
with the scores times log2(e) as the lesson does: either passes. About 10 lines.

The cases: one key block (seq 16, and seq 1: fifteen of the sixteen keys past the end); several,
the last ragged (seq 100 in blocks of 16: 7 blocks, the last of 4 keys), with a trend along the
keys so that the max grows from block to block (forget to rescale by alpha and it shows); blocks
of 32 x 16 and 16 x 32 (a [BLOCK_M] row vector broadcast against a [BLOCK_M, HEAD_DIM] tile without
[:, None] cannot hide when BLOCK_M is not HEAD_DIM); scores of 100 to 350 (exp of them overflows
float32: the max must be subtracted); scores all below -190 (exp of them is 0 in float32, below
its smallest denormal, so a max that starts at 0 instead of -inf divides 0 by 0); float16 inputs,
two batches.

Run it: python lesson05_flash_attention/exercises/attend.py   (--hint for a hint, --solution for ours)
"""
import math

import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     INPUT_PRECISION: tl.constexpr):
    """o = softmax(q k^T * sm_scale) v for BLOCK_M query rows of one (batch, head)."""
    pid_m = tl.program_id(axis=0)                       # which block of query rows
    bh = tl.program_id(axis=1)                          # which (batch, head)
    base = bh * seq_len * HEAD_DIM                      # q, k, v, o: contiguous (B, H, seq, HEAD_DIM)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)

    # (yours) the running max m_i, the running sum l_i, the accumulator acc: float32

    for start_n in range(0, seq_len, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)          # the keys of this block
        kT = tl.load(k_ptr + base + cols[None, :] * HEAD_DIM + dims[:, None], mask=cols[None, :] < seq_len,
                     other=0.0)                         # [HEAD_DIM, BLOCK_N]
        v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=cols[:, None] < seq_len,
                    other=0.0)                          # [BLOCK_N, HEAD_DIM]
        s = tl.dot(q, kT, input_precision=INPUT_PRECISION) * sm_scale
        s = tl.where(cols[None, :] < seq_len, s, float("-inf"))  # [BLOCK_M, BLOCK_N]: the scores

        # (yours) fold s and v into m_i, l_i and acc

    out = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # (yours) replace: the output, from acc and l_i
    tl.store(o_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq_len)


def launch(attention_kernel, q, k, v, o, sm_scale, BLOCK_M=16, BLOCK_N=16):
    """Given: one program per BLOCK_M query rows (axis 0) per (batch, head) (axis 1)."""
    B, H, seq, D = q.shape
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    attention_kernel[(cdiv(seq, BLOCK_M), B * H)](q, k, v, o, sm_scale, seq, HEAD_DIM=D, BLOCK_M=BLOCK_M,
                                                  BLOCK_N=BLOCK_N, INPUT_PRECISION=precision)


def reference(q, k, v, sm_scale):
    """Standard attention (lesson 5 section 1): the scores in float32 at least, p in the inputs' dtype."""
    s = (q @ k.transpose(-2, -1)).to(torch.promote_types(q.dtype, torch.float32)) * sm_scale
    return {"o": torch.softmax(s, dim=-1).to(q.dtype) @ v}


def case(name: str, B: int, H: int, seq: int, BLOCK_M: int = 16, BLOCK_N: int = 16, scores: str = "normal",
         dtype=torch.float32, D: int = 16) -> Case:
    g = torch.Generator().manual_seed(seq * 31 + B * 7 + H)
    q, k, v = (torch.randn(B, H, seq, D, generator=g) for _ in range(3))
    sm_scale = 1 / math.sqrt(D)
    if scores == "normal":  # a trend along the keys: the row max grows from block to block
        k = k + torch.linspace(0, 3, seq)[:, None] * q.mean(dim=2, keepdim=True).sign()
    elif scores == "large":  # q . k from about 100 to 350: exp overflows float32 past 88.7
        q, k, sm_scale = q.abs() + 2, k.abs() + 2, 1.0
        k = k * torch.linspace(1, 2, seq)[:, None]
    elif scores == "negative":  # every score below -190: exp of them is 0 in float32
        q, k, sm_scale = q.abs() + 3, -(k.abs() + 3), 1.0
    return Case(f"{name}: {B} x {H} x seq {seq}, blocks {BLOCK_M} x {BLOCK_N}, {str(dtype)[6:]}",
                dict(q=q.to(dtype), k=k.to(dtype), v=v.to(dtype), sm_scale=sm_scale),
                dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N))


EXERCISE = Exercise(
    lesson="lesson05_flash_attention", name="attend", kind="write", parts=("attention_kernel",),
    stub="eac81af4cc65", launch=launch, reference=reference, lines=10,
    cases=[case("one key block", 1, 1, 16), case("one key", 1, 1, 1),
           case("several key blocks, the last ragged", 1, 2, 100),
           case("query blocks of 32", 1, 1, 70, BLOCK_M=32),
           case("key blocks of 32", 2, 1, 45, BLOCK_N=32),
           case("large scores", 1, 1, 50, scores="large"),
           case("all scores negative", 1, 1, 40, scores="negative"),
           case("float16", 2, 1, 77, dtype=torch.float16)],
    bench_case=lambda: case("bench", 2, 8, 4096, BLOCK_M=64, BLOCK_N=64, dtype=torch.float16, D=64),
    hints=["Each query row keeps three things across the key blocks: the largest score seen so far (m_i), "
           "the sum of exp(score - m_i) so far (l_i), and the sum of exp(score - m_i) * v so far (acc). When a "
           "block raises the max, what was summed against the old max is too big by exp(m_new - m_i): multiply "
           "BOTH l_i and acc by alpha = exp(m_i - m_new). On the first block m_i = -inf makes alpha 0.",
           "Before the loop: m_i = tl.full([BLOCK_M], float('-inf'), tl.float32), l_i = tl.zeros([BLOCK_M], "
           "dtype=tl.float32), acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32). A per-row vector meets a "
           "tile as m_new[:, None] or alpha[:, None].",
           "Per key block, in this order: the new running max from the old one and the block's; alpha, what the "
           "old max turns into under the new one; p, the block's exp against the new max; then l_i and acc each "
           "rescaled by alpha before the block's share is added (tl.dot takes acc as its accumulator). Which "
           "division is left for after the loop?"],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
