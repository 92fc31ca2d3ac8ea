"""Lesson 3: row sum. Rows longer than a block: tiles walked in order, an accumulator carried along.

In lesson 2 a program held a whole row at once. A row of a million floats does not fit, so the
program walks along its row one tile at a time, adding each tile into an accumulator that stays
on chip from one tile to the next, and reduces the accumulator once at the end. Keep two words
apart: a BLOCK (the rows a program owns) is the unit the GPU schedules in parallel; a TILE is a
piece of data that one program works through, in order. Then the other way round: when there are
too few rows to give every SM a program, the programs run in waves that leave SMs idle (a measured
staircase), so a row is split across several programs and a second, small launch adds their
partial sums. Then the machine under the launch: how many programs an SM holds at once (occupancy),
and memory read in lines, so that the direction a warp reads in decides the bandwidth (coalescing).

A first reading can stop after section 9 (training); sections 10-16 look at the machine: occupancy,
the timings, what 64-bit offsets and a call cost, and coalescing (in coalescing.py). Beside the
lesson's op file, row_sum.py, rmsnorm.py turns the same row walk into RMSNorm (with its residual
add fused), the norm lesson 6's model trains with.

Run:   python lesson03_rowsum/main.py            (every section)
       python lesson03_rowsum/main.py --help     (sections, shapes, dtype)
Without a CUDA GPU the kernels run under Triton's interpreter on the CPU: the same kernels, exact
results, the traces; the sections that need a GPU show what a GPU printed (RESULTS.md, which names it).
"""
# %% Set-up: common.device chooses GPU or interpreter before triton is imported
from common.device import DEVICE, sm_count

import torch
import triton
import triton.language as tl

from common import bench, ptx, roofline
from common.chapter import Chapter, shape_arg
from common.checks import GRAD_NOTE, dtype_name, grad_errors, grad_ok
from common.launch import cdiv
from common.table import print_table
from common.trace import show
from lesson03_rowsum import coalescing  # the lesson's other file: coalescing (sections 15-16)
from lesson03_rowsum.row_sum import (DTYPES, choose_splits, columns_per_program, launch, row_sum,  # the op
                                     row_sum_kernel, row_sum_split_kernel, tile_config)

SECTIONS = {  # the chapter, in reading order: `--sections` picks some, `--skip` leaves some out
    "trace": "2. The trace: the worked example's row of 12, in tiles of 4",
    "waves": "3. Too few rows: programs against SMs, in waves",
    "staircase": "4. Waves, measured: a staircase",
    "split": "5. Splitting a row: several programs per row, then a second launch",
    "split_trace": "6. The trace of a split row: three programs, then their partial sums",
    "check": "8. Correctness: against a float64 sum",
    "grad": "9. Training: the gradient of a sum is a broadcast",
    "occupancy": "10. How many programs an SM holds at once: occupancy, from ptxas's registers",
    "occupancy_timed": "11. Occupancy, timed: one tile walked by 4, 8 and 16 warps",
    "bench": "12. Timing: against torch.sum(dim=1), GB/s and % of the copy bandwidth",
    "offsets": "13. 64-bit offsets: what they cost here",
    "host": "14. What a call costs the host",
    "lines": "15. Coalescing: the memory lines one warp's load touches (coalescing.py)",
    "coalescing": "16. Coalescing, timed: row sums of both layouts (coalescing.py)",
}
SIZES = {"quick": [(4096, 16384), (1 << 20, 32), (4, 1 << 24)],  # section 12's (M, N)
         "full": [(4096, 1024), (4096, 16384), (4096, 65536), (1 << 18, 256), (1 << 20, 32), (4, 1 << 24)]}
WAVES_SHAPES = [(4096, 16384), (4, 1 << 24), (160, 65536)]  # sections 3 and 5

chapter = Chapter("lesson03_rowsum", __doc__, SECTIONS, running=__name__ == "__main__")
chapter.parser.add_argument("--shapes", type=shape_arg, nargs="+", metavar="MxN",
                            help="section 12's shapes, e.g. 4096x16384 (default: wide, tall and 4-row shapes)")
chapter.parser.add_argument("--dtype", default="float32", choices=[dtype_name(d) for d in DTYPES],
                            help="section 12's dtype (default float32)")
args = chapter.start()

# %% [markdown]
# ## 1. The tiled kernel: one program per block of rows, each row walked tile by tile
# Each program owns BLOCK_M rows (one in the worked example) and walks their N columns BLOCK_N at a
# time: a tile of BLOCK_M x BLOCK_N elements per step of the loop. (Triton's convention names a
# tile's sides BLOCK_M and BLOCK_N, so here BLOCK_N is a tile's width.) `acc` is a BLOCK_M x BLOCK_N
# block of partial sums that stays on chip, in registers, for the whole loop: lane j of a row adds
# up columns j, j + BLOCK_N, j + 2 BLOCK_N, ... Adding tile to tile lane by lane needs no
# communication between threads; the one reduction across lanes, tl.sum, happens once, after the
# loop. The sums are kept in fp32 whatever x's dtype: a float16 accumulator adding ones stalls at
# 2048 (2049 is not a float16), and its output is rounded to x's dtype only at the store.
# The strides let the kernel read any 2-D view (x.t(), x[::3]) without a copy. INDEX_TYPE makes the
# offsets 64-bit for tensors past 2^31 elements (lesson 2's 64-bit offsets say why; section 13 here
# times what they cost). The kernel, its launcher and the op are in row_sum.py, the file a model
# imports: open it beside this chapter at row_sum_kernel (its five numbered steps are the loop above).


# %% [markdown]
# ## 2. The trace: the kernel itself, tile by tile
# Under Triton's interpreter the programs run one after another and `if TRACE:` prints what each
# holds, from inside the kernel (lesson 1, section 2). The worked example: one row of 12 numbers,
# BLOCK_N = 4, so one program (one block) walks three tiles in order.


# %%
def trace() -> None:
    """The worked example: [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8] summed in tiles of 4."""
    x = torch.tensor([[3.0, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]], device=DEVICE)
    y = torch.empty(1, device=DEVICE)
    print("One row of 12, BLOCK_M = 1, BLOCK_N = 4: grid (1,), one program, three tiles walked in order.")
    print("Lane j of acc adds columns j, j + 4, j + 8.")
    row_sum_kernel[(1,)](x, y, 1, 12, x.stride(0), x.stride(1), BLOCK_M=1, BLOCK_N=4, TRACE=True)
    print(f"row_sum = {y.item():g} (torch.sum: {x.sum().item():g})")


# %%
chapter.run("trace", trace, trace=True)

# %% [markdown]
# ## 3. Too few rows: programs against SMs, in waves
# A GPU is a set of SMs (lesson 1, section 7). It starts programs on free SMs until every SM is
# full; when one finishes, the next starts. A round of programs that fills every SM once is a wave:
# 132 programs on an H100 or H200 when each program fills an SM by itself. A launch of row_sum_kernel has
# cdiv(M, BLOCK_M) programs, and its tiles follow one rule: up to 4096 columns at a time, short rows
# packed until a program holds 2048 elements, 8 elements per thread (so 8 warps, 16 for the widest
# tile). The rule comes from a sweep on an H200 that RESULTS.md does not record; section 12's timing
# shows where it lands against torch.sum. Few rows, then, means few programs: 4 rows of 16 M floats
# make 4 programs, whatever the rows' length. (Without a GPU, common.device assumes an H200's 132 SMs.)


# %%
def waves(programs: int, sms: int, per_sm: int = 1) -> tuple[int, int, int]:
    """(full waves, programs in the last partial wave, SMs idle during it), when each SM runs
    per_sm programs at a time and every program takes as long as the others."""
    slots = sms * per_sm
    full, tail = divmod(programs, slots)
    return full, tail, (sms - cdiv(tail, per_sm)) if tail else 0


def waves_table(shapes=WAVES_SHAPES):
    """Programs a launch of row_sum_kernel makes, one program per block of rows, against the SMs."""
    sms, rows = sm_count(), []
    for M, N in shapes:
        BLOCK_M, BLOCK_N, _ = tile_config(N)
        programs = cdiv(M, BLOCK_M)
        rows.append((f"{M} x {N}", f"{BLOCK_M} x {BLOCK_N}", programs, programs / sms,
                     f"{min(programs, sms)} of {sms}"))
    table = print_table(rows, ["shape", "BLOCK_M x BLOCK_N", "programs", "programs per SM", "SMs with work"],
                        title=f"Programs against SMs: one program per block of rows ({sms} SMs)", floatfmt=".2f")
    print(f"With 4 rows, 4 programs: {sms - 4} of the {sms} SMs have nothing to do, however fast each one is.\n"
          f"A rule of thumb: launch at least 4 programs per SM ({sms} SMs: >= {4 * sms}), so the scheduler\n"
          "can balance the work and a last, partial wave is a small part of the whole. The tail effect:")
    for programs, gpu_sms, gpu in ((160, 148, "a B200"), (110, 108, "an A100"), (160, sms, "this GPU; an H200 under the interpreter")):
        full, tail, idle = waves(programs, gpu_sms)
        print(f"  {programs} programs that each fill an SM, on {gpu_sms} SMs ({gpu}): {full} full wave(s), then "
              f"{tail} programs while {idle} SMs sit idle")
    return table


# %%
chapter.run("waves", waves_table)

# %% [markdown]
# ## 4. Waves, measured: a staircase
# Each program of spin_kernel does a fixed amount of arithmetic and touches no memory on the way:
# 1024 threads (32 warps). Two such programs fit on an SM at once (an SM has 64 warp slots: section
# 10), but one alone keeps its cores busy, so two side by side take twice as long: the SM finishes
# one program's worth of work per program-time, and time counts waves of 132. As the programs step
# past each multiple of the SM count, the time steps up by one.


# %%
@triton.jit
def spin_kernel(y_ptr, iters, BLOCK: tl.constexpr):
    x = tl.arange(0, BLOCK).to(tl.float32) * 1e-3
    for _ in range(iters):          # a chain of multiply-adds: work for the cores, not the memory
        x = x * 0.999 + 0.001
    tl.store(y_ptr + tl.program_id(axis=0), tl.sum(x, axis=0))


def staircase(iters: int = 20000):
    """Time of spin_kernel against its number of programs, around multiples of the SM count."""
    sms = sm_count()
    counts = [1, sms // 2] + [n for k in range(1, 5) for n in (k * sms, k * sms + 1)]
    y = torch.empty(counts[-1], device=DEVICE)
    ms = bench.side_by_side({n: (lambda n=n: spin_kernel[(n,)](y, iters, BLOCK=1024, num_warps=32)) for n in counts})
    rows = [(n, n / sms, ms[n] * 1e3, ms[n] / ms[counts[0]]) for n in counts]
    return print_table(rows, ["programs", "programs per SM", "kernel µs", "x one program"], floatfmt=".2f",
                       title=f"Waves: spin_kernel against its number of programs ({sms} SMs)",
                       note=f"{iters} multiply-adds per thread, 1024 threads per program. {bench.SIDE_BY_SIDE_NOTE}",
                       plot=dict(x="programs", y="kernel µs", series=[], ceiling=None, logx=False))


# %%
chapter.run("staircase", staircase, gpu=True)

# %% [markdown]
# ## 5. Splitting a row: several programs per row, then a second launch
# The cure for too few rows: give each row several programs. Program (pid_m, pid_n) of
# row_sum_split_kernel runs row_sum_kernel's loop over one stretch of its BLOCK_M rows,
# COLS_PER_PROGRAM columns from column pid_n x COLS_PER_PROGRAM, and writes its partial sums into
# column pid_n of `partial`, an M x (programs per row) fp32 tensor. A second launch, row_sum_kernel
# itself, sums the rows of `partial` into y. The stretches are whole tiles, so no two programs read
# the same column, and the last one may run past N (the mask stops it there); rounding the stretches
# down to whole tiles can leave one program more than choose_splits asked for, with a short stretch
# (the tables' "programs per row"). How many programs per
# row: choose_splits follows the rule of thumb of section 3 (at least 4 programs per SM) and splits
# only where the rows alone give fewer, keeping at least 2 tiles per program. The grid keeps one
# axis, numbered down the row blocks first: CUDA allows 2^31 - 1 programs along axis 0 but only
# 65535 along axes 1 and 2, and a split row can have more programs than that. The kernel and the
# rule: row_sum.py, row_sum_split_kernel and choose_splits.


# %%
def split_table(shapes=WAVES_SHAPES):
    """The programs a row sum launches where choose_splits splits its rows, against the SMs."""
    sms, rows = sm_count(), []
    for M, N in shapes:
        splits = choose_splits(M, N)
        cols = columns_per_program(N, splits)
        programs = cdiv(M, tile_config(N)[0]) * cdiv(N, cols)
        rows.append((f"{M} x {N}", splits, cols, cdiv(N, cols), programs, programs / sms,
                     f"{min(programs, sms)} of {sms}"))
    return print_table(rows, ["shape", "choose_splits", "columns per program", "programs per row", "programs",
                              "programs per SM", "SMs with work"],
                       title=f"Programs against SMs, rows split where too few ({sms} SMs)", floatfmt=".2f",
                       note="Stage 1 only; the second launch, one program per block of rows of `partial`, is small. "
                            "Section 3's table has the same shapes with one program per block of rows.")


# %%
chapter.run("split", split_table)

# %% [markdown]
# ## 6. The trace of a split row
# The worked example's row again, now split between 3 programs (grid (3,)) of 4 columns each: every
# program is its own block, with one tile. Then the second launch, row_sum_kernel on the partial
# sums: one program, one tile of 4 lanes of which 3 are real.


# %%
def split_trace() -> None:
    """The worked example's row of 12 in three programs of 4 columns, then the sum of their partial sums."""
    x = torch.tensor([[3.0, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]], device=DEVICE)
    partial = torch.empty((1, 3), device=DEVICE)
    print("Stage 1: row_sum_split_kernel, grid (3,), COLS_PER_PROGRAM = 4, BLOCK_N = 4.")
    row_sum_split_kernel[(3,)](x, partial, 1, 12, x.stride(0), x.stride(1), partial.stride(0), 4,
                               BLOCK_M=1, BLOCK_N=4, TRACE=True)
    show("partial sums", partial[0], indent=0)
    print("Stage 2: row_sum_kernel on the 1 x 3 partial sums, grid (1,), BLOCK_N = 4 (the fourth lane masked off).")
    y = torch.empty(1, device=DEVICE)
    row_sum_kernel[(1,)](partial, y, 1, 3, partial.stride(0), partial.stride(1), BLOCK_M=1, BLOCK_N=4, TRACE=True)
    show("row_sum", y[0], indent=0)


# %%
chapter.run("split_trace", split_trace, trace=True)

# %% [markdown]
# ## 7. The launcher: row_sum(x, *, splits=None)
# row_sum.py's launch() allocates y, works out the tiles and the programs per row, and launches:
# row_sum_kernel once, or row_sum_split_kernel then row_sum_kernel on the partial sums. The offsets
# are 32-bit unless a tensor needs 64 (common.checks.index_type); a split row's last program walks a
# whole stretch, up to cdiv(N, cols) x cols, past N, so that end is what must fit (offset_type).
# `index_type` overrides the choice: section 13 times both. row_sum, the public function, checks
# its input and hands it to RowSum, the autograd function of section 9, whose forward calls launch().


# %% [markdown]
# ## 8. Correctness: against a float64 sum
# Random and awkward shapes (a single element, rows shorter than a tile, rows of several tiles with
# a ragged end), split and not, and a strided view, which the kernels read through its strides.


# %%
def check():
    """Error against a float64 sum, relative to the sum of |x| (the size of the numbers added): fp32
    accumulation keeps it below 1e-7; float16 / bfloat16 outputs add their rounding (11 / 8 bits)."""
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
    return print_table(rows, ["dtype", "shape", "programs per row", "max error / sum |x|", "ok"],
                       floatfmt=".1e", title="Check: row_sum against a float64 sum")


# %%
chapter.run("check", check)

# %% [markdown]
# ## 9. Training: the gradient of a sum is a broadcast
# y_i = sum_j x_ij, so dy_i/dx_ij = 1 and dL/dx_ij = dL/dy_i: each row's gradient copied across
# the row. There is nothing to compute, and nothing to write either: expand() makes an (M, N) view
# of the M numbers (column stride 0), which autograd hands on to the operation before (only a leaf's
# .grad gets a dense copy, as with torch.sum). No backward kernel: row_sum.py's RowSum (an autograd
# function, lesson 1 section 5) only needs the rule in its backward.


# %%
def grad_check():
    """row_sum's gradient against torch's autograd of x.sum(dim=1) (common.checks.grad_errors)."""
    rows = []
    for dtype in DTYPES:
        for M, N in [(1, 1), (5, 12345), (3, 70000)]:
            x = torch.randn(M, N, device=DEVICE, dtype=dtype)
            ((ours, theirs),) = grad_errors(row_sum, lambda t: t.sum(dim=1), [x])
            rows.append((dtype_name(dtype), f"{M} x {N}", ours, theirs, grad_ok(ours, theirs)))
    return print_table(rows, ["dtype", "shape", "dx: relative error", "torch's, same dtype", "ok"],
                       floatfmt=".1e", title="Check: row_sum's gradient against float64 autograd", note=GRAD_NOTE)


# %%
chapter.run("grad", grad_check)

# %% [markdown]
# ### Your turn: the exercises
# lesson03_rowsum/exercises/, each checked when you run its file (`--hint` for a hint): rmsnorm
# (write: a row walked twice in tiles, an fp32 accumulator carried across them, after section 2),
# waves (predict a staircase's time, after section 4), split_row_atomic (write: several programs
# per row adding into one output with tl.atomic_add, after section 6), occupancy (predict, after
# section 10), col_sum (write: down the columns, every element read once, after section 16) and
# layernorm (a stretch: mean, variance and normalisation in three walks).

# %% [markdown]
# ## 10. How many programs an SM holds at once: occupancy
# An SM runs several programs side by side when they fit: its registers (65,536 on an H100/H200),
# its warp slots (64), its program slots (32) and its shared memory (228 KB) are shared between
# them, and the scarcest decides. Occupancy is the resident warps over the 64 slots. More warps in
# flight hide more memory latency (while one waits for its load, another computes), which is what
# a memory-bound kernel like this one needs; past a point more occupancy buys nothing. The
# registers a kernel needs are known only after compiling: ptxas, the assembler that ships inside
# the triton wheel, reports them (common/ptx.py compiles for an H100/H200, sm_90, without a GPU).


# %%
SM = dict(registers=65536, warps=64, programs=32, shared=228 << 10)  # one H100/H200 SM
OCCUPANCY_CONFIGS = ((1, 4096, 4), (1, 4096, 8), (1, 4096, 16), (64, 32, 8))  # BLOCK_M, BLOCK_N, num_warps


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


def occupancy_table(configs=OCCUPANCY_CONFIGS):
    """row_sum_kernel compiled for an H100/H200 (sm_90) at several tile shapes: its registers, and
    the programs per SM and occupancy they allow."""
    seed = occupancy(warps=4, registers=160)
    print(f"The worked example (a kernel that needed 160 registers a thread, more than any tile below):\n"
          f"128 threads (4 warps) x 160 registers = {128 * 160:,} registers per program;\n"
          f"65,536 // 20,480 = {seed['registers']} programs per SM = {seed['programs'] * 4} warps: "
          f"occupancy {seed['programs'] * 4} / 64 = {seed['occupancy']:.2%}.\n")
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", **dict.fromkeys(("M", "N", "stride_xm", "stride_xn"), "i32")}
    compiled = ptx.compile_kernels([dict(module="lesson03_rowsum.row_sum", kernel=row_sum_kernel, signature=sig,
                                         asm=["ptx"], num_warps=w, constexprs={"BLOCK_M": bm, "BLOCK_N": bn})
                                    for bm, bn, w in configs])
    rows = []
    for (bm, bn, w), asm in zip(configs, compiled):
        regs = ptx.registers(asm["ptx"])
        occ = occupancy(w, regs, asm["shared"])
        rows.append((f"{bm} x {bn}", w, regs, occ["programs"], occ["limited_by"], 100 * occ["occupancy"]))
    return print_table(rows, ["BLOCK_M x BLOCK_N", "num_warps", "registers per thread", "programs per SM",
                              "limited by", "occupancy %"], floatfmt=".1f",
                       title="Occupancy of row_sum_kernel (registers from ptxas, sm_90)",
                       note="The same tile walked by more or fewer threads: fewer threads hold more elements each, "
                            "in more registers. The last row is the launcher's tile for rows of 32 columns. Register "
                            f"counts depend on the Triton and ptxas versions (here triton {triton.__version__}).")


# %%
chapter.run("occupancy", occupancy_table)

# %% [markdown]
# ## 11. Occupancy, timed: one tile walked by 4, 8 and 16 warps
# The launcher's tile for rows of 16384 (1 x 4096), launched with each num_warps of section 10's
# table on a 4096 x 16384 float32 tensor: what the occupancy buys a memory-bound kernel.


# %%
def occupancy_timed(configs=OCCUPANCY_CONFIGS, M: int = 4096, N: int = 16384):
    """Kernel time of row_sum_kernel with the launcher's tile for rows of N, at each num_warps of configs."""
    x, y = torch.randn(M, N, device=DEVICE), torch.empty(M, device=DEVICE)
    timed = [(bm, bn, w) for bm, bn, w in configs if (bm, bn) == tile_config(N)[:2]]
    ms = bench.side_by_side({(bm, bn, w): (lambda bm=bm, bn=bn, w=w: row_sum_kernel[(cdiv(M, bm),)](
        x, y, M, N, x.stride(0), x.stride(1), BLOCK_M=bm, BLOCK_N=bn, num_warps=w)) for bm, bn, w in timed})
    rows = [(f"{bm} x {bn}", w, *bench.timing_cells(ms[bm, bn, w], 4 * (M * N + M))) for bm, bn, w in timed]
    return print_table(rows, ["BLOCK_M x BLOCK_N", "num_warps", *bench.TIMING_HEADERS], floatfmt=".1f",
                       title=f"Occupancy, timed: row_sum_kernel on {M} x {N} float32",
                       note="Each configuration's occupancy: section 10's table. Kernel time as in section 12's "
                            "timing table (its note says how GB/s and % of copy are counted). "
                            + bench.SIDE_BY_SIDE_NOTE)


# %%
chapter.run("occupancy_timed", occupancy_timed, gpu=True)

# %% [markdown]
# ## 12. Timing: against torch.sum(dim=1), GB/s and % of the copy bandwidth
# Kernel time of torch.sum and of row_sum, split and not where choose_splits splits, turned into
# GB/s with the bytes a row sum must move (x read once, y written once) and into % of the copy
# bandwidth (lesson 1, section 7). Then the roofline points (README) of the two at 4096 x 16384.


# %%
TIMING_NOTE = (f"{bench.TIMING_NOTE} Bytes: x read once and y written once, (M x N + M) elements: a row sum "
               f"reads almost only. {bench.SIDE_BY_SIDE_NOTE}")


def bench_all(shapes, dtype=torch.float32):
    """torch.sum(dim=1) against row_sum at each (M, N): kernel time, GB/s, % of copy, speed-up."""
    rows = []
    for M, N in shapes:
        x = torch.randn(M, N, device=DEVICE, dtype=dtype)
        cases = {"torch.sum(dim=1)": lambda: x.sum(dim=1),
                 "Triton row_sum, rows not split": lambda: row_sum(x, splits=1)}
        if choose_splits(M, N) > 1:
            cases["Triton row_sum, rows split (auto)"] = lambda: row_sum(x)
        ms = bench.side_by_side(cases)
        for name in cases:
            rows.append([f"{M} x {N}", name, *bench.timing_cells(ms[name], (M * N + M) * x.element_size()),
                         ms["torch.sum(dim=1)"] / ms[name]])
    return print_table(rows, ["shape", "implementation", *bench.TIMING_HEADERS, "x torch"],
                       title=f"Timing, {dtype_name(dtype)}", note=TIMING_NOTE,
                       plot=dict(x="shape", y="GB/s", series=["implementation"], ceiling=bench.copy_bandwidth(),
                                 ceiling_label="device copy (measured)"))


def timing() -> list:
    table = bench_all(args.shapes or chapter.sizes(SIZES), getattr(torch, args.dtype))
    M, N = 4096, 16384  # the roofline (README): one addition per 4 bytes read
    x, size, nbytes = torch.randn(M, N, device=DEVICE), f"{M} x {N} float32", 4 * (M * N + M)
    print()
    points = roofline.points({("Triton row_sum", size): (lambda: row_sum(x), M * N, nbytes),
                              ("torch.sum(dim=1)", size): (lambda: x.sum(dim=1), M * N, nbytes)})
    return [table, points]


# %%
chapter.run("bench", timing, gpu=True)

# %% [markdown]
# ## 13. 64-bit offsets: what they cost here
# The launcher makes the offsets 64-bit only for tensors that need them (section 7). What it would
# cost to make them 64-bit always: the same calls of launch() with index_type=tl.int32 and tl.int64,
# side by side, at section 12's quick shapes.


# %%
def offsets():
    xs = [torch.randn(M, N, device=DEVICE) for M, N in SIZES["quick"]]
    return bench.offsets_cost({f"launch(x), x {x.shape[0]} x {x.shape[1]} float32":
                               (lambda t, x=x: launch(x, index_type=t)) for x in xs})


# %%
chapter.run("offsets", offsets, gpu=True)

# %% [markdown]
# ## 14. What a call costs the host
# The host's microseconds per call (lesson 1, section 12, says where they go), for torch.sum, the
# bare launch, row_sum with one launch and with two.


# %%
def host_cases() -> dict:  # bench.host_costs calls it in fresh processes
    x, wide = torch.randn(4096, 1024, device=DEVICE), torch.randn(16, 65536, device=DEVICE)
    y = x.new_empty(4096)
    BLOCK_M, BLOCK_N, num_warps = tile_config(1024)
    grid = (cdiv(4096, BLOCK_M),)
    return {"torch.sum(x, dim=1) (4096 x 1024 float32)": lambda: x.sum(dim=1),
            "row_sum_kernel[grid](...) alone, arguments ready": lambda: row_sum_kernel[grid](
                x, y, 4096, 1024, x.stride(0), x.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps),
            "row_sum(x): checks, output, grid, one launch": lambda: row_sum(x),
            "row_sum(x) of 16 x 65536: split rows, two launches": lambda: row_sum(wide)}


# %%
chapter.run("host", lambda: bench.host_cost_table("lesson03_rowsum.main:host_cases", 3 if args.full else 1), gpu=True)

# %% [markdown]
# ## 15. Coalescing: the memory lines one warp's load touches (coalescing.py)
# A warp's 32 threads load together, and memory answers in 128-byte lines of four 32-byte sectors.
# When thread t reads element t of a row, the 32 loads of 4 bytes fill one line; when it reads
# element t of a column (a row apart), they touch 32 lines, a sector of each, and use 4 of its 32
# bytes. The arithmetic, in coalescing.py, the lesson's second file.


# %%
chapter.run("lines", coalescing.lines_table)

# %% [markdown]
# ## 16. Coalescing, timed: row sums of both layouts (coalescing.py)
# row_sum reads x.t() through its strides correctly, but fetches far more than it uses: the next
# program (the next row) wants the neighbouring 4 bytes of the same sectors, and the L2 cache saves
# some of that, so the loss measured is several-fold rather than 8-fold.


# %%
chapter.run("coalescing", lambda: coalescing.timing(row_sum), gpu=True)
