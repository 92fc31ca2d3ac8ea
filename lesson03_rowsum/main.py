"""Lesson 3: row sum. Rows longer than a block: tiles walked in order, an accumulator carried along.

In lesson 2 a program held a whole row at once. A row of a million floats does not fit, so the
program walks along its row one tile at a time, adding each tile into an accumulator that stays
on chip from one tile to the next, and reduces the accumulator once at the end. Keep two words
apart: a BLOCK (a program) is the unit the GPU schedules in parallel; a TILE is a piece of data
that one program works through, in order. Then the other way round: when there are too few rows
to give every SM a program, a row is split across several programs and their partial sums are
added by a second, small launch.

Run:   python lesson03_rowsum/main.py            (all sections)
       python lesson03_rowsum/main.py --help
Without a CUDA GPU the kernel runs under Triton's interpreter; timings then measure the
interpreter. Real H200 numbers: lesson03_rowsum/RESULTS.md.
"""
# %% Set-up: choose GPU or interpreter before triton is imported
import functools
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # `common` from anywhere

from common.device import DEVICE, INTERPRET, check_tensor, sm_count, stamp

import torch
import triton
import triton.language as tl

from common import bench
from common.cli import lesson_parser, start
from common.trace import show

FLOATS = (torch.float32, torch.float16, torch.bfloat16)

# %% [markdown]
# ## 1. The tiled kernel
# Each program owns BLOCK_M rows (1 in the source documents' version) and walks their columns
# BLOCK_N at a time. `acc` is a [BLOCK_M, BLOCK_N] block of fp32 partial sums: lane j of it adds
# up columns j, j + BLOCK_N, j + 2 BLOCK_N, ... of its row. Adding tile to tile lane-wise needs no
# communication between threads; the one reduction across lanes happens once, after the loop.
# The second grid axis splits a row between programs (section 4); with one split it is unused.


# %%
@triton.jit
def row_sum_kernel(
    x_ptr, y_ptr,               # input (M, N); output (M, splits)
    M, N,
    stride_xm, stride_xn,       # strides of x, in elements: any 2-D view works without a copy
    COLS_PER_SPLIT,             # columns each program walks: N, or a multiple of BLOCK_N when split
    BLOCK_M: tl.constexpr,      # rows per program
    BLOCK_N: tl.constexpr,      # tile width
    TRACE: tl.constexpr = False,
):
    pid_m = tl.program_id(axis=0)       # which rows
    split = tl.program_id(axis=1)       # which stretch of those rows (always 0 when not split)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)  # on chip for the whole loop
    for start in range(0, COLS_PER_SPLIT, BLOCK_N):        # the tiles, one after another
        cols = split * COLS_PER_SPLIT + start + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn,
                    mask=mask, other=0.0)  # 0 is the padding that leaves a sum unchanged
        acc += x.to(tl.float32)
        if TRACE:
            show("tile", x)
            show("acc", acc)
    total = tl.sum(acc, axis=1)         # the one reduction across lanes
    if TRACE:
        show("tl.sum(acc)", total)
    tl.store(y_ptr + rows * tl.num_programs(axis=1) + split, total.to(y_ptr.dtype.element_ty),
             mask=rows < M)


# %% [markdown]
# ## 2. The launcher: tile sizes, and whether to split rows
# The tile settings come from a one-off sweep on an H200: tiles of up to 4096 columns, short
# rows packed until a program holds about 2048 elements, about 8-16 elements per thread.


# %%
@functools.cache  # the launcher runs on the host before every launch: keep it cheap (memoised)
def tile_config(N: int) -> tuple[int, int, int]:
    """BLOCK_M, BLOCK_N, num_warps."""
    BLOCK_N = min(triton.next_power_of_2(N), 4096)
    BLOCK_M = max(1, 2048 // BLOCK_N)                       # short rows: several to a program
    num_warps = max(4, min(16, BLOCK_M * BLOCK_N // 256))
    return BLOCK_M, BLOCK_N, num_warps


@functools.cache
def choose_splits(M: int, N: int) -> int:
    """How many programs share a row. The source documents' rule of thumb: launch at least 4x as
    many programs as there are SMs, so that no SM idles and the last wave is a small part of the
    work. Split only when the rows alone give fewer, and keep at least 2 tiles per program."""
    BLOCK_M, BLOCK_N, _ = tile_config(N)
    programs = triton.cdiv(M, BLOCK_M)
    target = 4 * sm_count()
    if programs >= target:
        return 1
    return max(1, min(triton.cdiv(target, programs), N // (2 * BLOCK_N)))


@functools.cache
def cols_per_split(N: int, splits: int) -> int:
    """Columns each program walks: N, or (split rows) a whole number of tiles, rounded down so
    that at least `splits` programs share the row."""
    BLOCK_N = tile_config(N)[1]
    return N if splits == 1 else max(BLOCK_N, N // splits // BLOCK_N * BLOCK_N)


def split_count(N: int, splits: int) -> int:
    """Programs per row actually launched."""
    return triton.cdiv(N, cols_per_split(N, splits))


def _launch(x: torch.Tensor, y: torch.Tensor, cols: int) -> None:
    """One launch: each program sums `cols` columns of BLOCK_M rows into y (M, cdiv(N, cols))."""
    M, N = x.shape
    BLOCK_M, BLOCK_N, num_warps = tile_config(N)
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, cols))
    row_sum_kernel[grid](x, y, M, N, x.stride(0), x.stride(1), cols,
                         BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps)


def row_sum(x: torch.Tensor, splits: int | None = None) -> torch.Tensor:
    """Sum of each row of a 2-D tensor: shape (M,), in x's dtype, accumulated in fp32.

    splits: programs per row; None chooses (1 unless there are too few rows to fill the GPU).
    """
    check_tensor(x, "x", FLOATS, ndim=2)
    M, N = x.shape
    if splits is not None and splits < 1:
        raise ValueError(f"splits must be >= 1, got {splits}")
    y = torch.empty(M, device=x.device, dtype=x.dtype)  # as (M, 1): one partial sum per row
    if M == 0 or N == 0:
        return y.zero_()
    cols = cols_per_split(N, splits or choose_splits(M, N))
    if cols == N:
        _launch(x, y, N)
    else:  # stage 1: partial sums (M, splits) in fp32; stage 2: sum those rows, the same kernel
        partial = torch.empty((M, triton.cdiv(N, cols)), device=x.device, dtype=torch.float32)
        _launch(x, partial, cols)
        _launch(partial, y, partial.shape[1])
    return y


# %% [markdown]
# ## 3. The trace: the source documents' 12-element row, tiles of 4


# %%
def trace() -> dict:
    x = torch.tensor([[3.0, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]], device=DEVICE)
    y = torch.empty((1, 1), device=DEVICE)
    print("One row of 12, BLOCK_N = 4: one program (one block), three tiles walked in order.")
    print("Lane j of acc adds columns j, j + 4, j + 8.")
    row_sum_kernel[(1, 1)](x, y, 1, 12, x.stride(0), x.stride(1), 12, BLOCK_M=1, BLOCK_N=4, TRACE=True)
    print(f"row_sum = {y.item():g} (torch.sum: {x.sum().item():g})")

    print("\nThe same row split between 3 programs (grid (1, 3)), 4 columns each: every program is")
    print("its own block, with one tile; their partial sums are added by a second launch.")
    partial = torch.empty((1, 3), device=DEVICE)
    row_sum_kernel[(1, 3)](x, partial, 1, 12, x.stride(0), x.stride(1), 4, BLOCK_M=1, BLOCK_N=4, TRACE=True)
    print(f"partial sums = {partial[0].tolist()} -> {partial.sum().item():g}")
    return {"total": y.item(), "partial": partial[0].tolist()}


# %% [markdown]
# ## 4. Too few rows: programs against SMs


# %%
def waves_table(shapes) -> bench.Table:
    """Programs launched against the GPU's SMs, one per row and split."""
    sms, rows = sm_count(), []
    for M, N in shapes:
        BLOCK_M, _, _ = tile_config(N)
        for label, splits in (("one program per row", 1), ("split rows", choose_splits(M, N))):
            programs = triton.cdiv(M, BLOCK_M) * split_count(N, splits)
            rows.append((f"{M} x {N}", label, programs, f"{programs / sms:.2f}",
                         f"{min(programs, sms)} of {sms}"))
    table = bench.print_table(rows, ["shape", "launch", "programs", "programs per SM", "SMs with work"],
                              title=f"Programs against SMs ({sms} SMs)")
    print(f"With 4 rows, 4 programs: {sms - 4} of the {sms} SMs have nothing to do, however fast each one is.\n"
          "Rule of thumb (source documents): at least 4 programs per SM, so the scheduler can balance\n"
          f"the work and a last, partial wave is a small part of the whole: 160 programs on {sms} SMs\n"
          f"run, one at a time per SM, as a full wave and then {160 - sms}, with {2 * sms - 160} SMs idle\n"
          "(on a 148-SM B200: 12, with 136 idle).")
    return table


# %% [markdown]
# ## 5. Correctness


# %%
def check() -> list:
    rows = []
    for dtype in FLOATS:
        for M, N in [(1, 1), (3, 7), (64, 1000), (5, 12345), (3, 70000), (1000, 33)]:
            x = torch.randn(M, N, device=DEVICE, dtype=dtype)
            ref = x.double().sum(dim=1)
            for splits in (1, 4):
                out = row_sum(x, splits=splits)
                rel = ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
                rows.append((str(dtype)[6:], f"{M} x {N}", split_count(N, splits), rel))
    x = torch.randn(500, 300, device=DEVICE)
    rows.append(("float32", "x.t(): strided", 1,
                 ((row_sum(x.t()).double() - x.t().double().sum(1)).abs().max() / 300).item()))
    bench.print_table(rows, ["dtype", "shape", "programs per row", "max error / max |sum|"], floatfmt=".1e")
    print("float16/bfloat16 errors are the rounding of the output; the sums themselves are fp32.")
    return rows


# %% [markdown]
# ## 6. Timing against torch.sum(dim=1)


# %%
def bench_all(shapes, dtype=torch.float32) -> bench.Table:
    ceiling = bench.copy_bandwidth()
    rows = []
    for M, N in shapes:
        x = torch.randn(M, N, device=DEVICE, dtype=dtype)
        cases = {"torch.sum(dim=1)": lambda: x.sum(dim=1), "Triton, one program per row": lambda: row_sum(x, 1)}
        if choose_splits(M, N) > 1:
            cases["Triton, split rows (auto)"] = lambda: row_sum(x)
        times = {name: bench.measure(fn) for name, fn in cases.items()}
        for name, (ms, launched_ms) in times.items():
            bw = bench.gbps(x.numel() * x.element_size(), ms)
            rows.append((f"{M} x {N}", name, ms * 1e3, launched_ms * 1e3, bw, bench.percent(bw, ceiling),
                         times["torch.sum(dim=1)"][0] / ms))
    title = (f"Timing, {str(dtype)[6:]}: {stamp()}\n{bench.TIMING_NOTE} Copy bandwidth measured: "
             f"{ceiling:.0f} GB/s. GB/s (from the kernel time) counts one read of x.")
    return bench.print_table(rows, ["shape", "implementation", "kernel µs", "µs with launch", "GB/s", "% of copy",
                                    "x torch"], title=title)


BENCH_SHAPES = [(4096, 1024), (4096, 16384), (4096, 65536), (1 << 18, 256), (1 << 20, 32), (4, 1 << 24)]


def results() -> list:
    """What common/results.py writes to RESULTS.md (on a GPU)."""
    timing = bench_all(BENCH_SHAPES)
    return [(timing, dict(x="shape", y="GB/s", series=["implementation"], ceiling=bench.copy_bandwidth(),
                          ceiling_label="device copy (measured)")),
            (waves_table([(4096, 16384), (4, 1 << 24), (160, 65536)]), None)]


# %% The script
def main(argv=None) -> None:
    p = lesson_parser(__doc__, ["trace", "waves", "check", "bench"])
    p.add_argument("--shapes", nargs="+", metavar="MxN",
                   help="bench shapes, e.g. 4096x16384 (default: wide, tall and 4-row shapes)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = start(p, argv, trace, __file__, "Trace: row_sum_kernel, tile by tile (interpreter)")
    if "waves" in args.sections:
        print(f"\n=== Programs against SMs ({sm_count()} SMs{', an H200 assumed' if INTERPRET else ''}) ===")
        waves_table([(4096, 16384), (4, 1 << 24), (160, 65536)])
    if "check" in args.sections:
        print("\n=== Check: Triton against a float64 sum ===")
        check()
    if "bench" in args.sections:
        print("\n=== Timing ===")
        if args.shapes:
            shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes]
        elif INTERPRET:
            shapes = [(64, 1024), (4, 1 << 16)]
        else:
            shapes = BENCH_SHAPES
        bench_all(shapes, getattr(torch, args.dtype))


if __name__ == "__main__":
    main()
