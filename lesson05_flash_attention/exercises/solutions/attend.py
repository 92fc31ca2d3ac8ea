"""SPOILER: the solution of exercise 5.1 (the online-softmax update, attend), and wrong ones the tests check the
checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "6138b0658678"  # common.exercise.given_fingerprint of attend.py as the course ships it


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     INPUT_PRECISION: tl.constexpr):
    """o = softmax(q k^T * sm_scale) v for BLOCK_M query rows of one (batch, head)."""
    pid_m = tl.program_id(axis=0)
    bh = tl.program_id(axis=1)
    base = bh * seq_len * HEAD_DIM
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        kT = tl.load(k_ptr + base + cols[None, :] * HEAD_DIM + dims[:, None], mask=cols[None, :] < seq_len,
                     other=0.0)
        v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=cols[:, None] < seq_len,
                    other=0.0)
        s = tl.dot(q, kT, input_precision=INPUT_PRECISION) * sm_scale
        s = tl.where(cols[None, :] < seq_len, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))      # the running max, per row
        alpha = tl.exp(m_i - m_new)                     # how much the old max overstated (0 on block 0)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)  # acc*alpha + p@v
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq_len)


# The mistakes, each an edit of the solution above (common.exercise.patched)
RESCALED = "acc * alpha[:, None]"
L_RESCALED = "l_i = l_i * alpha +"
WRONG = [Wrong("l_i rescaled, acc not", "values", "are wrong",
               dict(attention_kernel=patched(attention_kernel, (RESCALED, "acc")))),
         Wrong("nothing rescaled", "values", "are wrong",
               dict(attention_kernel=patched(attention_kernel, (L_RESCALED, "l_i = l_i +"), (RESCALED, "acc")))),
         Wrong("the max starts at 0", "values", "case 'all scores negative",
               dict(attention_kernel=patched(attention_kernel, ('m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)',
                                                                "m_i = tl.zeros([BLOCK_M], dtype=tl.float32)")))),
         Wrong("no max subtracted", "values", "case 'large scores",
               dict(attention_kernel=patched(attention_kernel, ("p = tl.exp(s - m_new[:, None])", "p = tl.exp(s)"),
                                             (L_RESCALED, "l_i = l_i +"), (RESCALED, "acc")))),
         Wrong("alpha without [:, None]", "runs", "make a column with [:, None]",
               dict(attention_kernel=patched(attention_kernel, (RESCALED, "acc * alpha")))),
         Wrong("not divided by l", "values", "are wrong",
               dict(attention_kernel=patched(attention_kernel, ("out = acc / l_i[:, None]", "out = acc")))),
         # the interpreter runs it (its first update makes acc float32); compiled, acc must keep one type
         Wrong("a float16 accumulator", "runs", "changes type in the loop (a float16 accumulator",
               dict(attention_kernel=patched(attention_kernel, ("acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)",
                                                                "acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=q.dtype)"))),
               compiles=False)]
