"""SPOILER: the solution of exercise 6.3 (AdamW's step), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


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


@triton.jit
def decay_everywhere(p_ptr, g_ptr, m_ptr, v_ptr, p_new_ptr, m_new_ptr, v_new_ptr, N, n_decay,
                     lr, one_minus_beta1, one_minus_beta2, eps, weight_decay, bias1, bias2, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0)
    m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    p = p * (1 - lr * weight_decay)                # the norms' weights decay too
    m = m + one_minus_beta1 * (g - m)
    v = v + one_minus_beta2 * (g * g - v)
    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)
    tl.store(p_new_ptr + offsets, p, mask=mask)
    tl.store(m_new_ptr + offsets, m, mask=mask)
    tl.store(v_new_ptr + offsets, v, mask=mask)


@triton.jit
def decay_in_the_gradient(p_ptr, g_ptr, m_ptr, v_ptr, p_new_ptr, m_new_ptr, v_new_ptr, N, n_decay,
                          lr, one_minus_beta1, one_minus_beta2, eps, weight_decay, bias1, bias2, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0)
    m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    g = tl.where(offsets < n_decay, g + weight_decay * p, g)  # Adam's L2 penalty, not AdamW's decoupled decay
    m = m + one_minus_beta1 * (g - m)
    v = v + one_minus_beta2 * (g * g - v)
    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)
    tl.store(p_new_ptr + offsets, p, mask=mask)
    tl.store(m_new_ptr + offsets, m, mask=mask)
    tl.store(v_new_ptr + offsets, v, mask=mask)


@triton.jit
def no_bias_correction(p_ptr, g_ptr, m_ptr, v_ptr, p_new_ptr, m_new_ptr, v_new_ptr, N, n_decay,
                       lr, one_minus_beta1, one_minus_beta2, eps, weight_decay, bias1, bias2, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0)
    m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    p = tl.where(offsets < n_decay, p * (1 - lr * weight_decay), p)
    m = m + one_minus_beta1 * (g - m)
    v = v + one_minus_beta2 * (g * g - v)
    p = p - lr * m / (tl.sqrt(v) + eps)            # bias1 and bias2 left out
    tl.store(p_new_ptr + offsets, p, mask=mask)
    tl.store(m_new_ptr + offsets, m, mask=mask)
    tl.store(v_new_ptr + offsets, v, mask=mask)


@triton.jit
def the_old_moments(p_ptr, g_ptr, m_ptr, v_ptr, p_new_ptr, m_new_ptr, v_new_ptr, N, n_decay,
                    lr, one_minus_beta1, one_minus_beta2, eps, weight_decay, bias1, bias2, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0)
    m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    p = tl.where(offsets < n_decay, p * (1 - lr * weight_decay), p)
    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)  # the step before the moments are updated
    m = m + one_minus_beta1 * (g - m)
    v = v + one_minus_beta2 * (g * g - v)
    tl.store(p_new_ptr + offsets, p, mask=mask)
    tl.store(m_new_ptr + offsets, m, mask=mask)
    tl.store(v_new_ptr + offsets, v, mask=mask)


@triton.jit
def no_mask(p_ptr, g_ptr, m_ptr, v_ptr, p_new_ptr, m_new_ptr, v_new_ptr, N, n_decay,
            lr, one_minus_beta1, one_minus_beta2, eps, weight_decay, bias1, bias2, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    p = tl.load(p_ptr + offsets)
    g = tl.load(g_ptr + offsets)
    m = tl.load(m_ptr + offsets)
    v = tl.load(v_ptr + offsets)
    p = tl.where(offsets < n_decay, p * (1 - lr * weight_decay), p)
    m = m + one_minus_beta1 * (g - m)
    v = v + one_minus_beta2 * (g * g - v)
    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)
    tl.store(p_new_ptr + offsets, p)
    tl.store(m_new_ptr + offsets, m)
    tl.store(v_new_ptr + offsets, v)


WRONG = [Wrong("decay everywhere, n_decay ignored", "values", "n_decay = 0", dict(adamw_kernel=decay_everywhere)),
         Wrong("weight decay added to the gradient (Adam's L2)", "values", "elements of p_new are wrong",
               dict(adamw_kernel=decay_in_the_gradient)),
         Wrong("bias corrections left out", "values", "elements of p_new are wrong",
               dict(adamw_kernel=no_bias_correction)),
         Wrong("the step from the old m and v", "values", "elements of p_new are wrong",
               dict(adamw_kernel=the_old_moments)),
         Wrong("no mask", "memory", "past the end of p", dict(adamw_kernel=no_mask))]
