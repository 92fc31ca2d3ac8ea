"""SPOILER: the solution of exercise 4.1 (the K loop), and wrong ones the tests check the checker with."""
import common.device
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "461c15eb804e"  # common.exercise.given_fingerprint of k_loop.py as the course ships it


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[rows, cols] = A[rows, :] @ B[:, cols] for this program's tile, in float32, stored in C's dtype."""
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        ks = step * BLOCK_K + tl.arange(0, BLOCK_K)
        a_offsets = rows[:, None] * stride_am + ks[None, :] * stride_ak
        b_offsets = ks[:, None] * stride_bk + cols[None, :] * stride_bn
        a_mask = (rows[:, None] < M) & (ks[None, :] < K)
        b_mask = (ks[:, None] < K) & (cols[None, :] < N)
        a = tl.load(a_ptr + a_offsets, mask=a_mask, other=0.0)
        b = tl.load(b_ptr + b_offsets, mask=b_mask, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")

    c_offsets = rows[:, None] * stride_cm + cols[None, :] * stride_cn
    c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptr + c_offsets, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


# The mistakes, each an edit of the solution above (common.exercise.patched)
WRONG = [Wrong("K // BLOCK_K steps", "values", "are wrong",
               dict(matmul_kernel=patched(matmul_kernel, ("range(0, tl.cdiv(K, BLOCK_K))", "range(0, K // BLOCK_K)")))),
         Wrong("no mask on K", "memory", "past the end of a",
               dict(matmul_kernel=patched(matmul_kernel, ("a_mask = (rows[:, None] < M) & (ks[None, :] < K)",
                                                          "a_mask = rows[:, None] < M"),
                                          ("b_mask = (ks[:, None] < K) & (cols[None, :] < N)",
                                           "b_mask = cols[None, :] < N")))),
         Wrong("float16 accumulator", "values", "case '50 x 37 x 200",
               dict(matmul_kernel=patched(matmul_kernel, ("dtype=tl.float32)", "dtype=c_ptr.dtype.element_ty)"),
                                          ('acc = tl.dot(a, b, acc, input_precision="ieee")',
                                           'acc += tl.dot(a, b, input_precision="ieee").to(c_ptr.dtype.element_ty)')))),
         # TF32, a GPU's default for float32: 10 bits of each input kept (the interpreter keeps all 23)
         Wrong("TF32, the default precision", "values", "in TF32, its default input_precision",
               dict(matmul_kernel=patched(matmul_kernel, ('input_precision="ieee"', 'input_precision="tf32"')))),
         # ieee where the checker runs it, TF32 (faster) on a GPU
         Wrong("ieee under the interpreter only", "runs", "asks whether it runs under the interpreter",
               dict(matmul_kernel=patched(matmul_kernel, ('input_precision="ieee"',
                                                          'input_precision="ieee" if common.device.INTERPRET else "tf32"')))),
         Wrong("strides ignored", "values", "transposed views",
               dict(matmul_kernel=patched(matmul_kernel, ("rows[:, None] * stride_am + ks[None, :] * stride_ak",
                                                          "rows[:, None] * K + ks[None, :]"),
                                          ("ks[:, None] * stride_bk + cols[None, :] * stride_bn",
                                           "ks[:, None] * N + cols[None, :]"))))]
