"""Lesson 2: softmax. A reduction inside one program, numerical stability, -inf padding, fusion.

Vector add never needed one element to know about another. Softmax does: every output divides
by the sum over its whole row, after subtracting the row's max. So a program now owns whole rows,
and reduces them with tl.max and tl.sum (the compiler turns these into warp shuffles and shared
memory; we write one line). Five steps, Max -> Subtract -> Exp -> Sum -> Divide, all on chip: one
read and one write per element, where PyTorch's step-by-step version needs about four times the
traffic. Rows too long for one program's registers are walked in tiles with an online softmax:
a running max and a running sum, the idea that flash attention (lesson 5) is built on.

Run:   python lesson02_softmax/main.py            (all sections)
       python lesson02_softmax/main.py --help
Without a CUDA GPU the kernels run under Triton's interpreter; timings then measure the
interpreter. Real H200 numbers: lesson02_softmax/RESULTS.md.
"""
# %% Set-up: choose GPU or interpreter before triton is imported
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # `common` from anywhere
if __name__ == "__main__":  # run as a script: be the module backward.py imports, not a second copy of it
    sys.modules.setdefault("lesson02_softmax.main", sys.modules[__name__])

from common.device import DEVICE, INTERPRET

import torch
import triton
import triton.language as tl

from common import bench, profile, ptx, roofline
from common.checks import check_tensors, dtype_name, index_type
from common.launch import cdiv, launch as launch_kernel, needs_op, next_power_of_2
from common.cli import (add_compile_option, lesson_parser, positive_int, run_sections,
                        sizes, start_lesson, trace_section)
from common.results import print_recorded
from common.trace import show
from lesson02_softmax import backward  # the backward pass, in the lesson's second file

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SIZES = {"cpu": (16, [256, 1024, 4096]), "gpu": (4096, [256, 1024, 4096, 16384, 131072]),  # M, then N
         "full": (4096, [256, 1024, 4096, 8192, 16384, 32768, 65536, 131072])}

# %% [markdown]
# ## 1. Softmax step by step in PyTorch: five kernels, and what each moves
# For x of shape (M, N), counted in elements:


# %%
def softmax_naive(x):
    x_max = x.max(dim=1, keepdim=True).values         # read MN,     write M
    z = x - x_max                                     # read MN + M, write MN
    numerator = torch.exp(z)                          # read MN,     write MN
    denominator = numerator.sum(dim=1, keepdim=True)  # read MN,     write M
    return numerator / denominator                    # read MN + M, write MN
    # total: read 5MN + 2M, write 3MN + 2M: about 8MN, against 2MN (read x, write y) fused.


def traffic(M: int, N: int) -> dict:
    """Elements moved through memory by each implementation (the counts above)."""
    return {"naive (5 steps)": 8 * M * N + 4 * M, "fused, one pass": 2 * M * N,
            "online, tiled (two reads)": 3 * M * N}


# %% [markdown]
# ## 2. The fused kernel: a program owns whole rows
# BLOCK_N, the columns a program holds at once, is the next power of two >= N (tl.arange needs a
# power of two); the lanes past N are masked. Short rows leave a program with little to do, so it
# takes BLOCK_M rows at once: a 2-D block [BLOCK_M, BLOCK_N], reduced along axis 1. The source
# documents' kernel is the case BLOCK_M = 1.


# %%
@triton.jit
def softmax_kernel(
    x_ptr, y_ptr,               # input and output, (M, N)
    M, N,                       # rows, columns
    stride_xm, stride_xn,       # elements between rows / columns of x: views need no copy
    stride_ym,                  # y is allocated contiguous: its column stride is 1
    BLOCK_M: tl.constexpr,      # rows per program
    BLOCK_N: tl.constexpr,      # next power of two >= N: a whole row at once
    PAD_ZERO: tl.constexpr = False,     # masked-off lanes hold -inf; the trace tries 0.0 instead
    STABLE: tl.constexpr = True,        # subtract the row max first (the trace tries without)
    INDEX_TYPE: tl.constexpr = tl.int32,  # of the offsets: tl.int64 past 2**31 elements (section 4)
    TRACE: tl.constexpr = False,
):
    pid = tl.program_id(axis=0)
    rows = pid.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)  # the rows this program owns
    cols = tl.arange(0, BLOCK_N).to(INDEX_TYPE)                  # every column of them
    # [:, None] makes a column, [None, :] a row; combined, they broadcast to [BLOCK_M, BLOCK_N]
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn
    # Masked lanes take part in the max and the sum below, so the padding must change neither:
    # -inf is below every number, and exp(-inf) = 0.
    x = tl.load(x_ptrs, mask=mask, other=0.0 if PAD_ZERO else float("-inf")).to(tl.float32)  # math in fp32
    if STABLE:
        x_max = tl.max(x, axis=1)                 # reduction 1: one max per row
        z = x - x_max[:, None]                    # every exponent <= 0: exp cannot overflow
    else:
        z = x
    numerator = tl.exp(z)
    denominator = tl.sum(numerator, axis=1)       # reduction 2: one sum per row, >= 1 if STABLE
    y = numerator / denominator[:, None]
    y_ptrs = y_ptr + rows[:, None] * stride_ym + cols[None, :]
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=mask)
    if TRACE:
        show("loaded row", x)
        if STABLE:
            show("max", x_max)
        show("after subtracting", z)
        show("exp", numerator)
        show("sum", denominator)
        show("result", y)


# %% [markdown]
# ### What tl.max and tl.sum become: a reduction tree
# Adding 1024 numbers one after another takes 1023 dependent steps. In pairs, round by round, it
# takes log2(1024) = 10 rounds, each one step deep, since the pairs of a round are independent.
# The compiler builds that tree in three levels: each thread first reduces the elements it holds
# (in registers), then the 32 threads of a warp exchange values with warp shuffles (shfl.sync:
# 5 rounds for 32 lanes, no memory), then the warps' results meet in shared memory, after a
# barrier (bar.sync), for a last short round. tree() shows both: the rounds, and the PTX of the
# kernel as the launcher (section 4) configures it for rows of 4096.


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
    code = ptx.compile_kernel("lesson02_softmax.main", "softmax_kernel", sig, {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N},
                              num_warps=num_warps)["ptx"]
    counts = {op: code.count(op) for op in ("shfl.sync", "bar.sync", "st.shared", "ld.shared")}
    print(f"\nsoftmax_kernel for rows of {N} (BLOCK_N = {BLOCK_N}, {num_warps} warps = {32 * num_warps} threads, "
          f"{BLOCK_N // (32 * num_warps)} elements each), compiled for sm_90, two reductions (max, then sum):")
    bench.print_table([(op, n) for op, n in counts.items()], ["PTX instruction", "count"])
    across = num_warps.bit_length() - 1
    print(f"Each reduction: a thread folds its own elements in registers; 5 shuffle rounds fold a warp's 32 lanes\n"
          f"(log2 32); one value per warp goes to shared memory and, after a barrier, {across} more shuffle rounds fold\n"
          f"the {num_warps} warps' values (log2 {num_warps}): 2 x (5 + {across}) = {2 * (5 + across)} shuffles.")
    return counts


# %% [markdown]
# ## 3. Rows too long for one program: the online softmax, walked in tiles
# A row of 2^17 floats is 512 KB: far more than one program's registers. So a program walks its
# row tile by tile, keeping two numbers: m, the max so far, and l, the sum of exp(x - m) so far.
# When a tile raises the max from m_old to m_new, everything summed so far was scaled by
# exp(-m_old) instead of exp(-m_new): multiply l by alpha = exp(m_old - m_new) and carry on.
# A second walk writes exp(x - m) / l. Two reads and one write (3MN) instead of 2MN: the price of
# long rows. Flash attention (lesson 5) does the same rescaling, with the output carried along
# so that no second walk is needed.


# %%
@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, N, stride_xm, stride_xn, stride_ym, BLOCK_N: tl.constexpr,
                          INDEX_TYPE: tl.constexpr = tl.int32, TRACE: tl.constexpr = False):
    row = tl.program_id(axis=0).to(INDEX_TYPE)   # one program per row
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    m = tl.full([], float("-inf"), tl.float32)   # running max
    l = tl.zeros([], dtype=tl.float32)           # running sum of exp(x - m)
    for start in range(0, N, BLOCK_N):           # walk 1: the max and the sum
        cols = start + tl.arange(0, BLOCK_N).to(INDEX_TYPE)
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # A row that is all -inf so far has m_new = -inf, and -inf - (-inf) is NaN: subtract 0.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)               # rescales the old sum to the new max
        l = l * alpha + tl.sum(tl.exp(x - m_safe), axis=0)
        m = m_new
        if TRACE:
            show("tile", x)
            show("m", m)
            show("alpha", alpha)
            show("l", l)
    for start in range(0, N, BLOCK_N):           # walk 2: normalise and write
        cols = start + tl.arange(0, BLOCK_N).to(INDEX_TYPE)
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m) / l
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=cols < N)
        if TRACE:
            show("output tile", y)


# %% [markdown]
# ## 4. The launcher: checks, then the kernel that fits the row length
# The rule for the one-pass kernel: rows shorter than 1024 are packed into one program until it
# holds 1024 elements, and every thread holds 32 of them (num_warps = BLOCK_M * BLOCK_N / 1024).
# A sweep of BLOCK_M x num_warps on the H200 (float32, M = 4096, kernel time; the sweep itself is
# not in RESULTS.md) found better settings for four row lengths; they are kept in TUNED. The
# one-pass kernel holds a whole row in registers; past 64K columns it would spill to memory, and
# the online kernel takes over. RESULTS.md times both kernels from 4096 columns up.
#
# Offsets past 2^31. The kernels compute addresses as x_ptr + rows * stride_xm + cols * stride_xn,
# in 32-bit integers unless told otherwise: Triton types an integer argument i32 when its value
# fits. A 65544 x 32768 softmax (a batch over a large vocabulary; 4 GB in fp16) has its last row
# at offset 65543 x 32768 = 2,147,713,024, past int32's 2,147,483,647: the product wraps negative
# and the kernel reads (and writes!) memory that is not the tensor's. So the launcher asks
# common.checks.index_type for int64 where a tensor needs it, int32 everywhere else: 64-bit
# arithmetic costs registers and instructions. For this memory-bound kernel the cost is lost in
# the noise; for lesson 4's matmul and lesson 5's attention it is not (each RESULTS.md: "64-bit
# offsets: what they cost").


# %%
MAX_ONE_PASS_N = 65536  # the longest row the one-pass kernel takes
TUNED = {256: (2, 2), 512: (1, 2), 2048: (2, 4), 65536: (1, 8)}  # BLOCK_N: (BLOCK_M, num_warps), H200 sweep


def one_pass_settings(N: int) -> tuple[int, int, int]:
    """BLOCK_M, BLOCK_N and num_warps for the one-pass kernel."""
    BLOCK_N = next_power_of_2(N)
    BLOCK_M = max(1, 1024 // BLOCK_N)
    BLOCK_M, num_warps = TUNED.get(BLOCK_N, (BLOCK_M, min(32, BLOCK_M * BLOCK_N // 1024)))
    return BLOCK_M, BLOCK_N, num_warps


def softmax(x: torch.Tensor, long_rows: bool | None = None) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor (float32/float16/bfloat16; math in fp32).

    long_rows: None picks the kernel by row length; True / False forces the online / one-pass one.
    """
    (x,) = check_tensors({"x": x}, DTYPES, ndim=2)
    if long_rows not in (None, True, False):  # a string such as "no" would be truthy
        raise TypeError(f"long_rows must be None, True or False, got {long_rows!r}")
    if needs_op(x):  # autograd or torch.compile: through the registered operator (section 7)
        return softmax_op(x, long_rows)
    return launch(x, long_rows)


def launch(x: torch.Tensor, long_rows: bool | None) -> torch.Tensor:
    """y = softmax(x) by the kernel that fits the row length (x as softmax() checked it)."""
    M, N = x.shape
    y = x.new_empty((M, N))  # same device and dtype as x
    if M == 0 or N == 0:
        return y
    if long_rows is None:
        long_rows = N > MAX_ONE_PASS_N
    INDEX_TYPE = index_type(x, y)
    if long_rows:
        # tiles of 8192 columns, 16 per thread: long enough to keep the loads streaming
        launch_kernel(softmax_online_kernel, (M,), None, x, y, N, x.stride(0), x.stride(1), y.stride(0),
                      BLOCK_N=8192, INDEX_TYPE=INDEX_TYPE, num_warps=16)
    else:
        BLOCK_M, BLOCK_N, num_warps = one_pass_settings(N)
        launch_kernel(softmax_kernel, (cdiv(M, BLOCK_M),), None, x, y, M, N, x.stride(0), x.stride(1), y.stride(0),
                      BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, INDEX_TYPE=INDEX_TYPE, num_warps=num_warps)
    return y


# bench.compiled(softmax_naive): torch.compile fuses the five steps into one generated Triton kernel.


# %% [markdown]
# ## 5. The trace: the kernels themselves, on the source documents' rows


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
    show("exp in float16 (max 65504; the kernel computes in fp32) overflows past x", round(math.log(torch.finfo(torch.float16).max), 2), indent=0)
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
    show("index_type(x) for that x", str(index_type(big)))
    show("index_type(x) for 4096 x 32768", str(index_type(big[:4096])))


# %% [markdown]
# ## 6. Correctness: random and awkward shapes, every dtype, both kernels


# %%
def check() -> bench.Table:
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
    return bench.print_table(rows, ["dtype", "shape", "kernel", "max |err| vs fp32 torch", "ok"], floatfmt=".1e",
                             title="Check: softmax against torch.softmax")


# %% [markdown]
# ## 7. Training: softmax's backward, one more row reduction
# For y = softmax(x) over a row, dy_j/dx_i = y_j (delta_ij - y_i), so given dL/dy the chain rule
# gives dL/dx_i = y_i (dL/dy_i - sum_j dL/dy_j y_j): one row reduction (the dot product of dy and y)
# and an element-wise step. The backward needs y, not x: the forward's output is what autograd keeps.
# Its kernel, softmax_backward_kernel, and the check of the gradients live in backward.py; here,
# the registration (lesson 1, section 5 shows how it works).


# %%
@torch.library.triton_op("lessons::softmax", mutates_args=())
def softmax_op(x: torch.Tensor, long_rows: bool | None) -> torch.Tensor:
    return launch(x, long_rows)


def keep_output(ctx, inputs, output):
    ctx.save_for_backward(output)


def softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return backward.softmax_backward(dy, y), None


softmax_op.register_autograd(softmax_grad, setup_context=keep_output)


# %% [markdown]
# ## 8. Fusion seen by the profiler, and the timing table


# %%
def fusion(M: int, N: int, use_compile: bool) -> list:
    x = torch.randn(M, N, device=DEVICE)
    moved = traffic(M, N)
    tables = [bench.print_table([(k, v / (M * N), v * 4 / 1e6) for k, v in moved.items()],
                                ["implementation", "elements moved / MN", "MB (fp32)"],
                                title=f"Memory traffic, M = {M}, N = {N}")]
    impls = {"naive (5 steps)": softmax_naive, "torch.softmax": lambda t: torch.softmax(t, dim=1)}
    if use_compile:
        impls["torch.compile(naive)"] = bench.compiled(softmax_naive)
    else:
        print("\n(torch.compile left out: --compile includes it. On a GPU it launches one generated Triton "
              "kernel:\nRESULTS.md, 'Kernels launched: torch.compile(naive)'.)")
    if not INTERPRET:
        impls["Triton softmax"] = softmax
    for name, fn in impls.items():
        rows = profile.kernels_launched(lambda: fn(x))
        print()
        tables.append(bench.print_table([(profile.short(k), c, us) for k, c, us in rows],
                                        ["top-level op (CPU)" if INTERPRET else "CUDA kernel", "calls", "total µs"],
                                        title=f"Kernels launched: {name}, M = {M}, N = {N}"))
    return tables


def host_cases() -> dict:
    """For bench.host_costs: the host's share of each call, beside PyTorch's and the bare launch
    (lesson 1, "What a launch costs")."""
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


def bench_all(M: int, sizes: list, dtype=torch.float32, use_compile: bool = True) -> bench.Table:
    ceiling = bench.copy_bandwidth()
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
        times = {name: bench.measure(fn) for name, fn in cases.items()}
        for name, both in times.items():  # GB/s: one read and one write of x
            rows.append([N, name, *bench.timing_cells(both, 2 * x.numel() * x.element_size(), ceiling),
                         times["torch.softmax"][0] / both[0]])
    note = f"{bench.stamp()}. {bench.TIMING_NOTE} softmax() picks one pass up to N = {MAX_ONE_PASS_N}, online above."
    if not INTERPRET:
        note += (f" Copy bandwidth measured: {ceiling:.0f} GB/s. GB/s (from the kernel time) counts one read and "
                 "one write of x (2MN elements) for every implementation.")
    return bench.print_table(rows, ["N", "implementation", *bench.TIMING_HEADERS, "x torch.softmax"],
                             title=f"Timing, {dtype_name(dtype)}, M = {M}", note=note,
                             plot=dict(x="N", y="GB/s", series=["implementation"], ceiling=ceiling,
                                       ceiling_label="device copy (measured)"))


# %% The script
def main(argv=None) -> None:
    def timing():
        M, default_sizes = sizes(args, SIZES)
        for dtype in ["float32", "bfloat16"] if args.full else [args.dtype]:
            bench_all(args.rows or M, args.sizes or default_sizes, getattr(torch, dtype), use_compile=args.compile)
        if INTERPRET:  # beside the interpreter's numbers, the H200's
            print_recorded(__file__, "Timing, float32", keep=lambda row: row["N"] in ("256", "1024", "4096"))
        M, N = 4096, 4096  # the roofline (README): FLOPs per byte, measured on a GPU
        x = torch.randn(M, N, device=DEVICE) if not INTERPRET else None
        flops = 5 * M * N  # per element: subtract the max, exp, divide; a max and a sum
        roofline.points({("Triton softmax", "4096 x 4096 float32"): (lambda: softmax(x), flops, 8 * M * N),
                         ("torch.softmax", "4096 x 4096 float32"): (lambda: torch.softmax(x, dim=1), flops, 8 * M * N),
                         ("naive (5 kernels, 8MN traffic)", "4096 x 4096 float32"):
                             (lambda: softmax_naive(x), flops, 4 * traffic(M, N)["naive (5 steps)"])}, __file__)


        def offsets_cases():  # section 4: what int64 offsets would cost at these sizes (timed with --full)
            xs = [torch.randn(SIZES["full"][0], N, device=DEVICE) for N in SIZES["gpu"][1]]
            return {f"softmax(x), x {x.shape[0]} x {x.shape[1]} float32": (lambda x=x: softmax(x)) for x in xs}
        bench.offsets_cost(offsets_cases, __file__, run=args.full)

    sections = {
        "trace": ("Trace: softmax_kernel and softmax_online_kernel, from inside (interpreter)",
                  lambda: trace_section(trace, __file__, args.child)),
        "tree": ("The reduction tree: rounds, and the shuffles in the PTX", tree),
        "check": ("Check: Triton against torch.softmax in float32", check),
        "grad": ("Training: softmax's gradient (backward.py)", backward.grad_check),
        "fusion": ("Fusion: traffic and kernels launched",
                   lambda: fusion(64 if INTERPRET else 4096, 4096, use_compile=args.compile)),
        "bench": ("Timing", timing),
        "host": ("What a call costs the host (lesson 1, 'What a launch costs')",
                 lambda: bench.host_costs("lesson02_softmax.main:host_cases", __file__)),
    }
    p = lesson_parser(__doc__, list(sections))
    p.add_argument("--rows", type=positive_int,
                   help=f"M for the bench (default {SIZES['cpu'][0]} interpreted, {SIZES['gpu'][0]} on a GPU)")
    p.add_argument("--sizes", type=positive_int, nargs="+", metavar="N",
                   help=f"row lengths for the bench (default {SIZES['cpu'][1]} interpreted, {SIZES['gpu'][1]} on a "
                        f"GPU, {SIZES['full'][1]} with --full)")
    p.add_argument("--dtype", default="float32", choices=[dtype_name(d) for d in DTYPES])
    add_compile_option(p)
    args = start_lesson(p, argv)
    run_sections(args, sections)

if __name__ == "__main__":
    main()
