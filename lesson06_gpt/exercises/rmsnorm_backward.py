"""Exercise 6.1 (write): RMSNorm's backward, dx from dy and the forward's rstd, a row in one block.

Worth doing after section 4 (each new kernel against PyTorch).

The statement. The forward (lesson03_rowsum/rmsnorm.py) computed, for each row of x (M x N),

    y = x * rstd * w,    rstd = 1 / sqrt(mean_n(x^2) + eps),

and kept rstd, one float32 per row, for the backward. Autograd hands you dy = dL/dy (x's shape
and dtype); write dx = dL/dx. With xh = x * rstd (the normalised row) and g = w * dy, the chain
rule through y and through rstd gives, for one row,

    dx = rstd * (g - xh * mean_n(g * xh)),      mean over the row's N columns:

one row reduction (the mean of g * xh, one number per row) and then an element-wise step. (dw, a
sum down the columns, is the lesson's other output; not asked here.) x, w and dy are float32,
float16 or bfloat16 (one dtype), rstd float32 (M,); dx has x's shape and dtype, contiguous, the
arithmetic in float32 whatever the dtype, one rounding, at the store. The launcher below is given:
one program per row, the whole row in one block of BLOCK_N lanes (N <= BLOCK_N, a power of two).
x's and dy's rows may lie further apart than N (a slice of a wider tensor): row m of x starts at
x_ptr + m * stride_xm, of dy at dy_ptr + m * stride_dym; the columns are contiguous. Load rstd,
do not recompute it (the kernel has no eps). About 10 lines.

The check: your dx against the formula in float64 from the same rstd (which is torch's autograd of
F.rms_norm to within rstd's float32 rounding).

The cases: a single element in a block of 128 lanes (a mean over the lanes instead of the N
columns shows at once); N = 127, 128 and 129 (a block of 128 one lane short, exact, and one of 256
with 127 lanes masked); 1000 columns with x's rows 1100 apart and dy's 1024 apart; float16 and
bfloat16. Every row has its own scale (so its own rstd, far from 1), w is not all ones, and dy has
both signs, neither constant along a row nor proportional to x (either makes dx nearly 0 whatever
the kernel does).

Run it: python lesson06_gpt/exercises/rmsnorm_backward.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def rmsnorm_backward_kernel(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, N, stride_xm, stride_dym,
                            BLOCK_N: tl.constexpr):
    """dx[row] = rstd * (g - xh * mean(g * xh)), xh = x[row] * rstd[row], g = w * dy[row]: program
    `row` holds its whole row in one block of BLOCK_N lanes, the arithmetic in fp32."""
    pass


def launch(rmsnorm_backward_kernel, x, w, dy, rstd, dx, BLOCK_N=None):
    """Given: one program per row, the whole row in one block (BLOCK_N: the next power of two >= N
    unless a case gives a wider one); dx contiguous."""
    M, N = x.shape
    BLOCK_N = BLOCK_N or triton.next_power_of_2(N)
    assert N <= BLOCK_N
    rmsnorm_backward_kernel[(M,)](x, w, dy, rstd, dx, N, x.stride(0), dy.stride(0), BLOCK_N=BLOCK_N)


def reference(x, w, dy, rstd):
    """The backward's formula from the given rstd, in float32 (float64 for the exact yardstick)."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf, wf, dyf, r = x.to(acc), w.to(acc), dy.to(acc), rstd.to(acc)[:, None]
    xh, g = xf * r, wf * dyf
    return {"dx": (r * (g - xh * (g * xh).mean(dim=1, keepdim=True))).to(x.dtype)}


def case(M: int, N: int, dtype=torch.float32, BLOCK_N: int | None = None, scale: float = 1.0,
         eps: float = 1e-6, x_stride: int | None = None, dy_stride: int | None = None) -> Case:
    i = torch.arange(M * N, dtype=torch.float64).reshape(M, N)
    rows = torch.arange(M, dtype=torch.float64)[:, None]
    x = ((i * 0.37).sin() + 0.3 * (i * 0.071).cos() + 0.2) * scale * (0.5 + 1.5 * rows)  # each row its scale
    dy = (i * 0.193 + 1.0).cos() - 0.2 + 0.1 * (i % 3)           # both signs, not constant, not like x
    w = torch.arange(N, dtype=torch.float64).mul(0.13).cos().mul(0.5).add(1.0)
    x, dy, w = x.to(dtype), dy.to(dtype), w.to(dtype)
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=1) + eps)       # what the forward kept: float32 per row
    if x_stride is not None:  # slices of wider tensors: rows further apart than N
        x = torch.cat([x, torch.zeros(M, x_stride - N, dtype=dtype)], dim=1)[:, :N]
    if dy_stride is not None:
        dy = torch.cat([dy, torch.zeros(M, dy_stride - N, dtype=dtype)], dim=1)[:, :N]
    name = (f"{M} x {N}" + (f", BLOCK_N {BLOCK_N}" if BLOCK_N else "") + f", {str(dtype)[6:]}"
            + (f", x's rows {x_stride} apart, dy's {dy_stride}" if x_stride else ""))
    return Case(name, dict(x=x, w=w, dy=dy, rstd=rstd), dict(BLOCK_N=BLOCK_N) if BLOCK_N else {})


EXERCISE = Exercise(
    lesson="lesson06_gpt", name="rmsnorm_backward", kind="write", parts=("rmsnorm_backward_kernel",),
    stub="40e91626104f", launch=launch, reference=reference, lines=10,
    cases=[case(1, 1, BLOCK_N=128, scale=0.002, eps=1e-5), case(3, 127), case(3, 128), case(3, 129),
           case(4, 1000, x_stride=1100, dy_stride=1024), case(3, 300, torch.float16, scale=4.0),
           case(2, 700, torch.bfloat16)],
    bench_case=lambda: case(4096, 4096, torch.bfloat16),
    hints=["Two steps, in this order: first s = mean over the row of g * xh (one number per row: tl.sum of "
           "the block, divided by N), with xh = x * rstd and g = w * dy; then dx = rstd * (g - xh * s) for "
           "every element. rstd is one float32 loaded for the row, tl.load(rstd_ptr + row).",
           "The masked lanes must add nothing to the sum: load x, w and dy with mask=cols < N and other=0.0 "
           "(then g * xh = 0 there), each converted with .to(tl.float32) at once, and divide by N, the real "
           "columns, not by BLOCK_N.",
           "Mind the strides: x's and dy's rows lie their own strides apart, dx's N apart. The two reductions of "
           "the formula are one tl.sum over the row; which quantity must it sum, and what divides it?"],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
