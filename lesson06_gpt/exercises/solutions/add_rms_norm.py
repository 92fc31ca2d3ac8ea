"""SPOILER: the solution of exercise 6.4 (the residual add fused into RMSNorm), and wrong ones the tests
check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


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


# The mistakes, each an edit of the solution above (common.exercise.patched)
WALK = "range(0, N, BLOCK_N)"
MEAN = "tl.sum(acc, axis=0) / N"
H_IN_WALK_2 = "        h = (x + r).to(h_ptr.dtype.element_ty).to(tl.float32)\n"
WRONG = [Wrong("the squares of x, not of h", "values", "are wrong",
               dict(add_rms_norm_kernel=patched(add_rms_norm_kernel, ("acc += h * h", "acc += x * x")))),
         Wrong("h stored in both walks", "memory", "is written 2 times",
               dict(add_rms_norm_kernel=patched(add_rms_norm_kernel, (H_IN_WALK_2, H_IN_WALK_2 +
                                                "        tl.store(h_ptr + row * N + cols, h, mask=mask)\n")))),
         # right wherever one thread stores and loads an element (the interpreter's one program at a time)
         Wrong("h loaded back in walk 2", "memory", "back after storing it",
               dict(add_rms_norm_kernel=patched(add_rms_norm_kernel,
                                                (H_IN_WALK_2, "        h = tl.load(h_ptr + row * N + cols, mask=mask, "
                                                              "other=0.0).to(tl.float32)\n")))),
         Wrong("range(0, N - BLOCK_N, BLOCK_N) in both walks", "memory", "left unwritten",
               dict(add_rms_norm_kernel=patched(add_rms_norm_kernel, (WALK, "range(0, N - BLOCK_N, BLOCK_N)", 2)))),
         Wrong("divided by the lanes walked, not N", "values", "1 x 1 in tiles of 128",
               dict(add_rms_norm_kernel=patched(add_rms_norm_kernel,
                                                (MEAN, "tl.sum(acc, axis=0) / (tl.cdiv(N, BLOCK_N) * BLOCK_N)")))),
         Wrong("float16 accumulator", "values", "1000 in tiles of 256, float16",
               dict(add_rms_norm_kernel=patched(add_rms_norm_kernel,
                                                ("acc = tl.zeros([BLOCK_N], dtype=tl.float32)",
                                                 "acc = tl.zeros([BLOCK_N], dtype=h_ptr.dtype.element_ty)"),
                                                ("        h = h.to(tl.float32)\n", ""),
                                                (MEAN, "tl.sum(acc, axis=0).to(tl.float32) / N"))))]
