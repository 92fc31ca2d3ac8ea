"""SPOILER: the solution of exercise 6.4 (the residual add fused into RMSNorm), and wrong ones the tests
check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


GIVEN = "9ec70c6257ba"  # common.exercise.given_fingerprint of add_rms_norm.py as the course ships it


@triton.jit
def add_rms_norm_kernel(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, N, stride_xm, stride_rm, eps,
                        BLOCK_N: tl.constexpr):
    """h[row] = x[row] + residual[row] (stored, in h's dtype), rstd[row] = 1 / sqrt(mean(h^2) + eps),
    y[row] = h * rstd * w: program `row` walks its row in tiles of BLOCK_N twice."""
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)   # fp32 partial sums of h^2, carried across the tiles
    for start in range(0, N, BLOCK_N):            # walk 1: h, stored once, and its squares
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty)    # rounded as torch's x + residual
        tl.store(h_ptr + row * N + cols, h, mask=mask)
        h = h.to(tl.float32)
        acc += h * h
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)  # the mean over the N real columns
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N, BLOCK_N):            # walk 2: h recomputed (not loaded back), normalised
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def squares_of_x(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, N, stride_xm, stride_rm, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(h_ptr + row * N + cols, (x + r).to(h_ptr.dtype.element_ty), mask=mask)
        acc += x * x                              # the norm of x, the residual left out of it
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def h_stored_twice(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, N, stride_xm, stride_rm, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * N + cols, h, mask=mask)
        h = h.to(tl.float32)
        acc += h * h
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * N + cols, h, mask=mask)  # the same h written again, in walk 2
        h = h.to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def last_tile_missed(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, N, stride_xm, stride_rm, eps,
                     BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N - BLOCK_N, BLOCK_N):  # stops one tile early, in both walks
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * N + cols, h, mask=mask)
        h = h.to(tl.float32)
        acc += h * h
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N - BLOCK_N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def mean_over_the_lanes(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, N, stride_xm, stride_rm, eps,
                        BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    walked = 0
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * N + cols, h, mask=mask)
        h = h.to(tl.float32)
        acc += h * h
        walked += BLOCK_N                          # the padded length: every lane walked, masked or not
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / walked + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def float16_accumulator(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, N, stride_xm, stride_rm, eps,
                        BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=h_ptr.dtype.element_ty)  # the rows' dtype: float16 for float16 rows
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0)
        h = x + r
        tl.store(h_ptr + row * N + cols, h, mask=mask)
        acc += h * h
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0).to(tl.float32) / N + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


WRONG = [Wrong("the squares of x, not of h", "values", "are wrong", dict(add_rms_norm_kernel=squares_of_x)),
         Wrong("h stored in both walks", "memory", "is written 2 times", dict(add_rms_norm_kernel=h_stored_twice)),
         Wrong("range(0, N - BLOCK_N, BLOCK_N) in both walks", "memory", "left unwritten",
               dict(add_rms_norm_kernel=last_tile_missed)),
         Wrong("divided by the lanes walked, not N", "values", "1 x 1 in tiles of 128",
               dict(add_rms_norm_kernel=mean_over_the_lanes)),
         Wrong("float16 accumulator", "values", "1000 in tiles of 256, float16",
               dict(add_rms_norm_kernel=float16_accumulator))]
