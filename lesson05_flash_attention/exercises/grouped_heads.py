"""Exercise 5.4 (write): grouped-query attention, the heads of k and v shared, never copied.

The statement. Llama 3, Mistral and most recent models give k and v fewer heads than q: q is
(batch, H_Q, seq, HEAD_DIM), k and v are (batch, H_KV, seq, HEAD_DIM), H_Q a multiple of H_KV,
and the H_Q // H_KV query heads of one group share one head of k and v: query head h reads head
h // (H_Q // H_KV) of k and v (H_KV = 1 is multi-query attention, H_KV = H_Q the ordinary kind). The
point is memory: the KV cache, and the bytes read from it, shrink by the group's size. So no
copies: torch's reference below repeats k and v H_Q // H_KV times (repeat_interleave), and the
kernel must not; it reads the shared head where it lies.

The kernel below is lesson 5's forward, not causal, with its pointers given for batch 0, head 0
of everything. Program (pid_m, bh) owns BLOCK_M query rows of batch bh // H_Q, query head
bh % H_Q. Write the four bases: q_base and o_base at this program's batch and query head, k_base
and v_base at its batch and the head of k and v its query head reads, each through the tensor's
own strides (in elements; the last dimension's stride is 1). The tensors may be views: in real
models q, k and v come out of one projection as (batch, seq, heads, HEAD_DIM) and are transposed,
so their strides are not those of contiguous tensors, and k's differ from q's. About 6 lines.

The cases: H_Q = H_KV = 2; H_Q = 4 with H_KV = 2 and with H_KV = 1 (multi-query), batches of 2;
groups of 3 (H_Q = 6, H_KV = 2: a group size written in as 2 shows); seq 1; and the (batch, seq,
heads, HEAD_DIM) views, float16. Sequence lengths 1 to 50, blocks of 16 (the last ragged).

Run it: python lesson05_flash_attention/exercises/grouped_heads.py   (--hint for a hint, --solution for ours)
"""
import math

import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len, H_Q, H_KV,
                     stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                     stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_on,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     INPUT_PRECISION: tl.constexpr):
    """Attention for BLOCK_M query rows of one (batch, query head); k and v have H_KV heads, q has H_Q."""
    pid_m = tl.program_id(axis=0)                       # which block of query rows
    bh = tl.program_id(axis=1)                          # which (batch, query head): B * H_Q of them
    # (yours) the batch, the query head, the head of k and v it reads, and the four bases
    q_base = q_ptr
    k_base = k_ptr
    v_base = v_ptr
    o_base = o_ptr
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


def launch(attention_kernel, q, k, v, o, sm_scale, BLOCK_M=16, BLOCK_N=16):
    """Given: one program per BLOCK_M query rows (axis 0) per (batch, query head) (axis 1); k and v as
    they are, with their own strides."""
    B, H_Q, seq, D = q.shape
    H_KV = k.shape[1]
    assert H_Q % H_KV == 0 and all(t.stride(-1) == 1 for t in (q, k, v, o))
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    attention_kernel[(cdiv(seq, BLOCK_M), B * H_Q)](
        q, k, v, o, sm_scale, seq, H_Q, H_KV, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
        HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, INPUT_PRECISION=precision)


def reference(q, k, v, sm_scale):
    """Standard attention with k and v repeated to H_Q heads (the copies the kernel must not make)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-2, -1)).to(torch.promote_types(q.dtype, torch.float32)) * sm_scale
    return {"o": torch.softmax(s, dim=-1).to(q.dtype) @ v}


def case(name: str, B: int, H_Q: int, H_KV: int, seq: int, views: bool = False, dtype=torch.float32,
         D: int = 16, BLOCK_M: int = 16, BLOCK_N: int = 16) -> Case:
    g = torch.Generator().manual_seed(seq * 13 + H_Q * 3 + H_KV)
    if views:  # as a projection makes them: (B, seq, heads, D) memory, seen as (B, heads, seq, D)
        q, k, v = (torch.randn(B, seq, h, D, generator=g).to(dtype).transpose(1, 2) for h in (H_Q, H_KV, H_KV))
    else:
        q, k, v = (torch.randn(B, h, seq, D, generator=g).to(dtype) for h in (H_Q, H_KV, H_KV))
    return Case(f"{name}: {B} x seq {seq}, {H_Q} query heads, {H_KV} of k and v{', views' if views else ''}, "
                f"{str(dtype)[6:]}", dict(q=q, k=k, v=v, sm_scale=1 / math.sqrt(D)),
                dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N))


EXERCISE = Exercise(
    lesson="lesson05_flash_attention", name="grouped_heads", kind="write", parts=("attention_kernel",),
    stub="8811b678e403", launch=launch, reference=reference, lines=6,
    cases=[case("one head each", 1, 2, 2, 20), case("groups of 2", 2, 4, 2, 33),
           case("multi-query", 2, 4, 1, 17), case("groups of 3", 1, 6, 2, 50), case("one key", 1, 2, 1, 1),
           case("views", 2, 4, 2, 40, views=True, dtype=torch.float16)],
    bench_case=lambda: case("bench", 2, 16, 4, 4096, views=True, dtype=torch.float16, D=64, BLOCK_M=64, BLOCK_N=64),
    hints=["bh counts (batch, query head) pairs with the head fastest: b = bh // H_Q, h = bh % H_Q. Consecutive "
           "query heads form a group: with H_Q // H_KV of them per group, which group is h in?",
           "h_kv = h // (H_Q // H_KV). A base is the pointer plus the batch times the batch stride plus the head "
           "times the head stride, with each tensor's own strides: k's are not q's.",
           "q_base = q_ptr + b * stride_qb + h * stride_qh; k_base = k_ptr + b * stride_kb + h_kv * stride_kh; "
           "v_base likewise with v's strides and h_kv; o_base = o_ptr + b * stride_ob + h * stride_oh."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
