"""Exercise 4.2 (write): the grouped program-to-tile map, a bijection that shares tiles.

The statement. The launcher starts a 1-D grid, one program per tile of C = A @ B: num_pid_m x
num_pid_n programs, pid = 0, 1, 2, ... Each program must first work out which tile (pid_m, pid_n)
of C is its own; the rest of the kernel (the K loop and the store of that tile) is given. Write
the map in grouped order (lesson 4, section 3): the programs walk GROUP_M tile rows at a time,
down the columns of that band, then the next band; the last band may hold fewer than GROUP_M
rows. For 5 x 4 tiles and GROUP_M = 2, program pid computes the tile where its number stands:

        pid_n:  0   1   2   3
    pid_m 0:    0   2   4   6      band 0: tile rows 0-1, programs 0-7
    pid_m 1:    1   3   5   7
    pid_m 2:    8  10  12  14      band 1: tile rows 2-3, programs 8-15
    pid_m 3:    9  11  13  15
    pid_m 4:   16  17  18  19      band 2: one row left, programs 16-19

GROUP_M = 1 is plain row-major order (pid_m = pid // num_pid_n). Use integer arithmetic on pid
only (//, %, min): no loops, no tables. About 6 lines. (tl.swizzle2d, which hopper.py calls,
computes such an order in one line; the point here is to derive it.)

Two checks, besides the values of C:
- a bijection: every tile of C computed by exactly one program (the memory stage sees a tile
  written twice, or one never written, from C's sentinel-filled memory);
- a budget on the load log: the first wave, the first `wave` programs (those a GPU runs at the
  same time, about one per SM), must read fewer distinct tiles of A and B than the same wave reads
  in row-major order. Row-major, a wave covers a strip of C one tile row tall: one tile row of
  A, and `wave` tile columns of B. Grouped, it covers a block about GROUP_M tiles tall: a few
  more tile rows of A, far fewer tile columns of B (the lesson's tiles_loaded counts the same);
- and the order itself, from the store log: each program's tile lies in its band of GROUP_M tile
  rows (the GROUP_M the kernel is given), in the column its number gives. A band of some other
  height also beats row-major order's wave, but it is not the order asked for.

The cases: 9 x 9 tiles with GROUP_M = 3 and a wave of 9, the lesson's picture (K one tile deep:
the wave reads 10 tiles row-major, 6 grouped; the lesson's K of 9 tiles makes it 90 and 54);
5 x 7 tiles with GROUP_M = 2 and a wave of 6, ragged in M, N and K, so that the last band holds
one tile row (21 tiles row-major, 15 grouped); 3 x 6 tiles with GROUP_M = 8, one band shorter
than GROUP_M (7 against 5); GROUP_M = 1, which is row-major itself (no budget); 1 x 1 x 1, one
program.

Run it: python lesson04_matmul/exercises/grouped_order.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import numpy as np
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def grouped_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                          stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr):
    """C's tile (pid_m, pid_n) for program pid, in grouped order; then that tile's product."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)  # tile rows of C
    num_pid_n = tl.cdiv(N, BLOCK_N)  # tile columns of C

    # Yours: pid_m and pid_n, the tile of program pid, GROUP_M tile rows at a time.

    # Given: the tile's product (exercise 4.1's loop) and its store.
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


def launch(grouped_matmul_kernel, a, b, c, GROUP_M, wave, BLOCK_M, BLOCK_N, BLOCK_K):
    """Given: a 1-D grid, one program per tile of C. (`wave` is the budget's, not the kernel's.)"""
    (M, K), N = a.shape, b.shape[1]
    grid = (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),)
    grouped_matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                                c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M)


def reference(a, b, **_):
    return {"c": a @ b}


def tiles_read(log, name: str, t: torch.Tensor, wave: int, block_rows: int, block_cols: int) -> int:
    """Distinct (row tile, column tile) pairs of the contiguous 2-D tensor `name` loaded by programs 0..wave-1."""
    loads = [idx for program, idx in log.elements("load", name).items() if program[0] < wave]
    if not loads:
        return 0
    idx = np.concatenate(loads)
    rows, cols = idx // t.shape[1], idx % t.shape[1]
    return len(np.unique((rows // block_rows) * (1 << 20) + cols // block_cols))


def budget_check(log, a, b, GROUP_M, wave, BLOCK_M, BLOCK_N, BLOCK_K):
    """The first wave must read fewer distinct tiles of A and B than row-major order's first wave, and
    every program's tile must lie in its band (GROUP_M tile rows), in the band's column its number gives."""
    (M, K), N = a.shape, b.shape[1]
    num_pid_m, num_pid_n, k_tiles = cdiv(M, BLOCK_M), cdiv(N, BLOCK_N), cdiv(K, BLOCK_K)
    if wave is not None:
        first = range(min(wave, num_pid_m * num_pid_n))
        row_major_a = len({p // num_pid_n for p in first}) * k_tiles  # A tiles (pid_m, k) ...
        row_major_b = len({p % num_pid_n for p in first}) * k_tiles    # ... and B tiles (k, pid_n)
        yours_a = tiles_read(log, "a", a, wave, BLOCK_M, BLOCK_K)
        yours_b = tiles_read(log, "b", b, wave, BLOCK_K, BLOCK_N)
        if yours_a + yours_b >= row_major_a + row_major_b:
            return (f"the first wave, programs 0..{wave - 1}, reads {yours_a + yours_b} distinct tiles of A and B "
                    f"({yours_a} of A, {yours_b} of B); row-major order reads {row_major_a + row_major_b} "
                    f"({row_major_a} + {row_major_b}), and grouped order must read fewer: with GROUP_M = {GROUP_M}, "
                    f"consecutive programs go down a band of {GROUP_M} tile rows before they move one column right")
    for (pid, *_), idx in sorted(log.elements("store", "c").items()):
        pid_m, pid_n = int(idx[0]) // N // BLOCK_M, int(idx[0]) % N // BLOCK_N  # the tile of its first element
        band = pid // (GROUP_M * num_pid_n)
        rows_here = min(num_pid_m - band * GROUP_M, GROUP_M)
        column = pid % (GROUP_M * num_pid_n) // rows_here
        if pid_m // GROUP_M != band or pid_n != column:
            return (f"program {pid} computes tile ({pid_m}, {pid_n}), but in grouped order with GROUP_M = {GROUP_M} "
                    f"its tile is in band {band} (tile rows {band * GROUP_M}..{band * GROUP_M + rows_here - 1}), "
                    f"column {column}: the band's {rows_here} programs of each column come one after another. "
                    "Use the GROUP_M the kernel is given (it is the launcher's choice, not a constant)")
    return None


def case(M: int, N: int, K: int, GROUP_M: int, wave, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, dtype=torch.float32) -> Case:
    a = torch.arange(M * K, dtype=torch.float32).mul(0.37).sin().add(0.1).reshape(M, K).to(dtype)
    b = torch.arange(K * N, dtype=torch.float32).mul(0.23).cos().sub(0.2).reshape(K, N).to(dtype)
    tiles = f"{cdiv(M, BLOCK_M)} x {cdiv(N, BLOCK_N)} tiles"
    return Case(f"{M} x {N} x {K} ({tiles}), GROUP_M = {GROUP_M}" + (f", a wave of {wave}" if wave else ""),
                dict(a=a, b=b, GROUP_M=GROUP_M, wave=wave, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K))


EXERCISE = Exercise(
    lesson="lesson04_matmul", name="grouped_order", kind="write", parts=("grouped_matmul_kernel",),
    stub="c11ec8650a92", launch=launch, reference=reference, budget_check=budget_check, lines=6,
    cases=[case(144, 144, 16, 3, 9), case(70, 100, 45, 2, 6), case(40, 96, 16, 8, 6, dtype=torch.float16),
           case(33, 50, 20, 1, None), case(1, 1, 1, 4, None)],
    bench_case=lambda: case(2048, 2048, 2048, 8, None, 128, 128, 64, dtype=torch.float16),
    hints=["A band is GROUP_M full tile rows: GROUP_M * num_pid_n programs. Which band is pid in, which is the band's "
           "first tile row, and how many rows does it have (the last may have fewer)?",
           "In band terms: band = pid // (GROUP_M * num_pid_n), first_pid_m = band * GROUP_M, "
           "rows_here = min(num_pid_m - first_pid_m, GROUP_M), local = pid % (GROUP_M * num_pid_n). "
           "Going down the band's columns, local counts rows fastest.",
           "pid_m = first_pid_m + local % rows_here; pid_n = local // rows_here. (Divide by the band's own row count, "
           "not by GROUP_M, or the last band's programs collide or fall off C.)"],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
