"""SPOILER: the solution of exercise 5.4 (grouped-query attention), and wrong ones the tests check the checker
with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "f905884a0194"  # common.exercise.given_fingerprint of grouped_heads.py as the course ships it


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len, H_Q, H_KV,
                     stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                     stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_on,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     INPUT_PRECISION: tl.constexpr):
    """Attention for BLOCK_M query rows of one (batch, query head); k and v have H_KV heads, q has H_Q."""
    pid_m = tl.program_id(axis=0)                       # which block of query rows
    bh = tl.program_id(axis=1)                          # which (batch, query head): B * H_Q of them
    b = bh // H_Q                                       # the batch
    h = bh % H_Q                                        # the query head
    h_kv = h // (H_Q // H_KV)                           # the head of k and v that query head h reads
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h_kv * stride_kh  # each tensor through its own strides: no copies
    v_base = v_ptr + b * stride_vb + h_kv * stride_vh
    o_base = o_ptr + b * stride_ob + h * stride_oh
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + rows[:, None] * stride_qn + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)          # the keys of this block
        kT = tl.load(k_base + cols[None, :] * stride_kn + dims[:, None], mask=cols[None, :] < seq_len, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vn + dims[None, :], mask=cols[:, None] < seq_len, other=0.0)
        s = tl.dot(q, kT, input_precision=INPUT_PRECISION) * sm_scale
        s = tl.where(cols[None, :] < seq_len, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_base + rows[:, None] * stride_on + dims[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq_len)


# The mistakes, each an edit of the solution above (common.exercise.patched)
H_KV = "h_kv = h // (H_Q // H_KV)"
WRONG = [Wrong("h % H_KV: heads interleaved", "values", "are wrong",
               dict(attention_kernel=patched(attention_kernel, (H_KV, "h_kv = h % H_KV")))),
         Wrong("k and v at the query's head", "memory", "past the end of k",
               dict(attention_kernel=patched(attention_kernel, (H_KV, "h_kv = h")))),
         Wrong("a group of 2 written in", "memory", "case 'multi-query",
               dict(attention_kernel=patched(attention_kernel, (H_KV, "h_kv = h // 2")))),
         Wrong("q's strides for k and v", "memory", "past the end of k",
               dict(attention_kernel=patched(attention_kernel,
                                             ("stride_kb + h_kv * stride_kh", "stride_qb + h_kv * stride_qh"),
                                             ("stride_vb + h_kv * stride_vh", "stride_qb + h_kv * stride_qh"))))]
