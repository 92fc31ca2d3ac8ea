"""SPOILER: the solution of exercise 3.3 (a split row, added with tl.atomic_add), and wrong ones the tests
check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched
from common.launch import cdiv


GIVEN = "d2f1f3e076d0"  # common.exercise.given_fingerprint of split_row_atomic.py as the course ships it


@triton.jit
def row_sum_atomic_kernel(x_ptr, y_ptr, N, stride_xm, COLS_PER_PROGRAM, BLOCK_N: tl.constexpr):
    """y[m] += the sum of row m's columns j * COLS_PER_PROGRAM ..., for program (m, j)."""
    m = tl.program_id(axis=0)
    first = tl.program_id(axis=1) * COLS_PER_PROGRAM  # my stretch's first column
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, COLS_PER_PROGRAM, BLOCK_N):
        cols = first + start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + m * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr + m, tl.sum(acc, axis=0))  # once per program, into y[m], which the launcher zeroed


def launch(row_sum_atomic_kernel, x, y, COLS_PER_PROGRAM=1024, BLOCK_N=256):
    """Given: y zeroed, then one program per row and stretch of COLS_PER_PROGRAM columns."""
    M, N = x.shape
    assert COLS_PER_PROGRAM % BLOCK_N == 0, "a stretch is a whole number of tiles"
    y.zero_()  # the programs add into y
    grid = (M, cdiv(N, COLS_PER_PROGRAM))
    row_sum_atomic_kernel[grid](x, y, N, x.stride(0), COLS_PER_PROGRAM, BLOCK_N=BLOCK_N)


# The mistakes, each an edit of the solution above (common.exercise.patched)
ADD = "tl.atomic_add(y_ptr + m, tl.sum(acc, axis=0))"
SUM_AND_ADD = ("        acc += tl.load(x_ptr + m * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)\n"
               "    " + ADD + "  # once per program, into y[m], which the launcher zeroed\n")
FIRST_STORES = ("if tl.program_id(axis=1) == 0:\n"
                "        tl.store(y_ptr + m, tl.sum(acc, axis=0))  # the first stretch sets y[m] ...\n"
                "    else:\n"
                "        tl.atomic_add(y_ptr + m, tl.sum(acc, axis=0))  # ... and the others add into it")
AN_ADD_PER_TILE = ("        x = tl.load(x_ptr + m * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)\n"
                   "        tl.atomic_add(y_ptr + m, tl.sum(x, axis=0))  # right, but one atomic per tile\n")
WRONG = [Wrong("tl.store instead of tl.atomic_add", "memory", "is written 2 times",
               dict(row_sum_atomic_kernel=patched(row_sum_atomic_kernel,
                                                  (ADD, "tl.store(y_ptr + m, tl.sum(acc, axis=0))")))),
         Wrong("y not zeroed", "values", "= nan",
               dict(launch=patched(launch, ("    y.zero_()  # the programs add into y\n", "")))),
         Wrong("an atomic per tile", "budget", "atomic adds into y",
               dict(row_sum_atomic_kernel=patched(row_sum_atomic_kernel, (SUM_AND_ADD, AN_ADD_PER_TILE)))),
         Wrong("every stretch from column 0", "values", "are wrong",
               dict(row_sum_atomic_kernel=patched(row_sum_atomic_kernel,
                                                  ("cols = first + start +", "cols = start +")))),
         # y not zeroed, as the first stretch's program stores where the others add: right in the order
         # the interpreter runs the programs, and on a GPU wherever an add lands before the store
         Wrong("the first stretch stores, the others add", "memory", "stores y[0] while program (0, 1) updates it",
               dict(row_sum_atomic_kernel=patched(row_sum_atomic_kernel, (ADD, FIRST_STORES)),
                    launch=patched(launch, ("    y.zero_()  # the programs add into y\n", "")))),
         # the answer written by the launcher after the kernel, behind an atomic that adds nothing
         Wrong("the launcher writes y behind tl.atomic_max", "memory", "after it ran",
               dict(row_sum_atomic_kernel=patched(row_sum_atomic_kernel, (ADD, "tl.atomic_max(y_ptr + m, 0.0)")),
                    launch=patched(launch, ("BLOCK_N=BLOCK_N)", "BLOCK_N=BLOCK_N)\n    y.copy_(x.float().sum(dim=1))")))),
         Wrong("masked at the stretch's end, not N", "memory", "past the end of x",
               dict(row_sum_atomic_kernel=patched(row_sum_atomic_kernel,
                                                  ("mask=cols < N,", "mask=cols < first + COLS_PER_PROGRAM,"))))]
