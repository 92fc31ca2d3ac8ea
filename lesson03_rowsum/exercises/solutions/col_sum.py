"""SPOILER: the solution of exercise 3.5 (a column sum), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "50fc7981822d"  # common.exercise.given_fingerprint of col_sum.py as the course ships it


@triton.jit
def col_sum_kernel(x_ptr, y_ptr, M, N, stride_xm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y[cols] = the sums of x's columns pid * BLOCK_N ..., walking down the rows BLOCK_M at a time."""
    pid = tl.program_id(axis=0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
        acc += x.to(tl.float32)  # lane by lane: a row of the tile is BLOCK_N neighbouring elements
    total = tl.sum(acc, axis=0)  # down the rows, once, after the loop
    tl.store(y_ptr + cols, total.to(y_ptr.dtype.element_ty), mask=cols < N)


# The mistakes, each an edit of the solution above (common.exercise.patched)
TILES = ("    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)\n"
         "    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)\n"
         "    for start in range(0, M, BLOCK_M):\n"
         "        rows = start + tl.arange(0, BLOCK_M)\n"
         "        mask = (rows[:, None] < M) & (cols[None, :] < N)\n"
         "        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)\n"
         "        acc += x.to(tl.float32)  # lane by lane: a row of the tile is BLOCK_N neighbouring elements\n"
         "    total = tl.sum(acc, axis=0)  # down the rows, once, after the loop\n"
         "    tl.store(y_ptr + cols, total.to(y_ptr.dtype.element_ty), mask=cols < N)\n")  # the body, all but pid
COLUMNS = ("    for col in range(pid * BLOCK_N, tl.minimum(pid * BLOCK_N + BLOCK_N, N)):"
           "  # each column walked down alone\n"
           "        acc = tl.zeros([BLOCK_M], dtype=tl.float32)\n"
           "        for start in range(0, M, BLOCK_M):\n"
           "            rows = start + tl.arange(0, BLOCK_M)\n"
           "            x = tl.load(x_ptr + rows * stride_xm + col, mask=rows < M, other=0.0)  # one element per row\n"
           "            acc += x.to(tl.float32)\n"
           "        tl.store(y_ptr + col, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))\n")
WRONG = [Wrong("a column at a time", "budget", "times the",
               dict(col_sum_kernel=patched(col_sum_kernel, (TILES, COLUMNS)))),
         Wrong("tl.sum over axis 1", "runs", "do not",
               dict(col_sum_kernel=patched(col_sum_kernel, ("tl.sum(acc, axis=0)", "tl.sum(acc, axis=1)")))),
         Wrong("rows not masked", "memory", "past the end of x",
               dict(col_sum_kernel=patched(col_sum_kernel, ("mask = (rows[:, None] < M) & (cols[None, :] < N)",
                                                            "mask = cols[None, :] < N")))),
         Wrong("range(0, M - BLOCK_M, BLOCK_M)", "values", "are wrong",
               dict(col_sum_kernel=patched(col_sum_kernel,
                                           ("range(0, M, BLOCK_M)", "range(0, M - BLOCK_M, BLOCK_M)")))),
         # float16 from the loads on: right on short columns, rounded away on long ones
         Wrong("a float16 accumulator", "values", "sums that climb and fall back",
               dict(col_sum_kernel=patched(col_sum_kernel, ("dtype=tl.float32)", "dtype=y_ptr.dtype.element_ty)"),
                                           ("acc += x.to(tl.float32)", "acc += x")))),
         Wrong("N as the row stride", "values", "rows 192 apart",
               dict(col_sum_kernel=patched(col_sum_kernel, ("rows[:, None] * stride_xm", "rows[:, None] * N"))))]
