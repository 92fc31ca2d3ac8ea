"""SPOILER: the solution of exercise 3.1 (RMSNorm's forward), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


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


# The mistakes, each an edit of the solution above (common.exercise.patched)
ACC = "    acc = tl.zeros([BLOCK_N], dtype=tl.float32)  # fp32 partial sums of x^2, carried across the tiles\n"
LOOP = "    for start in range(0, N, BLOCK_N):\n"
SHORT_LOOP = "    for start in range(0, N - BLOCK_N, BLOCK_N):  # stops one tile early (none when N <= BLOCK_N)\n"
WALKS = (ACC + LOOP +
         "        cols = start + tl.arange(0, BLOCK_N)\n"
         "        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)\n"
         "        acc += x * x\n"
         "    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)  # the mean over the N real columns\n" + LOOP +
         "        cols = start + tl.arange(0, BLOCK_N)\n"
         "        mask = cols < N\n"
         "        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)\n"
         "        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)\n"
         "        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)\n")
WHOLE_ROW = ("    cols = tl.arange(0, N)  # the whole row at once: N is not known when the kernel compiles\n"
             "    x = tl.load(x_ptr + row * stride_xm + cols).to(tl.float32)\n"
             "    rstd = 1 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)\n"
             "    w = tl.load(w_ptr + cols).to(tl.float32)\n"
             "    tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty))\n")
WRONG = [Wrong("float16 accumulator", "values", "5000, BLOCK_N 512, float16",
               dict(rmsnorm_kernel=patched(rmsnorm_kernel,
                                           (ACC, "    acc = tl.zeros([BLOCK_N], dtype=x_ptr.dtype.element_ty)"
                                                 "  # the input's dtype: float16 for float16 rows\n"),
                                           ("mask=cols < N, other=0.0).to(tl.float32)", "mask=cols < N, other=0.0)"),
                                           ("tl.sum(acc, axis=0) / N", "tl.sum(acc, axis=0).to(tl.float32) / N")))),
         Wrong("range(0, N - BLOCK_N, BLOCK_N) in the sum", "values", "are wrong",
               dict(rmsnorm_kernel=patched(rmsnorm_kernel, (ACC + LOOP, ACC + SHORT_LOOP)))),
         Wrong("range(0, N - BLOCK_N, BLOCK_N) in both loops", "memory", "left unwritten",
               dict(rmsnorm_kernel=patched(rmsnorm_kernel, (LOOP, SHORT_LOOP, 2)))),
         Wrong("divided by the lanes walked, not N", "values", "1 x 1, BLOCK_N 128",
               dict(rmsnorm_kernel=patched(rmsnorm_kernel, (ACC, ACC + "    walked = 0\n"),
                                           ("        acc += x * x\n",
                                            "        acc += x * x\n"
                                            "        walked += BLOCK_N"
                                            "  # the padded length: every lane walked, masked or not\n"),
                                           ("/ N + eps)  # the mean over the N real columns", "/ walked + eps)")))),
         Wrong("N as the row stride", "values", "rows 1100 apart",
               dict(rmsnorm_kernel=patched(rmsnorm_kernel, ("row * stride_xm", "row * N", 2),
                                           ("row * stride_ym", "row * N")))),
         Wrong("tl.arange(0, N)", "runs", "constexpr",  # a larger edit: no walks, the whole body replaced
               dict(rmsnorm_kernel=patched(rmsnorm_kernel, (WALKS, WHOLE_ROW)))),
         Wrong("second pass unmasked", "memory", "past the end of",
               dict(rmsnorm_kernel=patched(rmsnorm_kernel, (", mask=mask, other=0.0)", ")", 2),
                                           (", mask=mask)", ")"))))]
