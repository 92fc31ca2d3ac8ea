"""SPOILER: the solution of exercise 4.2 (grouped order), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "e7138691a6d9"  # common.exercise.given_fingerprint of grouped_order.py as the course ships it


@triton.jit
def tile_product(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 pid_m, pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The given part of the kernel: tile (pid_m, pid_n) of C, computed and stored."""
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
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def grouped_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                          stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr):
    """C's tile (pid_m, pid_n) for program pid, in grouped order; then that tile's product."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)

    per_band = GROUP_M * num_pid_n                        # programs in a band of GROUP_M tile rows
    first_pid_m = (pid // per_band) * GROUP_M             # the band's first tile row
    rows_here = min(num_pid_m - first_pid_m, GROUP_M)     # the last band may have fewer
    local = pid % per_band                                # this program's place in its band
    pid_m = first_pid_m + local % rows_here               # down the band's column ...
    pid_n = local // rows_here                            # ... then one column right

    tile_product(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 pid_m, pid_n, BLOCK_M, BLOCK_N, BLOCK_K)


# The mistakes, each an edit of the solution above (common.exercise.patched)
PLACE = ("    pid_m = first_pid_m + local % rows_here               # down the band's column ...\n"
         "    pid_n = local // rows_here                            # ... then one column right\n")
ROW_MAJOR = ("    pid_m = pid // num_pid_n  # GROUP_M ignored: a bijection, but a wave reads a strip of C\n"
             "    pid_n = pid % num_pid_n\n")
COLUMN_MAJOR = ("    pid_m = pid % num_pid_m  # down whole columns of C: one band as tall as C, a wave reads all of A\n"
                "    pid_n = pid // num_pid_m\n")
WRONG = [Wrong("row-major order", "budget", "row-major order reads",
               dict(grouped_matmul_kernel=patched(grouped_matmul_kernel, (PLACE, ROW_MAJOR)))),
         Wrong("column-major order", "budget", "row-major order reads",
               dict(grouped_matmul_kernel=patched(grouped_matmul_kernel, (PLACE, COLUMN_MAJOR)))),
         Wrong("two programs on one tile", "memory", "is written 2 times",
               dict(grouped_matmul_kernel=patched(grouped_matmul_kernel,
                                                  ("pid_n = local // rows_here", "pid_n = local // GROUP_M")))),
         # a band of 2 tile rows whatever GROUP_M says: a wave still reads fewer tiles than row-major order's
         Wrong("GROUP_M ignored, bands of 2", "budget", "in grouped order with GROUP_M = 3",
               dict(grouped_matmul_kernel=patched(grouped_matmul_kernel,
                                                  ("per_band = GROUP_M * num_pid_n", "per_band = 2 * num_pid_n"),
                                                  ("(pid // per_band) * GROUP_M", "(pid // per_band) * 2"),
                                                  ("min(num_pid_m - first_pid_m, GROUP_M)",
                                                   "min(num_pid_m - first_pid_m, 2)")))),
         Wrong("the last band as tall as the others", "memory", "left unwritten",
               dict(grouped_matmul_kernel=patched(grouped_matmul_kernel,
                                                  ("rows_here = min(num_pid_m - first_pid_m, GROUP_M)",
                                                   "rows_here = GROUP_M"))))]
