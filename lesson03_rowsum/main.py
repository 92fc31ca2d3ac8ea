"""Lesson 3: row sum. Rows longer than a block: tiles walked in order, an accumulator carried along.

In lesson 2 a program held a whole row at once. A row of a million floats does not fit, so the
program walks along its row one tile at a time, adding each tile into an accumulator that stays
on chip from one tile to the next, and reduces the accumulator once at the end. Keep two words
apart: a BLOCK (a program) is the unit the GPU schedules in parallel; a TILE is a piece of data
that one program works through, in order. Then the other way round: when there are too few rows
to give every SM a program, a row is split across several programs and their partial sums are
added by a second, small launch. Then the machine under the launch: programs run in waves over
the SMs (a measured staircase), an SM holds as many programs as its registers allow (occupancy),
and memory is read in lines, so the direction a warp reads in decides the bandwidth (coalescing).

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
if __name__ == "__main__":  # run as a script: be the module coalescing.py imports, not a second copy of it
    sys.modules.setdefault("lesson03_rowsum.main", sys.modules[__name__])

from common.device import DEVICE, INTERPRET, sm_count

import torch
import triton
import triton.language as tl

from common import bench, ptx, roofline
from common.checks import GRAD_NOTE, INDEX_ROOM, check_tensors, dtype_name, grad_errors, grad_ok, index_type
from common.launch import cdiv, launch as launch_kernel, needs_op, next_power_of_2
from common.cli import (lesson_parser, run_sections, shape_arg, sizes,
                        start_lesson, trace_section)
from common.results import print_recorded
from common.trace import show

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SIZES = {"cpu": [(64, 1024), (4, 1 << 16)], "gpu": [(4096, 16384), (1 << 20, 32), (4, 1 << 24)],  # (M, N)
         "full": [(4096, 1024), (4096, 16384), (4096, 65536), (1 << 18, 256), (1 << 20, 32), (4, 1 << 24)]}
WAVES_SHAPES = [(4096, 16384), (4, 1 << 24), (160, 65536)]

# %% [markdown]
# ## 1. The tiled kernel
# Each program owns BLOCK_M rows (1 in the source documents' version) and walks their columns
# BLOCK_N at a time. `acc` is a [BLOCK_M, BLOCK_N] block of fp32 partial sums: lane j of it adds
# up columns j, j + BLOCK_N, j + 2 BLOCK_N, ... of its row. Adding tile to tile lane-wise needs no
# communication between threads; the one reduction across lanes happens once, after the loop.
# Several programs can share a row (section 4): pid_n says which stretch of it is theirs; with one
# program per row, pid_n is always 0. The grid has one axis, numbered down the row blocks first:
# CUDA allows 2^31 - 1 programs along axis 0 but only 65535 along axes 1 and 2. INDEX_TYPE makes
# the offsets 64-bit for tensors past 2^31 elements (lesson 2, section 4, says why).


# %%
@triton.jit
def row_sum_kernel(
    x_ptr, y_ptr,               # input (M, N); output (M, splits)
    M, N,
    stride_xm, stride_xn,       # strides of x, in elements: any 2-D view works without a copy
    stride_ym,                  # elements between rows of y: 1, or the programs per row when split
    COLS_PER_PROGRAM,           # columns each program walks: N, or a multiple of BLOCK_N when split
    BLOCK_M: tl.constexpr,      # rows per program
    BLOCK_N: tl.constexpr,      # tile width
    INDEX_TYPE: tl.constexpr = tl.int32,  # of the offsets: int64 past 2**31 elements
    TRACE: tl.constexpr = False,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_pid_m             # which rows
    pid_n = pid // num_pid_m            # which stretch of those rows
    rows = pid_m.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)
    if TRACE:
        show("program (pid_m, pid_n)", (pid_m, pid_n), indent=0)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)  # on chip for the whole loop
    for start in range(0, COLS_PER_PROGRAM, BLOCK_N):      # the tiles, one after another
        cols = pid_n.to(INDEX_TYPE) * COLS_PER_PROGRAM + start + tl.arange(0, BLOCK_N)
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
    # y has one column per program along the row: y[rows, pid_n]
    tl.store(y_ptr + rows * stride_ym + pid_n, total.to(y_ptr.dtype.element_ty), mask=rows < M)


# %% [markdown]
# ## 2. The launcher: tile sizes, and whether to split rows
# The rule for the tiles: up to 4096 columns at a time, short rows packed until a program holds
# 2048 elements, 8 elements per thread (8 or 16 warps). It comes from a sweep on an H200 that
# RESULTS.md does not record; its timing table shows where the rule lands against torch.sum.
# (Triton's convention names a tile's sides BLOCK_M and BLOCK_N, so here BLOCK_N is a tile width.)


# %%
@functools.cache  # (every call asks, up to three times: the answer is kept per N)
def tile_config(N: int) -> tuple[int, int, int]:
    """BLOCK_M, BLOCK_N, num_warps for rows of N columns."""
    BLOCK_N = min(next_power_of_2(N), 4096)
    BLOCK_M = max(1, 2048 // BLOCK_N)
    num_warps = max(4, min(16, BLOCK_M * BLOCK_N // 256))
    return BLOCK_M, BLOCK_N, num_warps


@functools.cache
def choose_splits(M: int, N: int) -> int:
    """How many programs share a row (section 4). The source documents' rule of thumb: launch at
    least 4 programs per SM, so that no SM idles and the last wave is a small part of the work.
    Split only when the rows alone give fewer, and keep at least 2 tiles per program."""
    BLOCK_M, BLOCK_N, _ = tile_config(N)
    programs, target = cdiv(M, BLOCK_M), 4 * sm_count()
    return 1 if programs >= target else max(1, min(cdiv(target, programs), N // (2 * BLOCK_N)))


def columns_per_program(N: int, splits: int) -> int:
    """All N columns, or (a split row) whole tiles, rounded down so that >= `splits` programs share it."""
    BLOCK_N = tile_config(N)[1]
    return N if splits == 1 else max(BLOCK_N, N // splits // BLOCK_N * BLOCK_N)


def launch(x: torch.Tensor, y: torch.Tensor, cols: int) -> None:
    """One launch: each program sums `cols` columns of BLOCK_M rows into y, of shape (M, cdiv(N, cols))."""
    M, N = x.shape
    BLOCK_M, BLOCK_N, num_warps = tile_config(N)
    grid = (cdiv(M, BLOCK_M) * cdiv(N, cols),)
    launch_kernel(row_sum_kernel, grid, None, x, y, M, N, x.stride(0), x.stride(1), y.stride(0), cols,
                  BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, INDEX_TYPE=offset_type(x, y, cols), num_warps=num_warps)


def offset_type(x: torch.Tensor, y: torch.Tensor, cols: int):
    """index_type(x, y), or int64 where the last program's columns near 2**31: each program walks a
    whole stretch of `cols`, so the last one's indices run past N, up to cdiv(N, cols) * cols."""
    return tl.int64 if cdiv(x.shape[1], cols) * cols + INDEX_ROOM >= 2**31 else index_type(x, y)


def row_sum(x: torch.Tensor, splits: int | None = None) -> torch.Tensor:
    """Sum of each row of a 2-D tensor: shape (M,), in x's dtype, accumulated in fp32.

    splits: programs per row; None chooses (1 unless there are too few rows to fill the GPU).
    """
    (x,) = check_tensors({"x": x}, DTYPES, ndim=2)
    if splits is not None and (not isinstance(splits, int) or isinstance(splits, bool) or splits < 1):
        raise ValueError(f"splits must be a whole number >= 1 (or None), got {splits!r}")
    if needs_op(x):  # autograd or torch.compile: through the registered operator (section 7)
        return row_sum_op(x, splits)
    return sum_rows(x, splits)


def sum_rows(x: torch.Tensor, splits: int | None) -> torch.Tensor:
    """row_sum's launches, for x as row_sum() checked it: one, or two where rows are split."""
    M, N = x.shape
    y = x.new_empty(M)  # as (M, 1): one partial sum per row
    if M == 0 or N == 0:
        return y.zero_()
    cols = columns_per_program(N, splits or choose_splits(M, N))
    if cols == N:
        launch(x, y, N)
    else:  # stage 1: partial sums (M, programs per row) in fp32; stage 2: sum those rows, the same kernel
        partial = x.new_empty((M, cdiv(N, cols)), dtype=torch.float32)
        launch(x, partial, cols)
        launch(partial, y, partial.shape[1])
    return y


# %% [markdown]
# ## 3. The trace: the source documents' 12-element row, tiles of 4


# %%
def trace() -> None:
    x = torch.tensor([[3.0, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]], device=DEVICE)
    y = torch.empty((1, 1), device=DEVICE)
    print("One row of 12, BLOCK_N = 4: one program (one block), three tiles walked in order.")
    print("Lane j of acc adds columns j, j + 4, j + 8.")
    row_sum_kernel[(1,)](x, y, 1, 12, x.stride(0), x.stride(1), y.stride(0), 12, BLOCK_M=1, BLOCK_N=4, TRACE=True)
    print(f"row_sum = {y.item():g} (torch.sum: {x.sum().item():g})")

    print("\nThe same row split between 3 programs (grid (3,)), 4 columns each: every program is")
    print("its own block, with one tile; a second launch, one program, adds their partial sums.")
    partial = torch.empty((1, 3), device=DEVICE)
    row_sum_kernel[(3,)](x, partial, 1, 12, x.stride(0), x.stride(1), partial.stride(0), 4, BLOCK_M=1, BLOCK_N=4, TRACE=True)
    show("partial sums", partial[0], indent=0)
    row_sum_kernel[(1,)](partial, y, 1, 3, partial.stride(0), partial.stride(1), y.stride(0), 3, BLOCK_M=1, BLOCK_N=4)
    show("row_sum", y[0, 0], indent=0)


# %% [markdown]
# ## 4. Too few rows: programs against SMs
# The GPU starts programs on free SMs until every SM is full; when one finishes, the next starts.
# A round of programs that fills every SM once is a wave: 132 programs on an H200 when each
# program fills an SM by itself. A last wave with few programs leaves most SMs idle.


# %%
def waves_table(shapes) -> bench.Table:
    """Programs launched against the GPU's SMs, one per row and split."""
    sms, rows = sm_count(), []
    for M, N in shapes:
        BLOCK_M = tile_config(N)[0]
        for label, splits in (("one program per row", 1), ("split rows", choose_splits(M, N))):
            programs = cdiv(M, BLOCK_M) * cdiv(N, columns_per_program(N, splits))
            rows.append((f"{M} x {N}", label, programs, programs / sms,
                         f"{min(programs, sms)} of {sms}"))
    table = bench.print_table(rows, ["shape", "launch", "programs", "programs per SM", "SMs with work"],
                              title=f"Programs against SMs ({sms} SMs)", floatfmt=".2f")
    print(f"With 4 rows, 4 programs: {sms - 4} of the {sms} SMs have nothing to do, however fast each one is.\n"
          "Rule of thumb (source documents): at least 4 programs per SM (an A100's 108 SMs: >= 432), so the\n"
          "scheduler can balance the work and a last, partial wave is a small part of the whole.")
    for programs, gpu_sms, gpu in ((160, 148, "a B200"), (110, 108, "an A100"), (160, sms, "this GPU")):
        full, tail, idle = waves(programs, gpu_sms)
        print(f"  {programs} programs that each fill an SM, on {gpu}'s {gpu_sms} SMs: {full} full wave(s), then "
              f"{tail} programs while {idle} SMs sit idle")
    return table


def waves(programs: int, sms: int, per_sm: int = 1) -> tuple[int, int, int]:
    """(full waves, programs in the last partial wave, SMs idle during it), when each SM runs
    per_sm programs at a time and every program takes as long as the others."""
    slots = sms * per_sm
    full, tail = divmod(programs, slots)
    return full, tail, (sms - cdiv(tail, per_sm)) if tail else 0


# The tail effect, measured. Each program of spin_kernel does a fixed amount of arithmetic and
# touches no memory on the way: 1024 threads (32 warps). Two such programs fit on an SM at once
# (64 warp slots, section 5), but one alone keeps its cores busy, so two side by side take twice
# as long: the SM finishes one program's worth of work per program-time, and time counts waves
# of 132. As the programs step past each multiple of the SM count, the time steps up by one.
@triton.jit
def spin_kernel(y_ptr, iters, BLOCK: tl.constexpr):
    x = tl.arange(0, BLOCK).to(tl.float32) * 1e-3
    for _ in range(iters):          # a chain of multiply-adds: work for the cores, not the memory
        x = x * 0.999 + 0.001
    tl.store(y_ptr + tl.program_id(axis=0), tl.sum(x, axis=0))


def staircase(iters: int = 20000) -> bench.Table:
    """Time of spin_kernel against its number of programs, around multiples of the SM count."""
    sms = sm_count()
    counts = [1, sms // 2] + [n for k in range(1, 5) for n in (k * sms, k * sms + 1)]
    y = torch.empty(counts[-1], device=DEVICE)
    ms = bench.side_by_side({n: (lambda n=n: spin_kernel[(n,)](y, iters, BLOCK=1024, num_warps=32)) for n in counts})
    rows = [(n, n / sms, ms[n] * 1e3, ms[n] / ms[counts[0]]) for n in counts]
    return bench.print_table(rows, ["programs", "programs per SM", "kernel µs", "x one program"], floatfmt=".2f",
                             title=f"Waves: spin_kernel against its number of programs ({sms} SMs)",
                             note=f"{bench.stamp()}. {iters} multiply-adds per thread, 1024 threads per program."
                                  + bench.SIDE_BY_SIDE_NOTE,
                             plot=dict(x="programs", y="kernel µs", series=[], ceiling=None, logx=False))


# %% [markdown]
# ## 5. How many programs an SM holds at once: occupancy
# An SM runs several programs side by side when they fit: its registers (65,536 on an H100/H200),
# its warp slots (64), its program slots (32) and its shared memory (228 KB) are shared between
# them, and the scarcest decides. Occupancy is the resident warps over the 64 slots. More warps in
# flight hide more memory latency (while one waits for its load, another computes), which is what
# a memory-bound kernel like this one needs; past a point more occupancy buys nothing. The
# registers a kernel needs are known only after compiling: ptxas reports them (common/ptx.py).


# %%
SM = dict(registers=65536, warps=64, programs=32, shared=228 << 10)  # one H100/H200 SM


def occupancy(warps: int, registers: int, shared: int = 0, sm: dict = SM) -> dict:
    """Programs of `warps` warps, `registers` per thread and `shared` bytes that fit on one SM,
    by each limit; 'programs' is the smallest, 'occupancy' the share of the SM's warp slots used.
    (Registers are handed out per warp in blocks of 256, so 93 per thread cost as much as 96.)"""
    per_warp = cdiv(registers * 32, 256) * 256
    limits = {"registers": sm["registers"] // (per_warp * warps), "warps": sm["warps"] // warps,
              "program slots": sm["programs"], "shared memory": sm["shared"] // shared if shared else sm["programs"]}
    programs = min(limits.values())
    return dict(limits, programs=programs, occupancy=programs * warps / sm["warps"],
                limited_by=", ".join(name for name, n in limits.items() if n == programs))


def occupancy_table(configs=((1, 4096, 4), (1, 4096, 8), (1, 4096, 16), (64, 32, 8)), M=4096, N=16384) -> bench.Table:
    """row_sum_kernel compiled for an H100/H200 (sm_90) at several tile shapes: its registers, the
    occupancy they allow, and on a GPU its time on an M x N float32 row sum."""
    seed = occupancy(warps=4, registers=160)
    print(f"The source documents' example: 128 threads (4 warps) x 160 registers = {128 * 160:,} registers per "
          f"program;\n65,536 // 20,480 = {seed['registers']} programs per SM = {seed['programs'] * 4} warps: "
          f"occupancy {seed['programs'] * 4} / 64 = {seed['occupancy']:.2%}.\n")
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", **dict.fromkeys(("M", "N", "stride_xm", "stride_xn", "stride_ym",
                                                                "COLS_PER_PROGRAM"), "i32")}
    compiled = ptx.compile_kernels([dict(module="lesson03_rowsum.main",
                                         kernel="row_sum_kernel", signature=sig, asm=["ptx"], num_warps=w,
                                         constexprs={"BLOCK_M": bm, "BLOCK_N": bn}) for bm, bn, w in configs])
    x, y = (torch.randn(M, N, device=DEVICE), torch.empty(M, device=DEVICE)) if not INTERPRET else (None, None)
    ms = {} if INTERPRET else bench.side_by_side({  # timed: the tile the launcher uses for these rows
        (bm, bn, w): (lambda bm=bm, bn=bn, w=w: row_sum_kernel[(cdiv(M, bm),)](
            x, y, M, N, x.stride(0), x.stride(1), 1, N, BLOCK_M=bm, BLOCK_N=bn, num_warps=w))
        for bm, bn, w in configs if (bm, bn) == tile_config(N)[:2]})
    rows = []
    for (bm, bn, w), asm in zip(configs, compiled):
        regs = ptx.registers(asm["ptx"])
        occ = occupancy(w, regs, asm["shared"])
        rows.append((f"{bm} x {bn}", w, regs, occ["programs"], occ["limited_by"], 100 * occ["occupancy"],
                     f"{ms[bm, bn, w] * 1e3:.1f}" if (bm, bn, w) in ms else "-"))
    table = bench.print_table(rows, ["BLOCK_M x BLOCK_N", "num_warps", "registers per thread", "programs per SM",
                                    "limited by", "occupancy %", f"kernel µs, {M} x {N} fp32"], floatfmt=".1f",
                             title="Occupancy of row_sum_kernel (registers from ptxas, sm_90)",
                             note=f"{bench.stamp()}. The same tile walked by more or fewer threads: fewer threads hold "
                                  "more elements each, in more registers. The last row is the launcher's tile for rows "
                                  f"of 32 columns, not timed on rows of {N}. Register counts depend on the Triton "
                                  "and ptxas versions (see the stamp)." + bench.SIDE_BY_SIDE_NOTE)
    if INTERPRET:
        print_recorded(__file__, "Occupancy")
    return table


# %% [markdown]
# ## 6. Correctness


# %%
def check() -> bench.Table:
    """Error against a float64 sum, relative to the sum of |x| (the size of the numbers added): fp32
    accumulation keeps it near 1e-7; float16 / bfloat16 outputs add their rounding (11 / 8 bits)."""
    tolerance = {torch.float32: 1e-6, torch.float16: 2**-10, torch.bfloat16: 2**-7}
    rows = []
    cases = [(dtype, torch.randn(M, N, device=DEVICE, dtype=dtype))
             for dtype in DTYPES for M, N in [(1, 1), (3, 7), (64, 1000), (5, 12345), (3, 70000)]]
    cases.append((torch.float32, torch.randn(500, 300, device=DEVICE).t()))  # a strided view
    for dtype, x in cases:
        size = x.double().abs().sum(dim=1).clamp_min(1.0)
        for splits in (1, 4):
            programs = cdiv(x.shape[1], columns_per_program(x.shape[1], splits))
            if splits > 1 and programs == 1:
                continue  # a row this short is not split
            err = ((row_sum(x, splits=splits).double() - x.double().sum(dim=1)).abs() / size).max().item()
            shape = f"{x.shape[0]} x {x.shape[1]}" + ("" if x.is_contiguous() else ", x.t()")
            rows.append((dtype_name(dtype), shape, programs, err, err <= tolerance[dtype]))
    return bench.print_table(rows, ["dtype", "shape", "programs per row", "max error / sum |x|", "ok"],
                             floatfmt=".1e", title="Check: row_sum against a float64 sum")


# %% [markdown]
# ## 7. Training: the gradient of a sum is a broadcast
# y_i = sum_j x_ij, so dy_i/dx_ij = 1 and dL/dx_ij = dL/dy_i: each row's gradient copied across
# the row. There is nothing to compute, and nothing to write either: expand() makes an (M, N) view
# of the M numbers (column stride 0), which autograd hands on to the operation before (only a leaf's
# .grad gets a dense copy, as with torch.sum). No backward kernel: the registered operator (lesson 1,
# section 5) only needs the rule.


# %%
@torch.library.triton_op("lessons::row_sum", mutates_args=())
def row_sum_op(x: torch.Tensor, splits: int | None) -> torch.Tensor:
    return sum_rows(x, splits)


def keep_shape(ctx, inputs, output):
    ctx.shape = inputs[0].shape


row_sum_op.register_autograd(lambda ctx, dy: (dy[:, None].expand(ctx.shape), None), setup_context=keep_shape)


def grad_check() -> bench.Table:
    rows = []
    for dtype in DTYPES:
        for M, N in [(1, 1), (5, 12345), (3, 70000)]:
            ((ours, theirs),) = grad_errors(row_sum, lambda t: t.sum(dim=1), [torch.randn(M, N, device=DEVICE, dtype=dtype)])
            rows.append((dtype_name(dtype), f"{M} x {N}", ours, theirs, grad_ok(ours, theirs)))
    return bench.print_table(rows, ["dtype", "shape", "dx: relative error", "torch's, same dtype", "ok"],
                             floatfmt=".1e", title="Check: row_sum's gradient against float64 autograd", note=GRAD_NOTE)


# %% [markdown]
# ## 8. Timing against torch.sum(dim=1)


# %%
def host_cases() -> dict:
    """For bench.host_costs: the host's share of each call, beside PyTorch's and the bare launch
    (lesson 1, "What a launch costs")."""
    x, wide = torch.randn(4096, 1024, device=DEVICE), torch.randn(16, 65536, device=DEVICE)
    y = x.new_empty(4096)
    BLOCK_M, BLOCK_N, num_warps = tile_config(1024)
    grid = (cdiv(4096, BLOCK_M),)
    return {"torch.sum(x, dim=1) (4096 x 1024 float32)": lambda: x.sum(dim=1),
            "row_sum_kernel[grid](...) alone, arguments ready": lambda: row_sum_kernel[grid](
                x, y, 4096, 1024, x.stride(0), x.stride(1), y.stride(0), 1024, BLOCK_M=BLOCK_M,
                BLOCK_N=BLOCK_N, INDEX_TYPE=tl.int32, num_warps=num_warps),
            "row_sum(x): one launch": lambda: row_sum(x),
            "row_sum(x) of 16 x 65536: split rows, two launches": lambda: row_sum(wide)}


def bench_all(shapes, dtype=torch.float32) -> bench.Table:
    ceiling = bench.copy_bandwidth()
    rows = []
    for M, N in shapes:
        x = torch.randn(M, N, device=DEVICE, dtype=dtype)
        cases = {"torch.sum(dim=1)": lambda: x.sum(dim=1), "Triton, one program per row": lambda: row_sum(x, 1)}
        if choose_splits(M, N) > 1:
            cases["Triton, split rows (auto)"] = lambda: row_sum(x)
        times = {name: bench.measure(fn) for name, fn in cases.items()}
        for name, both in times.items():  # GB/s: one read of x
            rows.append([f"{M} x {N}", name, *bench.timing_cells(both, x.numel() * x.element_size(), ceiling),
                         times["torch.sum(dim=1)"][0] / both[0]])
    note = f"{bench.stamp()}. {bench.TIMING_NOTE}"
    if not INTERPRET:
        note += f" Copy bandwidth measured: {ceiling:.0f} GB/s. GB/s (from the kernel time) counts one read of x."
    return bench.print_table(rows, ["shape", "implementation", *bench.TIMING_HEADERS, "x torch"],
                             title=f"Timing, {dtype_name(dtype)}", note=note,
                             plot=dict(x="shape", y="GB/s", series=["implementation"], ceiling=ceiling,
                                       ceiling_label="device copy (measured)"))


# %% [markdown]
# ## 9. Coalescing: the same bytes, read along rows and down columns
# In coalescing.py, the lesson's second file: memory answers a warp in 128-byte lines, so the
# direction a warp reads in decides how much of each line it uses; row_sum timed on both layouts.


# %% The script
def main(argv=None) -> None:
    from lesson03_rowsum import coalescing  # the lesson's second file

    def waves_section():
        waves_table(WAVES_SHAPES)
        if INTERPRET:  # the interpreter runs programs one after another: no waves to see
            print_recorded(__file__, "Waves")
        else:
            staircase()

    def timing():
        bench_all(args.shapes or sizes(args, SIZES), getattr(torch, args.dtype))
        if INTERPRET:  # beside the interpreter's numbers, the H200's
            print_recorded(__file__, "Timing, float32")
        M, N = 4096, 16384  # the roofline (README): one addition per 4 bytes read
        x = torch.randn(M, N, device=DEVICE) if not INTERPRET else None
        roofline.points({("Triton row_sum", f"{M} x {N} float32"): (lambda: row_sum(x), M * N, 4 * (M * N + M)),
                         ("torch.sum(dim=1)", f"{M} x {N} float32"): (lambda: x.sum(dim=1), M * N, 4 * (M * N + M))},
                        __file__)


        def offsets_cases():  # what int64 offsets (lesson 2, section 4) would cost here (timed with --full)
            xs = [torch.randn(M, N, device=DEVICE) for M, N in SIZES["gpu"]]
            return {f"row_sum(x), x {x.shape[0]} x {x.shape[1]} float32": (lambda x=x: row_sum(x)) for x in xs}
        bench.offsets_cost(offsets_cases, __file__, run=args.full)

    sections = {
        "trace": ("Trace: row_sum_kernel, tile by tile (interpreter)", lambda: trace_section(trace, __file__, args.child)),
        "waves": (f"Programs against SMs ({sm_count()} SMs{', an H200 assumed' if INTERPRET else ''})", waves_section),
        "occupancy": ("Occupancy: programs per SM", occupancy_table),
        "check": ("Check: Triton against a float64 sum", check),
        "grad": ("Training: row_sum's gradient", grad_check),
        "bench": ("Timing", timing),
        "host": ("What a call costs the host (lesson 1, 'What a launch costs')",
                 lambda: bench.host_costs("lesson03_rowsum.main:host_cases", __file__)),
        "coalescing": ("Coalescing: along rows and down columns (coalescing.py)", coalescing.coalescing),
    }
    p = lesson_parser(__doc__, list(sections))
    p.add_argument("--shapes", type=shape_arg, nargs="+", metavar="MxN",
                   help="bench shapes, e.g. 4096x16384 (default: wide, tall and 4-row shapes)")
    p.add_argument("--dtype", default="float32", choices=[dtype_name(d) for d in DTYPES])
    args = start_lesson(p, argv)
    run_sections(args, sections)

if __name__ == "__main__":
    main()
