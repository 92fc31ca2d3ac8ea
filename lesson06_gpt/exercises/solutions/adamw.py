"""SPOILER: the solution of exercise 6.3 (AdamW's step), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "3e3f80f3ae8b"  # common.exercise.given_fingerprint of adamw.py as the course ships it


@triton.jit
def adamw_kernel(p_ptr, g_ptr, m_ptr, v_ptr, p_new_ptr, m_new_ptr, v_new_ptr, N, n_decay,
                 lr, one_minus_beta1, one_minus_beta2, eps, weight_decay, bias1, bias2, BLOCK_SIZE: tl.constexpr):
    """One AdamW step for elements [pid * BLOCK_SIZE, (pid + 1) * BLOCK_SIZE) of the flat buffers,
    the decay only where offsets < n_decay; the new p, m, v stored in p_new, m_new, v_new."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0)
    m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    p = tl.where(offsets < n_decay, p * (1 - lr * weight_decay), p)  # decoupled decay, element by element
    m = m + one_minus_beta1 * (g - m)
    v = v + one_minus_beta2 * (g * g - v)
    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)   # the new m and v, bias-corrected
    tl.store(p_new_ptr + offsets, p, mask=mask)
    tl.store(m_new_ptr + offsets, m, mask=mask)
    tl.store(v_new_ptr + offsets, v, mask=mask)


# The mistakes, each an edit of the solution above (common.exercise.patched)
STEP = "    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)   # the new m and v, bias-corrected\n"
MOMENTS = "    m = m + one_minus_beta1 * (g - m)\n    v = v + one_minus_beta2 * (g * g - v)\n"
DECAY = "p = tl.where(offsets < n_decay, p * (1 - lr * weight_decay), p)"
WRONG = [Wrong("decay everywhere, n_decay ignored", "values", "n_decay = 0",
               dict(adamw_kernel=patched(adamw_kernel, (DECAY, "p = p * (1 - lr * weight_decay)")))),
         Wrong("weight decay added to the gradient (Adam's L2)", "values", "elements of p_new are wrong",
               dict(adamw_kernel=patched(adamw_kernel, (DECAY, "g = tl.where(offsets < n_decay, g + weight_decay * p, g)")))),
         Wrong("bias corrections left out", "values", "elements of p_new are wrong",
               dict(adamw_kernel=patched(adamw_kernel, (STEP, "    p = p - lr * m / (tl.sqrt(v) + eps)\n")))),
         Wrong("the step from the old m and v", "values", "elements of p_new are wrong",
               dict(adamw_kernel=patched(adamw_kernel, (MOMENTS + STEP, STEP + MOMENTS)))),
         Wrong("no mask", "memory", "past the end of p",
               dict(adamw_kernel=patched(adamw_kernel, (", mask=mask, other=0.0)", ")", 4), (", mask=mask)", ")", 3))))]
