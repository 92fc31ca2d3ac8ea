"""Lesson 4, second file: matmul's backward pass (main.py, section 9, explains it and registers it).

dL/dA = dL/dC @ B^T and dL/dB = A^T @ dL/dC, through the same operator and kernel, on views with
the strides swapped; an activation's derivative first (relu from C, gelu from Z recomputed).
main.py hands matmul_grad its operator (functools.partial), so this file never imports main.py.
"""
import torch

from lesson01_vector_add.main import gelu_backward  # lesson 1's kernel: dL/dZ = dL/dC * gelu'(Z)


def keep_inputs(ctx, inputs, output):
    """What the backward needs from the forward: a and b, the flags, and C itself for relu."""
    a, b, ctx.activation, ctx.precision, ctx.tma = inputs
    ctx.save_for_backward(a, b, output if ctx.activation == "relu" else None)


def matmul_grad(ctx, dc, matmul_op):
    """dL/dA, dL/dB from dL/dC, by matmul_op (main.py's operator). ctx.needs_input_grad says which
    inputs want one: a frozen weight's dB is never computed."""
    a, b, c = ctx.saved_tensors
    if ctx.activation == "relu":
        dc = torch.where(c > 0, dc, 0)
    elif ctx.activation == "gelu":  # Z recomputed as the forward computed it (the same kernel: ctx.tma)
        dc = gelu_backward(dc, matmul_op(a, b, None, ctx.precision, ctx.tma))
    # B^T and A^T are transposed views, whose rows TMA cannot read: the pointer kernel (tma=False)
    da = matmul_op(dc, b.t(), None, ctx.precision, False) if ctx.needs_input_grad[0] else None  # dC @ B^T
    db = matmul_op(a.t(), dc, None, ctx.precision, False) if ctx.needs_input_grad[1] else None  # A^T @ dC
    return da, db, None, None, None  # none for activation, precision, tma
