"""SPOILER: the solution of exercise 4.3 (bias and activation epilogue), and wrong ones the tests check the
checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched
from lesson04_matmul.exercises.bias_epilogue import gelu_tanh  # noqa: F401  (the given GELU, called by the kernels)


GIVEN = "6e548cbb4941"  # common.exercise.given_fingerprint of bias_epilogue.py as the course ships it


@triton.jit
def k_loop(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, rows, cols,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The given part: A[rows, :] @ B[:, cols] in float32."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        ks = step * BLOCK_K + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    return acc


@triton.jit
def matmul_bias_act_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                           stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, ACTIVATION: tl.constexpr):
    """C[rows, cols] = act(A[rows, :] @ B[:, cols] + bias[cols]), act by ACTIVATION ("relu" or "gelu")."""
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = k_loop(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, rows, cols,
                 BLOCK_M, BLOCK_N, BLOCK_K)

    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)  # this tile's columns' bias
    acc = acc + bias[None, :]                                                  # down every row
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    if ACTIVATION == "gelu":
        acc = gelu_tanh(acc)

    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


# The mistakes, each an edit of the solution above (common.exercise.patched)
BIAS = ("    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)  # this tile's columns' bias\n"
        "    acc = acc + bias[None, :]                                                  # down every row\n")
ACTIVATION = ('    if ACTIVATION == "relu":\n'
              "        acc = tl.maximum(acc, 0.0)\n"
              '    if ACTIVATION == "gelu":\n'
              "        acc = gelu_tanh(acc)\n")
WRONG = [Wrong("bias by rows", "memory", "past the end of bias",
               dict(matmul_bias_act_kernel=patched(matmul_bias_act_kernel,
                                                   ("bias_ptr + cols, mask=cols < N,",
                                                    "bias_ptr + rows, mask=rows < M,"),
                                                   ("bias[None, :]", "bias[:, None]")))),
         Wrong("bias[:, None]", "runs", "do not match",
               dict(matmul_bias_act_kernel=patched(matmul_bias_act_kernel, ("bias[None, :]", "bias[:, None]")))),
         Wrong("activation before the bias", "values", "are wrong",
               dict(matmul_bias_act_kernel=patched(matmul_bias_act_kernel, (BIAS + ACTIVATION, ACTIVATION + BIAS))))]
