"""Lesson 7: Hopper. The course's fastest kernels taken apart: TMA, a persistent grid, warps by job.

On an H100 or H200, lesson 4's matmul() and lesson 5's attention() run kernels written for Hopper,
where their routes found them faster: a matmul whose tiles arrive by TMA, Hopper's copy engine, on a
persistent grid (lesson04_matmul/hopper.py, in Triton), and a flash attention forward and backward
in Gluon, Triton's lower-level language, whose warps each have one job: one warp brings tiles, two
warpgroups compute, and barriers in shared memory say when a tile has landed and when a slot is free
(lesson05_flash_attention/hopper.py, FlashAttention-3's structure). This chapter explains them in
that order, from the kernels the earlier lessons wrote: what Hopper changes (section 1), TMA
descriptors and the persistent matmul (2-6), warp specialization and mbarriers in the Gluon forward
(7-10), the backward (11-14), and the route each op takes on Hopper (15).

The kernels live in those two op files, where lessons 4 and 5 run them; this chapter imports them,
as lesson 6 imports its ops. Everything but the timings runs on any machine: the TMA kernel under
Triton's interpreter (which imitates TMA), the Gluon kernels compiled for an H100 (sm_90) without
one (machine_code.py counts what their PTX and machine code hold). A first reading can skip the
machine-code tables (sections 5, 9, 12 and 13) and read their notes.

Run:   python lesson07_hopper/main.py            (every section)
       python lesson07_hopper/main.py --help     (sections)
Without a CUDA GPU the TMA kernel runs under Triton's interpreter, the Gluon kernels are compiled
for sm_90 and counted, and the sections that need a GPU show what a GPU printed (RESULTS.md, which
names it).
"""
# %% Set-up: common.device chooses GPU or interpreter before triton is imported
import functools

from common.device import DEVICE, INTERPRET, shared_memory, sm_count

import torch
import torch.nn.functional as F
import triton

from common import bench
from common.chapter import Chapter
from common.checks import dtype_name, rel_error
from common.launch import cdiv, scratch
from common.table import Table, print_table
from lesson04_matmul import hopper as matmul_hopper                    # lesson 4's TMA kernel
from lesson04_matmul.matmul import choose_kernel, launch as launch_pointer, matmul_kernel
from lesson05_flash_attention import hopper as attention_hopper        # lesson 5's Gluon kernels
from lesson05_flash_attention.attention import ROUTES, attention_kernel_tuned, launch as launch_attention
from lesson05_flash_attention.backward import BACKWARD_NOTE, launch_backward
from lesson07_hopper import machine_code  # the kernels compiled for sm_90, counted (machine_code.py)

SECTIONS = {  # the chapter, in reading order: `--sections` picks some, `--skip` leaves some out
    "schedule": "3. The persistent grid, counted: tiles, programs, descriptors",
    "check": "4. Correctness: descriptors pad and clip, persistent programs loop",
    "ptx": "5. Which instructions move the tiles: both matmul kernels compiled for sm_90 (machine_code.py)",
    "steps": "6. What each step bought: TMA and a persistent grid, timed against cuBLAS",
    "phases": "8. mbarriers and their phases: which parity each wait asks for",
    "gluon": "9. The forward compiled for sm_90: partitions, copies, waits, register budgets (machine_code.py)",
    "bench_gluon": "10. The Gluon forward, timed against the Triton kernel and SDPA",
    "gluon_backward": "12. The register budget: the backward compiled for sm_90 (machine_code.py)",
    "sass": "13. Reading the SASS: the backward's step in the machine code (machine_code.py)",
    "bench_gluon_backward": "14. The Gluon backward, timed against the Triton backward and SDPA",
    "routes": "15. Which kernel each op runs on Hopper, and the table that decided it",
}
# The GPU sections' sizes: a quick look, or with --full what RESULTS.md holds (minutes). steps:
# section 6's n of n^3 products; gluon: section 10's (batch, heads, head_dim) and sequence lengths;
# gluon_backward: section 14's.
SIZES = {"quick": dict(steps=[4096], gluon=dict(shapes=[(4, 16, 128)], seqs=[4096]),
                       gluon_backward=dict(shapes=[(4, 16, 128)], seqs=[4096])),
         "full": dict(steps=[4096, 8192], gluon=dict(shapes=[(4, 32, 64), (4, 16, 128)], seqs=[1024, 4096, 16384]),
                      gluon_backward=dict(shapes=[(4, 32, 64), (4, 16, 128)], seqs=[4096, 16384]))}

chapter = Chapter("lesson07_hopper", __doc__, SECTIONS, running=__name__ == "__main__")
args = chapter.start()

# %% [markdown]
# ## 1. What Hopper changes
# Up to Ampere (A100), a fast kernel's threads do everything: each computes addresses, copies its
# share of a tile from memory into shared memory (cp.async, lesson 4's pipelined loads), waits,
# and every warp then multiplies its own small fragments on the tensor cores (mma.sync). The same
# warps load and compute, and Triton's compiler interleaves the two (num_stages).
#
# Hopper's tensor cores are fast enough that keeping them fed becomes the job, and the H100 adds
# hardware to do it off the threads:
# - TMA, the tensor memory accelerator: a copy engine beside each SM. One thread names a tile of a
#   matrix (a tensor descriptor: base, shape, strides, tile shape); the engine computes every
#   address, pads what falls outside the matrix with zeros, and lands the tile in shared memory in
#   the layout the tensor cores read (swizzled: each row's chunks permuted across shared memory's
#   banks, so that a warp's reads do not collide). No thread spends registers or instructions on it.
# - wgmma: a matmul issued by a warpgroup (4 warps, 128 threads) on tiles read straight from shared
#   memory, asynchronously: the instruction returns at once, the warps go on, and a wait later
#   says it is done.
# - mbarriers: barriers in shared memory that count arrivals and, for TMA, bytes landed. A copy
#   engine and a tensor core that work on their own need a way to say "done"; this is it.
# - setmaxnreg: a warpgroup gives registers back, or takes more, while the kernel runs.
#
# Everything is asynchronous now, so the shape of the fastest kernels changes: some warps only
# move tiles, others only compute, and they hand tiles over through a ring of shared-memory slots
# guarded by barriers (warp specialization, what cuBLAS's and cuDNN's Hopper kernels and
# FlashAttention-3 do). Triton's compiler does part of this by itself for sm_90: tl.dot becomes
# wgmma, a tensor descriptor's load becomes a TMA copy. What it leaves to itself (which warps
# load, which compute, when they wait) Gluon lets a kernel say by hand. The chapter takes the two
# steps in turn: lesson 4's matmul with TMA and a persistent grid, in Triton; then lesson 5's
# attention with its warps split by job, in Gluon.

# %% [markdown]
# ## 2. TMA descriptors and a persistent grid: lesson 4's matmul_kernel_tma
# Open lesson04_matmul/hopper.py beside this chapter at matmul_kernel_tma. It is lesson 4's kernel,
# the same tiles and K loop, with four changes:
# - The loads and the store go through descriptors. tl.make_tensor_descriptor(a_ptr, shape=[M, K],
#   strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K]) describes A once; a_desc.load([row,
#   col]) then asks the copy engine for the tile that starts there. There are no offsets and no
#   masks: the engine zero-pads reads past the edge and c_desc.store clips writes. The price is
#   in the rules: the last stride must be 1, the other strides and the base multiples of 16 bytes
#   (hopper.tma_ok). A transposed view (x @ W^T's B, a weight gradient's X^T) is read as it lies:
#   A_T / B_T describe the memory's rows, and the tile is turned on chip (.T), where the tensor cores
#   read either orientation. Each program builds its descriptors on the device as it starts,
#   128 bytes each, in a scratch buffer Triton asks common.launch.scratch for; built on the host
#   instead, they would be encoded at every call, host time a short kernel cannot hide.
# - The grid is persistent: one program per SM, each looping over tiles p, p + programs, p + 2
#   programs, ... (tl.range over units of work: a whole tile, or, with split K below, one part of
#   a tile; tiles in lesson 4's grouped order by tl.swizzle2d). No program starts and retires per tile, the descriptors are built once per SM instead of once per tile, and
#   with flatten=True the compiler pipelines across a tile's end: the next tile's first loads are in
#   flight while this one's epilogue runs (section 6 times what each of these buys, shape by shape).
# - Split K, for the tiles that would leave SMs idle: a weight's gradient, dY^T @ X, is 768 x 768
#   (36 tiles of 128 x 128 for 132 SMs) while its sum runs over 16384 tokens, and an MLP weight's,
#   768 x 3072, is 144 tiles: a full wave of 132, then 12 tiles on 12 SMs while 120 wait, the
#   product's time nearly doubled by its last 8% (a wave's quantization). So the waves before the
#   last take their tiles whole (whole_tiles): they keep every SM busy as they are. Each tile of
#   the last wave splits K into SPLIT_K parts, one unit of work each, summing a stretch of K into a
#   float32 block of its own; split_k_sum_kernel then adds each tile's parts, applies the
#   activation (which needs the whole sum) and casts. With fewer tiles than SMs every tile splits;
#   behind more than two waves none does (the last wave's idle SMs are then a small share of the
#   time). hopper.split_for picks the parts: as many as fit the SMs, each at least 4 steps of K (a
#   split tile's time is about the whole tile's over SPLIT_K, plus its sum); hopper.rule splits 128
#   x 128 tiles only (a 128 x 256 float32 block, stored whole, beside the stages would not fit in
#   shared memory); hopper.tune also times 128 x 256 ones with C and the parts in pieces, and
#   parts added by atomics (SPLIT_ATOMIC; lesson 4, section 17).
# - C's tile can be stored in 2 or 4 pieces side by side (EPILOGUE_SPLIT, hopper.store_tile): a TMA
#   store reads its tile from shared memory, and a piece needs a smaller buffer there (section 6).
# Section 3 counts what that changes, section 4 checks the kernel, section 5 shows what each kernel
# compiles to, and section 6 times each change.


# %% [markdown]
# ## 3. The persistent grid, counted: tiles, programs, descriptors
# One program per tile launches as many programs as there are tiles, in waves of one per SM (these
# tiles take most of an SM's shared memory, so one program fits at a time: lesson 3's waves); a
# persistent grid launches one per SM, which loop. The last wave is the same in both: the tiles
# left over keep some SMs busy while the others idle. Below, lesson 4's timed shapes in its
# 128 x 256 tiles on this machine's SMs (under the interpreter, an H200's: 132 SMs, 227 KB each).


# %%
STEP_TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=3, num_warps=8)  # sections 3 and 6


def schedule(shapes=((4096, 4096), (8192, 8192), (4096, 11008))) -> Table:
    """For C of each (M, N) shape in STEP_TILE's tiles: the tiles, the programs of each grid, the
    tiles a persistent program takes, and the descriptors each grid builds (3 per program)."""
    BM, BN, stages = STEP_TILE["BLOCK_M"], STEP_TILE["BLOCK_N"], STEP_TILE["num_stages"]
    config = triton.Config({"BLOCK_M": BM, "BLOCK_N": BN, "BLOCK_K": STEP_TILE["BLOCK_K"]}, num_stages=stages)
    per_sm = shared_memory() // matmul_hopper.shared_bytes(config)  # programs of these tiles an SM holds at once
    sms, rows = sm_count(), []
    for M, N in shapes:
        tiles = cdiv(M, BM) * cdiv(N, BN)
        programs = min(sms * per_sm, tiles)
        fewest, most = tiles // programs, cdiv(tiles, programs)
        rows.append((f"{M} x {N}", tiles, tiles / (sms * per_sm), programs,
                     f"{fewest}" if fewest == most else f"{fewest} or {most}", 3 * tiles, 3 * programs))
    return print_table(rows, ["C (M x N)", "tiles", "waves, a program per tile", "persistent programs",
                              "tiles per persistent program", "descriptors built, a program per tile",
                              "... persistent"], floatfmt=".2f",
                       title=f"{BM} x {BN} tiles on {sms} SMs ({per_sm} program per SM at a time)",
                       note=f"A {BM} x {BN} tile with {stages} stages of A and B in flight needs "
                            f"{matmul_hopper.shared_bytes(config) >> 10} KB of shared memory (hopper.shared_bytes), "
                            f"of the {shared_memory() >> 10} KB a program may have here. Waves: tiles / (SMs x "
                            "programs per SM); the fraction is the last wave, where the rest of the SMs idle. Each "
                            "program builds 3 descriptors (A, B, C) as it starts.")


# %%
chapter.run("schedule", schedule)

# %% [markdown]
# ## 4. Correctness: descriptors pad and clip, persistent programs loop
# Triton's interpreter imitates TMA, so the kernel runs here on any machine: on products whose
# sides are not multiples of the tile (the descriptors must pad the loads and clip the stores),
# with 3 persistent programs looping over every tile, through hopper.py's own launcher, and with
# split K: 64 x 96 has 2 tiles for 3 programs, so every tile splits; 200 x 48 has 4, 3 of them
# whole and the last in 3 parts of 1, 2 and 2 steps of K (parts as even as the steps allow); and
# with C's tiles stored in 2 or 4 pieces, past C's edge too (8 x 8 in a 64 x 64 tile, in halves:
# the right half, columns 32-63, lies wholly outside C, and TMA stores none of it). The
# error is relative, over the whole of C, against float64, and a float16 or bfloat16 output is as
# good as its rounding: within two of its rounding steps (torch.finfo(dtype).eps).


# %%
def check(programs: int = 3) -> Table:
    """matmul_kernel_tma (through launch_tma, on `programs` persistent programs that loop over the
    tiles) against float64: each operand as it lies in a linear layer's products (a row-major
    matrix, or a transposed view read as it lies), K whole or split into parts, C stored whole or
    in pieces."""
    if not INTERPRET and not matmul_hopper.HOPPER:
        print("This GPU cannot run the TMA kernel (compute capability 9.0 or newer, and the shared memory of its\n"
              "tiles); Triton's interpreter, on a machine without a GPU, runs it.")
        return None
    tiles = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=4, FLATTEN=True)  # small: several tiles a program
    cases = [((104, 72, 40), "A @ B", 1, 1), ((64, 96, 200), "A @ B^T (x @ W^T)", 2, 2),
             ((200, 48, 304), "A^T @ B (dY^T @ X)", 3, 4), ((8, 8, 8), "A^T @ B^T", 1, 2)]
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        for (M, N, K), layout, split, pieces in cases:
            a = torch.randn(K, M, device=DEVICE, dtype=dtype).t() if "A^T" in layout else \
                torch.randn(M, K, device=DEVICE, dtype=dtype)
            b = torch.randn(N, K, device=DEVICE, dtype=dtype).t() if "B^T" in layout else \
                torch.randn(K, N, device=DEVICE, dtype=dtype)
            for activation in (None, "gelu"):
                c = matmul_hopper.launch_tma(matmul_hopper.matmul_kernel_tma, a, b, activation, programs=programs,
                                             SPLIT_K=split, EPILOGUE_SPLIT=pieces, **tiles)
                exact = a.double() @ b.double()
                if activation == "gelu":
                    exact = F.gelu(exact, approximate="tanh")
                count = cdiv(M, tiles["BLOCK_M"]) * cdiv(N, tiles["BLOCK_N"])
                err = rel_error(c, exact)
                split_count = matmul_hopper.split_tiles(count, programs) if split > 1 else 0
                rows.append((dtype_name(dtype), f"{M} x {N} x {K}", layout, split, pieces, activation or "-", count,
                             split_count, min(programs, count + split_count * (split - 1)), err,
                             err < 2 * torch.finfo(dtype).eps))
    return print_table(rows, ["dtype", "M x N x K", "as they lie", "parts of K", "pieces of C", "activation", "tiles",
                              "tiles split", "programs", "relative error", "ok"],
                       floatfmt=".1e", title="Check: matmul_kernel_tma against float64",
                       note="ok: within twice the dtype's rounding step (float16 9.8e-4, bfloat16 7.8e-3). Tiles of "
                            "64 x 64, 64 deep. A^T, B^T: the operand is a transposed view, read as it lies. Parts "
                            "of K: SPLIT_K, float32 partial sums added by split_k_sum_kernel, for the tiles past the last "
                            "full wave of programs (all of them where there are fewer tiles than programs). Pieces of "
                            "C: EPILOGUE_SPLIT, each tile (and each part) stored as that many pieces side by side "
                            "(section 6).")


# %%
chapter.run("check", check)

# %% [markdown]
# ## 5. Which instructions move the tiles: both matmul kernels compiled for sm_90
# Compiled for an H100/H200 in a child process, which needs no GPU, the PTX shows what each
# kernel's loads became: cp.async, the per-thread asynchronous copies of lesson 4's pipeline, for
# the pointer kernel; cp.async.bulk.tensor, TMA copies, for the descriptors; and in both,
# wgmma.mma_async: on sm_90 Triton's compiler turns tl.dot into Hopper's warpgroup matmul by
# itself. So the pointer kernel already has most of what Hopper offers: in section 6's timing TMA
# alone buys nothing (a little slower, where each program builds its descriptors), and the
# persistent grid the last few percent.


# %%
chapter.run("ptx", machine_code.copy_instructions)

# %% [markdown]
# ## 6. What each step bought: TMA and a persistent grid, timed against cuBLAS
# One tile shape throughout (section 3's); each step added to the one before, all timed side by
# side with cuBLAS. matmul() takes this kernel from M * N * K = 16384 x 768 x 768 up
# (hopper.TMA_FROM, about 2130^3, the smallest product of lesson 6's transformer blocks; its LM
# head's, 16384 x 256 x 768, takes the pointer kernel): at 4096^3 and above it
# was the faster in this table (float16) and in lesson 4's timing table (section 10, float16 and
# bfloat16), and at 2048^3 the pointer kernel was.
#
# The last step spends shared memory differently. A TMA store goes from shared memory, so the
# kernel stages C's tile there, in a buffer beside the stages of A and B: 64 KB for 128 x 256 in
# float16, beside 3 stages of 48 KB, 208 KB of the 227 KB a program may have. Stored in two halves
# (EPILOGUE_SPLIT=2: hopper.store_tile, through hopper.halves, cuts the tile column-wise with
# tl.reshape, tl.permute and tl.split), the buffer takes 32 KB and a fourth stage fits, 224 KB (hopper.shared_bytes): one more
# tile of A and B in flight while the tensor cores work. The table says whether it pays here.


# %%
def bench_steps(sizes=(4096, 8192), dtype=torch.float16) -> Table | None:
    """matmul.py's kernel (matmul_kernel, through its launch), then TMA, a persistent grid, flatten
    and C stored in halves (a fourth stage), one tile shape throughout, side by side with cuBLAS."""
    if not matmul_hopper.HOPPER:
        print("This GPU cannot run the TMA kernel (tma_gpu: compute capability >= 9.0, and the shared memory\n"
              "of its tiles): nothing to time.")
        return None
    tile, rows = STEP_TILE, []
    for n in sizes:
        a, b = torch.randn(2, n, n, device=DEVICE, dtype=dtype)
        c = torch.empty(n, n, device=DEVICE, dtype=dtype)
        tiles = cdiv(n, tile["BLOCK_M"]) * cdiv(n, tile["BLOCK_N"])
        triton.set_allocator(scratch)

        def tma(programs, flatten, **more):  # more: what the last step changes of the tile's configuration
            matmul_hopper.matmul_kernel_tma[(programs,)](a, b, c, n, n, n, n, n, n, **{**tile, **more},
                                                         FLATTEN=flatten, ACTIVATION="")

        cases = {"cuBLAS (torch.matmul)": lambda: a @ b,
                 "tl.dot tiles, pointer loads (matmul_kernel)": lambda: launch_pointer(matmul_kernel, a, b, **tile),
                 "+ TMA loads and stores, one program per tile": lambda: tma(tiles, False),
                 "+ persistent: one program per SM": lambda: tma(min(sm_count(), tiles), False),
                 "+ flatten: pipelined across tiles": lambda: tma(min(sm_count(), tiles), True),
                 "+ C stored in halves: a fourth stage": lambda: tma(min(sm_count(), tiles), True, EPILOGUE_SPLIT=2,
                                                                       num_stages=4)}
        times = bench.side_by_side(cases)
        for name, ms in times.items():
            rows.append((f"{n}^3", name, ms * 1e3, bench.tflops(2 * n**3, ms), 100 * times["cuBLAS (torch.matmul)"] / ms))
    return print_table(rows, ["size", "kernel", "kernel µs", "TFLOP/s", "% of cuBLAS"],
                       title=f"What each step bought, {dtype_name(dtype)}",
                       note="One tile: 128 x 256 x 64, 3 stages (4 in the last row), 8 warps, grouped order. "
                            "'kernel µs': the kernels' own time (profiler timestamps, L2 flushed between calls). "
                            + bench.SIDE_BY_SIDE_NOTE)


# %%
chapter.run("steps", lambda: bench_steps(chapter.sizes(SIZES)["steps"]), gpu=True)

# %% [markdown]
# ## 7. Warp specialization: lesson 5's forward in Gluon
# lesson 5's attention_kernel says what one program computes, and Triton's compiler decides the
# rest: every warp loads, multiplies and does the softmax in turn, and the loads are pipelined
# (num_stages). Open lesson05_flash_attention/hopper.py at attention_kernel_hopper: the same
# algorithm, a program per 128 query rows walking the key blocks with the online softmax, but its
# warps are split by job, by hand, in Gluon (layouts, shared memory and barriers named in the
# code). Each job is a partition, a function run by its own warps; gl.warp_specialize, at the end
# of the kernel, hands them out (the kernel's own 4 warps run consumer 0; the workers it starts run
# consumer 1 and the producer):
# - the producer, one warp: TMA copies of the queries (once) and of each key/value block into a
#   ring of three shared-memory slots, each as soon as the slot is free;
# - two consumers, a warpgroup each, 64 query rows each: S = Q K^T and O += P V on the tensor cores
#   with wgmma, asynchronously, and the online softmax in registers between them;
# - the two consumers take turns at the tensor cores: each issues its two matmuls, hands the turn
#   to the other, and runs its softmax while the other's matmuls run (FlashAttention-3's
#   "ping-pong"). The exponentials and the matmuls then overlap, which one warpgroup doing both in
#   turn cannot do.
# The register budget makes the split pay: the producer needs few registers, the consumers many (a
# 64 x 128 float32 accumulator, the scores, P), and setmaxnreg moves them: the producer's warpgroup
# drops to 24 a thread, each consumer's rises to 240 (hopper.py, at MAXNREG, has the arithmetic:
# an SM's 64K registers over the three warpgroups). Without it, every warp of a kernel gets the same
# number of registers.
#
# mbarriers are how the jobs talk. A barrier lives in shared memory and counts arrivals (and, for
# TMA, bytes landed); when all have come in it completes a phase and starts the next, flipping a
# parity bit. mbarrier.wait(bar, p) returns once the phase of parity p is over. A ring slot is used
# once per round of the ring, so its waits alternate parity round by round, and nobody keeps a
# count of phases: the parity is computed from the block number. hopper.py's docstring has the
# table of barriers (who arrives, who waits, on which parity); section 8 counts the parities.


# %% [markdown]
# ## 8. mbarriers and their phases: which parity each wait asks for
# Key block j goes into slot s = j % NUM_BUFFERS, in round r = j // NUM_BUFFERS of the ring. The
# consumers wait on k_ready[s] and v_ready[s] for the phase the producer's copy completes: parity
# r & 1. The producer, before refilling slot s, waits on kv_empty[s] for the phase both consumers
# completed when they were done with the slot's previous block: round r - 1, parity (r & 1) ^ 1.
# In round 0 there was no previous block, and a fresh barrier's phase "before the first" counts as
# complete on parity 1: the producer's first waits pass at once, every slot starting free. The
# turns alternate with the block: consumer c waits on turns[c] with parity j & 1. A wrong parity is
# not an error but a hang (a wait for a phase that never comes) or a race (a wait that passes a
# phase too early), which is why the formulas are worth printing.


# %%
def phases(blocks: int = 7, num_buffers: int = attention_hopper.NUM_BUFFERS) -> Table:
    """For key blocks 0 .. blocks - 1 of the forward: the slot, the round, and the parity each
    wait asks for, by the formulas of hopper.py's producer and consumer."""
    rows = []
    for j in range(blocks):
        slot, round_ = j % num_buffers, j // num_buffers
        rows.append((j, slot, round_, (round_ & 1) ^ 1, "passes: a fresh barrier" if round_ == 0 else f"block {j - num_buffers}",
                     round_ & 1, j & 1))
    return print_table(rows, ["key block j", "slot", "round", "producer waits kv_empty[slot], parity",
                              "... the phase the consumers completed after", "consumers wait k_ready, v_ready, parity",
                              "consumer c waits turns[c], parity"],
                       title=f"The forward's barrier phases, {num_buffers} slots",
                       note="mbarrier.wait(bar, p) returns once the barrier's count has completed 2n + p + 1 times, "
                            "for some n >= 0, and for p = 1 on a fresh barrier too (the phase before its first counts as "
                            "complete). Each slot's barriers complete once per round, so a round's wait asks for r & 1, "
                            "and the producer's, for the round before, (r & 1) ^ 1.")


# %%
chapter.run("phases", phases)

# %% [markdown]
# ## 9. The forward compiled for sm_90: partitions, copies, waits, register budgets
# Compiled here for an H100/H200 (no GPU needed), the PTX has each piece of section 7: the
# register budgets setmaxnreg moves the warpgroups to, the TMA copies, the wgmma instructions and
# the barrier waits; and the shared memory a program takes: the queries and the ring, which at
# head_dim 128 has room for three slots and no more.


# %%
chapter.run("gluon", machine_code.compiled_forward)

# %% [markdown]
# ## 10. The Gluon forward, timed against the Triton kernel and SDPA
# The same forward written twice, side by side with SDPA's cuDNN and flash backends, float16: with
# --full (RESULTS.md) batch 4, 32 heads of 64 and 16 of 128, seq 1024, 4096 and 16384; a quick look
# takes 16 heads of 128 at seq 4096. What the table says decides lesson 5's route: the head dims
# where the warps split by hand pay at every length and mask (the Gluon rows' 'x Triton' above 1)
# are hopper.FASTER_HEAD_DIMS. Why the head dim matters: a turn's barriers and waits cost the same
# at either head dim, while its tensor-core work halves at 64, so the hand-made schedule's fixed
# cost is twice the share there.


# %%
def sdpa(q, k, v, *, causal=False, backend="FLASH_ATTENTION"):
    """PyTorch's scaled_dot_product_attention with one backend forced: "FLASH_ATTENTION"
    (FlashAttention-2) or "CUDNN_ATTENTION" (cuDNN's, on Hopper in FlashAttention-3's style)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, backend)):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def bench_forward(shapes=((4, 32, 64), (4, 16, 128)), seqs=(1024, 4096, 16384), dtype=torch.float16) -> Table | None:
    """Forward time of attention.py's Triton kernel, hopper.py's Gluon kernel, and SDPA's cuDNN and
    flash backends, side by side, on each shape."""
    if not attention_hopper.HOPPER:
        print("This GPU is not an sm_90 part (H100, H200): the Gluon kernel does not run here; nothing to time.")
        return None
    rows = []
    for B, H, D in shapes:
        for seq in seqs:
            for causal in (False, True):
                q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
                sm_scale = D ** -0.5
                cases = {"Triton (attention.py)": lambda: launch_attention(attention_kernel_tuned, q, k, v, causal, sm_scale),
                         "Gluon (hopper.py)": lambda: attention_hopper.launch(q, k, v, causal, sm_scale),
                         "SDPA cuDNN": lambda: sdpa(q, k, v, causal=causal, backend="CUDNN_ATTENTION"),
                         "SDPA flash (FA2)": lambda: sdpa(q, k, v, causal=causal, backend="FLASH_ATTENTION")}
                times = bench.side_by_side(cases)
                flops = 4 * B * H * seq * seq * D // (2 if causal else 1)
                for name, ms in times.items():
                    rows.append((f"{B} x {H} x {seq} x {D}", causal, name, ms * 1e3, bench.tflops(flops, ms),
                                 times["SDPA cuDNN"] / ms, times["Triton (attention.py)"] / ms))
                del q, k, v
    return print_table(rows, ["B x H x seq x head_dim", "causal", "implementation", "kernel µs", "TFLOP/s",
                              "x cuDNN", "x Triton"],
                       title=f"The forward on Hopper: Triton, Gluon and SDPA, {dtype_name(dtype)}", floatfmt=".2f",
                       note="'kernel µs': the kernels' own time (profiler timestamps, L2 flushed between calls); "
                            "TFLOP/s = 4 B H seq^2 head_dim / time, half of it when causal; 'x cuDNN', 'x Triton': "
                            "speed as a multiple of theirs (their time / this time). " + bench.SIDE_BY_SIDE_NOTE)


# %%
chapter.run("bench_gluon", lambda: bench_forward(**chapter.sizes(SIZES)["gluon"]), gpu=True)

# %% [markdown]
# ## 11. The backward in FlashAttention-3's structure
# lesson 5's backward.py runs the gradients as three Triton kernels: Delta; dK and dV, a program per
# key block; then dQ, a program per query block, which recomputes S and dP: 7 matmuls for the 5
# the maths needs. FlashAttention-3 (and cuDNN on Hopper) make dQ in the dK/dV kernel itself, and
# hopper.py's attention_bwd_kernel_hopper does the same with the forward's pieces:
# - one program per 128 keys; a producer warp brings K and V once, then for each query block Q,
#   dO, lse and Delta by TMA into a ring of slots;
# - two consumer warpgroups, 64 keys each, hold their dK and dV in registers (float32) for the whole
#   walk over the query blocks, everything transposed so that the keys run down wgmma's 64 rows:
#   S^T = K Q^T and dP^T = V dO^T, issued together; P^T = exp2(S^T * scale - lse) and
#   dS^T = P^T (dP^T - Delta) in registers; dV += P^T dO and dK += dS^T Q;
# - dQ_i = dS K needs both consumers' halves of dS^T (its sum runs over all 128 keys): each stores
#   its half in shared memory, a barrier waits for both, and each then makes half of dQ_i, a
#   64 x 64 float32 tile that TMA's reduce-add adds into dQ in memory (the copy engine reads the
#   tile and adds it in L2 while the warps go on). dQ's last bits then depend on the order of the
#   additions, so attention() takes this kernel only where deterministic algorithms are not asked
#   for;
# - the descriptors see each of q, k, v and dO as a 2-D matrix whose rows are its seq stride apart,
#   a row per position in the sequence (hopper.rows_descriptor), so a head is a block of rows and
#   columns in it, starting at the row and column origin() computes from the head's offset: column 0
#   for contiguous heads; for the heads of one QKV projection, side by side in a row, h x head_dim
#   for head h (each of q, k and v starting at its own place in the row). So lesson 6's model,
#   which hands attention views of its QKV projection, runs this kernel on them without a copy, and
#   dK and dV are stored by their strides into its d(QKV) buffer.
# Causal, a key block's walk starts at its diagonal, and the query blocks the diagonal crosses come
# first, in a loop of their own, so that the rest of the walk carries no mask. hopper.py's comment
# block "The backward in Gluon" has the barriers, the step's timeline and the register count.
#
# The register budget decides the design. A consumer thread has 240 registers. At head_dim 128 it
# holds dK and dV (64 each: 64 x 128 float32 over 128 threads), S^T and dP^T (32 each, at 64 query
# rows a step) and lse (16): 208 at the peak, so a step takes 64 query rows; at head_dim 64, dK and
# dV take half as much, and a step takes 128 query rows (S^T and dP^T 64 each, lse 32: 224), twice
# the work for the same barriers and waits (hopper.bwd_block_m: FlashAttention-3's choices). Past the
# budget, ptxas spills: it stores registers to local memory (which lives in the caches and DRAM) and
# loads them back every step. The count above is the big arrays only; addresses, indices, masks and
# loop state take registers too, so ptxas can spill a little below it, as section 12 shows. Section 12 counts what the compiled kernel keeps; section 13 reads the loop itself.


# %% [markdown]
# ## 12. The register budget: the backward compiled for sm_90
# The PTX's pieces as for the forward, plus TMA's reduce-adds, and what ptxas, the assembler that
# turns PTX into machine code, reports: the bytes it spills, and whether it had to serialise the
# wgmma instructions (each waiting for the one before, for want of registers to hold two results).
# The spills are this machine's ptxas's: another release allocates differently.


# %%
chapter.run("gluon_backward", machine_code.backward_budget)

# %% [markdown]
# ## 13. Reading the SASS: the backward's step in the machine code
# SASS is what the GPU runs: ptxas's output, printed by cuobjdump (both in the triton wheel). The
# step a consumer repeats is a loop in it, found by its backward branch (common.ptx.sass_loops),
# and its instructions say what the PTX cannot: HGMMA (the wgmma instructions, one per 16 of a
# matmul's inner dimension), LDL and STL (local memory: the spilled registers, read back and written every
# step), MUFU.EX2 (the exponentials, on the SM's special-function units) and FSEL (selects: the
# causal mask). WARPGROUP.DEPBAR.LE gsb0, N waits until at most N wgmma groups are in flight: the
# code waits for S^T alone (N = 1), computes exponentials while dP^T's matmul runs, then waits for
# dP^T too (N = 0). How many exponentials land between the two waits is how much of that overlap
# the machine code kept: ptxas may move the second wait up to interleave dS^T's arithmetic.


# %%
chapter.run("sass", machine_code.step_in_sass)

# %% [markdown]
# ## 14. The Gluon backward, timed against the Triton backward and SDPA
# Side by side with backward.py's three Triton kernels and SDPA's cuDNN and flash backends, float16,
# the gradient call alone. attention()'s backward runs the Gluon kernel at the head dims where this
# table finds it faster than the Triton kernels (hopper.FASTER_BACKWARD_HEAD_DIMS).


# %%
def bench_backward(shapes=((4, 32, 64), (4, 16, 128)), seqs=(4096, 16384), dtype=torch.float16) -> Table | None:
    """Backward time of hopper.py's Gluon kernel, backward.py's Triton kernels and SDPA's cuDNN and
    flash backends (their gradient call), side by side, on each shape; the same o and lse (the Gluon
    forward's) for the first two."""
    if not attention_hopper.HOPPER:
        print("This GPU is not an sm_90 part (H100, H200): the Gluon kernel does not run here; nothing to time.")
        return None
    rows, peak = [], bench.matmul_rate()
    for B, H, D in shapes:
        for seq in seqs:
            for causal in (False, True):
                q, k, v, do = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(4))
                sm_scale = D ** -0.5
                leaves, outs = {}, {}
                for name, backend in (("SDPA cuDNN", "CUDNN_ATTENTION"), ("SDPA flash (FA2)", "FLASH_ATTENTION")):
                    leaves[name] = [t.detach().requires_grad_() for t in (q, k, v)]
                    outs[name] = sdpa(*leaves[name], causal=causal, backend=backend)
                o, lse = attention_hopper.launch(q, k, v, causal, sm_scale)
                cases = {"Gluon (hopper.py)": lambda: attention_hopper.launch_backward(do, q, k, v, o, lse, causal,
                                                                                       sm_scale),
                         "Triton (backward.py)": lambda: launch_backward(do, q, k, v, o, lse, causal, sm_scale),
                         **{name: functools.partial(torch.autograd.grad, outs[name], leaves[name], do, retain_graph=True)
                            for name in outs}}
                times = bench.side_by_side(cases)
                flops = 2.5 * 4 * B * H * seq * seq * D / (2 if causal else 1)
                for name, ms in times.items():
                    rows.append((f"{B} x {H} x {seq} x {D}", causal, name, ms * 1e3, bench.tflops(flops, ms),
                                 bench.percent(bench.tflops(flops, ms), peak), times["SDPA cuDNN"] / ms,
                                 times["Triton (backward.py)"] / ms))
                del q, k, v, do, o, lse, leaves, outs
    return print_table(rows, ["B x H x seq x head_dim", "causal", "implementation", "backward µs", "TFLOP/s",
                              "% of matmul rate", "x cuDNN", "x Triton"],
                       title=f"The backward on Hopper: Gluon, Triton and SDPA, {dtype_name(dtype)}", floatfmt=".2f",
                       note=BACKWARD_NOTE + " Gluon and Triton: the backward's kernels alone (Delta, the kernels, "
                            "the float32 dQ's zeroing and cast for Gluon), from the Gluon forward's o and lse. "
                            "TFLOP/s: 2.5 x 4 B H seq^2 head_dim (half when causal), the five matmuls' useful work; "
                            "'% of matmul rate': of the stamp's measured cuBLAS rate; 'x cuDNN', 'x Triton': speed "
                            "as a multiple of theirs (their time / this time).")


# %%
chapter.run("bench_gluon_backward", lambda: bench_backward(**chapter.sizes(SIZES)["gluon_backward"]), gpu=True)

# %% [markdown]
# ## 15. Which kernel each op runs on Hopper, and the table that decided it
# A kernel written for Hopper runs where its lesson's route sends it, and the route follows the
# measurements: matmul.choose_kernel takes the TMA kernel from hopper.TMA_FROM up (section 6),
# attention's route takes the Gluon forward at hopper.FASTER_HEAD_DIMS (section 10) and the Gluon
# backward at hopper.FASTER_BACKWARD_HEAD_DIMS (section 14), and neither runs while torch.compile
# traces (Dynamo records a @triton.jit kernel's launch; a Gluon launch, or a TMA alignment check
# on tensors that have no memory yet, it cannot). The table asks matmul's route on examples as an
# H100 would (gpu_has_tma=True) and lists attention's routes, attention.py's ROUTES, in the order
# route() tries them.


# %%
MATMUL_EXAMPLES = [(4096, 4096, 4096, torch.bfloat16), (8192, 8192, 8192, torch.float16),
                   (2048, 2048, 2048, torch.float16), (4096, 4096, 4096, torch.float32)]  # (M, N, K, dtype)
KERNEL_FILES = {"tma": "matmul_kernel_tma (lesson04_matmul/hopper.py)", "pointer": "matmul_kernel (matmul.py)"}
DECIDED_BY = {"tma": "section 6; lesson 4, section 10", "gluon": "section 10 (forward), 14 (backward)"}


def routes() -> Table:
    """matmul's route on Hopper for MATMUL_EXAMPLES (meta tensors: a shape and strides, no memory),
    its backward, and attention's ROUTES."""
    rows = []
    for M, N, K, dtype in MATMUL_EXAMPLES:
        a, b = torch.empty(M, K, device="meta", dtype=dtype), torch.empty(K, N, device="meta", dtype=dtype)
        kernel = choose_kernel(a, b, gpu_has_tma=True)
        rows.append(("matmul()", "forward", f"{M} x {N} x {K} {dtype_name(dtype)}", KERNEL_FILES[kernel],
                     DECIDED_BY.get(kernel, "-")))
    rows.append(("matmul()", "backward", "dA = dC @ B^T, dB = A^T @ dC: each asks the route again (transposed "
                 "views read as they lie)", KERNEL_FILES["tma"] + " or " + KERNEL_FILES["pointer"], "-"))
    for direction, path, condition, kernels, _ in ROUTES:
        rows.append(("attention()", direction, f"{path}: {condition}", kernels, DECIDED_BY.get(path, "-")))
    return print_table(rows, ["op", "direction", "inputs", "kernel on an H100 or H200", "decided by"],
                       title="The routes on Hopper",
                       note=f"matmul: choose_kernel(a, b, gpu_has_tma=True), as on an H100 (hopper.TMA_FROM = "
                            f"{round(matmul_hopper.TMA_FROM ** (1 / 3))}^3). attention: ROUTES, in the order route() "
                            f"tries them (hopper.FASTER_HEAD_DIMS = {attention_hopper.FASTER_HEAD_DIMS}, "
                            f"FASTER_BACKWARD_HEAD_DIMS = {attention_hopper.FASTER_BACKWARD_HEAD_DIMS}); lesson 5, "
                            "section 6, prints what route() gives each example on this machine.")


# %%
chapter.run("routes", routes)
