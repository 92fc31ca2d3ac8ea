"""Exercise 5.2 (write, to a budget): causal attention, the key blocks above the diagonal never read.

The statement. q, k, v are (batch, heads, seq, HEAD_DIM) tensors, contiguous, float32 or float16,
HEAD_DIM 16. Causal attention: query i sees keys 0..i only, o = softmax(q k^T * sm_scale + M) v
with M[i, j] = -inf where j > i. The kernel below is lesson 5's forward in one stage, without the
causal part (exercise 5.1's answer is in it: do that one first): it walks every key block and masks
only the keys past the end. Make it causal, in two places:
- the mask: a key j counts for query row i when j <= i (and j < seq_len, as now);
- the loop's end: program pid_m owns the query rows pid_m * BLOCK_M .. (pid_m + 1) * BLOCK_M - 1,
  so a key block whose first key comes after the block's last row is wholly above the diagonal:
  every score in it would be masked. Such blocks must not be loaded at all (the lesson's section
  3: "about half the work"). The loop ends where the query block ends, or at seq_len.
Two lines to change. The budget is checked: every element load of k and v is recorded under the
interpreter, and a program that loads any key block wholly above its diagonal fails, even if its
values are right.

The cases: seq 1 and 16 (one block), 100 in blocks of 16 (7 query blocks reading 1 to 7 key blocks,
the last ragged), two heads; blocks of 32 queries by 16 keys (the diagonal crosses two key blocks)
and of 16 by 32 (a key block reaching past the diagonal must be read: part of it is below); float16
inputs, two batches. (A check by hand: query 0 sees key 0 alone, so row 0 of o is row 0 of v.)

Run it: python lesson05_flash_attention/exercises/causal.py   (--hint for a hint, --solution for ours)
"""
import math

import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import numpy as np
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     INPUT_PRECISION: tl.constexpr):
    """Causal attention for BLOCK_M query rows of one (batch, head): query i sees keys 0..i."""
    pid_m = tl.program_id(axis=0)                       # which block of query rows
    bh = tl.program_id(axis=1)                          # which (batch, head)
    base = bh * seq_len * HEAD_DIM                      # q, k, v, o: contiguous (B, H, seq, HEAD_DIM)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    end = seq_len                                       # (yours) where this query block's keys end
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)          # the keys of this block
        kT = tl.load(k_ptr + base + cols[None, :] * HEAD_DIM + dims[:, None], mask=cols[None, :] < seq_len,
                     other=0.0)                         # [HEAD_DIM, BLOCK_N]
        v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=cols[:, None] < seq_len,
                    other=0.0)                          # [BLOCK_N, HEAD_DIM]
        s = tl.dot(q, kT, input_precision=INPUT_PRECISION) * sm_scale
        keep = cols[None, :] < seq_len                  # (yours) and the causal mask
        s = tl.where(keep, s, float("-inf"))            # [BLOCK_M, BLOCK_N]: the scores
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq_len)


def launch(attention_kernel, q, k, v, o, sm_scale, BLOCK_M, BLOCK_N):
    """Given: one program per BLOCK_M query rows (axis 0) per (batch, head) (axis 1)."""
    B, H, seq, D = q.shape
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    attention_kernel[(cdiv(seq, BLOCK_M), B * H)](q, k, v, o, sm_scale, seq, HEAD_DIM=D, BLOCK_M=BLOCK_M,
                                                  BLOCK_N=BLOCK_N, INPUT_PRECISION=precision)


def reference(q, k, v, sm_scale, BLOCK_M, BLOCK_N):
    """Standard causal attention (lesson 5 section 1): the scores in float32 at least, p in the inputs' dtype."""
    seq = q.shape[-2]
    s = (q @ k.transpose(-2, -1)).to(torch.promote_types(q.dtype, torch.float32)) * sm_scale
    s = s.masked_fill(torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return {"o": torch.softmax(s, dim=-1).to(q.dtype) @ v}


def budget_check(log, q, k, v, sm_scale, BLOCK_M, BLOCK_N):
    """No program loads a key block (of k or of v) whose first key comes after its last query row."""
    B, H, seq, D = q.shape
    needed = B * H * sum(cdiv(min((m + 1) * BLOCK_M, seq), BLOCK_N) for m in range(cdiv(seq, BLOCK_M)))
    for name in ("k", "v"):
        read, first = 0, None
        for program, indices in sorted(log.elements("load", name).items()):
            pid_m, bh = program[0], program[1]
            last_row = min((pid_m + 1) * BLOCK_M, seq) - 1
            blocks = np.unique((indices // D) % seq // BLOCK_N)
            read += blocks.size
            above = blocks[blocks * BLOCK_N > last_row]
            if above.size and first is None:
                n = int(above[0])
                first = (f"program ({pid_m}, {bh}), the queries {pid_m * BLOCK_M}..{last_row}, loads {name} of key "
                         f"block {n} (keys {n * BLOCK_N}..{min((n + 1) * BLOCK_N, seq) - 1}), wholly above the "
                         "diagonal")
        if first:
            return (f"{first}: key blocks above the diagonal are never read, their scores would all be masked "
                    f"(this run read {read} key blocks of {name} where {needed} suffice). End the loop where the "
                    "query block ends.")
    return None


def case(name: str, B: int, H: int, seq: int, BLOCK_M: int = 16, BLOCK_N: int = 16, dtype=torch.float32,
         D: int = 16) -> Case:
    g = torch.Generator().manual_seed(seq * 17 + B * 5 + H)
    q, k, v = (torch.randn(B, H, seq, D, generator=g) for _ in range(3))
    return Case(f"{name}: {B} x {H} x seq {seq}, blocks {BLOCK_M} x {BLOCK_N}, {str(dtype)[6:]}",
                dict(q=q.to(dtype), k=k.to(dtype), v=v.to(dtype), sm_scale=1 / math.sqrt(D), BLOCK_M=BLOCK_M,
                     BLOCK_N=BLOCK_N))


EXERCISE = Exercise(
    lesson="lesson05_flash_attention", name="causal", kind="write", parts=("attention_kernel",),
    stub="6af25f4d1f1e", launch=launch, reference=reference, lines=2, budget_check=budget_check,
    cases=[case("one key", 1, 1, 1), case("one block", 1, 1, 16),
           case("several blocks, the last ragged", 1, 2, 100),
           case("query blocks of 32", 1, 1, 70, BLOCK_M=32),
           case("key blocks of 32", 2, 1, 45, BLOCK_N=32),
           case("float16", 2, 1, 77, dtype=torch.float16)],
    bench_case=lambda: case("bench", 2, 8, 4096, BLOCK_M=64, BLOCK_N=64, dtype=torch.float16, D=64),
    hints=["Two questions: which keys may query row i see (the mask, per score), and which key blocks can hold "
           "any key that some row of this program may see (the loop, per block)?",
           "The last row of program pid_m is (pid_m + 1) * BLOCK_M - 1, and no row sees a key past it: a key block "
           "starting at or after (pid_m + 1) * BLOCK_M is all -inf. The loop may stop there, or at seq_len if that "
           "comes first. The mask compares columns with rows: cols[None, :] against rows[:, None].",
           "Two conditions make a score visible: its key exists (a column below seq_len) and it is not in the "
           "future of its query (a column at most its row). The loop's end is the smaller of two numbers: which?"],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
