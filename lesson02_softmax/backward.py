"""Lesson 2, second file: softmax's backward pass, for training (main.py, section 8, registers it
and hands grad_check the forward it checks).

For y = softmax(x) over a row, dL/dx_i = y_i (dL/dy_i - sum_j dL/dy_j y_j): one row reduction (the
dot product of dy and y) and an element-wise step. The kernel walks a row in tiles twice: the dot
product first, then dx (for rows that fit in one tile, the second pass re-reads from the L2 cache).
"""
from common.device import DEVICE  # first: it decides how triton is imported

import torch
import triton
import triton.language as tl

from common.checks import GRAD_NOTE, dtype_name, grad_errors, grad_ok, index_type
from common.launch import cdiv, next_power_of_2, traceable
from common.table import Table, print_table


@triton.jit
def softmax_backward_kernel(y_ptr, dy_ptr, dx_ptr, M, N, stride_ym, stride_dym, stride_dxm,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INDEX_TYPE: tl.constexpr = tl.int32):
    pid = tl.program_id(axis=0)
    rows = pid.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)
    dot = tl.zeros([BLOCK_M], dtype=tl.float32)               # sum_j dy_j y_j, per row
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N).to(INDEX_TYPE)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :], mask=mask, other=0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * stride_dym + cols[None, :], mask=mask, other=0).to(tl.float32)
        dot += tl.sum(y * dy, axis=1)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N).to(INDEX_TYPE)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :], mask=mask, other=0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * stride_dym + cols[None, :], mask=mask, other=0).to(tl.float32)
        dx = y * (dy - dot[:, None])
        tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@torch.library.triton_op("lessons::softmax_backward", mutates_args=())
def softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dL/dx = y * (dy - rowsum(dy * y)), for y = softmax(x) and dy = dL/dy. An operator too:
    torch.compile traces backward passes, so the launch is traceable(kernel)[grid] (lesson 1, section 5)."""
    dy, y = dy.contiguous(), y.contiguous()  # rows then contiguous in all three: column stride 1
    M, N = y.shape
    dx = torch.empty_like(y)
    BLOCK_N = min(next_power_of_2(N), 4096)   # tiles of up to 4096 columns, 4096 elements a program
    BLOCK_M = max(1, 4096 // BLOCK_N)
    if M and N:
        grid = (cdiv(M, BLOCK_M),)
        traceable(softmax_backward_kernel)[grid](y, dy, dx, M, N, y.stride(0), dy.stride(0), dx.stride(0),
                                                 BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                                 INDEX_TYPE=index_type(y, dy, dx), num_warps=8)
    return dx


def grad_check(softmax, dtypes: tuple) -> Table:
    """dL/dx through `softmax` (main.py's, which it hands over with its DTYPES) against torch's
    autograd of torch.softmax (common.checks.grad_errors), in each of `dtypes`."""
    rows = []
    for dtype in dtypes:
        for M, N in [(1, 1), (3, 5), (64, 1000), (7, 4097)]:
            x = 5 * torch.randn(M, N, device=DEVICE, dtype=dtype)
            ((ours, theirs),) = grad_errors(softmax, lambda t: torch.softmax(t, dim=1), [x])
            rows.append((dtype_name(dtype), f"{M} x {N}", ours, theirs, grad_ok(ours, theirs)))
    return print_table(rows, ["dtype", "shape", "dx: relative error", "torch's, same dtype", "ok"],
                       floatfmt=".1e", title="Check: softmax's gradient against float64 autograd", note=GRAD_NOTE)
