"""Lesson 3's op: row_sum(x), the sum of each row, for rows longer than a block.

A program owns BLOCK_M rows and walks their N columns BLOCK_N at a time: a tile of BLOCK_M x BLOCK_N
elements per step of the loop, added lane by lane into an accumulator that stays on chip, in
registers, for the whole walk. The one reduction across lanes, tl.sum, comes once, after the loop.
Where there are too few rows to give every SM a program, a row is split between several programs
(row_sum_split_kernel) and a second, small launch adds their partial sums. main.py, the chapter,
traces both kernels, checks and times them; this file is what a model imports.

The op has the course's one shape (lesson 1, section 5): row_sum checks its input, RowSum (an
autograd function) says what the forward launches and what the backward returns, and launch()
runs `kernel[grid](...)`.
"""
import common.device  # noqa: F401  (first: it decides how triton is imported)

import torch
import triton
import triton.language as tl

from common.checks import INDEX_ROOM, check_tensors, index_type, whole
from common.launch import cdiv, next_power_of_2, splits_to_fill
from common.trace import show

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# The sums are kept in fp32 whatever x's dtype: a float16 accumulator adding ones stalls at 2048
# (2049 is not a float16), and the output is rounded to x's dtype only at the store. The strides let
# the kernel read any 2-D view (x.t(), x[::3]) without a copy. INDEX_TYPE makes the offsets 64-bit
# for tensors past 2^31 elements (lesson 2's 64-bit offsets say why).
@triton.jit
def row_sum_kernel(
    x_ptr,                      # input, M x N
    y_ptr,                      # output: the M sums, contiguous
    M, N,                       # rows, columns
    stride_xm, stride_xn,       # elements from one row of x to the next, and from one column to the next
    BLOCK_M: tl.constexpr,      # rows per program
    BLOCK_N: tl.constexpr,      # a tile's width: columns per step of the loop
    INDEX_TYPE: tl.constexpr = tl.int32,  # the offsets' integer type: int64 past 2**31 elements
    TRACE: tl.constexpr = False,  # print what each program does (interpreter only)
):
    # 1. Which rows are mine? Program pid owns rows pid * BLOCK_M ... pid * BLOCK_M + BLOCK_M - 1.
    pid = tl.program_id(axis=0)
    rows = pid.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)
    if TRACE:
        show("program", pid, indent=0)
    # 2. The accumulator: BLOCK_M x BLOCK_N partial sums in fp32, on chip for the whole loop.
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    # 3. The tiles, one after another along the row.
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < M) & (cols[None, :] < N)  # the last tile may run past the row's end
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :].to(INDEX_TYPE) * stride_xn,
                    mask=mask, other=0.0)  # 0: the padding that leaves a sum unchanged
        acc += x.to(tl.float32)  # lane by lane: no thread waits for another
        if TRACE:
            show("columns", cols)
            show("tile", x)
            show("acc", acc)
    # 4. The one reduction across lanes, after the loop: BLOCK_N partial sums per row -> 1.
    total = tl.sum(acc, axis=1)
    if TRACE:
        show("tl.sum(acc)", total)
    # 5. Store each row's sum, rounded to y's dtype; rows past M are not written.
    tl.store(y_ptr + rows, total.to(y_ptr.dtype.element_ty), mask=rows < M)


# Program (pid_m, pid_n) runs row_sum_kernel's loop over one stretch of its BLOCK_M rows,
# COLS_PER_PROGRAM columns from column pid_n x COLS_PER_PROGRAM, and writes its partial sums into
# column pid_n of `partial` (M x programs per row, fp32). The grid keeps one axis, numbered down the
# row blocks first: CUDA allows 2^31 - 1 programs along axis 0 but only 65535 along axes 1 and 2.
@triton.jit
def row_sum_split_kernel(
    x_ptr,                      # input, M x N
    partial_ptr,                # output: M x (programs per row) partial sums, fp32
    M, N,
    stride_xm, stride_xn,       # strides of x, in elements
    stride_pm,                  # elements from one row of partial to the next: the programs per row
    COLS_PER_PROGRAM,           # columns of each row that one program sums: a whole number of tiles
    BLOCK_M: tl.constexpr,      # rows per program
    BLOCK_N: tl.constexpr,      # a tile's width
    INDEX_TYPE: tl.constexpr = tl.int32,  # the offsets' integer type: int64 past 2**31 elements
    TRACE: tl.constexpr = False,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)     # programs down the rows
    pid_m = pid % num_pid_m             # which rows
    pid_n = pid // num_pid_m            # which stretch of those rows
    rows = pid_m.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)
    first = pid_n.to(INDEX_TYPE) * COLS_PER_PROGRAM  # my stretch's first column
    if TRACE:
        show("program (pid_m, pid_n)", (pid_m, pid_n), indent=0)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, COLS_PER_PROGRAM, BLOCK_N):  # row_sum_kernel's loop, over my stretch only
        cols = first + start + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < M) & (cols[None, :] < N)  # the last stretch may run past N
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask, other=0.0)
        acc += x.to(tl.float32)
        if TRACE:
            show("columns", cols)
            show("tile", x)
            show("acc", acc)
    total = tl.sum(acc, axis=1)
    if TRACE:
        show("partial sum", total)
    tl.store(partial_ptr + rows * stride_pm + pid_n, total, mask=rows < M)  # partial[rows, pid_n], fp32


# %% The launch settings: one rule each, worked out from the shape alone
def tile_config(N: int) -> tuple[int, int, int]:
    """BLOCK_M, BLOCK_N, num_warps for rows of N columns: up to 4096 columns a tile, short rows
    packed until a program holds 2048 elements, 8 elements per thread (a sweep on an H200)."""
    BLOCK_N = min(next_power_of_2(N), 4096)
    BLOCK_M = max(1, 2048 // BLOCK_N)
    num_warps = max(4, min(16, BLOCK_M * BLOCK_N // 256))
    return BLOCK_M, BLOCK_N, num_warps


def choose_splits(M: int, N: int) -> int:
    """How many programs share a row: enough for at least 4 programs per SM, where the rows alone
    give fewer, with at least 2 tiles per program; 1 otherwise."""
    BLOCK_M, BLOCK_N, _ = tile_config(N)
    return splits_to_fill(cdiv(M, BLOCK_M), N // (2 * BLOCK_N))


def columns_per_program(N: int, splits: int) -> int:
    """All N columns, or (a split row) whole tiles, rounded down so that >= `splits` programs share it."""
    BLOCK_N = tile_config(N)[1]
    return N if splits == 1 else max(BLOCK_N, N // splits // BLOCK_N * BLOCK_N)


def offset_type(x: torch.Tensor, out: torch.Tensor, cols: int):
    """index_type(x, out), or int64 where the last program's columns near 2**31: each program walks a
    whole stretch of `cols`, so the last one's indices run past N, up to cdiv(N, cols) * cols."""
    return tl.int64 if cdiv(x.shape[1], cols) * cols + INDEX_ROOM >= 2**31 else index_type(x, out)


# %% The launcher and the op
# Every launch passes every argument of its kernel, defaults too (TRACE=False): torch.compile records
# the launch as it is written, and its check of which tensors a kernel writes needs them all (without
# them it assumes the kernel writes every input, and copies them).
def launch(x: torch.Tensor, splits: int | None = None, *, index_type=None, dtype=None) -> torch.Tensor:
    """The row sums of x (as row_sum checked it), shape (M,): one launch, or two where rows are split.
    splits: programs per row (None: choose_splits); index_type: tl.int32 or tl.int64 for every
    launch (None: each launch's offset_type); dtype: the sums' (x's by default), rounded at the store."""
    M, N = x.shape
    y = x.new_empty(M, dtype=dtype)
    if M == 0 or N == 0:
        return y.zero_()
    BLOCK_M, BLOCK_N, num_warps = tile_config(N)
    cols = columns_per_program(N, splits or choose_splits(M, N))
    per_row = cdiv(N, cols)  # programs per row
    if per_row == 1:  # one program per block of rows
        row_sum_kernel[(cdiv(M, BLOCK_M),)](x, y, M, N, x.stride(0), x.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                            INDEX_TYPE=index_type or offset_type(x, y, N), TRACE=False, num_warps=num_warps)
        return y
    # stage 1: partial sums, M x per_row in fp32
    partial = x.new_empty((M, per_row), dtype=torch.float32)
    row_sum_split_kernel[(cdiv(M, BLOCK_M) * per_row,)](
        x, partial, M, N, x.stride(0), x.stride(1), partial.stride(0), cols, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        INDEX_TYPE=index_type or offset_type(x, partial, cols), TRACE=False, num_warps=num_warps)
    # stage 2: the rows of partial summed by row_sum_kernel, with the tiles for rows of per_row
    BLOCK_M, BLOCK_N, num_warps = tile_config(per_row)
    row_sum_kernel[(cdiv(M, BLOCK_M),)](partial, y, M, per_row, partial.stride(0), partial.stride(1), BLOCK_M=BLOCK_M,
                                        BLOCK_N=BLOCK_N, INDEX_TYPE=index_type or offset_type(partial, y, per_row),
                                        TRACE=False, num_warps=num_warps)
    return y


class RowSum(torch.autograd.Function):
    """y_i = sum_j x_ij, so dL/dx_ij = dL/dy_i: each row's gradient copied across the row. Nothing
    to compute, nothing to write: expand() makes an (M, N) view of the M numbers (column stride 0),
    as torch.sum's backward does. No backward kernel."""

    @staticmethod
    def forward(ctx, x, splits):
        ctx.shape = x.shape
        return launch(x, splits)

    @staticmethod
    def backward(ctx, dy):
        return dy[:, None].expand(ctx.shape), None


def row_sum(x: torch.Tensor, *, splits: int | None = None) -> torch.Tensor:
    """Sum of each row of a 2-D tensor: shape (M,), in x's dtype, accumulated in fp32.

    splits: programs per row; None chooses (1 unless there are too few rows to fill the GPU).
    """
    (x,) = check_tensors({"x": x}, DTYPES, ndim=2)
    splits = None if splits is None else whole("splits", splits)  # numpy's and torch's integers too
    return RowSum.apply(x, splits)
