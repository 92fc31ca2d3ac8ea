"""Lesson 2: softmax. A reduction inside one program, numerical stability, -inf padding, fusion.

Vector add never needed one element to know about another. Softmax does: every output divides
by the sum over its whole row, after subtracting the row's max. So a program now owns whole rows,
and reduces them with tl.max and tl.sum: one line each, which the compiler turns into warp
shuffles and shared memory (warps and shared memory as lesson 1 introduced them, in its sections
1 and 7; section 6 here shows what the compiler makes). Five steps, Max -> Subtract -> Exp -> Sum
-> Divide, all on chip: one read and one write per element, where PyTorch's step-by-step version
needs about four times the traffic. Rows too long for one program's registers are walked in tiles
with an online softmax: a running max and a running sum, the idea that flash attention (lesson 5)
is built on. A first reading can skip section 6 (the reduction tree's PTX) and stop after section
8 (training); sections 9-12 measure the kernels on a GPU. Beside the lesson's op file, softmax.py,
cross_entropy.py builds a language model's loss on the online softmax: lesson 6's model trains with
it.

Run:   python lesson02_softmax/main.py            (every section)
       python lesson02_softmax/main.py --help     (sections, sizes, dtype)
Without a CUDA GPU the kernels run under Triton's interpreter on the CPU: the same kernels, exact
results, the traces; the sections that need a GPU show what a GPU printed (RESULTS.md, which names it).
"""
# %% Set-up: common.device chooses GPU or interpreter before triton is imported
import math

from common.device import DEVICE

import torch
import triton.language as tl

from common import bench, checks, profile, ptx, roofline
from common.chapter import Chapter, add_compile_option, positive_int
from common.checks import GRAD_NOTE, dtype_name, grad_errors, grad_ok
from common.launch import cdiv, next_power_of_2
from common.table import Table, print_table
from common.trace import show
from lesson02_softmax.softmax import (DTYPES, MAX_ONE_PASS_N, launch, one_pass_settings, softmax,  # the op
                                      softmax_kernel, softmax_online_kernel)

SECTIONS = {  # the chapter, in reading order: `--sections` picks some, `--skip` leaves some out
    "traffic": "1. Softmax step by step in PyTorch: five kernels, and what each way moves",
    "trace": "5. The trace: both kernels from inside, on the worked examples",
    "tree": "6. What tl.max and tl.sum become: a reduction tree, and its PTX for sm_90",
    "check": "7. Correctness: random and awkward shapes, every dtype, both kernels",
    "grad": "8. Training: softmax's backward, one more row reduction (softmax.py)",
    "fusion": "9. Fusion, seen by the profiler: how many kernels each softmax launches",
    "bench": "10. Timing: torch against Triton, GB/s and % of the copy bandwidth",
    "offsets": "11. 64-bit offsets: what they cost",
    "host": "12. What a call costs the host",
}
SIZES = {"quick": (4096, [256, 1024, 4096, 16384, 131072]),  # section 10's M, then its row lengths N
         "full": (4096, [256, 1024, 4096, 8192, 16384, 32768, 65536, 131072])}

chapter = Chapter("lesson02_softmax", __doc__, SECTIONS, running=__name__ == "__main__")
chapter.parser.add_argument("--rows", type=positive_int, metavar="M",
                            help=f"section 10's M (default {SIZES['quick'][0]})")
chapter.parser.add_argument("--sizes", type=positive_int, nargs="+", metavar="N",
                            help=f"section 10's row lengths (default {SIZES['quick'][1]}, {SIZES['full'][1]} with --full)")
chapter.parser.add_argument("--dtype", default="float32", choices=[dtype_name(d) for d in DTYPES],
                            help="section 10's dtype (default float32; --full times float32 and bfloat16)")
add_compile_option(chapter.parser)
args = chapter.start()

# %% [markdown]
# ## 1. Softmax step by step in PyTorch: five kernels, and what each way moves
# softmax(x)_j = exp(x_j - max(x)) / sum_k exp(x_k - max(x)), over each row. Written in PyTorch it
# is five operators, and eager PyTorch runs each as its own kernel, which reads its inputs from
# memory and writes its result back. For x of shape (M, N), counted in elements:


# %%
def softmax_naive(x):
    x_max = x.amax(dim=1, keepdim=True)               # read MN,     write M
    z = x - x_max                                     # read MN + M, write MN
    numerator = torch.exp(z)                          # read MN,     write MN
    denominator = numerator.sum(dim=1, keepdim=True)  # read MN,     write M
    return numerator / denominator                    # read MN + M, write MN
    # total: read 5MN + 2M, write 3MN + 2M: about 8MN, against 2MN (read x, write y) fused.


def traffic(M: int, N: int) -> dict:
    """Elements moved through memory by each implementation (the counts above; the fused kernel is
    section 2's, the online one section 3's)."""
    return {"naive (5 steps)": 8 * M * N + 4 * M, "fused, one pass": 2 * M * N,
            "online, tiled (two reads)": 3 * M * N}


def memory_traffic(M: int = 4096, N: int = 4096) -> Table:
    moved = traffic(M, N)
    return print_table([(k, v / (M * N), v * 4 / 1e6) for k, v in moved.items()],
                       ["implementation", "elements moved / MN", "MB (fp32)"], title=f"Memory traffic, M = {M}, N = {N}",
                       note="Counted, not measured: each kernel's reads and writes of memory (section 9 shows the "
                            "kernels on a GPU). A memory-bound kernel's time follows its traffic.")


# %%
chapter.run("traffic", memory_traffic)

# %% [markdown]
# ## 2. The fused kernel: a program owns whole rows
# BLOCK_N, the columns a program holds at once, is the next power of two >= N (tl.arange needs a
# power of two); the lanes past N are masked. Short rows leave a program with little to do, so it
# takes BLOCK_M rows at once: a 2-D block [BLOCK_M, BLOCK_N], reduced along axis 1. The textbook
# kernel, one row per program, is the case BLOCK_M = 1.
#
# The kernel, softmax_kernel, is in softmax.py, the file a model imports: open it beside this
# chapter. It loads its [BLOCK_M, BLOCK_N] block with -inf in the masked-off lanes, then the five
# steps, each a line: the max of each row (tl.max, reduction 1), subtract it, exp, the sum of each row
# (tl.sum, reduction 2), divide; and one store. Section 5 shows why the max and the -inf matter.


# %% [markdown]
# ## 3. Rows too long for one program: the online softmax, walked in tiles
# A row of 2^17 floats is 512 KB: far more than one program's registers. So a program walks its
# row tile by tile, keeping two numbers: m, the max so far, and l, the sum of exp(x - m) so far.
# When a tile raises the max from m_old to m_new, everything summed so far was scaled by
# exp(-m_old) instead of exp(-m_new): multiply l by alpha = exp(m_old - m_new) and carry on.
# A second walk writes exp(x - m) / l. Two reads and one write (3MN) instead of 2MN: the price of
# long rows. Flash attention (lesson 5) does the same rescaling, with the output carried along
# so that no second walk is needed.
#
# The kernel: softmax.py, softmax_online_kernel, one program per row, its two walks commented there.


# %% [markdown]
# ## 4. The launcher: checks, then the kernel that fits the row length
# softmax() (softmax.py) checks its input and calls Softmax.apply: Softmax, an autograd function
# (section 8; lesson 1, section 5, says how they work), whose forward runs the launcher, launch().
# launch() allocates the output, picks the kernel and its grid from the row length and calls
# `kernel[grid](...)`.
#
# How big a program is. num_warps sets its threads: a warp is 32 threads that the GPU runs in
# lockstep (lesson 1, section 1). The rule for the one-pass kernel: rows shorter than 1024 are
# packed into one program until it holds 1024 elements, and every thread holds 32 of them, so a
# program has one warp per 1024 elements (num_warps = BLOCK_M * BLOCK_N / 1024). A sweep of
# BLOCK_M x num_warps on the H200 (float32, M = 4096, kernel time; the sweep itself is not in
# RESULTS.md) found better settings for four row lengths; they are kept in TUNED. The one-pass
# kernel holds a whole row in registers; at 64K columns it already spills some to memory (the
# compiler's registers run out), and past them the online kernel takes over. Section 10 times both kernels from 4096 columns up.
#
# Offsets past 2^31. The kernels compute addresses as x_ptr + rows * stride_xm + cols * stride_xn,
# in 32-bit integers unless told otherwise: Triton types an integer argument i32 when its value
# fits. A 65544 x 32768 softmax (a batch over a large vocabulary; 4 GB in fp16) has its last row
# at offset 65543 x 32768 = 2,147,713,024, past int32's 2,147,483,647: the product wraps negative
# and the kernel reads (and writes!) memory that is not the tensor's. So the launcher asks
# common.checks.index_type for int64 where a tensor needs it, int32 everywhere else: 64-bit
# arithmetic costs registers and instructions. launch() also takes the index type as an argument,
# which softmax() never passes; section 11 does, to time both. For this memory-bound kernel the
# cost is lost in the noise, as it is for lesson 5's attention; for lesson 4's float16 matmul it is
# not (each RESULTS.md: "64-bit offsets: what they cost").
#
# The rule and TUNED: softmax.py's one_pass_settings; the launcher: softmax.py's launch(). And
# bench.compiled(softmax_naive): torch.compile fuses the five steps into one generated Triton
# kernel, profiled in section 9 and timed in section 10.


# %% [markdown]
# ## 5. The trace: the kernels themselves, on the worked examples
# Under Triton's interpreter the programs run one after another, in order, so what each one holds
# is printed from inside the kernel (the `if TRACE:` lines; a compiled kernel drops them). The
# trace launches the kernels itself, one program per row, with the flags the launcher never sets:
# without the max (STABLE=False) and with 0 for padding (PAD_ZERO=True), to show why both matter.


# %%
def run_rows(rows: list, **flags) -> torch.Tensor:
    """Launch softmax_kernel on small rows (one program per row) with the given flags."""
    x = torch.tensor(rows, dtype=torch.float32, device=DEVICE)
    y = torch.empty_like(x)
    M, N = x.shape
    softmax_kernel[(M,)](x, y, M, N, x.stride(0), x.stride(1), y.stride(0),
                         BLOCK_M=1, BLOCK_N=next_power_of_2(N), **flags)
    return y


def trace() -> None:
    torch.set_printoptions(precision=4, sci_mode=False)
    print("Row [1, 2, 3, 4, 5], N = 5 -> BLOCK_N = 8: three lanes padded with -inf")
    run_rows([[1.0, 2, 3, 4, 5]], TRACE=True)

    print("\nStability: [1000, 1001, 1002]. exp(1000) overflows float32 (max about 3.4e38 = e^88.7);")
    show("exp in float16 (the kernel computes in fp32) overflows past x = log(65504), its largest number,",
         round(math.log(torch.finfo(torch.float16).max), 2), indent=0)
    print("  without subtracting the max (STABLE=False):")
    run_rows([[1000.0, 1001, 1002]], STABLE=False, TRACE=True)
    print("  with it: [1000, 1001, 1002] - 1002 = [-2, -1, 0]")
    y_stable = run_rows([[1000.0, 1001, 1002]], TRACE=True)
    print(f"  -> {y_stable[0].tolist()}: the softmax of [1, 2, 3] too; a constant shift cancels")

    row = [[-3.0, -2, -5, -1, -4]]
    print("\nWhy -inf and not 0: [-3, -2, -5, -1, -4] padded to 8 lanes. With 0, the max becomes 0")
    print("(a padding lane) and three exp(0) = 1 join the sum:")
    y_zero = run_rows(row, PAD_ZERO=True, TRACE=True)
    print("  with -inf:")
    y_inf = run_rows(row, TRACE=True)
    print(f"  padded with 0:    {[round(v, 4) for v in y_zero[0].tolist()]} (sums to "
          f"{y_zero.sum().item():.4f}: wrong)\n  padded with -inf: {[round(v, 4) for v in y_inf[0].tolist()]}"
          f" (sums to {y_inf.sum().item():.4f}; torch.softmax agrees)")

    print("\nThe online softmax: a row of 10 in tiles of 4 (the last tile has 2 real lanes). m starts at")
    print("-inf and l at 0, so the first alpha is exp(-inf) = 0: nothing summed yet to rescale.")
    x = torch.tensor([[1.0, 5, 2, 8, 3, 7, 4, 6, 0, 9]], device=DEVICE)
    y = torch.empty_like(x)
    softmax_online_kernel[(1,)](x, y, 10, x.stride(0), x.stride(1), y.stride(0), BLOCK_N=4, TRACE=True)
    print(f"  final m = 9, l = {torch.exp(x - 9).sum().item():.4f}; same as the one-pass softmax: "
          f"max |difference| = {(y - torch.softmax(x, dim=1)).abs().max().item():.1e}")

    print("\nOffsets (section 4): where the last row of a 65544 x 32768 tensor starts, in int32 arithmetic")
    show("rows * stride_xm = 65543 * 32768", torch.tensor(65543, dtype=torch.int32) * 32768)
    big = torch.empty(65544, 32768, device="meta", dtype=torch.float16)  # a shape, no memory
    show("index_type(x) for that x", str(checks.index_type(big)))
    show("index_type(x) for 4096 x 32768", str(checks.index_type(big[:4096])))


# %%
chapter.run("trace", trace, trace=True)

# %% [markdown]
# ## 6. What tl.max and tl.sum become: a reduction tree
# Adding 1024 numbers one after another takes 1023 dependent steps. In pairs, round by round, it
# takes log2(1024) = 10 rounds, each one step deep, since the pairs of a round are independent.
# The compiler builds that tree in three levels. Each thread first reduces the elements it holds,
# in its registers. Then the 32 threads of a warp (lesson 1, section 1) exchange values with warp
# shuffles: shfl.sync hands each thread a value from another thread's registers, without going
# through memory, and 5 rounds fold 32 lanes. Then the warps' results meet in shared memory (lesson
# 1, section 7: the small on-chip scratchpad that the threads of a program share), where each warp
# writes its value and, after a barrier (bar.sync: every thread waits until all have arrived), the
# values are folded in a last short round. tree() shows both: the rounds, and the PTX (NVIDIA's
# assembly for one thread: lesson 1, section 8) of softmax_kernel as the launcher (section 4)
# configures it for rows of 4096, compiled for sm_90 (an H100 or H200) in a child process
# (common/ptx.py): no GPU needed.


# %%
def tree_rounds(values: list) -> list[list]:
    """A pairwise sum, round by round (a power-of-two count): [1..8] -> [3, 7, 11, 15] -> [10, 26] -> [36]."""
    rounds = [list(values)]
    while len(rounds[-1]) > 1:
        v = rounds[-1]
        rounds.append([v[i] + v[i + 1] for i in range(0, len(v), 2)])
    return rounds


def tree(N: int = 4096) -> dict:
    rounds = tree_rounds(range(1, 9))
    for i, r in enumerate(rounds):
        print(f"  round {i}: {r}")
    print(f"{sum(len(r) for r in rounds[1:])} additions in {len(rounds) - 1} rounds (in a row: 7 additions, 7 steps); "
          f"1024 numbers: {len(tree_rounds([0] * 1024)) - 1} rounds.")
    BLOCK_M, BLOCK_N, num_warps = one_pass_settings(N)
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", **dict.fromkeys(("M", "N", "stride_xm", "stride_xn", "stride_ym"), "i32")}
    code = ptx.compile_kernel("lesson02_softmax.softmax", softmax_kernel, sig, {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N},
                              num_warps=num_warps)["ptx"]
    counts = {op: code.count(op) for op in ("shfl.sync", "bar.sync", "st.shared", "ld.shared")}
    print(f"\nsoftmax_kernel for rows of {N} (BLOCK_N = {BLOCK_N}, {num_warps} warps = {32 * num_warps} threads, "
          f"{BLOCK_N // (32 * num_warps)} elements each), compiled for sm_90, two reductions (max, then sum):")
    print_table([(op, n) for op, n in counts.items()], ["PTX instruction", "count"])
    across = num_warps.bit_length() - 1
    print(f"Each reduction: a thread folds its own elements in registers; 5 shuffle rounds fold a warp's 32 lanes\n"
          f"(log2 32); one value per warp goes to shared memory and, after a barrier, {across} more shuffle rounds fold\n"
          f"the {num_warps} warps' values (log2 {num_warps}): 2 x (5 + {across}) = {2 * (5 + across)} shuffles.\n"
          "The barriers: one per reduction, and one between them, so that the sum's values do not overwrite\n"
          "the max's in shared memory before every warp has read them.")
    return counts


# %%
chapter.run("tree", tree)

# %% [markdown]
# ## 7. Correctness: random and awkward shapes, every dtype, both kernels
# Shapes that are not powers of two exercise the masks; rows of 40000 exercise the online kernel's
# walk over its tiles (8192 columns each; rows of 4097 take one tile); a transposed view exercises the strides. Each case
# runs both kernels (long_rows=False and True).


# %%
def check() -> Table:
    """Max error against torch.softmax in float32. The outputs are at most 1, so the error is
    absolute: float16 / bfloat16 round them to 11 / 8 significant bits."""
    tolerance = {torch.float32: 4e-6, torch.float16: 2**-11, torch.bfloat16: 2**-8}  # fp32: a sum of 40000 terms
    rows = []
    cases = [(dtype, 5 * torch.randn(M, N, device=DEVICE, dtype=dtype))
             for dtype in DTYPES for M, N in [(1, 1), (3, 5), (64, 1000), (7, 4097), (2, 40000)]]
    cases.append((torch.float32, (5 * torch.randn(300, 200, device=DEVICE)).t()))  # a strided view
    for dtype, x in cases:
        ref = torch.softmax(x.float(), dim=1)
        for long_rows in (False, True):
            err = (softmax(x, long_rows=long_rows).float() - ref).abs().max().item()
            shape = f"{x.shape[0]} x {x.shape[1]}" + ("" if x.is_contiguous() else ", x.t()")
            rows.append((dtype_name(dtype), shape, "online" if long_rows else "one pass", err,
                         err <= tolerance[dtype]))
    return print_table(rows, ["dtype", "shape", "kernel", "max |err| vs fp32 torch", "ok"], floatfmt=".1e",
                       title="Check: softmax against torch.softmax")


# %%
chapter.run("check", check)

# %% [markdown]
# ## 8. Training: softmax's backward, one more row reduction
# For y = softmax(x) over a row, dy_j/dx_i = y_j (delta_ij - y_i), so given dL/dy the chain rule
# gives dL/dx_i = y_i (dL/dy_i - sum_j dL/dy_j y_j): one row reduction (the dot product of dy and y)
# and an element-wise step. The backward needs y, not x: the forward's output is what autograd keeps.
# Its kernel, softmax_backward_kernel, walks a row in tiles twice, the dot product first, then dx;
# softmax_backward() launches it. Both are in softmax.py, beside Softmax, the autograd function that
# softmax() calls (lesson 1, section 5, shows how one works): its forward launches the forward kernel
# and keeps y (ctx.save_for_backward), its backward launches softmax_backward. Here, the check of the
# gradients.


# %%
def grad_check() -> Table:
    """dL/dx through softmax() against torch's autograd of torch.softmax in float64 (common.checks.grad_errors)."""
    rows = []
    for dtype in DTYPES:
        for M, N in [(1, 1), (3, 5), (64, 1000), (7, 4097)]:
            x = 5 * torch.randn(M, N, device=DEVICE, dtype=dtype)
            ((ours, theirs),) = grad_errors(softmax, lambda t: torch.softmax(t, dim=1), [x])
            rows.append((dtype_name(dtype), f"{M} x {N}", ours, theirs, grad_ok(ours, theirs)))
    return print_table(rows, ["dtype", "shape", "dx: relative error", "torch's, same dtype", "ok"],
                       floatfmt=".1e", title="Check: softmax's gradient against float64 autograd", note=GRAD_NOTE)


# %%
chapter.run("grad", grad_check)

# %% [markdown]
# ### Your turn: the exercises
# lesson02_softmax/exercises/, each checked when you run its file (`--hint` for a hint):
# count_traffic (predict section 1's count before reading it), log_softmax (write: one program per
# row, -inf padding, the max subtracted), softmax_backward (write: this section's backward, to a
# read-once budget), torch_compile (predict where torch.compile cannot fuse, after section 9) and
# long_rows (a stretch: section 3's online softmax, every element read exactly twice).

# %% [markdown]
# ## 9. Fusion, seen by the profiler: how many kernels does each softmax launch?
# torch.profiler lists the CUDA kernels a call launches (common/profile.py). Section 1 counted what
# each way moves; here the naive version's five operators launch five kernels, and torch.softmax,
# torch.compile's generated kernel and ours launch one each.


# %%
def fusion(M: int = 4096, N: int = 4096, use_compile: bool = True) -> list:
    x = torch.randn(M, N, device=DEVICE)
    impls = {"naive (5 steps)": softmax_naive, "torch.softmax": lambda t: torch.softmax(t, dim=1)}
    if use_compile:
        impls["torch.compile(naive)"] = bench.compiled(softmax_naive)
    impls["Triton softmax"] = softmax
    tables = []
    for name, fn in impls.items():
        rows = profile.kernels_launched(lambda: fn(x))
        print()
        tables.append(print_table([(profile.short(k), c, us) for k, c, us in rows], ["CUDA kernel", "calls", "total µs"],
                                  title=f"Kernels launched: {name}, M = {M}, N = {N}"))
    return tables


# %%
chapter.run("fusion", lambda: fusion(use_compile=args.compile), gpu=True)

# %% [markdown]
# ## 10. Timing: torch against Triton, GB/s and % of the measured copy bandwidth
# Each implementation's kernel time (common/bench.py says how it is measured), turned into GB/s with
# the bytes a fused softmax must move, one read and one write of x, for every implementation alike,
# and into % of the copy bandwidth (lesson 1, section 7). The naive version and the online kernel
# move more than that (section 1), so their GB/s is what they achieve per useful byte. Then the
# roofline points (README): FLOPs per byte at 4096 x 4096.


# %%
def bench_all(M: int, sizes: list, dtype=torch.float32, use_compile: bool = True) -> Table:
    rows = []
    for N in sizes:
        x = torch.randn(M, N, device=DEVICE, dtype=dtype)
        cases = {"naive (5 steps)": lambda: softmax_naive(x), "torch.softmax": lambda: torch.softmax(x, dim=1)}
        if use_compile:
            cases["torch.compile"] = lambda: bench.compiled(softmax_naive)(x)
        if N <= MAX_ONE_PASS_N:
            cases["Triton one pass"] = lambda: softmax(x, long_rows=False)
        if N >= 4096:
            cases["Triton online"] = lambda: softmax(x, long_rows=True)
        ms = {name: bench.kernel_time_ms(fn) for name, fn in cases.items()}
        for name in cases:  # GB/s: one read and one write of x
            rows.append([N, name, *bench.timing_cells(ms[name], 2 * x.numel() * x.element_size()),
                         ms["torch.softmax"] / ms[name]])
    note = (f"{bench.TIMING_NOTE} GB/s counts one read and one write of x (2MN elements) for every implementation. "
            f"softmax() picks one pass up to N = {MAX_ONE_PASS_N}, online above.")
    return print_table(rows, ["N", "implementation", *bench.TIMING_HEADERS, "x torch.softmax"],
                       title=f"Timing, {dtype_name(dtype)}, M = {M}", note=note,
                       plot=dict(x="N", y="GB/s", series=["implementation"], ceiling=bench.copy_bandwidth(),
                                 ceiling_label="device copy (measured)"))


def timing() -> list:
    M, sizes = chapter.sizes(SIZES)
    dtypes = ["float32", "bfloat16"] if args.full else [args.dtype]
    tables = [bench_all(args.rows or M, args.sizes or sizes, getattr(torch, dtype), args.compile) for dtype in dtypes]
    M, N = 4096, 4096  # the roofline (README): FLOPs per byte
    x = torch.randn(M, N, device=DEVICE)
    flops = 5 * M * N  # per element: subtract the max, exp, divide; a max and a sum
    print()
    tables.append(roofline.points({
        ("Triton softmax", "4096 x 4096 float32"): (lambda: softmax(x), flops, 8 * M * N),
        ("torch.softmax", "4096 x 4096 float32"): (lambda: torch.softmax(x, dim=1), flops, 8 * M * N),
        ("naive (5 kernels, 8MN traffic)", "4096 x 4096 float32"):
            (lambda: softmax_naive(x), flops, 4 * traffic(M, N)["naive (5 steps)"])}))
    return tables


# %%
chapter.run("bench", timing, gpu=True)

# %% [markdown]
# ## 11. 64-bit offsets: what they cost
# Section 4's launcher picks int32 offsets below 2^31 elements and int64 past it. Here the same
# calls run with each, handed to launch() as its index_type, at section 10's quick sizes.


# %%
def offsets() -> Table:
    M, sizes = SIZES["quick"]
    xs = [torch.randn(M, N, device=DEVICE) for N in sizes]
    return bench.offsets_cost({f"softmax, x {x.shape[0]} x {x.shape[1]} float32":
                               (lambda index_type, x=x: launch(x, None, index_type=index_type)) for x in xs})


# %%
chapter.run("offsets", offsets, gpu=True)

# %% [markdown]
# ## 12. What a call costs the host
# The host's microseconds per call of softmax(), beside torch.softmax and the bare launch with its
# arguments ready (lesson 1, section 12, says where such microseconds go).


# %%
def host_cases() -> dict:  # bench.host_costs calls it in fresh processes
    M, N = 4096, 1024
    x = torch.randn(M, N, device=DEVICE)
    y = torch.empty_like(x)
    BLOCK_M, BLOCK_N, num_warps = one_pass_settings(N)
    grid = (cdiv(M, BLOCK_M),)
    return {f"torch.softmax ({M} x {N} float32)": lambda: torch.softmax(x, dim=1),
            "softmax_kernel[grid](...) alone, arguments ready": lambda: softmax_kernel[grid](
                x, y, M, N, x.stride(0), x.stride(1), y.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                INDEX_TYPE=tl.int32, num_warps=num_warps),
            "softmax(x)": lambda: softmax(x), "softmax(x, long_rows=True)": lambda: softmax(x, long_rows=True)}


# %%
chapter.run("host", lambda: bench.host_cost_table("lesson02_softmax.main:host_cases", 3 if args.full else 1), gpu=True)
