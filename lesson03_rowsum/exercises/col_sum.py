"""Exercise 3.5 (write): a column sum, y = x.sum(dim=0), read along the rows (coalescing).

The statement. x is an M x N tensor (float32, float16 or bfloat16); y, of N elements and x's
dtype, holds the sum of each column: y[n] = sum over m of x[m, n], accumulated in float32 and
rounded once, at the store. The launcher below is given: program pid owns the BLOCK_N columns
pid * BLOCK_N ... pid * BLOCK_N + BLOCK_N - 1 and walks DOWN the rows, BLOCK_M rows at a time,
so that each tile it loads is BLOCK_M x BLOCK_N and every row of the tile is BLOCK_N neighbouring
elements of memory: a warp's load touches whole sectors (lesson 3, section 15). It keeps a
BLOCK_M x BLOCK_N fp32 accumulator across the tiles (row_sum_kernel's, turned a quarter turn) and
reduces it across its rows, once, after the loop. x's rows may lie further apart than N (a slice
of a wider tensor): element (m, n) is at x_ptr + m * stride_xm + n. About 10 lines.

The budget, checked under the interpreter from every load the kernel makes: each element of x
read exactly once, and the 32-byte sectors the loads touch (each load, one tile, counted alone)
at most twice the sectors x lies in. A kernel that walks down one column at a time reads every
element once too, and gets the values right, but each of its loads takes one element from each
of BLOCK_M rows: a sector per element, 4 of its 32 bytes used (2 for float16), and on a GPU about
that share of the bandwidth.

The cases: a single element; 129 x 129 in tiles of 32 x 64 (ragged in both dimensions: five
row tiles, the last of one row, and three column blocks, the last of one column); 128 x 127 in
one row tile of 128; a single row of 300 across three programs; 200 x 150 float16 read through a
slice (stride_xm = 192); 512 x 40 float16 whose lower rows nearly cancel the upper ones, so that
each lane's sum climbs to about 20 and falls back near 0 (a float16 running sum is rounded at every
step to a 64th there, far more than the result's own rounding: a float32 accumulator passes, a
float16 one does not); 400 x 40 bfloat16 in tiles of 16 x 64 (25 row tiles, one program).

Run it: python lesson03_rowsum/exercises/col_sum.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import numpy as np
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv
from lesson03_rowsum.coalescing import SECTOR


@triton.jit
def col_sum_kernel(x_ptr, y_ptr, M, N, stride_xm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y[cols] = the sums of x's columns pid * BLOCK_N ..., walking down the rows BLOCK_M at a time."""
    pass


def launch(col_sum_kernel, x, y, BLOCK_M=32, BLOCK_N=64):
    """Given: one program per block of BLOCK_N columns."""
    M, N = x.shape
    col_sum_kernel[(cdiv(N, BLOCK_N),)](x, y, M, N, x.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)


def reference(x):
    acc = torch.promote_types(x.dtype, torch.float32)
    return {"y": x.to(acc).sum(dim=0).to(x.dtype)}


def read_once_and_coalesced(log, x):
    """Every element of x loaded exactly once, and the 32-byte sectors the loads touch (each load
    counted alone: one tile, a sector fetched once for all its lanes) at most twice the sectors x
    lies in: a tile whose rows are runs of neighbouring columns fetches each sector about once."""
    region = next(r for r in log.regions if r.name == "x")
    M, N = x.shape
    where = (torch.arange(M)[:, None] * x.stride(0) + torch.arange(N)[None, :] * x.stride(1)).reshape(-1).numpy()
    counts = np.zeros(int(where.max()) + 1 if where.size else 1, dtype=np.int64)
    fetched = 0
    for kind, program, name, indices in log.accesses:
        if kind == "load" and name == "x":
            np.add.at(counts, indices, 1)
            fetched += len(np.unique((region.start + indices * region.itemsize) // SECTOR))
    reads = counts[where]
    if (reads != 1).any():
        first = int(np.flatnonzero(reads != 1)[0])
        return (f"x[{first // N}, {first % N}] was read {reads[first]} times ({int((reads > 1).sum())} elements read "
                "more than once): each program walks its own columns, each tile of rows once")
    sectors = len(np.unique((region.start + where * region.itemsize) // SECTOR))  # the sectors x lies in
    if fetched > 2 * sectors:
        return (f"the loads of x touched {fetched} sectors of {SECTOR} bytes, {fetched / sectors:.1f} times the "
                f"{sectors} that x lies in: each load should be a tile whose rows are runs of neighbouring "
                "columns (cols[None, :]), not one column taken from many rows, a sector for each element "
                "(lesson 3, section 15)")
    return None


def case(M: int, N: int, BLOCK_M: int, BLOCK_N: int, dtype=torch.float32, stride: int | None = None,
         climb: bool = False) -> Case:
    i = torch.arange(M * N, dtype=torch.float32).reshape(M, N)
    x = ((i * 0.37).sin() + 0.5 * (i * 0.013).cos() + 0.25).to(dtype)  # no symmetry to hide a sign or a transpose
    if climb:  # the lower half of the rows nearly the negative of the upper: sums climb, then fall back near 0
        up = x[:M // 2].float() + 1.0
        x = torch.cat([up, -up + 0.05 * (i[:M // 2] * 0.21).sin()]).to(dtype)
    if stride is not None:  # a slice of a wider tensor: rows `stride` elements apart
        x = torch.cat([x, torch.zeros(M, stride - N, dtype=dtype)], dim=1)[:, :N]
    name = (f"{M} x {N}, BLOCK {BLOCK_M} x {BLOCK_N}, {str(dtype)[6:]}" + (f", rows {stride} apart" if stride else "")
            + (", sums that climb and fall back" if climb else ""))
    return Case(name, dict(x=x), dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N))


EXERCISE = Exercise(
    lesson="lesson03_rowsum", name="col_sum", kind="write", parts=("col_sum_kernel",), stub="185049d31b79",
    launch=launch, reference=reference, lines=10, budget_check=read_once_and_coalesced,
    cases=[case(1, 1, 32, 64), case(129, 129, 32, 64), case(128, 127, 128, 32), case(1, 300, 32, 128),
           case(200, 150, 64, 64, torch.float16, stride=192), case(512, 40, 16, 64, torch.float16, climb=True),
           case(400, 40, 16, 64, torch.bfloat16)],
    bench_case=lambda: case(8192, 8192, 64, 128),
    hints=["Turn row_sum_kernel a quarter turn: the program's columns are fixed, cols = pid * BLOCK_N + "
           "tl.arange(0, BLOCK_N), and the loop walks the rows: for start in range(0, M, BLOCK_M), with "
           "rows = start + tl.arange(0, BLOCK_M).",
           "A tile is x_ptr + rows[:, None] * stride_xm + cols[None, :], masked by (rows[:, None] < M) & "
           "(cols[None, :] < N) with other=0.0; acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32) adds it "
           "lane by lane (.to(tl.float32)).",
           "After the loop, tl.sum(acc, axis=0) sums down the rows: BLOCK_N column sums; "
           "tl.store(y_ptr + cols, total.to(y_ptr.dtype.element_ty), mask=cols < N)."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
