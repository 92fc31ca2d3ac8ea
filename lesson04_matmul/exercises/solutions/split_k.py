"""SPOILER: the solution of exercise 4.5 (split K, the parts added with tl.atomic_add), and wrong ones the
tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "2c993be07693"  # common.exercise.given_fingerprint of split_k.py as the course ships it


@triton.jit
def split_k_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   K_PER_PROGRAM, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[rows, cols] += A[rows, stretch] @ B[stretch, cols], the stretch of K program axis 2 names."""
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)

    first = tl.program_id(axis=2) * K_PER_PROGRAM  # my stretch's first k
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K_PER_PROGRAM, BLOCK_K):
        ks = first + start + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.atomic_add(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,
                  mask=(rows[:, None] < M) & (cols[None, :] < N))  # once, into C, which the launcher zeroed


# The mistakes, each an edit of the solution above (common.exercise.patched)
ADD = ("    tl.atomic_add(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,\n"
       "                  mask=(rows[:, None] < M) & (cols[None, :] < N))  # once, into C, which the launcher zeroed\n")
STORE = ("    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,\n"
         "             mask=(rows[:, None] < M) & (cols[None, :] < N))\n")
STEP = "        acc = tl.dot(a, b, acc, input_precision=\"ieee\")\n"
ADD_PER_STEP = ("        tl.atomic_add(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn,\n"
                "                      tl.dot(a, b, input_precision=\"ieee\"),\n"
                "                      mask=(rows[:, None] < M) & (cols[None, :] < N))\n")
HALF_STEP = ("        acc = tl.dot(a, b, acc.to(tl.float32), input_precision=\"ieee\")"
             ".to(a_ptr.dtype.element_ty)\n")  # a float16 running sum, rounded at every step
WRONG = [Wrong("tl.store instead of tl.atomic_add", "memory", "is written",
               dict(split_k_kernel=patched(split_k_kernel, (ADD, STORE)))),
         Wrong("every stretch from k = 0", "values", "are wrong",
               dict(split_k_kernel=patched(split_k_kernel, ("ks = first + start +", "ks = start +")))),
         Wrong("no mask on ks", "memory", "past the end of",
               dict(split_k_kernel=patched(split_k_kernel, (" & (ks[None, :] < K)", ""),
                                           ("(ks[:, None] < K) & ", "")))),
         Wrong("a float16 accumulator", "values", "are wrong",
               dict(split_k_kernel=patched(split_k_kernel, ("dtype=tl.float32)", "dtype=a_ptr.dtype.element_ty)"),
                                           (STEP, HALF_STEP)))),
         Wrong("an atomic add per step", "budget", "atomic adds for",
               dict(split_k_kernel=patched(split_k_kernel, (STEP, ADD_PER_STEP), (ADD, ""))))]
