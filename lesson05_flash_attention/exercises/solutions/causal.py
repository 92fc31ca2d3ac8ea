"""SPOILER: the solution of exercise 5.2 (causal attention, the blocks above the diagonal skipped), and wrong
ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "09327a3e93df"  # common.exercise.given_fingerprint of causal.py as the course ships it


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
    end = tl.minimum((pid_m + 1) * BLOCK_M, seq_len)    # the block's last row + 1: no key block above
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)          # the keys of this block
        kT = tl.load(k_ptr + base + cols[None, :] * HEAD_DIM + dims[:, None], mask=cols[None, :] < seq_len,
                     other=0.0)                         # [HEAD_DIM, BLOCK_N]
        v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=cols[:, None] < seq_len,
                    other=0.0)                          # [BLOCK_N, HEAD_DIM]
        s = tl.dot(q, kT, input_precision=INPUT_PRECISION) * sm_scale
        keep = (cols[None, :] < seq_len) & (cols[None, :] <= rows[:, None])  # query i sees key j <= i
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


# The mistakes, each an edit of the solution above (common.exercise.patched)
END = "end = tl.minimum((pid_m + 1) * BLOCK_M, seq_len)"
CAUSAL = "(cols[None, :] <= rows[:, None])"
WRONG = [Wrong("every key block, masked", "budget", "wholly above the diagonal",
               dict(attention_kernel=patched(attention_kernel, (END, "end = seq_len")))),
         Wrong("masked with <", "values", "are wrong",
               dict(attention_kernel=patched(attention_kernel, (CAUSAL, "(cols[None, :] < rows[:, None])")))),
         Wrong("the loop ends by BLOCK_N", "values", "case 'query blocks of 32",
               dict(attention_kernel=patched(attention_kernel, ("(pid_m + 1) * BLOCK_M", "(pid_m + 1) * BLOCK_N")))),
         Wrong("the diagonal block skipped", "values", "are wrong",
               dict(attention_kernel=patched(attention_kernel, (END, "end = pid_m * BLOCK_M")))),
         Wrong("the loop cut, no causal mask", "values", "are wrong",
               dict(attention_kernel=patched(attention_kernel, (" & " + CAUSAL, ""))))]
