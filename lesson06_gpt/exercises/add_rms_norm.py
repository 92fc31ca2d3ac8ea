"""Exercise 6.4 (stretch, write): the residual add fused into RMSNorm's forward, h stored on the way.

Worth doing after exercises 3.1 and 6.1, and section 7 (the anatomy of a training step).

The statement. A transformer block's residual stream goes h = x + f(x), and the next block begins
with norm(h). Unfused, that is two kernels: the add writes h, the norm reads it back. Fused (as
lesson03_rowsum/rmsnorm.py does with `residual`), one kernel reads x and the residual, stores h
once (the stream goes on with it) and normalises it without reading h back:

    h = x + residual,   rounded to x's dtype (as torch's x + residual is),
    rstd = 1 / sqrt(mean_n(h^2) + eps),     y = h * rstd * w,

h and y of x's shape and dtype (float32, float16 or bfloat16), and rstd, one float32 per row,
kept for the backward (exercise 6.1's input). x, residual and w share one dtype; x's rows are
stride_xm apart (a slice of a wider tensor in one case), the residual's stride_rm, columns
contiguous; h and y are contiguous (row m at m * N). The arithmetic in float32. The launcher
below is given: one program per row; a row is several tiles of BLOCK_N long, so the program
walks it twice, as in exercise 3.1:
  1. h = x + residual for each tile, rounded to h's dtype and stored (each element of h written
     once: this walk only), its squares (of the rounded h) added into an fp32 accumulator;
     after the loop rstd from the sum over the N real columns, stored;
  2. the same tiles again: h recomputed from x and the residual, rounded alike, not loaded back
     (a store and a load of one address by different threads of a program are not ordered on a
     GPU without a barrier: recomputing is cheaper and always right), times rstd and w, stored.
About 20 lines.

The cases: a single element in tiles of 128 (a mean over the lanes walked shows); N = 127, 128 and
129 in tiles of 128; 1000 columns in tiles of 256 with x's rows 1100 apart; 1000 float16 columns
whose sums of squares (88,000 and 159,000) pass float16's largest number, 65,504 (a float16
accumulator overflows); 700 bfloat16 columns in tiles of 128. x and the residual differ (a norm
of x alone shows), every row has its own scale, the values are not symmetric.

Run it: python lesson06_gpt/exercises/add_rms_norm.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def add_rms_norm_kernel(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, N, stride_xm, stride_rm, eps,
                        BLOCK_N: tl.constexpr):
    """h[row] = x[row] + residual[row] (stored, in h's dtype), rstd[row] = 1 / sqrt(mean(h^2) + eps),
    y[row] = h * rstd * w: program `row` walks its row in tiles of BLOCK_N twice."""
    pass


def launch(add_rms_norm_kernel, x, residual, w, h, y, rstd, eps, BLOCK_N=128):
    """Given: one program per row, BLOCK_N columns at a time; h and y contiguous."""
    M, N = x.shape
    add_rms_norm_kernel[(M,)](x, residual, w, h, y, rstd, N, x.stride(0), residual.stride(0), eps, BLOCK_N=BLOCK_N)


def reference(x, residual, w, eps):
    """torch: the sum in x's dtype, the norm in float32 (float64 for the exact yardstick)."""
    acc = torch.promote_types(x.dtype, torch.float32)
    h = x + residual
    hf = h.to(acc)
    rstd = torch.rsqrt(hf.pow(2).mean(dim=1) + eps)
    return {"h": h, "y": (hf * rstd[:, None] * w.to(acc)).to(x.dtype), "rstd": rstd}


def case(M: int, N: int, BLOCK_N: int, dtype=torch.float32, scale: float = 1.0, stride: int | None = None) -> Case:
    i = torch.arange(M * N, dtype=torch.float64).reshape(M, N)
    rows = torch.arange(M, dtype=torch.float64)[:, None]
    x = ((i * 0.37).sin() + 0.3 * (i * 0.071).cos() + 0.2) * scale * (1 + 0.5 * rows)  # each row its scale
    residual = (0.8 * (i * 0.211 + 1.0).cos() - 0.1) * scale                          # not x, not symmetric
    w = torch.arange(N, dtype=torch.float64).mul(0.13).cos().mul(0.5).add(1.0)
    x, residual, w = x.to(dtype), residual.to(dtype), w.to(dtype)
    if stride is not None:  # a slice of a wider tensor: x's rows `stride` elements apart
        x = torch.cat([x, torch.zeros(M, stride - N, dtype=dtype)], dim=1)[:, :N]
    name = f"{M} x {N} in tiles of {BLOCK_N}, {str(dtype)[6:]}" + (f", x's rows {stride} apart" if stride else "")
    return Case(name, dict(x=x, residual=residual, w=w, eps=1e-6), dict(BLOCK_N=BLOCK_N))


EXERCISE = Exercise(
    lesson="lesson06_gpt", name="add_rms_norm", kind="write", parts=("add_rms_norm_kernel",), stub="e46f89e119e0",
    launch=launch, reference=reference, lines=20, stretch=True,
    cases=[case(1, 1, 128), case(3, 127, 128), case(3, 128, 128), case(3, 129, 128),
           case(2, 1000, 256, stride=1100), case(2, 1000, 256, torch.float16, scale=10.0),
           case(3, 700, 128, torch.bfloat16)],
    bench_case=lambda: case(4096, 8192, 1024, torch.bfloat16),
    hints=["Exercise 3.1's two loops over start in range(0, N, BLOCK_N), with a second input: in each, "
           "cols = start + tl.arange(0, BLOCK_N), mask = cols < N, and h = x + residual from two masked loads "
           "(other=0.0) converted to float32. Only the first loop stores h; after it, store rstd "
           "(tl.store(rstd_ptr + row, rstd)).",
           "Round h as torch does before squaring it and before normalising it: h = (x + r).to(h_ptr.dtype"
           ".element_ty), store that, then h = h.to(tl.float32). The masked lanes give h = 0: they add nothing "
           "to the sum, which is divided by N, not by the lanes walked.",
           "Walk 1 stores h at h_ptr + row * N + cols (h is contiguous; x and the residual are not: their rows "
           "are stride_xm and stride_rm apart) and adds h * h into acc = tl.zeros([BLOCK_N], dtype=tl.float32); "
           "walk 2 needs w's tile as well, and stores h * rstd * w in y's dtype, with the mask."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
