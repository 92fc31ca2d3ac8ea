"""Lesson 4: matrix multiplication. 2-D tiles, the K loop, masks, strides, grouped order, autotuning.

C = A @ B with A (M, K) and B (K, N). Each output element is a row of A times a column of B; done
one element at a time, every element of A and B is read N or M times over. So a program owns a
BLOCK_M x BLOCK_N tile of C and walks K in steps of BLOCK_K: each step loads a tile of A and a
tile of B once and uses every loaded number BLOCK_N (or BLOCK_M) times, in one tl.dot that runs
on the tensor cores. An fp32 accumulator collects the steps; an activation can be applied to it
before the store, for free (a fused epilogue). Then the GPU-specific part: the order in which
programs run decides how much of A and B the L2 cache can share (grouped ordering), the best
block sizes depend on the shape and the GPU (autotuning), and Hopper has a copy engine (TMA) and
rewards programs that stay resident (a persistent grid): section 5 measures what those bought.

Run:   python lesson04_matmul/main.py            (all sections)
       python lesson04_matmul/main.py --help
Without a CUDA GPU the kernels run under Triton's interpreter on small matrices; timings then
measure the interpreter. Real H200 numbers: lesson04_matmul/RESULTS.md.
"""
# %% Set-up: choose GPU or interpreter before triton is imported
import functools
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # `common` from anywhere

from common.device import DEVICE, INTERPRET, check_tensor, sm_count, stamp

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from common import bench
from common.cli import lesson_parser, start
from common.trace import show
from lesson01_vector_add.main import gelu_tanh  # lesson 1's GELU, fused here into the epilogue

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ACTIVATIONS = (None, "relu", "gelu")

# %% [markdown]
# ## 1. The plan, in plain PyTorch
# Before any pointer arithmetic: the loop over output tiles (one iteration = one program) and,
# inside it, the K loop. Program (pid_m, pid_n) computes C[rows, cols] as a sum over K tiles.


# %%
def matmul_plan(A, B, BLOCK_M=2, BLOCK_N=2, BLOCK_K=2, verbose=False):
    M, K = A.shape
    N = B.shape[1]
    C = torch.zeros(M, N, dtype=A.dtype)
    for pid_m in range(triton.cdiv(M, BLOCK_M)):             # the grid, axis 0
        for pid_n in range(triton.cdiv(N, BLOCK_N)):         # the grid, axis 1
            rows = slice(pid_m * BLOCK_M, (pid_m + 1) * BLOCK_M)
            cols = slice(pid_n * BLOCK_N, (pid_n + 1) * BLOCK_N)
            acc = torch.zeros(BLOCK_M, BLOCK_N, dtype=A.dtype)  # the program's accumulator
            for k in range(0, K, BLOCK_K):                      # the K loop, inside the program
                a = A[rows, k:k + BLOCK_K]
                b = B[k:k + BLOCK_K, cols]
                acc += a @ b
                if verbose and (pid_m, pid_n) == (0, 0):
                    print(f"    program (0, 0), k = {k}: a = {a.tolist()}, b = {b.tolist()} "
                          f"-> acc = {acc.tolist()}")
            C[rows, cols] = acc
    return C


# %% [markdown]
# ## 2. The kernel, in three pieces
# A program knows only addresses. Element (i, j) of A lives at a_ptr + i * stride_am + j * stride_ak
# (for a contiguous A: stride_am = K, stride_ak = 1; for A = X.t(), the strides swap, so a
# transposed view needs no copy). rows / cols / ks are vectors of indices; rows[:, None] (a
# column) plus ks[None, :] (a row) broadcasts to the whole [BLOCK_M, BLOCK_K] table of addresses.
#
# Piece 1, the K loop of one program, shared by both kernels below:


# %%
@triton.jit
def tile_k_loop(a_ptr, b_ptr, rows, cols, M, N, K,
                stride_am, stride_ak, stride_bk, stride_bn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                DOT_IN_FP32: tl.constexpr, INPUT_PRECISION: tl.constexpr, TRACE: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32, whatever the inputs
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        ks = step * BLOCK_K + tl.arange(0, BLOCK_K)
        a_offsets = rows[:, None] * stride_am + ks[None, :] * stride_ak   # A[rows, ks]
        b_offsets = ks[:, None] * stride_bk + cols[None, :] * stride_bn   # B[ks, cols]
        # Masks on all three dimensions. Padding with 0 adds 0 * anything = 0 to the sum.
        a_mask = (rows[:, None] < M) & (ks[None, :] < K)
        b_mask = (ks[:, None] < K) & (cols[None, :] < N)
        a = tl.load(a_ptr + a_offsets, mask=a_mask, other=0.0)
        b = tl.load(b_ptr + b_offsets, mask=b_mask, other=0.0)
        if DOT_IN_FP32:
            # Triton's interpreter keeps bfloat16 as raw 16-bit integers, and its tl.dot on them
            # returns garbage (about 1e10 on unit normals). The interpreter path converts to fp32
            # first; on a GPU the tensor cores multiply bf16 directly.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)  # acc += a @ b, on the tensor cores
        if TRACE == 1:
            show("round", step + 1, 2)
            show("ks", ks)
            show("a offsets", a_offsets)
            show("a tile", a)
            show("b tile", b)
            show("acc", acc)
        if TRACE == 2:
            show("round", step + 1, 2)
            show("ks kept", tl.sum((ks < K).to(tl.int32), axis=0))
    return acc


# %% [markdown]
# Piece 2, the epilogue: the accumulator is still on chip, so an activation costs no memory
# traffic at all; then one store of the tile, masked at the edges of C.


# %%
@triton.jit
def activate(acc, ACTIVATION: tl.constexpr):
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    if ACTIVATION == "gelu":
        acc = gelu_tanh(acc)
    return acc


@triton.jit
def store_tile(c_ptr, acc, rows, cols, M, N, stride_cm, stride_cn, ACTIVATION: tl.constexpr):
    acc = activate(acc, ACTIVATION)
    c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    c_offsets = rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptr + c_offsets, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


# %% [markdown]
# Piece 3, the teaching kernel: a 2-D grid, program (pid_m, pid_n) owns one tile of C.


# %%
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,       # elements between rows / columns of A
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ACTIVATION: tl.constexpr = "",          # "", "relu" or "gelu", applied before the store
    DOT_IN_FP32: tl.constexpr = False,      # see tile_k_loop: the interpreter's bf16 trap
    INPUT_PRECISION: tl.constexpr = "tf32", # float32 inputs: "tf32" (tensor cores) or "ieee"
    TRACE: tl.constexpr = 0,                # 1: every tile of every round; 2: mask counts only
):
    pid_m = tl.program_id(axis=0)   # which tile row of C
    pid_n = tl.program_id(axis=1)   # which tile column of C
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if TRACE == 1:
        show("program (pid_m, pid_n)", (pid_m, pid_n), 0)
        show("rows", rows)
        show("cols", cols)
    if TRACE == 2:
        show("program (pid_m, pid_n)", (pid_m, pid_n), 0)
        show("rows kept", tl.sum((rows < M).to(tl.int32), axis=0))
        show("cols kept", tl.sum((cols < N).to(tl.int32), axis=0))
    acc = tile_k_loop(a_ptr, b_ptr, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      BLOCK_M, BLOCK_N, BLOCK_K, DOT_IN_FP32, INPUT_PRECISION, TRACE)
    store_tile(c_ptr, acc, rows, cols, M, N, stride_cm, stride_cn, ACTIVATION)


# %% [markdown]
# ## 3. Grouped ordering: which tiles run at the same time
# Programs start in pid order, about one wave of (number of SMs x programs per SM) at a time. In
# row-major order a wave covers a strip of C: it needs few rows of A but ALL of B. Grouping
# GROUP_M tile rows together makes a wave cover a squarer block of C: fewer A and B tiles per
# wave, more of them shared through the L2 cache. Whether that shows up as time depends on the
# GPU, its L2 and the tile: bench_order() times both orders. On the H200 at 8192^3 with 128 x 256
# tiles, grouped order was 9% faster in RESULTS.md (1517 against 1660 µs).
# The kernel maps its 1-D pid:


# %%
@triton.jit
def grouped_pid(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Tile (pid_m, pid_n) of program `pid`: groups of GROUP_M tile rows, and inside a group, down
    a column of tiles before moving right."""
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)  # the last group may be shorter
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def matmul_kernel_grouped(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,          # tile rows per group; 1 gives row-major order
    ACTIVATION: tl.constexpr = "",
    DOT_IN_FP32: tl.constexpr = False,
    INPUT_PRECISION: tl.constexpr = "tf32",
):
    pid = tl.program_id(axis=0)
    pid_m, pid_n = grouped_pid(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tile_k_loop(a_ptr, b_ptr, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      BLOCK_M, BLOCK_N, BLOCK_K, DOT_IN_FP32, INPUT_PRECISION, 0)
    store_tile(c_ptr, acc, rows, cols, M, N, stride_cm, stride_cn, ACTIVATION)


def tile_order(num_pid_m: int, num_pid_n: int, GROUP_M: int) -> list[tuple[int, int]]:
    """(pid_m, pid_n) of programs 0, 1, 2, ...: the kernel's own mapping, run as plain Python
    (.fn is the Python function under @triton.jit; on integers it needs no GPU)."""
    return [grouped_pid.fn(pid, num_pid_m, num_pid_n, GROUP_M) for pid in range(num_pid_m * num_pid_n)]


def tiles_loaded(order: list, wave: int, k_tiles: int) -> int:
    """Distinct input tiles the first `wave` programs read: A tiles (pid_m, k), B tiles (k, pid_n)."""
    first = order[:wave]
    return len({m for m, _ in first}) * k_tiles + len({n for _, n in first}) * k_tiles


# %% [markdown]
# ## 4. Autotuning: the best tile depends on the shape and the GPU
# triton.autotune times each configuration the first time it meets a new (M, N, K) and keeps the
# fastest. The list below holds the tile shapes that do well on Hopper (tensor-core tiles of
# 64-256, 3-4 pipeline stages: num_stages is how many K tiles are in flight, loaded
# asynchronously, while the tensor cores work on an earlier one). Under the interpreter there is
# nothing to tune: one small configuration runs.
# A caveat: autotune times each configuration once, briefly (do_bench, about 0.1 s), one after
# the other, while a GPU's clock drifts with its power and temperature (the same kernel timed a
# minute apart differed by 5-15% on the H200 here). Configurations within a few percent of each
# other (on the H200: 128 x 256 tiles with 3 or 4 stages) can swap places from one run to the
# next; that costs little. The timing tables do not trust one-shot timings: they time the
# implementations in turns (bench.side_by_side), so drift cannot favour one of them.


# %%
GPU_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
]
INTERPRETER_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}
SMALL_CONFIG = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=3)
TUNE_FROM = 512**3  # M * N * K below which tuning costs more than it can save: SMALL_CONFIG runs
TMA_FROM = 2048**3  # from here on the TMA kernel of section 5 is as fast or faster (RESULTS.md)

if not INTERPRET:
    matmul_kernel_tuned = triton.autotune(GPU_CONFIGS, key=["M", "N", "K"])(matmul_kernel_grouped)
_tuned_shapes: set = set()


# %% [markdown]
# ## 5. Hopper's TMA engine and a persistent grid
# cuBLAS on Hopper feeds its tensor cores with two things the kernels above do not use:
# - TMA (the tensor memory accelerator). A tensor descriptor holds a matrix's base, shape, strides
#   and tile shape; desc.load([row, col]) asks the copy engine for a whole tile. One thread issues
#   it, the hardware computes every address, fills what falls outside the shape with zeros (no
#   masks), and lands the tile in shared memory already in the swizzled layout the tensor cores
#   read; desc.store clips at the edges. The rules: the last stride is 1, the other strides and
#   the base are multiples of 16 bytes. The host builds the descriptors (TensorDescriptor) and
#   passes them as arguments, so programs start with them ready.
# - A persistent grid: one program per SM (132 on an H200), each looping over output tiles
#   tile_id, tile_id + 132, ... . No program launches and retires per tile, and with
#   flatten=True the compiler pipelines across the tile boundary: the next tile's first loads are
#   in flight while this tile's epilogue computes and stores.
# Triton's pipeliner already turns the pointer loads of section 3 into asynchronous copies
# (cp.async: the PTX counts printed by copy_instructions() below show it), so the gains here are
# the last few percent. bench_steps() times each step side by side; on the H200, fp16, one tile
# of 128 x 256 x 64 (RESULTS.md, "What each step bought"), as % of cuBLAS at 4096^3 and 8192^3:
# pointer loads 95.8 and 97.5; TMA loads and stores 96.8 and 99.3; persistent 97.9 and 100.5;
# flatten 99.2 and 100.0. Autotuned, this kernel reached 98-100% of cuBLAS at 2048^3-8192^3 in fp16
# and bf16, where the pointer kernels reached 95-99%. Below 2048^3 the pointer kernels were faster
# (at 1024^3, 84% against 66% of cuBLAS): matmul() runs this kernel from TMA_FROM = 2048^3 up,
# wherever it can (a Hopper GPU, float16 or bfloat16, rows that TMA can address).
# An aside on the descriptors: tl.make_tensor_descriptor builds them inside the kernel instead;
# then every program builds its own, through global memory, before its first load. In a one-off
# comparison on the H200 that was slower with one program per tile, so this kernel takes them
# from the host.


# %%
@triton.jit
def matmul_kernel_tma(
    a_desc, b_desc, c_desc, M, N, K,    # tensor descriptors of A, B, C (tile shapes: below)
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr,              # pipeline across tiles (a persistent grid)
    ACTIVATION: tl.constexpr = "",
    DOT_IN_FP32: tl.constexpr = False,  # the interpreter's bf16 trap, as in tile_k_loop
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # A grid of one program per tile runs this loop once; a smaller grid makes it persistent.
    for tile_id in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0), flatten=FLATTEN):
        pid_m, pid_n = grouped_pid(tile_id, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, step * BLOCK_K])   # the tile A[rows, ks], zero-padded
            b = b_desc.load([step * BLOCK_K, pid_n * BLOCK_N])   # B[ks, cols]
            if DOT_IN_FP32:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        acc = activate(acc, ACTIVATION)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))  # clipped at the edges


def tile_shapes(BLOCK_M, BLOCK_N, BLOCK_K):
    """The tiles the kernel loads from A and B and stores to C."""
    return [BLOCK_M, BLOCK_K], [BLOCK_K, BLOCK_N], [BLOCK_M, BLOCK_N]


def tma_descriptors(a, b, c, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64):
    """The descriptors of A, B and C (autotuned launches: the hook below sets each config's tiles)."""
    shapes = tile_shapes(BLOCK_M, BLOCK_N, BLOCK_K)
    return tuple(TensorDescriptor.from_tensor(t, shape) for t, shape in zip((a, b, c), shapes))


def tile_shapes_hook(nargs):
    """Autotune pre-hook: before each configuration runs, its tile shapes go into the descriptors."""
    shapes = tile_shapes(nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"])
    for name, shape in zip(("a_desc", "b_desc", "c_desc"), shapes):
        nargs[name].block_shape = shape


TMA_CONFIGS = [  # the large tiles of GPU_CONFIGS, persistent (bench_steps: it beat one program per tile)
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "FLATTEN": True},
                  num_stages=stages, num_warps=8, pre_hook=tile_shapes_hook)
    for bm, bn, stages in ((128, 256, 3), (128, 256, 4), (256, 128, 3), (128, 128, 4))
]
if not INTERPRET:
    matmul_kernel_tma_tuned = triton.autotune(TMA_CONFIGS, key=["M", "N", "K"])(matmul_kernel_tma)


HOPPER = not INTERPRET and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


def tma_ok(*tensors) -> bool:
    """Can the TMA engine address these matrices? Rows contiguous, 16-byte aligned rows and base."""
    return all(t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0
               for t in tensors)


def copy_instructions(BLOCK=(128, 128, 64)) -> dict:
    """Compile both kernels for sm_90 (no GPU needed: common/ptx.py) and count, in the PTX, the
    instructions that move tiles (cp.async: per-thread asynchronous copies; cp.async.bulk.tensor:
    TMA) and the Hopper tensor-core instruction (wgmma.mma_async)."""
    from common import ptx

    BM, BN, BK = BLOCK
    ptrs = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}
    tile = dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, ACTIVATION="")
    kernels = {
        "matmul_kernel_grouped (pointers)": (
            {**ptrs, "stride_am": "i32", "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr",
             "stride_cm": "i32", "stride_cn": "constexpr", **dict.fromkeys(tile, "constexpr"),
             "DOT_IN_FP32": "constexpr", "INPUT_PRECISION": "constexpr"},
            dict(stride_ak=1, stride_bn=1, stride_cn=1, **tile, DOT_IN_FP32=False, INPUT_PRECISION="tf32")),
        "matmul_kernel_tma (descriptors)": (
            {"a_desc": f"tensordesc<fp16[{BM},{BK}]>", "b_desc": f"tensordesc<fp16[{BK},{BN}]>",
             "c_desc": f"tensordesc<fp16[{BM},{BN}]>", "M": "i32", "N": "i32", "K": "i32",
             **dict.fromkeys(tile, "constexpr"), "FLATTEN": "constexpr", "DOT_IN_FP32": "constexpr"},
            dict(**tile, FLATTEN=True, DOT_IN_FP32=False)),
    }
    counts = {}
    for name, (signature, constexprs) in kernels.items():
        aligned = [arg for arg in ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")
                   if arg in signature]
        code = ptx.compile_kernel("lesson04_matmul.main", name.split()[0], signature, constexprs,
                                  divisible_by_16=aligned, num_warps=8)["ptx"]
        counts[name] = {"cp.async": len(re.findall(r"cp\.async\.c[ag]", code)),
                        "cp.async.bulk.tensor": code.count("cp.async.bulk.tensor"),
                        "wgmma.mma_async": code.count("wgmma.mma_async")}
        print(f"    {name:34s} " + ", ".join(f"{k}: {v}" for k, v in counts[name].items()))
    return counts


# %% [markdown]
# ## 6. The launcher


# %%
def matmul(a: torch.Tensor, b: torch.Tensor, activation: str | None = None,
           precision: str = "tf32", tma: bool | None = None) -> torch.Tensor:
    """C = activation(a @ b) for 2-D a (M, K) and b (K, N): float16, bfloat16 or float32, any
    strides; fp32 accumulation, output in the inputs' dtype. activation: None, "relu" or "gelu"
    (tanh form). precision (float32 inputs on a GPU): "tf32", the tensor cores' 10-bit-mantissa
    mode (fast, about 1e-3 relative error), or "ieee" (exact fp32 arithmetic, several times slower).
    tma: None picks matmul_kernel_tma (section 5) wherever it can run: a Hopper GPU, float16 or
    bfloat16, rows contiguous and 16-byte aligned, M * N * K >= TMA_FROM; the pointer
    kernels elsewhere. True insists on it (an error says why it cannot; the interpreter runs it
    too), False keeps the pointer kernels.
    """
    check_tensor(a, "a", DTYPES, ndim=2)
    check_tensor(b, "b", DTYPES, ndim=2)
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} but b is on {b.device}")
    if a.dtype != b.dtype:
        raise TypeError(f"a is {a.dtype} but b is {b.dtype}: cast one so both match")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} "
                         f"({a.shape[1]} != {b.shape[0]})")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if precision not in ("tf32", "ieee"):
        raise ValueError(f"precision must be 'tf32' or 'ieee', got {precision!r}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.zero_()  # an empty sum; relu(0) = gelu(0) = 0
    act = activation or ""
    if tma is None:  # section 5's kernel where it can run and pays (RESULTS.md); the pointer kernels elsewhere
        tma = HOPPER and a.dtype != torch.float32 and tma_ok(a, b, c) and M * N * K >= TMA_FROM
    if tma:
        if a.dtype == torch.float32:
            raise TypeError("tma=True needs float16 or bfloat16 inputs, got float32")
        if not tma_ok(a, b, c):
            raise ValueError(f"tma=True needs rows that are contiguous and 16-byte aligned: a.stride() = "
                             f"{a.stride()}, b.stride() = {b.stride()}, N = {N} (a multiple of 8 for C's rows)")
        if not INTERPRET and not HOPPER:
            raise ValueError("tma=True needs a Hopper GPU or newer (compute capability 9.0)")
        if INTERPRET:  # a persistent grid of 3 programs, so the tile loop really loops
            cfg = INTERPRETER_CONFIG
            descriptors = tma_descriptors(a, b, c, cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"])
            tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
            matmul_kernel_tma[(min(3, tiles),)](*descriptors, M, N, K, **cfg, FLATTEN=True, ACTIVATION=act,
                                                DOT_IN_FP32=a.dtype == torch.bfloat16)
            return c

        def grid(meta):  # persistent: one program per SM (or per tile, if there are fewer)
            return (min(sm_count(), triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)

        return tuned_launch(matmul_kernel_tma_tuned, grid, (*tma_descriptors(a, b, c), M, N, K),
                            dict(ACTIVATION=act), (M, N, K, a.dtype, "tma"), c)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if INTERPRET:
        cfg = INTERPRETER_CONFIG
        grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
        matmul_kernel_grouped[grid](*args, **cfg, ACTIVATION=act, DOT_IN_FP32=a.dtype == torch.bfloat16,
                                    INPUT_PRECISION=precision)
        return c
    if M * N * K < TUNE_FROM:
        grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)
        matmul_kernel_grouped[grid](*args, **SMALL_CONFIG, ACTIVATION=act, INPUT_PRECISION=precision)
        return c

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    return tuned_launch(matmul_kernel_tuned, grid, args, dict(ACTIVATION=act, INPUT_PRECISION=precision),
                        (M, N, K, a.dtype, "tiles"), c)


def tuned_launch(kernel, grid, args, kwargs, key, c):
    """Launch an autotuned kernel; the first call for a shape tunes, and says so while it runs."""
    if key not in _tuned_shapes:
        M, N, K, dtype, _ = key
        print(f"    [autotuning {M} x {N} x {K} {str(dtype)[6:]} over {len(kernel.configs)} configurations ...",
              end="", flush=True)
    kernel[grid](*args, **kwargs)
    if key not in _tuned_shapes:
        _tuned_shapes.add(key)
        print(f" best: {kernel.best_config}]")
    return c


def matmul_tiny_tiles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The teaching kernel with 16 x 16 x 16 tiles (tl.dot's smallest): for contrast."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    matmul_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, DOT_IN_FP32=INTERPRET and a.dtype == torch.bfloat16)
    return c


def reference(a, b, activation=None):
    """torch.matmul (cuBLAS on a GPU), then the activation as a second kernel."""
    c = a @ b
    if activation == "relu":
        return torch.relu(c)
    if activation == "gelu":
        return F.gelu(c, approximate="tanh")
    return c


# %% [markdown]
# ## 7. The trace: the 4 x 4 worked by hand, then the 70 x 45 @ 45 x 50 masks


# %%
A4 = [[1.0, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]
B4 = [[1.0, 0, 1, 0], [0, 1, 0, 1], [2, 0, 1, 0], [0, 2, 0, 1]]


def launch_teaching(a, b, BLOCK, **flags):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK, **flags)
    return grid, c


def trace() -> dict:
    A = torch.tensor(A4, device=DEVICE)
    B = torch.tensor(B4, device=DEVICE)
    print("The plan (plain PyTorch): program (0, 0) computes C[0:2, 0:2] in two K rounds")
    matmul_plan(A.cpu(), B.cpu(), verbose=True)

    print("\nThe kernel: A = 1..16, B as above, BLOCK_M = BLOCK_N = BLOCK_K = 2 -> grid (2, 2), "
          "2 rounds each.\nA is contiguous: stride_am = 4, stride_ak = 1, so A[i, j] is at offset 4i + j.")
    grid, C = launch_teaching(A, B, 2, TRACE=1)
    print(f"C = {C.tolist()}\n(torch: {(A @ B).tolist()})")

    print("\n70 x 45 @ 45 x 50 with 32-blocks: grid (cdiv(70, 32), cdiv(50, 32)) = (3, 2); K = 45 -> 2 rounds.")
    a = torch.randn(70, 45, device=DEVICE, dtype=torch.float16)
    b = torch.randn(45, 50, device=DEVICE, dtype=torch.float16)
    grid2, c = launch_teaching(a, b, 32, TRACE=2)
    err = (c.float() - a.float() @ b.float()).abs().max().item()
    print(f"grid = {grid2}; the last tile row keeps rows 64..69 (6 of 32), the last tile column "
          f"cols 32..49 (18 of 32),\nthe second round ks 32..44 (13 of 32). Max error against fp32: {err:.1e}")
    return {"C": C.tolist(), "grid": list(grid), "grid_70x45x50": list(grid2), "err_70x45x50": err}


# %% [markdown]
# ## 8. Why tiles, and why grouped order: the arithmetic


# %%
def reuse_table(shapes) -> bench.Table:
    rows = []
    for M, N, K in shapes:
        naive = 2 * M * N * K  # every output reads a row of A and a column of B: 2K elements
        rows.append((f"{M} x {N} x {K}", naive * 2 / 1e9,
                     *(naive / T * 2 / 1e9 for T in (16, 128))))
    return bench.print_table(rows, ["M x N x K", "GB read, no reuse", "16 x 16 tiles", "128 x 128 tiles"],
                             title="Reads of A and B (fp16), without reuse (2MNK elements) and with T x T "
                                   "tiles (2MNK / T)")


def order_demo(tiles: int = 9, GROUP_M: int = 3) -> dict:
    """Row-major against grouped order on a tiles x tiles grid of C (K also `tiles` tiles)."""
    result = {}
    for label, group in (("row-major (GROUP_M = 1)", 1), (f"grouped (GROUP_M = {GROUP_M})", GROUP_M)):
        order = tile_order(tiles, tiles, group)
        position = {tile: pid for pid, tile in enumerate(order)}
        print(f"\n{label}: the program that computes each tile of C (first wave of {tiles} marked *)")
        for m in range(tiles):
            print("    " + " ".join(f"{position[(m, n)]:3d}{'*' if position[(m, n)] < tiles else ' '}"
                                    for n in range(tiles)))
        loaded = tiles_loaded(order, tiles, tiles)
        print(f"    the first {tiles} programs read {loaded} input tiles")
        result[group] = loaded
    return result


# %% [markdown]
# ## 9. Correctness: awkward shapes, views, dtypes, activations


# %%
def rel_error(out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def check() -> bench.Table:
    rows = []
    shapes = [(1, 1, 1), (70, 50, 45), (127, 33, 255), (300, 8, 16), (16, 24, 700)]  # M, N, K
    for dtype in DTYPES:
        for M, N, K in shapes:
            a = torch.randn(M, K, device=DEVICE, dtype=dtype)
            b = torch.randn(K, N, device=DEVICE, dtype=dtype)
            for act in ACTIVATIONS:
                ref = reference(a.double(), b.double(), act)
                rows.append((str(dtype)[6:], f"{M} x {N} x {K}", act or "-", rel_error(matmul(a, b, act), ref)))
    x, y = torch.randn(64, 96, device=DEVICE), torch.randn(80, 64, device=DEVICE)
    rows.append(("float32", "x.t() @ y.t()", "-", rel_error(matmul(x.t(), y.t()), x.double().t() @ y.double().t())))
    if not INTERPRET:
        a, b = torch.randn(384, 384, device=DEVICE), torch.randn(384, 384, device=DEVICE)
        ref = a.double() @ b.double()
        for precision in ("tf32", "ieee"):
            rows.append(("float32", f"384^3, {precision}", "-", rel_error(matmul(a, b, precision=precision), ref)))
        for dtype in (torch.float16, torch.bfloat16) if HOPPER else ():  # TMA, ragged edges on every side
            a = torch.randn(1000, 1000, device=DEVICE, dtype=dtype)
            b = torch.randn(1000, 1032, device=DEVICE, dtype=dtype)
            for act in ACTIVATIONS:
                rows.append((str(dtype)[6:], "1000 x 1032 x 1000, TMA", act or "-",
                             rel_error(matmul(a, b, act, tma=True), reference(a.double(), b.double(), act))))
    return bench.print_table(rows, ["dtype", "M x N x K", "activation", "relative error"], floatfmt=".1e",
                             title="Relative error ||C - C_ref|| / ||C_ref|| against float64. float16 and "
                                   "bfloat16 round the output to 11 and 8 bits;\nfloat32 on a GPU multiplies "
                                   "in TF32 (10-bit mantissa) unless precision='ieee'.")


# %% [markdown]
# ## 10. Timing: against cuBLAS, the fused epilogue, and the order of the tiles


# %%
@functools.cache
def matmul_rate(dtype=torch.bfloat16) -> float:
    """The machine's matmul ceiling, measured: cuBLAS on 8192^3 (TFLOP/s)."""
    n = 8192 if not INTERPRET else 256
    a, b = torch.randn(n, n, device=DEVICE, dtype=dtype), torch.randn(n, n, device=DEVICE, dtype=dtype)
    return bench.tflops(2 * n**3, bench.measure(lambda: a @ b)[0])  # kernel time, as in the tables


def ceilings() -> dict:
    """Extra ceilings for the results page stamp (common/results.py)."""
    return {"matmul rate (cuBLAS bf16 8192^3, measured)": f"{matmul_rate():.0f} TFLOP/s"}


def bench_all(shapes, dtypes=(torch.float16, torch.bfloat16), tiny_up_to: int = 4096) -> bench.Table:
    ceiling = matmul_rate()
    rows = []
    for dtype in dtypes:
        for M, N, K in shapes:
            a = torch.randn(M, K, device=DEVICE, dtype=dtype)
            b = torch.randn(K, N, device=DEVICE, dtype=dtype)
            if INTERPRET:
                cases = {"torch.matmul": lambda: a @ b, "Triton (32 x 32 tiles)": lambda: matmul(a, b)}
            else:
                cases = {"cuBLAS (torch.matmul)": lambda: a @ b,
                         "Triton, pointer loads (autotuned)": lambda: matmul(a, b, tma=False)}
                if HOPPER:
                    cases["Triton, TMA + persistent (autotuned)"] = lambda: matmul(a, b, tma=True)
            if max(M, N, K) <= tiny_up_to:
                cases["Triton, 16 x 16 tiles"] = lambda: matmul_tiny_tiles(a, b)
            times = bench.side_by_side(cases)
            base = next(iter(times.values()))
            for name, ms in times.items():
                tf = bench.tflops(2 * M * N * K, ms)
                rows.append((str(dtype)[6:], f"{M} x {N} x {K}", name, ms * 1e3, tf, 100 * base / ms,
                             bench.percent(tf, ceiling)))
    where = "torch.matmul on the CPU, 256^3" if INTERPRET else "cuBLAS, bf16, 8192^3"
    title = (f"Timing: {stamp()}\n{bench.TIMING_NOTE}{bench.SIDE_BY_SIDE_NOTE} Matmul ceiling measured ({where}): "
             f"{ceiling:.0f} TFLOP/s. TFLOP/s = 2MNK / kernel time.")
    return bench.print_table(rows, ["dtype", "M x N x K", "implementation", "kernel µs", "TFLOP/s",
                                    "% of torch", "% of ceiling"], title=title)


def bench_epilogue(n: int = 4096, dtype=torch.float16) -> bench.Table:
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    cases = {(act, name): fn for act in ("relu", "gelu") for name, fn in (
        ("torch.matmul, then the activation", lambda act=act: reference(a, b, act)),
        ("Triton, activation fused", lambda act=act: matmul(a, b, act)))}
    times = bench.side_by_side(cases)
    rows = [(act, name, ms * 1e3, bench.tflops(2 * n**3, ms)) for (act, name), ms in times.items()]
    saved = 2 * n * n * a.element_size() / 1e6
    return bench.print_table(rows, ["activation", "implementation", "kernel µs", "TFLOP/s"],
                             title=f"Fused epilogue, {n}^3 {str(dtype)[6:]}: unfused, C is written, read back "
                                   f"and written again: {saved:.0f} MB more traffic")


def bench_order(n: int = 8192, dtype=torch.float16) -> bench.Table:
    """The same kernel and tile, launched in row-major and in grouped order."""
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    c = torch.empty(n, n, device=DEVICE, dtype=dtype)
    cfg = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64) if not INTERPRET else dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    grid = (triton.cdiv(n, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)

    def launch(group):
        matmul_kernel_grouped[grid](a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    c.stride(0), c.stride(1), **cfg, GROUP_M=group,
                                    DOT_IN_FP32=INTERPRET and dtype == torch.bfloat16,
                                    **({} if INTERPRET else dict(num_warps=8, num_stages=3)))

    times = bench.side_by_side({"row-major": lambda: launch(1), "grouped, GROUP_M = 8": lambda: launch(8)})
    rows = [(name, ms * 1e3, bench.tflops(2 * n**3, ms)) for name, ms in times.items()]
    return bench.print_table(rows, ["order", "kernel µs", "TFLOP/s"],
                             title=f"Tile order, {n}^3 {str(dtype)[6:]}, {cfg['BLOCK_M']} x {cfg['BLOCK_N']} tiles")


def bench_steps(sizes=(4096, 8192), dtype=torch.float16) -> bench.Table:
    """What each step bought, one tile shape (128 x 256 x 64, 3 stages, 8 warps) throughout."""
    rows = []
    for n in sizes:
        a = torch.randn(n, n, device=DEVICE, dtype=dtype)
        b = torch.randn(n, n, device=DEVICE, dtype=dtype)
        c = torch.empty(n, n, device=DEVICE, dtype=dtype)
        tile = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=3, num_warps=8)
        tiles = triton.cdiv(n, 128) * triton.cdiv(n, 256)
        descriptors = tma_descriptors(a, b, c, 128, 256, 64)

        def tma(programs, flatten):
            matmul_kernel_tma[(programs,)](*descriptors, n, n, n, **tile, FLATTEN=flatten)

        def pointers():
            matmul_kernel_grouped[(tiles,)](a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                            c.stride(0), c.stride(1), **tile)

        cases = {"cuBLAS (torch.matmul)": lambda: a @ b, "tl.dot tiles, pointer loads (section 3)": pointers,
                 "+ TMA loads and stores, one program per tile": lambda: tma(tiles, False),
                 "+ persistent: one program per SM": lambda: tma(min(sm_count(), tiles), False),
                 "+ flatten: pipelined across tiles": lambda: tma(min(sm_count(), tiles), True)}
        times = bench.side_by_side(cases)
        base = times["cuBLAS (torch.matmul)"]
        for name, ms in times.items():
            rows.append((f"{n}^3", name, ms * 1e3, bench.tflops(2 * n**3, ms), 100 * base / ms))
    return bench.print_table(rows, ["size", "kernel", "kernel µs", "TFLOP/s", "% of cuBLAS"],
                             title=f"What each step bought, {str(dtype)[6:]}, one tile: 128 x 256 x 64, 3 stages, "
                                   f"8 warps, grouped order.{bench.SIDE_BY_SIDE_NOTE}")


GPU_SHAPES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
              (4096, 11008, 4096), (4096, 4096, 11008)]  # last two: a Llama-7B MLP, up and down, 4096 tokens


def results() -> list:
    """What common/results.py writes to RESULTS.md (on a GPU)."""
    timing = bench_all(GPU_SHAPES)
    steps = [(bench_steps(), None)] if HOPPER else []  # TMA needs Hopper (sm_90) or newer
    return [(timing, None), *steps, (bench_epilogue(), None), (bench_order(), None), (check(), None)]


# %% The script
def main(argv=None) -> None:
    p = lesson_parser(__doc__, ["trace", "order", "ptx", "check", "bench"])
    p.add_argument("--sizes", type=int, nargs="+", metavar="N",
                   help="square sizes for the bench (default 512 ... 8192 and two MLP shapes on a GPU; "
                        "64 128 interpreted)")
    args = start(p, argv, trace, __file__, "Trace: matmul_kernel, program by program, round by round (interpreter)")
    if "order" in args.sections:
        print("\n=== Why tiles, and the order of the tiles ===")
        reuse_table([(n, n, n) for n in (1024, 4096, 8192)])
        order_demo()
    if "ptx" in args.sections:
        print("\n=== Under the hood: the PTX of both kernels for an H100/H200 (sm_90), 128 x 128 x 64 tiles ===")
        copy_instructions()
    if "check" in args.sections:
        print("\n=== Check: against float64 ===")
        check()
    if "bench" in args.sections:
        print("\n=== Timing ===")
        if args.sizes:
            shapes = [(n, n, n) for n in args.sizes]
        else:
            shapes = [(64, 64, 64), (128, 128, 128)] if INTERPRET else GPU_SHAPES
        bench_all(shapes, tiny_up_to=max(max(s) for s in shapes) if INTERPRET else 4096)
        if HOPPER:  # TMA is a Hopper engine; the interpreter only imitates it (the tests use that)
            bench_steps()
        bench_epilogue(128 if INTERPRET else 4096)
        bench_order(128 if INTERPRET else 8192)


if __name__ == "__main__":
    main()
