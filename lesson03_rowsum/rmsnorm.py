"""Lesson 3, a file lesson 6 uses: RMSNorm, forward and backward, with the residual add fused in.

    y = x * rstd * w,    rstd = 1 / sqrt(mean(x^2) + eps),   one rstd per row (Llama's norm: LayerNorm without the mean)

The forward is this lesson's row walk (main.py, section 1): a row in tiles, an fp32 accumulator of
x^2 carried across them, one tl.sum after the loop; then a second walk normalises. It keeps rstd,
one float32 per row, for the backward. A transformer block calls it as norm(h + f(h)): with
`residual`, the kernel adds the two first and stores the sum as well (the residual stream goes on
with it), so the sum is written once and never read back: one launch instead of two, and one fewer
read of the rows.

The backward, for one row, with xh = x * rstd and g = w * dy:

    dx = rstd * (g - xh * mean(g * xh)),      dw = sum over the rows of dy * xh,

plus, with the residual fused, the gradient that reaches the sum from the rest of the network (dh):
the two meet in one store. dw is a sum down the columns: each program takes a stretch of rows,
adds its rows' dy * xh into an fp32 accumulator of a row's width, and stores it as one row of a
partial-sums matrix (programs x N); then row_sum.py's launch adds the partial rows up, reading the
matrix's transpose through its strides. The backward holds a row in one block (up to MAX_N columns).
"""
from common.device import sm_count  # first: it decides how triton is imported

import torch
import triton
import triton.language as tl

from common.checks import check_tensors, index_type, real
from common.launch import cdiv, next_power_of_2
from common.trace import show
from lesson03_rowsum.row_sum import launch as row_sum_launch, tile_config  # the lesson's op: row sums, its tiles

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_N = 16384  # the widest row: the backward holds one in registers (16 float32 per thread at 32 warps)


@triton.jit
def rms_norm_kernel(
    x_ptr, r_ptr,             # input rows, and the residual added to them (HAS_RESIDUAL)
    h_ptr,                    # output: x + residual (HAS_RESIDUAL)
    w_ptr, y_ptr, rstd_ptr,   # weights (N, any float dtype), output rows, rstd per row (float32)
    M, N, stride_x, stride_r, stride_h, stride_y,   # rows, columns; elements between rows of each
    stride_w,                 # elements between weights: 1, 2 for w[::2], 0 for one weight expanded
    eps,
    BLOCK_M: tl.constexpr,    # rows per program (lesson 3's tile_config: short rows packed)
    BLOCK_N: tl.constexpr,    # a tile's width
    HAS_RESIDUAL: tl.constexpr,
    INDEX_TYPE: tl.constexpr = tl.int32,
    TRACE: tl.constexpr = False,
):
    rows = tl.program_id(axis=0).to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows[:, None] < M
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)  # x^2, lane by lane, carried across the tiles
    for start in range(0, N, BLOCK_N):          # walk 1: the sum of squares (and h = x + residual)
        cols = start + tl.arange(0, BLOCK_N)
        mask = row_ok & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:  # the sum, rounded to h's dtype as torch's x + residual is, then normalised
            x += tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            x = x.to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + rows[:, None] * stride_h + cols[None, :], x, mask=mask)
            x = x.to(tl.float32)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=1) / N + eps)  # the mean over the N real columns, per row
    if TRACE:
        if HAS_RESIDUAL:
            show("sum of h^2 (h = x + residual)", tl.sum(acc, axis=1))
        else:
            show("sum of x^2", tl.sum(acc, axis=1))
        show("rstd", rstd)
    tl.store(rstd_ptr + rows, rstd, mask=rows < M)
    for start in range(0, N, BLOCK_N):          # walk 2: normalise, weigh, store
        cols = start + tl.arange(0, BLOCK_N)
        mask = row_ok & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:  # recomputed from the two inputs (h was stored by other threads, maybe), rounded alike
            x += tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            x = x.to(h_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + cols.to(INDEX_TYPE) * stride_w, mask=cols < N, other=0.0).to(tl.float32)
        y = x * rstd[:, None] * w[None, :]
        if TRACE:
            show("y", y)
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_backward_kernel(
    dy_ptr, x_ptr, w_ptr, rstd_ptr,   # dL/dy, the normalised rows (h with a residual), w, rstd
    dh_ptr,                           # dL/dh from the rest of the network, added to dx (HAS_DH)
    dx_ptr,                           # output: dL/dx (dL/dh with a residual), contiguous
    dw_ptr,                           # output: partial sums of dw, one row of N per program, float32
    M, N, stride_dy, stride_x, stride_dh, stride_w,
    blocks_per_program,               # each program's stretch: this many blocks of BLOCK_M rows
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,            # the whole row: N <= BLOCK_N
    HAS_DH: tl.constexpr,
    INDEX_TYPE: tl.constexpr = tl.int32,
):
    pid = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    w = tl.load(w_ptr + cols.to(INDEX_TYPE) * stride_w, mask=cols < N, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)  # this program's share of sum_rows(dy * xh)
    first = pid.to(INDEX_TYPE) * blocks_per_program * BLOCK_M
    for i in range(0, blocks_per_program):      # the stretch, a block of rows at a time
        rows = first + i * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)  # the last stretch may run past the last row
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
        xh = x * rstd[:, None]         # the normalised rows, recomputed: never stored by the forward
        g = w[None, :] * dy
        dx = (g - xh * (tl.sum(g * xh, axis=1) / N)[:, None]) * rstd[:, None]
        if HAS_DH:
            dx += tl.load(dh_ptr + rows[:, None] * stride_dh + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + rows[:, None] * N + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * xh                  # 0 for rows past M (their loads gave 0)
    tl.store(dw_ptr + pid.to(INDEX_TYPE) * N + cols, tl.sum(dw, axis=0), mask=cols < N)


def launch(x, w, eps: float, residual=None) -> tuple:
    """(h, y, rstd): h = x + residual (None without one), y = rms_norm(h) * w in x's dtype, rstd per row."""
    M, N = x.shape
    y, rstd = x.new_empty((M, N)), x.new_empty(M, dtype=torch.float32)
    h = x.new_empty((M, N)) if residual is not None else None
    if M and N:
        BLOCK_M, BLOCK_N, num_warps = tile_config(N)  # lesson 3's tile: short rows packed, 8 per thread
        r = residual if residual is not None else x  # (a pointer the kernel never reads)
        hy = h if h is not None else y
        rms_norm_kernel[(cdiv(M, BLOCK_M),)](x, r, hy, w, y, rstd, M, N, x.stride(0), r.stride(0), hy.stride(0),
                                             y.stride(0), w.stride(0), eps, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                             HAS_RESIDUAL=residual is not None, INDEX_TYPE=index_type(x, r, y, w),
                                             TRACE=False, num_warps=num_warps)  # every argument (row_sum.py says why)
    return h, y, rstd


def launch_backward(dy, x, w, rstd, dh=None) -> tuple:
    """(dx, dw) from dy; dx includes dh where the residual was fused. dx in x's dtype, dw in w's."""
    M, N = x.shape
    dx = x.new_empty((M, N))
    BLOCK_N = next_power_of_2(N)
    BLOCK_M = max(1, 2048 // BLOCK_N)
    blocks = cdiv(M, BLOCK_M)
    per_program = max(1, cdiv(blocks, 4 * sm_count()))  # a few programs per SM, each a stretch of rows
    programs = max(1, cdiv(blocks, per_program))
    partial = x.new_zeros((programs, N), dtype=torch.float32) if M == 0 else \
        x.new_empty((programs, N), dtype=torch.float32)
    if M and N:
        dh_ = dh if dh is not None else dy
        rms_norm_backward_kernel[(programs,)](dy, x, w, rstd, dh_, dx, partial, M, N, dy.stride(0), x.stride(0),
                                              dh_.stride(0), w.stride(0), per_program, BLOCK_M=BLOCK_M,
                                              BLOCK_N=BLOCK_N, HAS_DH=dh is not None,
                                              INDEX_TYPE=index_type(dy, x, dx, w),
                                              num_warps=max(1, min(16, BLOCK_M * BLOCK_N // 256)))
    dw = row_sum_launch(partial.t(), dtype=w.dtype)  # the columns of partial, added: row_sum.py's kernels on the transpose
    return dx, dw


class RMSNorm(torch.autograd.Function):
    """y = rms_norm(x) * w; the backward from x, w and rstd (the normalised rows recomputed)."""

    @staticmethod
    def forward(ctx, x, w, eps):
        _, y, rstd = launch(x, w, eps)
        ctx.save_for_backward(x, w, rstd)  # saved tensors: autograd checks they were not changed in place
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd = ctx.saved_tensors
        dx, dw = launch_backward(dy.contiguous(), x, w, rstd)
        return dx, dw, None  # one gradient per input of forward; none for eps


class AddRMSNorm(torch.autograd.Function):
    """(h, y) = (x + residual, rms_norm(h) * w) in one launch; the backward from h, w and rstd (x and
    residual are not kept). h's gradient from the rest of the network (dh) joins dx in one store."""

    @staticmethod
    def forward(ctx, x, residual, w, eps):
        h, y, rstd = launch(x, w, eps, residual)
        ctx.set_materialize_grads(False)  # a gradient nobody sent arrives as None, not as zeros made for it
        ctx.save_for_backward(h, w, rstd)
        return h, y

    @staticmethod
    def backward(ctx, dh, dy):
        h, w, rstd = ctx.saved_tensors
        if dy is None:  # (the normalised rows unused: h's gradient is all there is)
            return dh, dh, None, None
        dx, dw = launch_backward(dy.contiguous(), h, w, rstd, None if dh is None else dh.contiguous())
        return dx, dx, dw, None  # h = x + residual: both get dL/dh


def rows_of(t: torch.Tensor, N: int) -> torch.Tensor:
    """t as (rows, N), a view where it can be: the kernels follow a row stride, not a column stride."""
    rows = t.reshape(t.shape[:-1].numel(), N)  # (not -1: ambiguous where N is 0)
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None, *,
             residual: torch.Tensor | None = None):
    """F.rms_norm(x, (N,), weight, eps) over the last dimension of x (any leading shape; float32,
    float16 or bfloat16, the arithmetic in float32, rows of up to MAX_N columns). As F.rms_norm: eps
    None is the epsilon of the dtype computed in, float32's for all three (torch's code takes float32's
    for float16 and bfloat16 inputs too, where its docs say x's); the weight may be of another of those
    dtypes than x and any stride (w[::2], one value expanded); y has x's dtype, under torch.autocast
    too (autocast leaves F.rms_norm's dtypes as they are: torch 2.11 on an H100).
    With `residual` (x's shape and dtype): returns (h, rms_norm(h)) for h = x + residual, in one launch."""
    tensors = {"x": x} | ({"residual": residual} if residual is not None else {})
    x, *rest = check_tensors(tensors, DTYPES)  # one device and one dtype for the rows
    residual = rest[0] if rest else None
    (weight,) = check_tensors({"weight": weight}, DTYPES)  # a weight in its own dtype: the kernels cast it
    if weight.device != x.device:
        raise ValueError(f"x is on {x.device}, weight on {weight.device}: put them on one device")
    if x.ndim == 0:
        raise ValueError("x must have a dimension to normalise: got a 0-d tensor")
    if weight.ndim != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must be a vector of x's last dimension, {x.shape[-1]}: got {tuple(weight.shape)}")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual must match x: x {tuple(x.shape)}, residual {tuple(residual.shape)}")
    N = x.shape[-1]
    if N > MAX_N:
        raise ValueError(f"rms_norm takes rows of at most {MAX_N} columns (the backward holds a row in one block), "
                         f"got {N}")
    eps = torch.finfo(torch.float32).eps if eps is None else real("eps", eps)
    if eps <= 0:
        raise ValueError(f"eps must be > 0 (it keeps a row of zeros finite), got {eps}")
    shape = x.shape
    if residual is not None:
        h, y = AddRMSNorm.apply(rows_of(x, N), rows_of(residual, N), weight, eps)
        return h.view(shape), y.view(shape)
    return RMSNorm.apply(rows_of(x, N), weight, eps).view(shape)
