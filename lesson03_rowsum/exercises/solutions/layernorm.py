"""SPOILER: the solution of exercise 3.6 (LayerNorm's forward, in three walks), and wrong ones the tests
check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


GIVEN = "5f6d7896173d"  # common.exercise.given_fingerprint of layernorm.py as the course ships it


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    """y[row] = (x[row] - mean) / sqrt(var + eps) * w + b, program `row` walking its row in tiles."""
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):  # 1. the mean
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):  # 2. the variance around it
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)  # a padded lane's 0 - mean kept out of the sum
        acc += d * d
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):  # 3. normalise, scale, shift, store
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def padding_in_the_variance(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += (x - mean) * (x - mean)  # the padded lanes add mean^2 each
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def one_walk_shortcut(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):  # sum and sum of squares in one walk
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x
        acc2 += x * x
    mean = tl.sum(acc, axis=0) / N
    var = tl.sum(acc2, axis=0) / N - mean * mean  # two nearly equal numbers subtracted
    rstd = 1 / tl.sqrt(var + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def unbiased_variance(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / (N - 1) + eps)  # torch.var's default, not layer_norm's
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def weights_unmasked(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols).to(tl.float32)  # "the store is masked, that is enough"
        b = tl.load(b_ptr + cols).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


WRONG = [Wrong("padded lanes in the variance", "values", "3 x 127, BLOCK_N 128",
               dict(layernorm_kernel=padding_in_the_variance)),
         Wrong("var = mean(x^2) - mean^2", "values", "offset 1000", dict(layernorm_kernel=one_walk_shortcut)),
         Wrong("variance over N - 1", "values", "are wrong", dict(layernorm_kernel=unbiased_variance)),
         Wrong("w and b loaded unmasked", "memory", "past the end of w", dict(layernorm_kernel=weights_unmasked))]
