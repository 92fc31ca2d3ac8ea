"""Lesson 4: matrix multiplication. 2-D tiles, the K loop, masks, strides, grouped order, autotuning.

C = A @ B with A (M, K) and B (K, N). Each output element is a row of A times a column of B; done
one element at a time, every element of A and B is read N or M times over. So a program owns a
BLOCK_M x BLOCK_N tile of C and walks K in steps of BLOCK_K: each step loads a tile of A and a tile
of B once and uses every loaded number BLOCK_N (or BLOCK_M) times, in one tl.dot on the tensor cores
(the units that multiply small matrix tiles in one instruction: section 2). An fp32 accumulator
collects the steps; an activation can be applied to it before the store, a few instructions per
element instead of a second pass over C (a fused epilogue). The order in which programs run decides
how much of A and B the L2 cache can share (grouped order), and the best block sizes depend on the
shape and the GPU (autotuning). A first reading can stop after section 9 (training); sections 10-17
time the kernel against cuBLAS. The kernels, their launchers, the route between them and the op live
in op files, what a model imports: matmul.py (the pointer kernel, matmul() and its backward) and
hopper.py (the TMA kernel, which the route takes on Hopper: lesson 7, lesson07_hopper/main.py, takes
it apart).

Run:   python lesson04_matmul/main.py            (every section)
       python lesson04_matmul/main.py --help     (sections, sizes)
Without a CUDA GPU the kernels run under Triton's interpreter on small matrices: the traces, and
results exact to the output dtype's rounding; the sections that need a GPU show what a GPU
printed (RESULTS.md, which names it).
"""
# %% Set-up: common.device chooses GPU or interpreter before triton is imported
import math

from common.device import DEVICE, sm_count

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common import bench, roofline
from common.chapter import Chapter, positive_int
from common.checks import GRAD_NOTE, dtype_name, grad_errors, grad_ok, rel_error
from common.launch import cdiv, scratch
from common.table import Table, print_table
from common.trace import show
from lesson04_matmul import hopper, library  # the TMA kernel (an op file); torch.matmul's kernels (section 15)
from lesson04_matmul.matmul import (ACTIVATIONS, DTYPES, choose_kernel, grouped_pid, launch, matmul,  # the op
                                    matmul_kernel, matmul_kernel_tuned)

SECTIONS = {  # the chapter, in reading order: `--sections` picks some, `--skip` leaves some out
    "tiles": "2. Why tiles: the arithmetic",
    "grouped": "3. Grouped order: which tile each program computes",
    "trace": "5. The trace: matmul_kernel, program by program, round by round",
    "route": "7. The public function: matmul(), and which kernel it runs (matmul.choose_kernel)",
    "check": "8. Correctness: awkward shapes, views, dtypes, activations",
    "grad": "9. Training: the backward pass is two more matmuls (matmul.py, Matmul)",
    "bench": "10. Timing: against torch.matmul (cuBLAS)",
    "roofline": "11. The roofline: a compute-bound kernel",
    "epilogue": "12. The fused epilogue, timed",
    "order": "13. Grouped order, timed",
    "host": "14. What a call costs the host",
    "library": "15. torch.matmul's kernel for each shape (library.py)",
    "offsets": "16. 64-bit offsets: what they cost the pointer kernel",
    "layers": "17. The products a model trains: a linear layer's forward and both gradients",
}
# A quick look, or with --full what RESULTS.md holds. shapes: section 10's (M, N, K), the last two of
# "full" a Llama-7B MLP, up and down; checked: the dtypes sections 8 and 9 check (each one compiles
# every kernel again; the tests check all three).
SIZES = {"quick": dict(shapes=[(4096, 4096, 4096)], checked=[torch.float16]),
         "full": dict(shapes=[(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                              (8192, 8192, 8192), (4096, 11008, 4096), (4096, 4096, 11008)], checked=DTYPES)}

chapter = Chapter("lesson04_matmul", __doc__, SECTIONS, running=__name__ == "__main__")
chapter.parser.add_argument("--sizes", type=positive_int, nargs="+", metavar="N",
                            help="section 10's sizes, M = N = K (default 4096^3; with --full, the shapes of "
                                 "RESULTS.md, 512^3 to 8192^3 and a Llama-7B MLP's)")
args = chapter.start()

# %% [markdown]
# ## 1. The plan, in plain PyTorch
# Before any pointer arithmetic: the loop over output tiles (one iteration = one program) and,
# inside it, the K loop. Program (pid_m, pid_n) computes C[rows, cols] as a sum over K tiles.


# %%
def matmul_plan(A, B, BLOCK_M=2, BLOCK_N=2, BLOCK_K=2, verbose=False):
    M, K = A.shape
    N = B.shape[1]
    C = torch.zeros(M, N, dtype=A.dtype)
    for pid_m in range(cdiv(M, BLOCK_M)):             # the programs: a tile row of C ...
        for pid_n in range(cdiv(N, BLOCK_N)):         # ... and a tile column
            rows = slice(pid_m * BLOCK_M, (pid_m + 1) * BLOCK_M)
            cols = slice(pid_n * BLOCK_N, (pid_n + 1) * BLOCK_N)
            acc = torch.zeros(BLOCK_M, BLOCK_N, dtype=A.dtype)  # the program's accumulator
            for k in range(0, K, BLOCK_K):                      # the K loop, inside the program
                a = A[rows, k:k + BLOCK_K]
                b = B[k:k + BLOCK_K, cols]
                acc += a @ b
                if verbose and (pid_m, pid_n) == (0, 0):  # each round adds one tile product
                    print(f"    program (0, 0), k = {k}: a = {a.tolist()}, b = {b.tolist()}, a @ b = {(a @ b).tolist()}"
                          f" -> acc = {acc.tolist()}")
            C[rows, cols] = acc
    return C


def tile_counts(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K) -> dict:
    """The plan's numbers: the grid of programs, K rounds each, and the columns of the last tile column."""
    grid, rounds = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)), cdiv(K, BLOCK_K)
    last = (grid[1] - 1) * BLOCK_N  # the first column of the last tile column
    return dict(grid=grid, programs=grid[0] * grid[1], rounds=rounds, tile_products=grid[0] * grid[1] * rounds,
                last_cols=(last, N - 1, N - last))


# %% [markdown]
# ## 2. Why tiles: the arithmetic
# Without reuse, each of the M x N outputs reads a row of A and a column of B: 2MNK elements
# read. A program that holds a T x T tile of C reads each loaded element of A and B once for T
# outputs, so the reads fall to 2MNK / T. The tensor cores do the rest: they are units of each SM
# that multiply small matrix tiles in one instruction (lesson 1, section 7), many times faster
# than the ordinary cores multiply numbers one by one, and tl.dot hands them whole tiles; so a
# bigger tile is both fewer reads and fewer, larger instructions.


# %%
def reuse_table(shapes=((1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192))) -> Table:
    rows = []
    for M, N, K in shapes:
        naive = 2 * M * N * K  # every output reads a row of A and a column of B: 2K elements
        rows.append((f"{M} x {N} x {K}", naive * 2 / 1e9, *(naive / T * 2 / 1e9 for T in (16, 128))))
    return print_table(rows, ["M x N x K", "GB read, no reuse", "16 x 16 tiles", "128 x 128 tiles"], floatfmt=".2f",
                       title="Reads of A and B (fp16), without reuse and with tiles",
                       note="No reuse: 2MNK elements (each output reads a row of A and a column of B). T x T tiles: "
                            "2MNK / T.")


# %%
chapter.run("tiles", reuse_table)

# %% [markdown]
# ## 3. Grouped order: which tile each program computes
# The grid is one axis of programs, pid = 0, 1, 2, ...; each program first works out which tile
# (pid_m, pid_n) of C is its own. The obvious mapping is row-major, the plan's two loops:
# pid_m = pid // num_pid_n, pid_n = pid % num_pid_n. But programs start in pid order, about one
# wave (SMs x programs per SM) at a time, and a wave in row-major order covers a strip of C: a few
# tile rows of A, and ALL of B. Grouped order walks GROUP_M tile rows at a time, down the columns:
# a wave covers a squarer block of C, which needs fewer tiles of A and B, and shares more of them
# through the L2 cache (the cache that all SMs share in front of memory: lesson 1, section 7).
# grouped_pid (in matmul.py, each line of its index arithmetic commented) computes the mapping,
# and the kernel of section 4 calls it first thing; with GROUP_M = 1 it is row-major again.
# Triton's standard library has this mapping as tl.swizzle2d; hopper.py uses it. Below, on a 9 x 9
# grid of tiles, the first wave of 9 programs reads 90 input tiles in row-major order and 54 in
# groups of 3; section 13 times the difference.


# %%
def tile_order(num_pid_m: int, num_pid_n: int, GROUP_M: int) -> list[tuple[int, int]]:
    """(pid_m, pid_n) of programs 0, 1, 2, ...: the kernel's own mapping, run as plain Python
    (.fn is the Python function under @triton.jit; on integers it needs no GPU)."""
    return [grouped_pid.fn(pid, num_pid_m, num_pid_n, GROUP_M) for pid in range(num_pid_m * num_pid_n)]


def tiles_loaded(order: list, wave: int, k_tiles: int) -> int:
    """Distinct input tiles the first `wave` programs read: A tiles (pid_m, k), B tiles (k, pid_n)."""
    return (len({m for m, _ in order[:wave]}) + len({n for _, n in order[:wave]})) * k_tiles


def order_demo(tiles: int = 9, GROUP_M: int = 3) -> None:
    """Row-major against grouped order on a tiles x tiles grid of C (K also `tiles` tiles)."""
    for label, group in (("row-major (GROUP_M = 1)", 1), (f"grouped (GROUP_M = {GROUP_M})", GROUP_M)):
        order = tile_order(tiles, tiles, group)
        position = {tile: pid for pid, tile in enumerate(order)}
        print(f"\n{label}: the program that computes each tile of C (first wave of {tiles} marked *)")
        for m in range(tiles):
            print("    " + " ".join(f"{position[(m, n)]:3d}{'*' if position[(m, n)] < tiles else ' '}"
                                    for n in range(tiles)))
        show("input tiles read by the first wave", tiles_loaded(order, tiles, tiles))


# %%
chapter.run("grouped", order_demo)

# %% [markdown]
# ## 4. The kernel
# A program knows only addresses. Element (i, j) of A lives at a_ptr + i * stride_am + j * stride_ak
# (for a contiguous A: stride_am = K, stride_ak = 1; for A = X.t() the strides swap, so a
# transposed view needs no copy). rows / cols / ks are vectors of indices; rows[:, None] (a
# column) plus ks[None, :] (a row) broadcasts to the whole [BLOCK_M, BLOCK_K] table of addresses.
# Masks on all three dimensions pad the ragged edges with 0, which adds nothing to a sum. The
# accumulator is fp32 whatever the inputs (fp16 in, fp32 accumulate): a sum of K products in fp16
# would lose the small ones. float32 inputs are multiplied in TF32 by default: the tensor cores
# round each input to float32's 8-bit exponent with a 10-bit mantissa (about 3 decimal digits,
# as float16 has) and add the products in fp32, several times faster than full fp32, which
# INPUT_PRECISION = "ieee" asks for (section 8 shows both errors).
#
# The launcher allocates C and launches one program per tile. The kernel it is handed picks the
# block sizes: matmul_kernel takes them as arguments (`meta`), the autotuned form of section 6
# chooses them, so the grid is a function of the configuration in use.
#
# The kernel and its launcher are in matmul.py, the file a model imports: open it beside this
# chapter at matmul_kernel (each line of the loop commented) and launch(). Its GELU epilogue is
# lesson 1's gelu_tanh, a @triton.jit function inlined into the kernel, imported from lesson 1's
# op file (lesson01_vector_add/elementwise.py), not from lesson 1's chapter.


# %% [markdown]
# ## 5. The trace: matmul_kernel, program by program, round by round
# Under Triton's interpreter the programs run one after another, in order, so what each one holds
# can be printed from inside the kernel (the `if TRACE:` lines; a compiled kernel drops them). First
# the source documents' small examples: a 2 x 2 product by hand, and the programs and rounds that
# their three tilings take (tile_counts, section 1); then section 1's plan on a 4 x 4 product in
# 2 x 2 tiles, the kernel on the same 4 x 4, and a 70 x 45 @ 45 x 50 product whose edge tiles need
# the masks.


# %%
A4 = [[1.0, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]
B4 = [[1.0, 0, 1, 0], [0, 1, 0, 1], [2, 0, 1, 0], [0, 2, 0, 1]]


def trace() -> None:
    A, B = torch.tensor(A4, device=DEVICE), torch.tensor(B4, device=DEVICE)
    A2, B2 = torch.tensor([[1.0, 2], [3, 4]]), torch.tensor([[5.0, 6], [7, 8]])
    print(f"By hand: {A2.tolist()} @ {B2.tolist()} = {(A2 @ B2).tolist()}: C[0, 0] = 1 x 5 + 2 x 7 = 19. A (3, 4) "
          f"@ B (4, 2): {tile_counts(3, 2, 4, 1, 1, 4)['programs']} outputs of K = 4 products each.")
    for shape, block in (((8, 8, 6), 2), ((96, 80, 64), 32)):
        t = tile_counts(*shape, block, block, block)
        print(f"C ({shape[0]}, {shape[1]}), K = {shape[2]}, {block} x {block} tiles: grid {t['grid']}, {t['programs']} "
              f"programs x {t['rounds']} rounds = {t['tile_products']} tile products; the last tile column holds "
              f"cols {t['last_cols'][0]}..{t['last_cols'][1]} ({t['last_cols'][2]} of {block} valid)")
    print("\nThe plan (plain PyTorch): program (0, 0) computes C[0:2, 0:2] in two K rounds, one tile product each")
    matmul_plan(A.cpu(), B.cpu(), verbose=True)

    print(f"\nThe kernel: A = 1..16, B = {B4}, BLOCK_M = BLOCK_N = BLOCK_K = 2 -> 2 x 2 = 4 programs, "
          f"2 rounds each.\nA is contiguous: stride_am = 4, stride_ak = 1, so A[i, j] is at offset 4i + j: A[1, 2] = "
          f"{A.flatten()[1 * A.stride(0) + 2 * A.stride(1)].item():g} at 4 x 1 + 2 = 6.")
    C = launch(matmul_kernel, A, B, BLOCK_M=2, BLOCK_N=2, BLOCK_K=2, GROUP_M=1, TRACE=True)
    show("C", C, indent=0)
    print(f"(torch: {(A @ B).tolist()})")

    print("\n70 x 45 @ 45 x 50 with 32-blocks: cdiv(70, 32) x cdiv(50, 32) = 3 x 2 = 6 programs; K = 45: 2 rounds.")
    a, b = torch.randn(70, 45, device=DEVICE, dtype=torch.float16), torch.randn(45, 50, device=DEVICE, dtype=torch.float16)
    c = launch(matmul_kernel, a, b, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, TRACE=True)
    err = (c.float() - a.float() @ b.float()).abs().max().item()
    half_ulp = torch.finfo(torch.float16).eps * 2.0 ** math.floor(math.log2(c.float().abs().max().item())) / 2
    print(f"The last tile row keeps rows 64..69 (6 of 32), the last tile column cols 32..49 (18 of 32),\n"
          f"the second round ks 32..44 (13 of 32). Max error against fp32: {err:.1e}, the float16 output's own "
          f"rounding\n(half a unit in the last place of its largest values: {half_ulp:.1e}); the sums are float32.")


# %%
chapter.run("trace", trace, trace=True)

# %% [markdown]
# ## 6. Autotuning: the best tile depends on the shape and the GPU
# triton.autotune times each configuration the first time it meets a new (M, N, K) and keeps the
# fastest. The list holds tile shapes that do well on Hopper: tensor-core tiles of 64-256, and 3-4
# pipeline stages. num_stages is the depth of the software pipeline: while the tensor cores
# multiply one K tile, the loads of the next num_stages - 1 are already in flight, each landing in
# shared memory; the compiler issues them as cp.async, an asynchronous copy from memory to shared
# memory that each thread starts and does not wait for (lesson 7 counts them in the PTX). The
# stages wait in shared memory, so a GPU with less of it skips the largest tiles. Small problems:
# below 512^3 tuning costs more than it saves; the smallest tile (the last, which fits every GPU)
# runs untimed. The interpreter runs one small configuration. (Autotune times each
# configuration once, briefly: near-equal ones can swap from run to run.) The list, the rule for
# small problems and matmul_kernel_tuned, the autotuned kernel, are in matmul.py (GPU_CONFIGS).
# Timing a list means compiling each configuration first: on a fresh GPU that is most of a first
# run. A pick depends only on the key and the GPU model, so the course ships the picks of one run
# per model (common/tuned.py, common/tuned/*.json) and hands them to the autotuner before its first
# launch: on a recorded model a first run times nothing; elsewhere, or at a new shape, it times.


# %% [markdown]
# ## 7. The public function: matmul(), and which kernel it runs
# matmul() (matmul.py) checks the input, then one function decides which kernel runs: choose_kernel,
# the route. It picks hopper.py's TMA kernel (TMA, Hopper's tensor memory accelerator: a copy engine
# that moves whole tiles, section 15) where it can run and pays: a Hopper GPU, float16 or bfloat16,
# operands the copy engine can address, M * N * K from 16384 x 768 x 768, the smallest product of
# lesson 6's transformer blocks (lesson 7 takes it apart; the model's LM head, 16384 x 256 x 768 (a
# vocabulary of 256 bytes), is smaller and takes the pointer kernel); otherwise the autotuned
# pointer kernel. Whether TMA can read a tensor depends on where its memory starts and how far apart
# its rows are (both multiples of 16 bytes), so the route is asked on the tensors the kernel reads,
# in the forward of section 9's autograd function (Matmul). (matmul() also takes a float32 weight b
# beside 16-bit a, mixed precision's: Matmul casts it first, and the route asks on the cast.) Under
# torch.compile a traced tensor has no address yet: the route reads its offset in its storage
# instead, as the compiler does for its own kernels (hopper.starts_aligned). The table: each of the
# route's conditions, in the order it asks them, with an example it decides (a meta tensor: a shape
# and strides, no memory), and the kernel it picks.


# %%
ROUTE_EXAMPLES = [  # (the condition that decides; an example: M, N, K, dtype, A transposed?; choose_kernel's arguments)
    ("tma=False", (4096, 4096, 4096), torch.float16, False, dict(tma=False)),
    ("tma=True (raises where the TMA kernel cannot run)", (64, 48, 32), torch.float16, False, dict(tma=True)),
    ("a GPU with TMA, 16-bit, M * N * K >= 16384 x 768 x 768, operands TMA can address", (4096, 4096, 4096),
     torch.bfloat16, False, {}),
    ("... one of them transposed (A = X.t()): read as it lies", (4096, 4096, 4096), torch.float16, True, {}),
    ("else: float32", (4096, 4096, 4096), torch.float32, False, {}),
    ("else: M * N * K < 16384 x 768 x 768 (2048^3: the pointer kernel won)", (2048, 2048, 2048), torch.float16,
     False, {}),
    ("else: rows TMA cannot address (K = 4100: rows of 8200 bytes, not a multiple of 16)", (4096, 4096, 4100), torch.float16, False, {}),
    ("else: a GPU without TMA (before Hopper)", (4096, 4096, 4096), torch.float16, False, dict(gpu_has_tma=False)),
]
KERNELS = {"tma": ("matmul_kernel_tma", "hopper.py"), "pointer": ("matmul_kernel", "matmul.py")}  # the route's answers


def route_table() -> Table:
    """choose_kernel's answer for each example of ROUTE_EXAMPLES, on a GPU with TMA unless the row says not."""
    rows = []
    for condition, (M, N, K), dtype, transposed, kwargs in ROUTE_EXAMPLES:
        a = torch.empty((K, M) if transposed else (M, K), device="meta", dtype=dtype)
        a = a.t() if transposed else a
        b = torch.empty(K, N, device="meta", dtype=dtype)
        arguments = ", ".join(f"{k}={v}" for k, v in kwargs.items())
        kernel = choose_kernel(a, b, **{"gpu_has_tma": True, **kwargs})
        rows.append((condition, f"{M} x {N} x {K} {dtype_name(dtype)}" + (", A transposed" if transposed else ""),
                     arguments or "-", "{} ({})".format(*KERNELS[kernel])))
    return print_table(rows, ["condition (asked in this order)", "example", "arguments", "kernel"],
                       title="matmul()'s route: choose_kernel",
                       note="Asked in Matmul's forward, on the tensors the kernel reads (a float32 weight after its "
                            "cast). The backward asks again for dA = dC @ B^T and for dB = A^T @ dC (transposed views, "
                            "which TMA reads as they lie); with gelu, Z is recomputed by the forward's kernel, gelu' in "
                            "its epilogue.")


# %%
chapter.run("route", route_table)


# %% [markdown]
# ## 8. Correctness: awkward shapes, views, dtypes, activations
# Shapes that are not multiples of any tile (1, 33, 45, 127, 255) exercise the masks on all three
# dimensions; x.t() @ y.t() reads transposed views through their strides. The error is relative, over
# the whole of C, against float64: float16 and bfloat16 are as good as their output's rounding,
# float32 as good as TF32 (or fp32 itself, with precision="ieee"). A default run checks the shapes
# in float16, the dtype section 10 times; --full (RESULTS.md) and the tests in all three.


# %%
def reference(a, b, activation=None):
    """torch.matmul (cuBLAS on a GPU), then the activation as a second kernel."""
    c = a @ b
    return torch.relu(c) if activation == "relu" else F.gelu(c, approximate="tanh") if activation == "gelu" else c


TINY = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=8)  # 16 x 16 x 16 tiles, for contrast (section 10)
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 2e-3}  # relative; float32: TF32's


def check(n: int = 128) -> Table:
    """Relative error ||C - C_ref|| / ||C_ref|| against float64, in the run's checked dtypes (SIZES),
    every activation; then float32 views, and float32 at n^3 in TF32 and in full precision."""
    rows, x, y = [], torch.randn(64, 96, device=DEVICE), torch.randn(80, 64, device=DEVICE)
    cases = [(f"{M} x {N} x {K}", torch.randn(M, K, device=DEVICE, dtype=dtype), torch.randn(K, N, device=DEVICE, dtype=dtype))
             for dtype in chapter.sizes(SIZES)["checked"] for M, N, K in [(1, 1, 1), (70, 50, 45), (127, 33, 255),
                                                                         (16, 24, 700)]]
    for label, a, b in cases + [("x.t() @ y.t(): views", x.t(), y.t())]:
        for act in ACTIVATIONS:
            err = rel_error(matmul(a, b, activation=act), reference(a.double(), b.double(), act))
            rows.append((dtype_name(a.dtype), label, act or "-", err, err < TOLERANCE[a.dtype]))
    a, b = torch.randn(2, n, n, device=DEVICE)
    for precision, tolerance in (("tf32", TOLERANCE[torch.float32]), ("ieee", 1e-6)):
        err = rel_error(matmul(a, b, precision=precision), a.double() @ b.double())
        rows.append(("float32", f"{n}^3, {precision}", "-", err, err < tolerance))
    return print_table(rows, ["dtype", "M x N x K", "activation", "relative error", "ok"], floatfmt=".1e",
                       title="Check: matmul against float64",
                       note="float16 and bfloat16 round the output to 11 and 8 bits; float32 on a GPU multiplies in "
                            "TF32 (10-bit mantissa) unless precision='ieee'. (Triton's interpreter multiplies float32 "
                            "in full precision whatever precision says.)")


# %%
chapter.run("check", check)

# %% [markdown]
# ## 9. Training: the backward pass is two more matmuls
# For C = A @ B and a loss L: dL/dA = dL/dC @ B^T (M x N times N x K) and dL/dB = A^T @ dL/dC
# (K x M times M x N). B^T and A^T are views: the same memory with the strides swapped, and the
# kernel reads any strides (section 4), so the backward runs the same kernel with no copy. Each of
# the two products asks the route again (section 7): on Hopper, hopper.py's TMA kernel reads a
# transposed view as it lies and turns the tile on chip, and for dB, whose output is as small as a
# weight while its sum runs over every token (its inner dimension, A's rows), it splits that sum
# into parts so that every SM has work (lesson 7).
# Each gradient comes out laid out as its input is: for a transposed view (a linear layer's B =
# W^T) the backward computes dB^T = dC^T @ A and returns its transpose, a view, so W's gradient
# lies as W does and autograd adds it to W.grad as it is (PyTorch's mm backward does the same; a
# gradient laid out otherwise is copied into W's layout first).
# With an activation, C = act(Z) for Z = A @ B, and dL/dZ = dL/dC * act'(Z) comes first:
# - relu' is 1 where Z > 0, and C > 0 exactly there: C itself tells, no Z needed;
# - gelu' needs Z, which the fused kernel never wrote. Keeping it would cost an M x N tensor per
#   layer, held from each step's forward to its backward; recomputing it costs one more matmul in
#   the backward (as activation checkpointing does). That matmul's epilogue then reads the tile of
#   dL/dC and stores dL/dZ = dL/dC * gelu'(Z) instead of Z (ACTIVATION="gelu_backward"; gelu' is
#   lesson 1's gelu_tanh_grad, from lesson01_vector_add/elementwise.py): Z never goes to memory, and
#   the backward launches no element-wise kernel of its own.
# matmul.py's Matmul, a torch.autograd.Function, holds both directions: forward launches the
# kernel matmul() chose, backward computes dA and dB (only the gradients whose input requires grad:
# ctx.needs_input_grad). matmul() calls Matmul.apply whether or not anything requires grad, and
# torch.compile traces it whole, the kernels' launches included.


# %%
def grad_check(shapes=((1, 1, 1), (70, 50, 45))) -> Table:
    """dA, dB through matmul() against torch's autograd, in section 8's dtypes, every activation
    (common.checks.grad_errors)."""
    rows = []
    for dtype in chapter.sizes(SIZES)["checked"]:
        for M, N, K in shapes:
            a, b = torch.randn(M, K, device=DEVICE, dtype=dtype), torch.randn(K, N, device=DEVICE, dtype=dtype)
            for act in ACTIVATIONS:
                errs = grad_errors(lambda a, b, activation: matmul(a, b, activation=activation, precision="ieee"),
                                   reference, [a, b], activation=act)
                rows.append((dtype_name(dtype), f"{M} x {N} x {K}", act or "-",
                             *(f"{e:.1e} ({t:.1e})" for e, t in errs), all(grad_ok(e, t) for e, t in errs)))
    return print_table(rows, ["dtype", "M x N x K", "activation", "dA", "dB", "ok"],
                       title="Check: matmul's gradients against float64 autograd", note=GRAD_NOTE +
                       " float32 multiplies in full precision here (precision='ieee'), as torch's does.")


# %%
chapter.run("grad", grad_check)

# %% [markdown]
# ### Your turn: the exercises
# lesson04_matmul/exercises/, each checked when you run its file (`--hint` for a hint): k_loop
# (write the accumulator, the masked tiles and tl.dot), grouped_order (write section 3's map: a
# bijection that reads fewer tiles per wave than row-major order), bias_epilogue (write a fused
# act(A @ B + bias)), when_to_write (predict when a hand-written matmul beats cuBLAS, after section
# 12), split_k (write a weight's gradient split along K, its parts added with tl.atomic_add, after
# section 17) and swiglu_mlp (a stretch: two matmuls sharing one K loop).

# %% [markdown]
# ## 10. Timing: against torch.matmul (cuBLAS)
# Each implementation's kernel time (common/bench.py says how it is measured), turned into TFLOP/s
# (2MNK floating-point operations: a multiply and an add per term) and into % of the machine's
# measured matmul rate. The implementations of one shape take turns (bench.side_by_side), so the
# GPU's clock drifts alike for all of them. 16 x 16 tiles, tl.dot's smallest, show what section
# 2's arithmetic means in time.


# %%
def bench_all(shapes, dtypes=(torch.float16, torch.bfloat16)) -> Table:
    ceiling = bench.matmul_rate()
    rows = []
    for dtype in dtypes:
        for M, N, K in shapes:
            a, b = torch.randn(M, K, device=DEVICE, dtype=dtype), torch.randn(K, N, device=DEVICE, dtype=dtype)
            cases = {"torch.matmul": lambda: a @ b,
                     "Triton, tl.dot tiles (matmul_kernel, autotuned)": lambda: matmul(a, b, tma=False)}
            if hopper.HOPPER:
                cases["Triton, TMA + persistent (matmul_kernel_tma, hopper.py)"] = lambda: matmul(a, b, tma=True)
            if max(M, N, K) <= 4096:  # (at 8192^3 each call takes tens of milliseconds)
                cases["Triton, 16 x 16 tiles (matmul_kernel)"] = lambda: launch(matmul_kernel, a, b, **TINY)
            times = bench.side_by_side(cases)
            for name, ms in times.items():
                tf = bench.tflops(2 * M * N * K, ms)
                rows.append((dtype_name(dtype), f"{M} x {N} x {K}", name, ms * 1e3, tf,
                             100 * times["torch.matmul"] / ms, bench.percent(tf, ceiling)))
    note = ("'kernel µs': the GPU kernels' own time (profiler timestamps, L2 flushed between calls); TFLOP/s = 2MNK / "
            f"kernel time; '% of ceiling': of the measured matmul rate (cuBLAS, bf16, 8192^3: {ceiling:.0f} TFLOP/s). "
            f"{bench.SIDE_BY_SIDE_NOTE} Each Triton row names the kernel it timed: tma=False and tma=True force "
            "one or the other; matmul() left to choose runs the TMA kernel on Hopper from M * N * K = 16384 x 768 x 768 "
            "(hopper.TMA_FROM) up (choose_kernel, section 7). '% of ceiling' can pass 100 by a little: the ceiling is "
            "one measurement of its own. A small product's caller pays its host cost instead, where that is larger: 'Host cost per "
            "call'.")
    return print_table(rows, ["dtype", "M x N x K", "implementation", "kernel µs", "TFLOP/s", "% of torch",
                              "% of ceiling"], title="Timing against torch.matmul", note=note,
                       plot=dict(x="M x N x K", y="TFLOP/s", series=["dtype", "implementation"], ceiling=ceiling,
                                 ceiling_label="cuBLAS bf16 8192^3 (measured)", logx=False))


def timing() -> Table:
    shapes = [(n, n, n) for n in args.sizes] if args.sizes else chapter.sizes(SIZES)["shapes"]
    return bench_all(shapes, dtypes=(torch.float16, torch.bfloat16) if args.full else (torch.float16,))


# %%
chapter.run("bench", timing, gpu=True)

# %% [markdown]
# ## 11. The roofline: a compute-bound kernel
# A 4096^3 float16 product does 2n^3 FLOPs over 3n^2 elements moved (A and B read, C written
# once): over a thousand FLOPs per byte, far right of the ridge where memory stops being the limit
# (common/roofline.py; the README draws every lesson's points). Only the tensor cores' rate bounds it.


# %%
def picked(a, b) -> str:
    """The kernel matmul(a, b) runs, by name (choose_kernel: section 7), for the timing rows."""
    return KERNELS[choose_kernel(a, b)][0]


def roofline_points(n: int = 4096) -> Table:
    a, b = torch.randn(2, n, n, device=DEVICE, dtype=torch.float16)
    return roofline.points({(name, f"{n}^3 float16"): (fn, 2 * n**3, 2 * 3 * n * n) for name, fn in (
        (f"Triton matmul() ({picked(a, b)})", lambda: matmul(a, b)), ("torch.matmul", lambda: a @ b))})


# %%
chapter.run("roofline", roofline_points, gpu=True)

# %% [markdown]
# ## 12. The fused epilogue, timed
# torch.matmul then torch.relu (or F.gelu) writes C, reads it back and writes it again; matmul()
# applies the activation to the accumulator before its one store.


# %%
def bench_epilogue(n: int = 4096, dtype=torch.float16) -> Table:
    a, b = torch.randn(2, n, n, device=DEVICE, dtype=dtype)
    times = bench.side_by_side({(act, name): fn for act in ("relu", "gelu") for name, fn in (
        ("torch.matmul, then the activation", lambda act=act: reference(a, b, act)),
        (f"Triton matmul(), activation fused ({picked(a, b)})", lambda act=act: matmul(a, b, activation=act)))})
    rows = [(act, name, ms * 1e3, bench.tflops(2 * n**3, ms)) for (act, name), ms in times.items()]
    saved = 2 * n * n * a.element_size() / 1e6
    return print_table(rows, ["activation", "implementation", "kernel µs", "TFLOP/s"],
                       title=f"Fused epilogue, {n}^3 {dtype_name(dtype)}",
                       note=f"Unfused, C is written, read back and written again: {saved:.0f} MB more traffic. "
                            f"{bench.SIDE_BY_SIDE_NOTE}")


# %%
chapter.run("epilogue", bench_epilogue, gpu=True)

# %% [markdown]
# ## 13. Grouped order, timed
# The same kernel and tile, launched in row-major order (GROUP_M = 1) and in groups of 8 tile rows
# (section 3): only the order in which the programs visit the tiles differs.


# %%
def bench_order(n: int = 8192, dtype=torch.float16) -> Table:
    """The same kernel and tile, launched in row-major and in grouped order."""
    a, b = torch.randn(2, n, n, device=DEVICE, dtype=dtype)
    tile = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)
    times = bench.side_by_side({f"GROUP_M = {group}" + (" (row-major)" if group == 1 else ""):
                                (lambda group=group: launch(matmul_kernel, a, b, GROUP_M=group, **tile))
                                for group in (1, 8)})
    rows = [(name, ms * 1e3, bench.tflops(2 * n**3, ms)) for name, ms in times.items()]
    return print_table(rows, ["order", "kernel µs", "TFLOP/s"], title=f"Tile order, {n}^3 {dtype_name(dtype)}",
                       note=f"{tile['BLOCK_M']} x {tile['BLOCK_N']} tiles, one program per tile. "
                            f"{bench.SIDE_BY_SIDE_NOTE}")


# %%
chapter.run("order", lambda: bench_order(8192 if args.full else 4096), gpu=True)

# %% [markdown]
# ## 14. What a call costs the host
# matmul()'s checks, its choice of kernel and the launch, against the floor (an empty kernel's
# launch) and torch.matmul; lesson 1, section 12, says where such microseconds go. A product
# whose kernel takes less than this waits for the host, not the GPU.


# %%
def host_cases(n: int = 2048) -> dict:  # bench.host_costs calls it in fresh processes
    """The host's share of each matmul path at n^3, beside torch.matmul and the bare launches."""
    a, b, c = torch.randn(3, n, n, device=DEVICE, dtype=torch.float16)
    a32, b32 = a.float(), b.float()
    def grid(meta):  # the autotuner's pick, as the launcher's grid
        return (cdiv(n, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"]),)

    cases = {f"torch.matmul ({n}^3 float16)": lambda: a @ b,
             "matmul_kernel_tuned[grid](...) alone, arguments ready": lambda: matmul_kernel_tuned[grid](
                 a, b, c, n, n, n, *a.stride(), *b.stride(), *c.stride(), ACTIVATION="", INPUT_PRECISION="tf32",
                 INDEX_TYPE=tl.int32),
             "matmul(a, b, tma=False): float16, pointers": lambda: matmul(a, b, tma=False),
             "matmul(a32, b32): float32, pointers": lambda: matmul(a32, b32),
             'matmul(a, b, activation="gelu", tma=False)': lambda: matmul(a, b, activation="gelu", tma=False)}
    if hopper.HOPPER:
        triton.set_allocator(scratch)
        kwargs = hopper.GPU_TMA_CONFIGS[0].all_kwargs()
        cases |= {"matmul_kernel_tma[grid](...) alone, arguments ready": lambda: hopper.matmul_kernel_tma[
                      (sm_count(),)](a, b, c, n, n, n, n, n, n, **kwargs),
                  "matmul(a, b, tma=True): float16, the TMA path": lambda: matmul(a, b, tma=True)}
    return cases


# %%
chapter.run("host", lambda: bench.host_cost_table("lesson04_matmul.main:host_cases", 3 if args.full else 1), gpu=True)

# %% [markdown]
# ## 15. torch.matmul's kernel for each shape (library.py)
# cuBLAS picks one of many kernels for each call by a heuristic; the autotuner picks matmul()'s
# configuration by measuring (below 512^3 the smallest runs untimed, section 6; on Hopper the TMA
# kernel takes hopper.config()'s configuration, no autotuner: section 17). The profiler names both,
# shape by shape. An odd size costs both libraries: rows of 4095 half-precision numbers do not start
# on 16-byte boundaries, which the fast kernels' vector loads and TMA need, so cuBLAS falls back to a
# general kernel and matmul() to the pointer kernel with narrower loads. A Memset row is cuBLAS
# clearing memory its kernel uses.


# %%
chapter.run("library", library.kernels_by_shape, gpu=True)

# %% [markdown]
# ### On Hopper: lesson 7
# From M * N * K = 16384 x 768 x 768 up (hopper.TMA_FROM, about 2130^3) on an H100 or H200, matmul()
# runs hopper.py's kernel (section 7's route): the same
# tiles and K loop, its tiles brought by TMA, Hopper's copy engine, through tensor descriptors, on a
# persistent grid of one program per SM. Lesson 7 (lesson07_hopper/main.py) takes it apart: the
# descriptors, the persistent loop, the instructions each kernel compiles to for an H100 (no GPU
# needed), and what each step bought against cuBLAS.

# %% [markdown]
# ## 16. 64-bit offsets: what they cost the pointer kernel
# The pointer kernel computes each address as an offset from the base: in int32, or in int64 where
# a tensor passes 2^31 elements (common.checks.index_type), which costs wider registers and more
# instructions per address. The TMA kernel hands the copy engine coordinates and needs neither.


# %%
def bench_offsets(n: int = 4096) -> Table:
    """matmul.py's kernel computes addresses from offsets: int32, or int64 past 2^31 elements
    (common.checks.index_type); the TMA kernel hands the copy engine coordinates and needs neither.
    What int64 offsets would cost the pointer kernel (matmul_kernel_tuned, through launch, which
    takes the index type as an argument), timed side by side with int32."""
    ab = {t: torch.randn(2, n, n, device=DEVICE, dtype=t) for t in (torch.float16, torch.float32)}
    return bench.offsets_cost({f"pointer kernel (autotuned), {n}^3 {dtype_name(t)}":
                               (lambda index_type, a=a, b=b: launch(matmul_kernel_tuned, a, b, index_type=index_type))
                               for t, (a, b) in ab.items()})


# %%
chapter.run("offsets", bench_offsets, gpu=True)

# %% [markdown]
# ## 17. The products a model trains: a linear layer's forward and both gradients
# A linear layer stores its weight as W (out x in) and computes y = x @ W^T: B is a transposed
# view. Its backward runs two more products: dX = dY @ W, and dW = dY^T @ X (out x in, as W lies:
# section 9's backward turns dB = A^T @ dC so for B = W^T), where A = dY^T is the transposed view
# and the sum runs over every token of the batch (16384 in lesson 6's GPT-2-small step) while the
# output is only as large as the weight.
# The three differ in what is hard: the forward and dX have tiles to spare; dW has few tiles and a
# long inner dimension, K = the tokens. Split K spreads that K over the idle SMs
# (lesson 7, section 2): where C has fewer tiles than SMs, every tile splits; in two waves, only
# the last wave's tiles do (behind more waves, the idle SMs of the last cost less than the split's
# second launch). Lesson 6 runs three more: the MLP's up projection with GELU in its epilogue, and
# on Hopper (the TMA kernel's) its backward's recomputed Z with dY * gelu'(Z) in the epilogue
# (section 9) and each weight's gradient in float32, for the float32 weight, from the accumulator.
#
# Which configuration each product takes is no rule of thumb: it depends on the tiles, the waves
# they make on this GPU's SMs, the epilogue's shared memory. triton.autotune cannot choose it (split
# K is two launches, and it sets the grid), so hopper.tune times hopper.candidates: first the
# configuration hopper.rule gives (the rules config() used before any timing), then tiles of 128 x
# 256, 256 x 128 or 128 x 128 in 3 to 5 stages, C in the fewest pieces that fit (C's tile leaves
# through shared memory; stored in pieces, EPILOGUE_SPLIT, it needs less: lesson 7, section 6),
# each checked against C in float32 first, and hopper.config returns the fastest from then on.
# A weight's gradient also tries its parts added by atomics (SPLIT_ATOMIC) into one float32 block
# per tile, or, for a float32 weight's, into C itself: the adds meet in the L2 cache instead of
# each part's float32 block going to memory and back, so K can split into as many parts as fill
# every SM (36 tiles: 11 parts, 3 full waves, hopper.fill_split), and a float32 C needs no second
# kernel. The parts land in any order and the sum's last bits can change from run to run, so
# under torch.use_deterministic_algorithms config() keeps to hopper.rule's configuration.
# (Exercise split_k writes the idea with plain loads: a 3-D grid, a stretch of K for each program,
# one atomic add each.)
# This section, a sweep that --full runs, tunes every product before timing it; a recorded run
# (COURSE_RECORD_PICKS=1, common/tuned.py) keeps the picks per GPU model, and later runs take them:
# lesson 6's GPT-2-small run (its --full) at these very products. Timed beside torch's way to the
# same C: cuBLAS, then torch's GELU or its backward where there is an epilogue;
# torch.mm(out_dtype=float32) for a float32 dW.


# %%
LAYERS = [("QKV", 768, 1280), ("attention out", 768, 768), ("MLP up", 768, 3072), ("MLP down", 3072, 768)]  # (in, out)
# (QKV: 12 query heads and 4 key and 4 value heads of 64, lesson 6's grouped-query model: 20 x 64 = 1280)


F32_MM = hasattr(torch.ops.aten.mm, "dtype")  # torch.mm(..., out_dtype=torch.float32) (torch 2.8 on)


def layer_products(tokens: int) -> list:
    """Each product of LAYERS in bfloat16: (layer, product, a, b, activation, grad, out_dtype,
    torch's way to the same C). A layer's three as a model of bfloat16 weights runs them, and those
    lesson 6 adds: GELU fused, and on a Hopper GPU (the TMA kernel's alone) its backward's epilogue
    and a float32 weight's gradient."""
    rows = []
    for layer, K, N in LAYERS:
        x, w, dy = (torch.randn(*shape, device=DEVICE, dtype=torch.bfloat16) for shape in
                    ((tokens, K), (N, K), (tokens, N)))
        rows += [(layer, "forward: x @ W^T", x, w.t(), None, None, None, lambda x=x, w=w: x @ w.t()),
                 (layer, "dX = dY @ W", dy, w, None, None, None, lambda dy=dy, w=w: dy @ w),
                 (layer, "dW = dY^T @ X", dy.t(), x, None, None, None, lambda dy=dy, x=x: dy.t() @ x)]
        if layer == "MLP up":
            rows.append((layer, "forward + GELU", x, w.t(), "gelu", None, None,
                         lambda x=x, w=w: F.gelu(x @ w.t(), approximate="tanh")))
        if hopper.HOPPER and layer == "MLP up":
            rows.append((layer, "dY * gelu'(x @ W^T)", x, w.t(), "gelu_backward", dy, None,
                         lambda x=x, w=w, dy=dy: torch.ops.aten.gelu_backward(dy, x @ w.t(), approximate="tanh")))
        if hopper.HOPPER:  # (cuBLAS writes a float32 C from 16-bit inputs from torch 2.8 on; before, cast)
            rows.append((layer, "dW in float32", dy.t(), x, None, None, torch.float32,
                         (lambda dy=dy, x=x: torch.mm(dy.t(), x, out_dtype=torch.float32)) if F32_MM else
                         (lambda dy=dy, x=x: (dy.t() @ x).float())))
    return rows


def configuration(meta: dict, M: int, N: int) -> str:
    """A TMA configuration in words: its tile, stages, C's pieces, and the split tiles' parts."""
    text = f"{meta['BLOCK_M']} x {meta['BLOCK_N']}" + (f", {meta['num_stages']} stages" if "num_stages" in meta else "")
    if meta["EPILOGUE_SPLIT"] > 1:
        text += f", C in {meta['EPILOGUE_SPLIT']} pieces"
    if meta["SPLIT_K"] > 1:
        tiles = cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])
        text += f", {hopper.split_tiles(tiles, sm_count())} of {tiles} tiles: K in {meta['SPLIT_K']} parts"
        text += " added by atomics" if meta.get("SPLIT_ATOMIC") else ""
    return text


def course_product(a, b, activation, grad, out_dtype):
    """The course's way to C: matmul(), or, for what only the backward runs, the TMA kernel as
    Matmul.backward launches it (config()'s configuration)."""
    if grad is None and out_dtype is None:
        return lambda: matmul(a, b, activation=activation)
    (M, K), N = a.shape, b.shape[1]
    return lambda: hopper.launch_tma(hopper.matmul_kernel_tma, a, b, activation, grad=grad, out_dtype=out_dtype,
                                     **hopper.config(M, N, K, activation=activation, out_dtype=out_dtype))


def tune_layers(products: list) -> Table:
    """hopper.tune on each product: every candidate's kernel µs, against the rule's. A pick is kept
    per size, epilogue and C's dtype (hopper.pick_key), so products that share them are tuned once:
    attention out's forward and dX; MLP up's forward and MLP down's dX, and the other way round."""
    rows, tuned = [], set()
    for layer, product, a, b, activation, grad, out_dtype, _ in products:
        (M, K), N = a.shape, b.shape[1]
        if hopper.pick_key(M, N, K, activation, out_dtype) in tuned:
            continue
        tuned.add(hopper.pick_key(M, N, K, activation, out_dtype))
        timed = hopper.tune(a, b, activation, grad, out_dtype)
        fastest = min(ms for _, ms in timed)
        rows += [(layer, product, configuration(meta, M, N), ms * 1e3, timed[0][1] / ms,
                  "pick" if ms == fastest else "") for meta, ms in timed]
    return print_table(rows, ["layer", "product", "configuration (the rule's first)", "µs", "x the rule", ""],
                       floatfmt=("", "", "", ".1f", ".2f", ""),  # (µs in tenths, x the rule in hundredths)
                       title="Each product's candidates, timed (hopper.tune)",
                       note="Kernel µs (profiler timestamps, L2 flushed between calls; every kernel a call launches: "
                            "with split K the parts' sum, or C's zeroing where they add by atomics), bfloat16 inputs. "
                            "x the rule: speed as a multiple of hopper.rule's configuration's. Each "
                            "product's candidates were timed in turns, 3 rounds, median (bench.side_by_side); the "
                            "fastest is config()'s pick from then on, in the table below too, for every product of "
                            "the same sizes, epilogue and C's dtype (tuned once).")


def bench_layers(tokens: int = 16384) -> list:
    """Kernel µs of each of layer_products, the course's beside torch's (on Hopper each product tuned
    first). A sweep: with --full only."""
    products = layer_products(tokens)
    tables = [tune_layers(products)] if hopper.HOPPER else []
    rows = []
    for layer, product, a, b, activation, grad, out_dtype, torch_way in products:
        ms = bench.side_by_side({"torch": torch_way, "course": course_product(a, b, activation, grad, out_dtype)})
        kernel = KERNELS[choose_kernel(a, b)][0]
        (M, K), N = a.shape, b.shape[1]
        if kernel == "matmul_kernel_tma":
            kernel += " " + configuration(hopper.config(M, N, K, activation=activation, out_dtype=out_dtype), M, N)
        rows.append((layer, product, f"{M} x {N} x {K}", kernel, ms["torch"] * 1e3, ms["course"] * 1e3,
                     ms["torch"] / ms["course"]))
    tables.append(print_table(rows, ["layer", "product", "M x N x K", "the course runs", "cuBLAS µs", "course µs",
                                     "x cuBLAS"], floatfmt=(".1f",) * 6 + (".2f",),  # (hundredths: tenths hide gaps)
                              title=f"A linear layer's products, {tokens} tokens, bfloat16",
                              note="Kernel µs (profiler timestamps, L2 flushed between calls; every kernel a call "
                                   "launches). cuBLAS: torch's way to the same C (with torch's GELU, or its backward, "
                                   "after it where the course fuses one). x cuBLAS: speed as a multiple of torch's "
                                   "(its time / ours). " + bench.SIDE_BY_SIDE_NOTE))
    return tables


# %%
chapter.run("layers", bench_layers, gpu=True, full=True, stand_in=("layer's",))
