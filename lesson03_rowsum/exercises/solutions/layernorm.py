"""SPOILER: the solution of exercise 3.6 (LayerNorm's forward, in three walks), and wrong ones the tests
check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "9c28a14f92c2"  # common.exercise.given_fingerprint of layernorm.py as the course ships it


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


# The mistakes, each an edit of the solution above (common.exercise.patched)
MEAN_LOAD = "        acc += tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)\n"
VARIANCE_WALK = ("    acc = tl.zeros([BLOCK_N], dtype=tl.float32)\n"
                 "    for start in range(0, N, BLOCK_N):  # 2. the variance around it\n"
                 "        cols = start + tl.arange(0, BLOCK_N)\n"
                 "        mask = cols < N\n"
                 "        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)\n"
                 "        d = tl.where(mask, x - mean, 0.0)  # a padded lane's 0 - mean kept out of the sum\n"
                 "        acc += d * d\n"
                 "    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)\n")
ONE_WALK = (("    row = tl.program_id(axis=0)\n",
             "    row = tl.program_id(axis=0)\n    acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)\n"),
            (MEAN_LOAD, "        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)\n"
                        "        acc += x\n"
                        "        acc2 += x * x  # the sum of squares in the mean's walk\n"),
            (VARIANCE_WALK, "    var = tl.sum(acc2, axis=0) / N - mean * mean  # two nearly equal numbers subtracted\n"
                            "    rstd = 1 / tl.sqrt(var + eps)\n"))
WRONG = [Wrong("padded lanes in the variance", "values", "3 x 127, BLOCK_N 128",
               dict(layernorm_kernel=patched(layernorm_kernel, ("d = tl.where(mask, x - mean, 0.0)", "d = x - mean")))),
         Wrong("var = mean(x^2) - mean^2", "values", "offset 1000",
               dict(layernorm_kernel=patched(layernorm_kernel, *ONE_WALK))),
         Wrong("variance over N - 1", "values", "are wrong",
               dict(layernorm_kernel=patched(layernorm_kernel, ("tl.sum(acc, axis=0) / N + eps",
                                                                "tl.sum(acc, axis=0) / (N - 1) + eps")))),
         # the sums in float16, from the loads on: right on short rows, past float16's range on long ones
         Wrong("float16 accumulators", "values", "1 x 4096, BLOCK_N 64, float16, offset 50",
               dict(layernorm_kernel=patched(layernorm_kernel,
                                             ("acc = tl.zeros([BLOCK_N], dtype=tl.float32)",
                                              "acc = tl.zeros([BLOCK_N], dtype=x_ptr.dtype.element_ty)", 2),
                                             (MEAN_LOAD, MEAN_LOAD.replace(".to(tl.float32)", "")),
                                             ("other=0.0).to(tl.float32)\n        d = tl.where(mask, x - mean, 0.0)",
                                              "other=0.0)\n"
                                              "        d = tl.where(mask, x - mean.to(x.dtype), 0.0).to(x.dtype)")))),
         Wrong("w and b loaded unmasked", "memory", "past the end of w",
               dict(layernorm_kernel=patched(layernorm_kernel, ("tl.load(w_ptr + cols, mask=mask, other=0.0)",
                                                                "tl.load(w_ptr + cols)"),
                                             ("tl.load(b_ptr + cols, mask=mask, other=0.0)",
                                              "tl.load(b_ptr + cols)"))))]
