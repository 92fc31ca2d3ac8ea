"""SPOILER: the solution of exercise 5.6 (sliding-window attention), and wrong ones the tests check the checker
with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "83992b135fd6"  # common.exercise.given_fingerprint of sliding_window.py as the course ships it


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
    start = (tl.maximum(pid_m * BLOCK_M - WINDOW + 1, 0) // BLOCK_N) * BLOCK_N  # the first row's first key's block
    end = tl.minimum((pid_m + 1) * BLOCK_M, seq_len)    # after the last row: nothing above the diagonal
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)          # the keys of this block
        kT = tl.load(k_ptr + base + cols[None, :] * HEAD_DIM + dims[:, None], mask=cols[None, :] < seq_len,
                     other=0.0)                         # [HEAD_DIM, BLOCK_N]
        v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=cols[:, None] < seq_len,
                    other=0.0)                          # [BLOCK_N, HEAD_DIM]
        s = tl.dot(q, kT, input_precision=INPUT_PRECISION) * sm_scale
        keep = (cols[None, :] < seq_len) & (cols[None, :] <= rows[:, None])  # causal,
        keep = keep & (cols[None, :] > rows[:, None] - WINDOW)  # and no further back than WINDOW keys
        s = tl.where(keep, s, float("-inf"))            # [BLOCK_M, BLOCK_N]: the scores
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: all its scores -inf
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq_len)


# The mistakes, each an edit of the solution above (common.exercise.patched)
START = "start = (tl.maximum(pid_m * BLOCK_M - WINDOW + 1, 0) // BLOCK_N) * BLOCK_N"
END = "tl.minimum((pid_m + 1) * BLOCK_M, seq_len)"  # the solution's end: after the last row
WRONG = [Wrong("every causal block, masked", "budget", "wholly outside the windows",
               dict(attention_kernel=patched(attention_kernel, (START, "start = 0")))),
         Wrong("WINDOW + 1 keys", "values", "are wrong",
               dict(attention_kernel=patched(attention_kernel, ("cols[None, :] > rows[:, None] - WINDOW",
                                                                "cols[None, :] >= rows[:, None] - WINDOW")))),
         Wrong("a row of -inf: nan", "values", "= nan",
               dict(attention_kernel=patched(attention_kernel, ('m_use = tl.where(m_new == float("-inf"), 0.0, m_new)',
                                                                "m_use = m_new")))),
         Wrong("the window of the last row", "values", "are wrong",
               dict(attention_kernel=patched(attention_kernel, ("pid_m * BLOCK_M - WINDOW + 1", END + " - WINDOW"))))]
