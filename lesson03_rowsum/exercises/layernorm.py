"""Exercise 3.6 (stretch, write): LayerNorm's forward, the mean and then the variance around it, in tiles.

The statement. x is an M x N tensor (float32, float16 or bfloat16), w and b vectors of N weights
and biases of x's dtype, eps a small float; y has x's shape and dtype. For every row,

    mean = sum_n x[m, n] / N,   var = sum_n (x[m, n] - mean)^2 / N   (the biased variance, as torch's)
    y[m, n] = (x[m, n] - mean) / sqrt(var + eps) * w[n] + b[n],

the arithmetic in float32, one rounding at the store: torch.nn.functional.layer_norm. The launcher
is given: one program per row, the row walked in tiles of BLOCK_N. Exercise 3.1's two walks become
three: the mean; the variance around the mean; the normalisation. Two traps wait:
  - the masked lanes of a ragged last tile load as 0, and 0 - mean is not 0: under the square,
    each one adds mean^2 to the variance unless it is kept out (tl.where(mask, x - mean, 0.0));
  - the one-walk shortcut var = mean(x^2) - mean^2 subtracts two large, nearly equal numbers
    when the values sit far from 0: with a mean of 1000 and a spread of about 1, float32 keeps
    about 7 digits of the 10^6 and the variance is lost in their rounding.
Row m of x starts at x_ptr + m * stride_xm; columns are contiguous; y is contiguous. About 20 lines.
(Welford's update computes mean and variance in one walk, stably, if you know it.)

The cases: a single element (var = 0: y = b); N = 127 and 129 with tiles of 128 (a ragged last
tile, one padded lane or 127); 1000 columns around an offset of 1000 in tiles of 256; 3000
float16 columns in tiles of 512; 4096 float16 columns around 50 in tiles of 64, whose sum, about
205000, is past float16's largest number, 65504 (a float16 accumulator overflows to inf, as a GPU's
does; float32 holds it); 500 bfloat16 columns read through a slice (stride_xm = 640).

Run it: python lesson03_rowsum/exercises/layernorm.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    """y[row] = (x[row] - mean) / sqrt(var + eps) * w + b, program `row` walking its row in tiles."""
    pass


def launch(layernorm_kernel, x, w, b, y, eps, BLOCK_N=256):
    """Given: one program per row."""
    M, N = x.shape
    layernorm_kernel[(M,)](x, w, b, y, N, x.stride(0), y.stride(0), eps, BLOCK_N=BLOCK_N)


def reference(x, w, b, eps):
    acc = torch.promote_types(x.dtype, torch.float32)
    return {"y": F.layer_norm(x.to(acc), (x.shape[1],), w.to(acc), b.to(acc), eps).to(x.dtype)}


def case(M: int, N: int, BLOCK_N: int, dtype=torch.float32, offset: float = 0.0, stride: int | None = None) -> Case:
    i = torch.arange(M * N, dtype=torch.float32).reshape(M, N)
    rows = torch.arange(M, dtype=torch.float32)[:, None]
    x = ((i * 0.37).sin() + 0.3 * (i * 0.071).cos() + 0.2 + 0.3 * rows) * (1 + 0.5 * rows) + offset
    w = torch.arange(N, dtype=torch.float32).mul(0.13).cos().mul(0.5).add(1.0)
    b = torch.arange(N, dtype=torch.float32).mul(0.29).add(0.5).sin().mul(0.1)  # b[0] is not 0: 1 x 1 gives y = b
    x = x.to(dtype)
    if stride is not None:  # a slice of a wider tensor: rows `stride` elements apart
        x = torch.cat([x, torch.zeros(M, stride - N, dtype=dtype)], dim=1)[:, :N]
    name = (f"{M} x {N}, BLOCK_N {BLOCK_N}, {str(dtype)[6:]}" + (f", offset {offset:g}" if offset else "")
            + (f", rows {stride} apart" if stride else ""))
    return Case(name, dict(x=x, w=w.to(dtype), b=b.to(dtype), eps=1e-5), dict(BLOCK_N=BLOCK_N))


EXERCISE = Exercise(
    lesson="lesson03_rowsum", name="layernorm", kind="write", parts=("layernorm_kernel",), stub="d04c9696e9eb",
    launch=launch, reference=reference, lines=20, stretch=True,
    cases=[case(1, 1, 128), case(3, 127, 128), case(3, 129, 128), case(2, 1000, 256, offset=1000.0),
           case(2, 3000, 512, torch.float16), case(1, 4096, 64, torch.float16, offset=50.0),
           case(3, 500, 128, torch.bfloat16, stride=640)],
    bench_case=lambda: case(4096, 8192, 1024, torch.bfloat16),
    hints=["Three loops over the same tiles, cols = start + tl.arange(0, BLOCK_N), mask = cols < N, x loaded "
           "with other=0.0 and .to(tl.float32): the first adds x into an fp32 accumulator (mean = tl.sum(acc, "
           "axis=0) / N), the second adds (x - mean)^2 into another, the third normalises and stores.",
           "In the second loop, d = tl.where(mask, x - mean, 0.0) before squaring: a padded lane holds 0, and "
           "(0 - mean)^2 is not 0. Then rstd = 1 / tl.sqrt(tl.sum(acc2, axis=0) / N + eps).",
           "The third loop: w and b loaded with mask=mask and .to(tl.float32); tl.store(y_ptr + row * stride_ym + "
           "cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
