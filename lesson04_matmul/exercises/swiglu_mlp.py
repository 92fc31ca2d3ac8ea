"""Exercise 4.6 (stretch, optimise to a budget): Llama's gated MLP, silu(x @ W1) * (x @ W3), x read once.

The statement. The first half of a Llama feed-forward layer computes two products of the same
input, the gate h1 = x @ W1 and the up projection h3 = x @ W3, and multiplies them: out =
silu(h1) * h3, silu(h) = h * sigmoid(h) (lesson 1's SwiGLU exercise took h1 and h3 as given). x
is (M, K), W1 and W3 are (K, N), out is (M, N), one dtype, float16 or float32. PyTorch runs four
kernels (two products, the silu, the multiplication) and writes h1, silu(h1) and h3 to memory. Write one kernel: each program owns a BLOCK_M x BLOCK_N
tile of out, keeps two float32 accumulators, and walks K once; in each step it loads the tile of x
ONCE and gives it to both tl.dot calls (input_precision="ieee", as in exercise 4.1), with the
tiles of W1 and W3 for its columns. After the loop, the gate and the product in float32, then the
store (given). About 14 lines.

The budget, counted in the load log: x is read once per tile column of out (cdiv(N, BLOCK_N)
times over: each program reads its rows of x once, all of K), W1 and W3 once per tile row
(cdiv(M, BLOCK_M) times). Two K loops, one per product, read x twice as often and fail it.

The cases: 1 x 1 x 1; 37 x 50 x 16 with 32 x 16 tiles (K one step); 70 x 45 x 100 with K in
four steps of 32 (ragged in M, N and K); 45 x 70 x 33 float16 with 16 x 32 tiles. The values of
h1 run over both signs (silu's two sides), and W1 and W3 differ, so a gate on the wrong product
shows.

Run it: python lesson04_matmul/exercises/swiglu_mlp.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def swiglu_mlp_kernel(x_ptr, w1_ptr, w3_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn,
                      stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[rows, cols] = silu(x[rows, :] @ W1[:, cols]) * (x[rows, :] @ W3[:, cols]); W1 and W3 share strides."""
    pid_m = tl.program_id(axis=0)  # given: the tile
    pid_n = tl.program_id(axis=1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)

    # Yours: two accumulators, one K loop (x's tile loaded once per step, used by both products), then
    # out = silu(h1) * h3 in float32.

    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, out.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))  # given: the store


def launch(swiglu_mlp_kernel, x, w1, w3, out, BLOCK_M, BLOCK_N, BLOCK_K):
    """Given: one program per tile of out, on a 2-D grid."""
    (M, K), N = x.shape, w1.shape[1]
    assert w1.stride() == w3.stride()
    grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
    swiglu_mlp_kernel[grid](x, w1, w3, out, M, N, K, x.stride(0), x.stride(1), w1.stride(0), w1.stride(1),
                            out.stride(0), out.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)


def reference(x, w1, w3, **_):
    return {"out": F.silu(x @ w1) * (x @ w3)}


def budget_check(log, x, w1, w3, BLOCK_M, BLOCK_N, BLOCK_K):
    """x read cdiv(N, BLOCK_N) times over, W1 and W3 cdiv(M, BLOCK_M) times: each tile loaded once per step."""
    (M, K), N = x.shape, w1.shape[1]
    for name, t, passes, per in (("x", x, cdiv(N, BLOCK_N), "tile column"), ("w1", w1, cdiv(M, BLOCK_M), "tile row"),
                                 ("w3", w3, cdiv(M, BLOCK_M), "tile row")):
        loads = log.count("load", name)
        if loads > passes * t.numel():
            return (f"{name} was read {loads / t.numel():.2f} times over ({loads} element loads for its {t.numel()} "
                    f"element{'s' if t.numel() > 1 else ''}); the budget is {passes}, once per {per} of out. Load each tile once per K step, "
                    "into a variable, and give that variable to both tl.dot calls.")
    return None


def case(M: int, N: int, K: int, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, dtype=torch.float32) -> Case:
    g = torch.Generator().manual_seed(M * 10007 + N * 101 + K)  # seeded: the same values on every run
    x = torch.randn(M, K, generator=g)
    w1 = torch.randn(K, N, generator=g) * (2 / K ** 0.5)  # h1 = x @ W1 of size ~2, both signs: silu's two sides
    w3 = torch.randn(K, N, generator=g) / K ** 0.5
    return Case(f"{M} x {N} x {K}, blocks {BLOCK_M} x {BLOCK_N} x {BLOCK_K}, {str(dtype)[6:]}",
                dict(x=x.to(dtype), w1=w1.to(dtype), w3=w3.to(dtype), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                     BLOCK_K=BLOCK_K))


EXERCISE = Exercise(
    lesson="lesson04_matmul", name="swiglu_mlp", kind="optimise", parts=("swiglu_mlp_kernel",), stub="1a573cb9b61c",
    launch=launch, reference=reference, budget_check=budget_check, lines=14, stretch=True,
    cases=[case(1, 1, 1), case(37, 50, 16, BLOCK_M=32), case(70, 45, 100, BLOCK_K=32),
           case(45, 70, 33, BLOCK_N=32, dtype=torch.float16)],
    bench_case=lambda: case(2048, 4096, 2048, 128, 64, 64, dtype=torch.float16),
    hints=["Exercise 4.1's loop, with two accumulators, acc1 and acc3, and three loads per step: x's tile "
           "x[rows, ks], then W1[ks, cols] and W3[ks, cols] (the same offsets and mask, two pointers).",
           "acc1 = tl.dot(x_tile, w1_tile, acc1, input_precision=\"ieee\") and acc3 = tl.dot(x_tile, w3_tile, acc3, ...): "
           "the same x_tile variable in both, so x is loaded once per step.",
           "After the loop: out = acc1 * tl.sigmoid(acc1) * acc3 (all float32); the store is given."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
