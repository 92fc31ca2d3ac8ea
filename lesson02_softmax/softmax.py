"""Lesson 2's op: softmax(x, dim), forward and backward.

softmax(x)_j = exp(x_j - max(x)) / sum_k exp(x_k - max(x)), over each row. A program owns whole
rows and reduces them with tl.max and tl.sum: one read and one write per element (softmax_kernel).
Rows too long for one program's registers are walked in tiles with an online softmax, a running max
and a running sum (softmax_online_kernel: two reads and one write). The backward, for y = softmax(x)
over a row, is dL/dx_i = y_i (dL/dy_i - sum_j dL/dy_j y_j): one more row reduction, the dot product
of dy and y (softmax_backward_kernel). main.py, the chapter, traces the kernels, checks and times
them; this file is what a model imports.

The op has the course's one shape (lesson 1, section 5): softmax() checks its input, Softmax (an
autograd function) says what the forward launches and what the backward launches, and the launchers
run `kernel[grid](...)`.
"""
import common.device  # noqa: F401  (first: it decides how triton is imported)

import torch
import triton
import triton.language as tl

from common import checks
from common.checks import check_tensors, flag, whole
from common.launch import cdiv, next_power_of_2
from common.trace import show

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def softmax_kernel(
    x_ptr, y_ptr,               # input and output, (M, N)
    M, N,                       # rows, columns
    stride_xm, stride_xn,       # elements between rows / columns of x: views need no copy
    stride_ym,                  # y is allocated contiguous: its column stride is 1
    BLOCK_M: tl.constexpr,      # rows per program
    BLOCK_N: tl.constexpr,      # next power of two >= N: a whole row at once
    PAD_ZERO: tl.constexpr = False,     # masked-off lanes hold -inf; the trace tries 0.0 instead
    STABLE: tl.constexpr = True,        # subtract the row max first (the trace tries without)
    INDEX_TYPE: tl.constexpr = tl.int32,  # of the offsets: tl.int64 past 2**31 elements (the chapter's section 4)
    TRACE: tl.constexpr = False,
):
    pid = tl.program_id(axis=0)
    rows = pid.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)  # the rows this program owns
    cols = tl.arange(0, BLOCK_N).to(INDEX_TYPE)                  # every column of them
    # [:, None] makes a column, [None, :] a row; combined, they broadcast to [BLOCK_M, BLOCK_N]
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn
    # Masked lanes take part in the max and the sum below, so the padding must change neither:
    # -inf is below every number, and exp(-inf) = 0.
    x = tl.load(x_ptrs, mask=mask, other=0.0 if PAD_ZERO else float("-inf")).to(tl.float32)  # math in fp32
    if STABLE:
        x_max = tl.max(x, axis=1)                 # reduction 1: one max per row
        z = x - x_max[:, None]                    # every exponent <= 0: exp cannot overflow
    else:
        z = x
    numerator = tl.exp(z)
    denominator = tl.sum(numerator, axis=1)       # reduction 2: one sum per row, >= 1 if STABLE
    y = numerator / denominator[:, None]
    y_ptrs = y_ptr + rows[:, None] * stride_ym + cols[None, :]
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=mask)
    if TRACE:
        show("loaded row", x)
        if STABLE:
            show("max", x_max)
            show("after subtracting", z)
        show("exp", numerator)
        show("sum", denominator)
        show("result", y)  # exp / sum (without STABLE: inf / inf = nan)


# A row walked tile by tile, keeping m, the max so far, and l, the sum of exp(x - m) so far. When a
# tile raises the max from m_old to m_new, everything summed so far was scaled by exp(-m_old) instead
# of exp(-m_new): l is multiplied by alpha = exp(m_old - m_new). A second walk writes exp(x - m) / l.
@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, N, stride_xm, stride_xn, stride_ym, BLOCK_N: tl.constexpr,
                          INDEX_TYPE: tl.constexpr = tl.int32, TRACE: tl.constexpr = False):
    row = tl.program_id(axis=0).to(INDEX_TYPE)   # one program per row
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    m = tl.full([], float("-inf"), tl.float32)   # running max
    l = tl.zeros([], dtype=tl.float32)           # running sum of exp(x - m)
    for start in range(0, N, BLOCK_N):           # walk 1: the max and the sum
        cols = start + tl.arange(0, BLOCK_N).to(INDEX_TYPE)
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # A row that is all -inf so far has m_new = -inf, and -inf - (-inf) is NaN: subtract 0.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)               # rescales the old sum to the new max
        l = l * alpha + tl.sum(tl.exp(x - m_safe), axis=0)
        m = m_new
        if TRACE:
            show("tile", x)
            show("m", m)
            show("alpha", alpha)
            show("l", l)
    for start in range(0, N, BLOCK_N):           # walk 2: normalise and write
        cols = start + tl.arange(0, BLOCK_N).to(INDEX_TYPE)
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m) / l
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=cols < N)
        if TRACE:
            show("output tile", y)


# dL/dx = y * (dy - rowsum(dy * y)), a row in tiles walked twice: the dot product first, then dx
# (for rows that fit in one tile, the second walk re-reads from the L2 cache).
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


# %% The launch settings (the chapter's section 4 says where they come from)
MAX_ONE_PASS_N = 65536  # the longest row the one-pass kernel takes
TUNED = {256: (2, 2), 512: (1, 2), 2048: (2, 4), 65536: (1, 8)}  # BLOCK_N: (BLOCK_M, num_warps), H200 sweep


def one_pass_settings(N: int) -> tuple[int, int, int]:
    """BLOCK_M, BLOCK_N and num_warps for the one-pass kernel: rows packed until a program holds 1024
    elements, one warp per 1024 elements (32 per thread), or TUNED's settings for its BLOCK_N."""
    BLOCK_N = next_power_of_2(N)
    BLOCK_M = max(1, 1024 // BLOCK_N)
    BLOCK_M, num_warps = TUNED.get(BLOCK_N, (BLOCK_M, min(32, BLOCK_M * BLOCK_N // 1024)))
    return BLOCK_M, BLOCK_N, num_warps


# %% The launchers, the autograd function and the op
def launch(x: torch.Tensor, long_rows: bool | None, *, index_type=None) -> torch.Tensor:
    """y = softmax(x) by the kernel that fits the row length (x as softmax() checked it).
    index_type: tl.int32 or tl.int64 for the offsets (None: common.checks.index_type decides). The
    launches pass every argument of their kernel, defaults too: torch.compile's analysis of what a
    kernel writes wants them all (it takes a kernel called with fewer to write every input)."""
    M, N = x.shape
    y = x.new_empty((M, N))  # same device and dtype as x
    if M == 0 or N == 0:
        return y
    if long_rows is None:
        long_rows = N > MAX_ONE_PASS_N
    if index_type is None:
        index_type = checks.index_type(x, y)
    if long_rows:
        # tiles of 8192 columns, 16 per thread: long enough to keep the loads streaming
        softmax_online_kernel[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0),
                                    BLOCK_N=8192, INDEX_TYPE=index_type, TRACE=False, num_warps=16)
    else:
        BLOCK_M, BLOCK_N, num_warps = one_pass_settings(N)
        grid = (cdiv(M, BLOCK_M),)  # BLOCK_M rows per program
        softmax_kernel[grid](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                             PAD_ZERO=False, STABLE=True, INDEX_TYPE=index_type, TRACE=False, num_warps=num_warps)
    return y


def softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dL/dx = y * (dy - rowsum(dy * y)), for y = softmax(x) and dy = dL/dy, both (M, N), in one launch."""
    dy, y = dy.contiguous(), y.contiguous()  # rows then contiguous in all three: column stride 1
    M, N = y.shape
    dx = torch.empty_like(y)
    BLOCK_N = min(next_power_of_2(N), 4096)   # tiles of up to 4096 columns, 4096 elements a program
    BLOCK_M = max(1, 4096 // BLOCK_N)
    if M and N:
        softmax_backward_kernel[(cdiv(M, BLOCK_M),)](y, dy, dx, M, N, y.stride(0), dy.stride(0), dx.stride(0),
                                                     BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                                     INDEX_TYPE=checks.index_type(y, dy, dx), num_warps=8)
    return dx


class Softmax(torch.autograd.Function):
    """y = softmax(x) along the rows; the backward needs y, not x: the forward's output is what it keeps."""

    @staticmethod
    def forward(ctx, x, long_rows):
        y = launch(x, long_rows)
        ctx.save_for_backward(y)  # saved tensors: autograd checks they were not changed in place
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(dy, y), None  # no gradient for long_rows


def softmax(x: torch.Tensor, dim: int = -1, *, long_rows: bool | None = None) -> torch.Tensor:
    """Softmax of a 2-D tensor along `dim` (float32/float16/bfloat16; math in fp32), as
    torch.softmax(x, dim). The kernels reduce along rows; dim 0 runs them on x.t(), a view.

    long_rows: None picks the kernel by row length; True / False forces the online / one-pass one.
    """
    (x,) = check_tensors({"x": x}, DTYPES, ndim=2)
    dim = whole("dim", dim, least=-2)
    if dim > 1:
        raise IndexError(f"dim must be in [-2, 1] for a 2-D tensor, got {dim}")
    long_rows = flag("long_rows", long_rows, optional=True)  # a string such as "no" would be truthy
    if dim % 2 == 0:  # along the columns: the rows of the transpose (the kernels follow strides)
        return Softmax.apply(x.t(), long_rows).t()
    return Softmax.apply(x, long_rows)
