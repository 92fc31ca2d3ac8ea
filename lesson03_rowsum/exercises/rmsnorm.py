"""Exercise 3.1 (write): RMSNorm's forward, a row reduction and then a normalisation, rows walked twice.

The statement. x is an M x N tensor (float32, float16 or bfloat16), w a vector of N weights of
x's dtype, eps a small float; y has x's shape and dtype. For every row,

    y[m, n] = x[m, n] / sqrt(mean_n(x[m, n]^2) + eps) * w[n],   mean over the row's N columns,

the arithmetic in float32 whatever the dtype, one rounding, at the store. (RMSNorm is the norm of
Llama and most models since: LayerNorm without the mean.) The launcher below is given: one program
per row, grid (M,). A row is longer than one tile (N up to 5000, BLOCK_N from 128 to 512), so the
program walks its row twice, tile by tile, as row_sum_kernel does (lesson 3, section 1):
  1. the reduction: an fp32 accumulator of BLOCK_N lanes carried across the tiles, adding x^2;
     one tl.sum after the loop, divided by N (the real columns, not the lanes walked);
  2. the normalisation: the same tiles again, each one loaded, scaled, multiplied by w and stored.
x's rows may lie further apart than N (a slice of a wider tensor): row m starts at
x_ptr + m * stride_xm; its columns are contiguous, and so are y's. About 14 lines.

The cases: a single element (1 x 1: one lane of 128 real, so a mean over the lanes walked
instead of the N columns shows at once); N = 127, 128 and 129 with tiles of 128 (one tile, a
full tile, and a second tile of one column: a loop that stops one tile early shows); 1000
columns in tiles of 256 read through a slice (stride_xm = 1100); 5000 float16 columns of
activations of a few units (up to 11), whose sums of squares (73,000 and 164,000) are past
float16's largest number, 65,504: a float16 accumulator overflows there; 700 bfloat16 columns in
tiles of 128. Every row has its own scale, and the values are not
symmetric, so a row mixed up with another or a sign lost shows.

Run it: python lesson03_rowsum/exercises/rmsnorm.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    """y[row] = x[row] / sqrt(mean(x[row]^2) + eps) * w: program `row` walks its row in tiles of
    BLOCK_N twice, once to sum the squares (in fp32), once to normalise and store."""
    pass


def launch(rmsnorm_kernel, x, w, y, eps, BLOCK_N=256):
    """Given: one program per row."""
    M, N = x.shape
    rmsnorm_kernel[(M,)](x, w, y, N, x.stride(0), y.stride(0), eps, BLOCK_N=BLOCK_N)


def reference(x, w, eps):
    acc = torch.promote_types(x.dtype, torch.float32)  # float32, or float64 for the exact yardstick
    xf, wf = x.to(acc), w.to(acc)
    return {"y": (xf * torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + eps) * wf).to(x.dtype)}


def case(M: int, N: int, BLOCK_N: int, dtype=torch.float32, scale: float = 1.0, stride: int | None = None) -> Case:
    i = torch.arange(M * N, dtype=torch.float32).reshape(M, N)
    rows = torch.arange(M, dtype=torch.float32)[:, None]
    x = ((i * 0.37).sin() + 0.3 * (i * 0.071).cos() + 0.2) * scale * (1 + 0.5 * rows)  # each row its own scale
    w = torch.arange(N, dtype=torch.float32).mul(0.13).cos().mul(0.5).add(1.0)
    x = x.to(dtype)
    if stride is not None:  # a slice of a wider tensor: rows `stride` elements apart
        x = torch.cat([x, torch.zeros(M, stride - N, dtype=dtype)], dim=1)[:, :N]
    name = f"{M} x {N}, BLOCK_N {BLOCK_N}, {str(dtype)[6:]}" + (f", rows {stride} apart" if stride else "")
    return Case(name, dict(x=x, w=w.to(dtype), eps=1e-6), dict(BLOCK_N=BLOCK_N))


EXERCISE = Exercise(
    lesson="lesson03_rowsum", name="rmsnorm", kind="write", parts=("rmsnorm_kernel",), stub="8c441b53ebb8",
    launch=launch, reference=reference, lines=14,
    cases=[case(1, 1, 128), case(3, 127, 128), case(3, 128, 128), case(3, 129, 128),
           case(4, 1000, 256, stride=1100), case(2, 5000, 512, torch.float16, scale=5.0),
           case(3, 700, 128, torch.bfloat16)],
    bench_case=lambda: case(4096, 8192, 1024, torch.bfloat16),
    hints=["Two loops over the same tiles, `for start in range(0, N, BLOCK_N)`: the first only adds "
           "x * x into an fp32 accumulator (acc = tl.zeros([BLOCK_N], dtype=tl.float32)); after it, "
           "rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps); the second loop uses rstd.",
           "In each loop: cols = start + tl.arange(0, BLOCK_N); mask = cols < N; load the tile with "
           "mask=mask, other=0.0 and .to(tl.float32) at once (x * x overflows float16 once |x| passes 256). The "
           "masked lanes add 0 to the sum, so divide by N, not by the lanes walked.",
           "row = tl.program_id(axis=0); x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, "
           "other=0.0).to(tl.float32); in the second loop also w = tl.load(w_ptr + cols, mask=mask)"
           ".to(tl.float32), then tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w)"
           ".to(y_ptr.dtype.element_ty), mask=mask)."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
