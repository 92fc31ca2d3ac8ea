"""Exercise 4.3 (write): a fused epilogue, C = act(A @ B + bias), in one store.

The statement. A linear layer with a bias and an activation: A (M, K) the activations, B (K, N)
the weights, bias a vector of N (one number per output column, as nn.Linear's), all of one
dtype, float16 or float32; C (M, N) in that dtype, C[i, j] = act(sum_k A[i, k] B[k, j] + bias[j]),
act relu or gelu (tanh form, lesson 1's gelu_tanh, given below) by the constexpr ACTIVATION.
In PyTorch, torch.relu(a @ b + bias) runs three kernels and writes C three times. Here the K loop
and the store are given (exercise 4.1's); write the epilogue between them (lesson 4, section 4):
while acc, the float32 tile of A @ B, is still on chip, load this tile's slice of the bias (masked,
as C's columns are), add it to every row of acc, then apply the activation, in float32. About 6
lines.

The cases: relu and gelu; float32 and float16; 1 x 1 x 1 (one lane of one program); 37 x 50 x 16
with 32 x 16 tiles (tiles taller than wide, so the bias's two orientations have different
shapes; K one step); 70 x 45 x 100 with K in four steps of 32, M larger than N (a bias read by
rows runs past its N numbers), ragged in M, N and K; 45 x 70 x 33, float16, with 16 x 32 tiles.
A @ B and the bias are seeded random numbers of the same size and of both signs, so a bias
added along the wrong axis, or after the activation, shows in many elements.

Run it: python lesson04_matmul/exercises/bias_epilogue.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def gelu_tanh(x):
    """Given (lesson 1's): GELU, tanh form, on a float32 block; 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u))."""
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2/pi) * (x + 0.044715 x^3)
    return tl.fdiv(x, 1.0 + tl.exp(-2.0 * u), ieee_rounding=False)


@triton.jit
def matmul_bias_act_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                           stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, ACTIVATION: tl.constexpr):
    """C[rows, cols] = act(A[rows, :] @ B[:, cols] + bias[cols]), act by ACTIVATION ("relu" or "gelu")."""
    pid_m = tl.program_id(axis=0)  # given: the tile, the K loop
    pid_n = tl.program_id(axis=1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        ks = step * BLOCK_K + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")

    # Yours: the epilogue. The bias (N numbers, one per column), then the activation, on acc.

    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))  # given: the one store


def launch(matmul_bias_act_kernel, a, b, bias, c, activation, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16):
    """Given: one program per tile of C, on a 2-D grid."""
    (M, K), N = a.shape, b.shape[1]
    grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
    matmul_bias_act_kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                 c.stride(0), c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                 ACTIVATION=activation)


def reference(a, b, bias, activation):
    z = a @ b + bias  # bias (N,) broadcasts along the rows: bias[j] for column j
    return {"c": torch.relu(z) if activation == "relu" else F.gelu(z, approximate="tanh")}


def case(M: int, N: int, K: int, activation: str, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, dtype=torch.float32) -> Case:
    g = torch.Generator().manual_seed(M * 10007 + N * 101 + K)  # seeded: the same values on every run
    a = torch.randn(M, K, generator=g)
    b = torch.randn(K, N, generator=g) / K ** 0.5  # A @ B of size ~1, both signs
    bias = torch.randn(N, generator=g)             # the same size, both signs
    return Case(f"{M} x {N} x {K}, {activation}, blocks {BLOCK_M} x {BLOCK_N} x {BLOCK_K}, {str(dtype)[6:]}",
                dict(a=a.to(dtype), b=b.to(dtype), bias=bias.to(dtype), activation=activation),
                dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K))


EXERCISE = Exercise(
    lesson="lesson04_matmul", name="bias_epilogue", kind="write", parts=("matmul_bias_act_kernel",),
    stub="e76f74b0af3a", launch=launch, reference=reference, lines=6,
    cases=[case(1, 1, 1, "relu"), case(37, 50, 16, "relu", BLOCK_M=32), case(70, 45, 100, "gelu", BLOCK_K=32),
           case(37, 50, 16, "gelu", BLOCK_M=32, dtype=torch.float16),
           case(45, 70, 33, "relu", BLOCK_N=32, dtype=torch.float16)],
    bench_case=lambda: case(2048, 2048, 2048, "gelu", 128, 128, 64, dtype=torch.float16),
    hints=["The bias belongs to C's columns: this tile needs bias[cols], BLOCK_N numbers, loaded once per program "
           "(after the loop, not in it), masked with cols < N.",
           "acc is BLOCK_M x BLOCK_N and the bias a row of BLOCK_N: bias[None, :] broadcasts it down the rows. "
           "The activation comes after the add: act(A @ B + bias). ACTIVATION is a constexpr, so "
           "`if ACTIVATION == \"relu\":` is decided when the kernel compiles.",
           "bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32); acc = acc + bias[None, :]; "
           "then acc = tl.maximum(acc, 0.0) for relu, acc = gelu_tanh(acc) for gelu."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
