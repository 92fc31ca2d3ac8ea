"""SPOILER: the solution of exercise 3.1 (RMSNorm's forward), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


GIVEN = "0731c9972ed6"  # common.exercise.given_fingerprint of rmsnorm.py as the course ships it


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    """y[row] = x[row] / sqrt(mean(x[row]^2) + eps) * w: program `row` walks its row in tiles of
    BLOCK_N twice, once to sum the squares (in fp32), once to normalise and store."""
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)  # fp32 partial sums of x^2, carried across the tiles
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)  # the mean over the N real columns
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def float16_accumulator(x_ptr, w_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=x_ptr.dtype.element_ty)  # the input's dtype: float16 for float16 rows
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0).to(tl.float32) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def last_tile_missed(x_ptr, w_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N - BLOCK_N, BLOCK_N):  # stops one tile early (none at all when N <= BLOCK_N)
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def last_tile_missed_twice(x_ptr, w_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N - BLOCK_N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N - BLOCK_N, BLOCK_N):  # the same loop twice: the last tile never stored
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def mean_over_the_lanes(x_ptr, w_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    walked = 0
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
        walked += BLOCK_N  # the padded length: every lane walked, masked or not
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / walked + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rows_n_apart(x_ptr, w_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)  # N for the stride
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def one_tile_of_n(x_ptr, w_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, N)  # the whole row at once: N is not known when the kernel compiles
    x = tl.load(x_ptr + row * stride_xm + cols).to(tl.float32)
    rstd = 1 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty))


@triton.jit
def second_pass_unmasked(x_ptr, w_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols).to(tl.float32)
        w = tl.load(w_ptr + cols).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty))


WRONG = [Wrong("float16 accumulator", "values", "5000, BLOCK_N 512, float16", dict(rmsnorm_kernel=float16_accumulator)),
         Wrong("range(0, N - BLOCK_N, BLOCK_N) in the sum", "values", "are wrong",
               dict(rmsnorm_kernel=last_tile_missed)),
         Wrong("range(0, N - BLOCK_N, BLOCK_N) in both loops", "memory", "left unwritten",
               dict(rmsnorm_kernel=last_tile_missed_twice)),
         Wrong("divided by the lanes walked, not N", "values", "1 x 1, BLOCK_N 128",
               dict(rmsnorm_kernel=mean_over_the_lanes)),
         Wrong("N as the row stride", "values", "rows 1100 apart", dict(rmsnorm_kernel=rows_n_apart)),
         Wrong("tl.arange(0, N)", "runs", "constexpr", dict(rmsnorm_kernel=one_tile_of_n)),
         Wrong("second pass unmasked", "memory", "past the end of", dict(rmsnorm_kernel=second_pass_unmasked))]
