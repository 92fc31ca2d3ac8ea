"""Lesson 4, second file: matmul's backward pass (main.py, section 9, explains it and registers it).

dL/dA = dL/dC @ B^T and dL/dB = A^T @ dL/dC, through the same operator and kernel, on views with
the strides swapped; an activation's derivative first (relu from C, gelu from Z recomputed).
"""
from common.device import DEVICE, INTERPRET  # first: it decides how triton is imported

import torch

from common import bench
from common.checks import GRAD_NOTE, dtype_name, grad_errors, grad_ok
from lesson01_vector_add.main import gelu_backward  # lesson 1's kernel: dL/dZ = dL/dC * gelu'(Z)


def keep_inputs(ctx, inputs, output):
    a, b, ctx.activation, ctx.precision, _ = inputs
    ctx.save_for_backward(a, b, output if ctx.activation == "relu" else None)


def matmul_grad(ctx, dc):
    """dL/dA, dL/dB from dL/dC. ctx.needs_input_grad says which inputs want one: a frozen weight's
    dB is never computed."""
    from lesson04_matmul.main import matmul_op  # main registers this function as matmul_op's backward

    a, b, c = ctx.saved_tensors
    if ctx.activation == "relu":
        dc = torch.where(c > 0, dc, 0)
    elif ctx.activation == "gelu":
        dc = gelu_backward(dc, matmul_op(a, b, None, ctx.precision, None))  # Z, recomputed
    da = matmul_op(dc, b.t(), None, ctx.precision, None) if ctx.needs_input_grad[0] else None  # dC @ B^T
    db = matmul_op(a.t(), dc, None, ctx.precision, None) if ctx.needs_input_grad[1] else None  # A^T @ dC
    return da, db, None, None, None


def grad_check() -> bench.Table:
    """dA, dB through main.matmul() against torch's autograd, every dtype and activation."""
    from lesson04_matmul.main import ACTIVATIONS, DTYPES, matmul, reference

    rows = []
    for dtype in DTYPES:
        for M, N, K in [(1, 1, 1), (70, 50, 45)] + ([] if INTERPRET else [(127, 33, 255)]):  # tests: more
            a, b = torch.randn(M, K, device=DEVICE, dtype=dtype), torch.randn(K, N, device=DEVICE, dtype=dtype)
            for act in ACTIVATIONS:
                errs = grad_errors(lambda a, b, activation: matmul(a, b, activation, precision="ieee"), reference,
                                   [a, b], activation=act)
                rows.append((dtype_name(dtype), f"{M} x {N} x {K}", act or "-",
                             *(f"{e:.1e} ({t:.1e})" for e, t in errs), all(grad_ok(e, t) for e, t in errs)))
    return bench.print_table(rows, ["dtype", "M x N x K", "activation", "dA", "dB", "ok"],
                             title="Check: matmul's gradients against float64 autograd", note=GRAD_NOTE +
                             " float32 multiplies in full precision here (precision='ieee'), as torch's does.")
