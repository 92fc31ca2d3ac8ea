"""SPOILER: the solution of exercise 6.3 (AdamW's step), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "220145474b71"  # common.exercise.given_fingerprint of adamw.py as the course ships it


@triton.jit
def adamw_kernel(table_ptr, hyper_ptr, blocks_ptr, BLOCK_SIZE: tl.constexpr):
    """One AdamW step for one block of one tensor: the tensor's row is blocks[pid]; its addresses,
    size and first block are in table (9 a row), its hyperparameters in hyper (7 a row)."""
    pid = tl.program_id(axis=0)
    t = tl.load(blocks_ptr + pid)                                    # my tensor's row
    row, hyper = table_ptr + t * 9, hyper_ptr + t * 7
    p_ptr = tl.load(row).to(tl.pointer_type(tl.float32))             # an address made a pointer
    g_ptr = tl.load(row + 1).to(tl.pointer_type(tl.float32))
    m_ptr = tl.load(row + 2).to(tl.pointer_type(tl.float32))
    v_ptr = tl.load(row + 3).to(tl.pointer_type(tl.float32))
    p_new_ptr = tl.load(row + 4).to(tl.pointer_type(tl.float32))
    m_new_ptr = tl.load(row + 5).to(tl.pointer_type(tl.float32))
    v_new_ptr = tl.load(row + 6).to(tl.pointer_type(tl.float32))
    n, first = tl.load(row + 7), tl.load(row + 8)
    lr, weight_decay = tl.load(hyper), tl.load(hyper + 1)
    one_minus_beta1, one_minus_beta2, eps = tl.load(hyper + 2), tl.load(hyper + 3), tl.load(hyper + 4)
    bias1, bias2 = tl.load(hyper + 5), tl.load(hyper + 6)
    offsets = (pid - first) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # my block of the tensor
    mask = offsets < n
    p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0)
    m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    p = p * (1 - lr * weight_decay)                                  # decoupled decay, before the step
    m = m + one_minus_beta1 * (g - m)
    v = v + one_minus_beta2 * (g * g - v)
    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)   # the new m and v, bias-corrected
    tl.store(p_new_ptr + offsets, p, mask=mask)
    tl.store(m_new_ptr + offsets, m, mask=mask)
    tl.store(v_new_ptr + offsets, v, mask=mask)


# The mistakes, each an edit of the solution above (common.exercise.patched)
STEP = "    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)   # the new m and v, bias-corrected\n"
MOMENTS = "    m = m + one_minus_beta1 * (g - m)\n    v = v + one_minus_beta2 * (g * g - v)\n"
DECAY = "p = p * (1 - lr * weight_decay)"
WRONG = [Wrong("every tensor with the first one's hyperparameters", "values", "elements of p_new1 are wrong",
               dict(adamw_kernel=patched(adamw_kernel, ("hyper_ptr + t * 7", "hyper_ptr")))),
         Wrong("the program's row, not its tensor's", "memory", "past the end of table",
               dict(adamw_kernel=patched(adamw_kernel, ("t = tl.load(blocks_ptr + pid)", "t = pid")))),
         Wrong("the block counted from the grid's start, not the tensor's", "memory", "left unwritten",
               dict(adamw_kernel=patched(adamw_kernel, ("(pid - first) * BLOCK_SIZE", "pid * BLOCK_SIZE")))),
         Wrong("weight decay added to the gradient (Adam's L2)", "values", "elements of p_new0 are wrong",
               dict(adamw_kernel=patched(adamw_kernel, (DECAY, "g = g + weight_decay * p")))),
         Wrong("bias corrections left out", "values", "elements of p_new0 are wrong",
               dict(adamw_kernel=patched(adamw_kernel, (STEP, "    p = p - lr * m / (tl.sqrt(v) + eps)\n")))),
         Wrong("the step from the old m and v", "values", "elements of p_new0 are wrong",
               dict(adamw_kernel=patched(adamw_kernel, (MOMENTS + STEP, STEP + MOMENTS)))),
         Wrong("no mask", "memory", "past the end of p0",
               dict(adamw_kernel=patched(adamw_kernel, (", mask=mask, other=0.0)", ")", 4), (", mask=mask)", ")", 3))))]
