"""Exercise 5.6 (stretch, write to a budget): sliding-window attention, the blocks outside the window never read.

The statement. Mistral, Gemma and others let each query see only the last WINDOW keys: query i sees
the keys j with i - WINDOW < j <= i (WINDOW = 1: itself alone; WINDOW >= seq: causal attention).
q, k, v are (batch, heads, seq, HEAD_DIM) tensors, contiguous, float32 or float16, HEAD_DIM 16;
o = softmax(q k^T * sm_scale + M) v with M[i, j] = 0 inside the window and -inf outside. The cost
should grow as seq x WINDOW, not seq^2: a program must read only the key blocks that hold a key
some row of it may see. Rows pid_m * BLOCK_M .. (pid_m + 1) * BLOCK_M - 1 see keys from the first
row's window start to the last row, so the loop starts at the key block holding the first row's
first key and ends where exercise 5.2 ended it. The kernel below is the non-causal one again; set
its loop's start and end and its mask (three lines), and then make it survive what a window does
to the online softmax that causal attention never did: run it, and read what the checker says.
The budget is checked as in 5.2: a program that loads a key block wholly outside the windows of
all its rows fails, even with the right values. About 5 lines.

The cases: WINDOW 1, 20, 37 and 200 (past seq: plain causal); seq 1, 45, 70 and 100; blocks of
16 x 16, 32 x 16 and 16 x 32; float16 inputs, two batches.

Run it: python lesson05_flash_attention/exercises/sliding_window.py   (--hint for a hint, --solution for ours)
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
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len, WINDOW,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     INPUT_PRECISION: tl.constexpr):
    """Sliding-window attention for BLOCK_M query rows of one (batch, head): query i sees keys i - WINDOW + 1..i."""
    pid_m = tl.program_id(axis=0)                       # which block of query rows
    bh = tl.program_id(axis=1)                          # which (batch, head)
    base = bh * seq_len * HEAD_DIM                      # q, k, v, o: contiguous (B, H, seq, HEAD_DIM)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    start = 0                                           # (yours) the first key block any row here needs
    end = seq_len                                       # (yours) and where the needed keys end
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)          # the keys of this block
        kT = tl.load(k_ptr + base + cols[None, :] * HEAD_DIM + dims[:, None], mask=cols[None, :] < seq_len,
                     other=0.0)                         # [HEAD_DIM, BLOCK_N]
        v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=cols[:, None] < seq_len,
                    other=0.0)                          # [BLOCK_N, HEAD_DIM]
        s = tl.dot(q, kT, input_precision=INPUT_PRECISION) * sm_scale
        keep = cols[None, :] < seq_len                  # (yours) and the window
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


def launch(attention_kernel, q, k, v, o, sm_scale, WINDOW, BLOCK_M, BLOCK_N):
    """Given: one program per BLOCK_M query rows (axis 0) per (batch, head) (axis 1)."""
    B, H, seq, D = q.shape
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    attention_kernel[(cdiv(seq, BLOCK_M), B * H)](q, k, v, o, sm_scale, seq, WINDOW, HEAD_DIM=D, BLOCK_M=BLOCK_M,
                                                  BLOCK_N=BLOCK_N, INPUT_PRECISION=precision)


def reference(q, k, v, sm_scale, WINDOW, BLOCK_M, BLOCK_N):
    """Standard attention with the window's mask: the scores in float32 at least, p in the inputs' dtype."""
    i = torch.arange(q.shape[-2], device=q.device)
    outside = (i[None, :] > i[:, None]) | (i[None, :] <= i[:, None] - WINDOW)
    s = (q @ k.transpose(-2, -1)).to(torch.promote_types(q.dtype, torch.float32)) * sm_scale
    return {"o": torch.softmax(s.masked_fill(outside, float("-inf")), dim=-1).to(q.dtype) @ v}


def budget_check(log, q, k, v, sm_scale, WINDOW, BLOCK_M, BLOCK_N):
    """No program loads a key block (of k or of v) that holds no key in the window of any of its rows."""
    B, H, seq, D = q.shape

    def needed(pid_m):  # the key blocks from the first row's first key to the last row
        first_row, last_row = pid_m * BLOCK_M, min((pid_m + 1) * BLOCK_M, seq) - 1
        return range(max(first_row - WINDOW + 1, 0) // BLOCK_N, last_row // BLOCK_N + 1)

    enough = B * H * sum(len(needed(m)) for m in range(cdiv(seq, BLOCK_M)))
    for name in ("k", "v"):
        read, first, advice = 0, None, ""
        for program, indices in sorted(log.elements("load", name).items()):
            pid_m, bh = program[0], program[1]
            keys = np.unique((indices // D) % seq)
            blocks = np.unique(keys // BLOCK_N)
            read += blocks.size
            outside = [int(n) for n in blocks if n not in needed(pid_m)]
            if outside and first is None:
                n, need, last_row = outside[0], needed(pid_m), min((pid_m + 1) * BLOCK_M, seq) - 1
                there = keys[keys // BLOCK_N == n]
                where = "above the diagonal" if n > need[-1] else "before the window of its first row"
                advice = ("End the loop where the query block ends, and start it on a multiple of BLOCK_N (else its "
                          "last block runs past the diagonal)." if n > need[-1] else
                          "Start the loop at the key block holding the first row's first key.")
                first = (f"program ({pid_m}, {bh}), the queries {pid_m * BLOCK_M}..{last_row}, loads {name} at keys "
                         f"{there[0]}..{there[-1]}, in key block {n} (keys {n * BLOCK_N}.."
                         f"{min((n + 1) * BLOCK_N, seq) - 1}), which is wholly outside the windows of its rows "
                         f"({where}; they need key blocks {need[0]}..{need[-1]})")
        if first:
            return (f"{first}: blocks outside the window are never read (this run read {read} key blocks of {name} "
                    f"where {enough} suffice). {advice}")
    return None


def case(name: str, B: int, H: int, seq: int, WINDOW: int, BLOCK_M: int = 16, BLOCK_N: int = 16,
         dtype=torch.float32, D: int = 16) -> Case:
    g = torch.Generator().manual_seed(seq * 11 + WINDOW * 3 + B)
    q, k, v = (torch.randn(B, H, seq, D, generator=g) for _ in range(3))
    return Case(f"{name}: {B} x {H} x seq {seq}, WINDOW {WINDOW}, blocks {BLOCK_M} x {BLOCK_N}, {str(dtype)[6:]}",
                dict(q=q.to(dtype), k=k.to(dtype), v=v.to(dtype), sm_scale=1 / math.sqrt(D), WINDOW=WINDOW,
                     BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N))


EXERCISE = Exercise(
    lesson="lesson05_flash_attention", name="sliding_window", kind="write", parts=("attention_kernel",),
    stub="faa700f24edb", launch=launch, reference=reference, lines=5, budget_check=budget_check, stretch=True,
    cases=[case("one key", 1, 1, 1, 20), case("a window of 1", 1, 1, 45, 1),
           case("a window of 20", 1, 2, 100, 20), case("a window of 37, query blocks of 32", 1, 1, 70, 37, BLOCK_M=32),
           case("a window of 20, key blocks of 32", 1, 1, 100, 20, BLOCK_N=32),
           case("a window past seq: causal", 1, 1, 45, 200),
           case("float16", 2, 1, 70, 37, dtype=torch.float16)],
    bench_case=lambda: case("bench", 1, 8, 8192, 1024, BLOCK_M=64, BLOCK_N=64, dtype=torch.float16, D=64),
    hints=["The first row of the program, pid_m * BLOCK_M, sees keys from pid_m * BLOCK_M - WINDOW + 1 (or 0); the "
           "loop starts at the block holding that key: round it down to a multiple of BLOCK_N. It ends as in 5.2, "
           "and the mask adds one comparison to 5.2's.",
           "A row whose window starts late meets whole key blocks of -inf before its first key: then m_i and m_new "
           "are both -inf, and exp(-inf - (-inf)) is exp(nan). Causal attention never has such a row (key 0 is in "
           "every row's first block). In the two exponentials, use a max that is never -inf: 0 where m_new is -inf "
           "(l_i and acc are still 0 there, so nothing is lost).",
           "start = (tl.maximum(pid_m * BLOCK_M - WINDOW + 1, 0) // BLOCK_N) * BLOCK_N; end = tl.minimum((pid_m + 1) "
           "* BLOCK_M, seq_len); keep = (cols[None, :] < seq_len) & (cols[None, :] <= rows[:, None]) & "
           "(cols[None, :] > rows[:, None] - WINDOW); then m_use = tl.where(m_new == float('-inf'), 0.0, m_new) in "
           "both tl.exp calls."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
