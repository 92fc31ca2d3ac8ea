"""Lesson 4's TMA kernel: Hopper's copy engine and a persistent grid, the last few percent of a matmul.

cuBLAS on Hopper (H100, H200) feeds its tensor cores (lesson 4's main.py, section 2) with two things
matmul.py's kernel does not use, TMA and a persistent grid; this kernel uses both, and four more
for the products a model trains:
- TMA, the tensor memory accelerator: a copy engine beside each SM that moves a whole tile
  between memory and shared memory on one thread's request. A tensor descriptor holds a matrix's
  base, shape, strides and tile shape; desc.load([row, col]) asks the engine for a tile. The
  hardware computes every address, fills what falls outside the shape with zeros (no masks), and
  lands the tile in shared memory already in the swizzled layout the tensor cores read;
  desc.store clips at the edges. The rules: the last stride is 1, the other strides and the base
  are multiples of 16 bytes. Each program builds its three descriptors (a fourth for split K's
  parts, below) as it starts (tl.make_tensor_descriptor: 128 bytes each, written to a scratch
  buffer that Triton asks the allocator, common.launch.scratch, for at every launch). The host
  could build them instead (TensorDescriptor) and pass them as arguments; but then Triton's
  launcher encodes all three on the host at every call, time a small product's kernel cannot
  hide, while building them on the device costs kernel time instead: each program pays it once,
  as it starts.
- A persistent grid: one program per SM (132 on an H200), each looping over output tiles
  tile_id, tile_id + 132, ... . No program launches and retires per tile, and with flatten=True
  the compiler pipelines across the tile boundary: the next tile's first loads are in flight
  while this tile's epilogue computes and stores.
- Operands as they lie: a linear layer's products have a transposed operand (x @ W^T's B, a
  weight gradient's X^T). TMA reads rows, so the descriptor describes the memory as it is (W,
  rows of K) and the kernel turns the tile in shared memory (.T), where the tensor cores read
  either orientation: no copy of the transpose (A_T, B_T).
- Split K: a weight's gradient sums over every token of the batch into an output as small as the
  weight (768 x 768: 36 tiles of 128 x 128 for 132 SMs; an MLP's, 768 x 3072, is 144 tiles, a
  wave and 12 more that leave 120 SMs idle). The tiles of the last wave (every tile, where there
  are fewer than SMs) run as SPLIT_K parts of K side by side, each into a float32 block, and
  split_k_sum_kernel adds each tile's parts (with the activation and the cast); or each part adds
  itself by atomics (SPLIT_ATOMIC) into one float32 block per tile, which split_k_sum_kernel then
  only casts, or, where C is float32 with no activation, into C itself: no second kernel.
- The epilogue in pieces: a TMA store goes from shared memory, so C's tile (or a part) is staged
  there, in a buffer beside the stages of A and B. Stored in 2 or 4 pieces side by side
  (EPILOGUE_SPLIT), the buffer is that much smaller: room for one more stage, or for a float32
  tile. Lesson 7, section 6, times a fourth stage for 128 x 256 tiles.
- A configuration per product: config() returns the one timed fastest for the product on this
  GPU model (tune(), over candidates(); kept per model in common/tuned/), else rule()'s.
Triton's pipeliner already turns matmul.py's pointer loads into asynchronous copies (cp.async, a
copy from memory to shared memory that each thread starts and does not wait for), so on a large
square product the gains are the last few percent (lesson 4, section 10, times both kernels).
matmul() runs this kernel where it can and where it pays (matmul.choose_kernel, the route: a
Hopper GPU, float16 or bfloat16, operands TMA can address, and M * N * K >= TMA_FROM), with
config()'s configuration, no autotuner on the way. Each program builds its descriptors once: with
one program per tile that is once per tile, with a persistent grid once per SM. A short kernel pays
the descriptors' cost on a larger share of its time, and a small problem leaves SMs idle, so below
some size the pointer kernel is the faster: on an H100 at 2048^3 it was, at 4096^3 this kernel
was (lesson 4, section 10); TMA_FROM, the smallest product of lesson 6's transformer blocks, lies
between (the model's LM head, smaller, takes the pointer kernel).

This file is an op file: the kernel, its configurations, its preconditions and its launcher.
matmul.py's route imports it (not the other way round); lesson 7's chapter (lesson07_hopper/main.py)
takes it apart: the instructions it compiles to, and each step timed.
"""
from common.device import INTERPRET, capability, interpretable, shared_memory, sm_count  # first: it picks triton's mode

from fractions import Fraction

import torch
import triton
import triton.language as tl

from common.checks import dtype_name
from common.launch import cdiv, scratch
from common.tuned import picks, recorded
from lesson01_vector_add.elementwise import gelu_tanh, gelu_tanh_grad  # lesson 1's, fused as in matmul.py

TMA_FROM = 16384 * 768 * 768  # M * N * K from which the route takes this kernel: the smallest product of
                               # lesson 6's transformer blocks, between 2048^3, where the pointer kernel was
                               # the faster, and 4096^3, where this kernel was (main.py, section 10)


# %% The kernel: matmul.py's, with descriptor loads and a loop over tiles
@triton.jit
def halves(tile):
    """tile's left and right halves, column-wise: tl.reshape, tl.permute and tl.split."""
    return tl.split(tl.permute(tl.reshape(tile, (tile.shape[0], 2, tile.shape[1] // 2)), (0, 2, 1)))


@triton.jit
def store_tile(desc, row, col, tile, PIECES: tl.constexpr):
    """tile stored by desc at (row, col), whole (PIECES 1) or as 2 or 4 pieces side by side, each as
    wide as desc's block."""
    if PIECES == 1:
        desc.store([row, col], tile)
    elif PIECES == 2:
        left, right = halves(tile)
        desc.store([row, col], left)
        desc.store([row, col + tile.shape[1] // 2], right)
    else:
        left, right = halves(tile)
        p0, p1 = halves(left)
        p2, p3 = halves(right)
        W: tl.constexpr = tile.shape[1] // 4
        desc.store([row, col], p0)
        desc.store([row, col + W], p1)
        desc.store([row, col + 2 * W], p2)
        desc.store([row, col + 3 * W], p3)


@triton.jit
def matmul_kernel_tma(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_bk, stride_cm,    # the row strides of A, B and C as they lie in memory
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr,              # pipeline across tiles (a persistent grid)
    ACTIVATION: tl.constexpr = "",      # matmul.py's: "", "relu", "gelu" or "gelu_backward" (with g_ptr)
    g_ptr=None,                         # "gelu_backward": dL/dC, C's shape, contiguous
    A_T: tl.constexpr = False,          # A lies in memory as A^T, K x M rows (a.t() of a row-major tensor)
    B_T: tl.constexpr = False,          # B lies in memory as B^T, N x K rows (a linear layer's weight)
    SPLIT_K: tl.constexpr = 1,          # > 1: each tile from whole_tiles on runs as SPLIT_K parts of K
    whole_tiles=0,                      # tiles 0 ... whole_tiles - 1 (the full waves) run whole
    parts_ptr=None,                     # float32: one BLOCK_M x BLOCK_N block per part of a split tile
    EPILOGUE_SPLIT: tl.constexpr = 1,   # C's tile (and a part's) stored in 1, 2 or 4 pieces side by side
    SPLIT_ATOMIC: tl.constexpr = False,  # a split tile's parts added by atomics: into C, or parts_ptr's block
):
    # The descriptors: each matrix's base, shape and strides as it lies in memory, and the tile a
    # load or store moves. TMA reads rows; a transposed operand is read as it lies (the tile of A^T
    # or B^T) and transposed in shared memory, where the tensor cores read either orientation.
    if A_T:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[stride_am, 1], block_shape=[BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_T:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bk, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
    # A store by TMA goes from shared memory: the tile is staged there first, in a buffer of its own
    # beside the stages of A and B. Stored in EPILOGUE_SPLIT pieces, the buffer is that much smaller
    # (128 x 256 bfloat16: 64 KB whole, 32 KB in halves), which can make room for one more stage.
    PIECE_N: tl.constexpr = BLOCK_N // EPILOGUE_SPLIT
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, PIECE_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    # The loop counts units of work: a whole tile is one unit, a split tile SPLIT_K units. 144 tiles
    # on 132 programs, SPLIT_K 11: work 0-131 are tiles 0-131, work 132-142 tile 132's parts 0-10,
    # work 143-153 tile 133's, and so on. The full waves keep every SM busy as they are; splitting
    # them would only add a float32 write, its read and a second kernel.
    work_count = num_pid_m * num_pid_n
    if SPLIT_K > 1:  # the split tiles' parts: one BLOCK_M x BLOCK_N float32 block each, tile by tile
        split_tiles = work_count - whole_tiles
        work_count = whole_tiles + split_tiles * SPLIT_K
        if not SPLIT_ATOMIC:
            parts_desc = tl.make_tensor_descriptor(parts_ptr, shape=[split_tiles * SPLIT_K * BLOCK_M, BLOCK_N],
                                                   strides=[BLOCK_N, 1], block_shape=[BLOCK_M, PIECE_N])
    # A grid of one program per unit of work runs this loop once; a smaller grid makes it
    # persistent: program p takes work p, p + programs, p + 2 programs, ...
    for work in tl.range(tl.program_id(0), work_count, tl.num_programs(0), flatten=FLATTEN):
        tile_id, first, last, is_whole = work, 0, k_steps, True  # a whole tile: every step of K
        if SPLIT_K > 1:  # past whole_tiles, a unit is one part of a tile (its parts on neighbouring programs)
            is_whole = work < whole_tiles
            unit = work - whole_tiles  # (negative for a whole tile: tl.where keeps work's values there)
            part = unit % SPLIT_K
            tile_id = tl.where(is_whole, work, whole_tiles + unit // SPLIT_K)
            first = tl.where(is_whole, 0, part * k_steps // SPLIT_K)  # parts of K as even as steps allow
            last = tl.where(is_whole, k_steps, (part + 1) * k_steps // SPLIT_K)
        # matmul.py's grouped order (grouped_pid; main.py, section 3), from Triton's standard library:
        # tl.swizzle2d takes the row-major (row, column) of tile_id and returns the grouped one.
        pid_m, pid_n = tl.swizzle2d(tile_id // num_pid_n, tile_id % num_pid_n, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(first, last):
            if A_T:
                a = a_desc.load([step * BLOCK_K, pid_m * BLOCK_M]).T   # the tile A^T[ks, rows], turned
            else:
                a = a_desc.load([pid_m * BLOCK_M, step * BLOCK_K])     # the tile A[rows, ks], zero-padded
            if B_T:
                b = b_desc.load([pid_n * BLOCK_N, step * BLOCK_K]).T   # B^T[cols, ks], turned
            else:
                b = b_desc.load([step * BLOCK_K, pid_n * BLOCK_N])     # B[ks, cols]
            acc = tl.dot(a, b, acc)
        # Two ifs, not an if/else: with SPLIT_K = 1 there is no parts descriptor and is_whole is the
        # constant True, so the compiler keeps only the epilogue.
        if SPLIT_K > 1:
            if not is_whole:  # a partial sum, kept in float32 (bfloat16 would round each part), in
                # block `unit` (tile by tile, part by part: split_k_sum_kernel reads the same order).
                # The activation waits for the sum: gelu(p0 + p1) is not gelu(p0) + gelu(p1).
                if SPLIT_ATOMIC:  # or every part of a tile added into one zeroed float32 block by
                    # atomics: the adds meet in the L2 cache, so parts cost no memory round trip and can
                    # be many. The block: the tile's own in parts_ptr (split_k_sum_kernel then applies the
                    # activation and casts), or, parts_ptr None (C float32, no activation), C itself.
                    # The parts land in any order, so the sum's last bits can change from run to run.
                    rows = tl.arange(0, BLOCK_M)
                    cols = tl.arange(0, BLOCK_N)
                    if parts_ptr is None:
                        rows = pid_m * BLOCK_M + rows
                        cols = pid_n * BLOCK_N + cols
                        tl.atomic_add(c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :], acc,
                                      mask=(rows < M)[:, None] & (cols < N)[None, :], sem="relaxed")
                    else:
                        rows = (tile_id - whole_tiles) * BLOCK_M + rows
                        tl.atomic_add(parts_ptr + rows[:, None].to(tl.int64) * BLOCK_N + cols[None, :], acc,
                                      sem="relaxed")
                else:
                    store_tile(parts_desc, unit * BLOCK_M, 0, acc, EPILOGUE_SPLIT)
        if is_whole:
            if ACTIVATION == "relu":
                acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)
            if ACTIVATION == "gelu":
                acc = gelu_tanh(acc)
            if ACTIVATION == "gelu_backward":  # dL/dC's tile by plain loads (no shared memory left for its TMA tile)
                rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
                cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
                g = tl.load(g_ptr + rows[:, None] * N + cols[None, :], mask=(rows < M)[:, None] & (cols < N)[None, :])
                acc = g.to(tl.float32) * gelu_tanh_grad(acc)
            # (clipped at the edges: a piece past C's last column is not stored at all)
            store_tile(c_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, acc.to(c_desc.dtype), EPILOGUE_SPLIT)


@triton.jit
def split_k_sum_kernel(parts_ptr, c_ptr, M, N, stride_cm, whole_tiles, SPLIT_K: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, ROWS: tl.constexpr,
                       ACTIVATION: tl.constexpr = "", g_ptr=None):
    """C's split tiles: each the sum of its SPLIT_K float32 parts, the activation applied, in C's
    dtype. Program (t, r) takes rows r * ROWS ... of split tile t (tile whole_tiles + t). It must
    place tiles as matmul_kernel_tma does: the same tile ids, swizzle2d and GROUP_M, and part p of
    split tile t in block t * SPLIT_K + p."""
    t = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tile_id = whole_tiles + t
    pid_m, pid_n = tl.swizzle2d(tile_id // num_pid_n, tile_id % num_pid_n, num_pid_m, num_pid_n, GROUP_M)
    tile_rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    tile_cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for part in tl.static_range(SPLIT_K):
        block_rows = (t * SPLIT_K + part) * BLOCK_M + tile_rows
        acc += tl.load(parts_ptr + block_rows[:, None] * BLOCK_N + tile_cols[None, :])
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)
    if ACTIVATION == "gelu":
        acc = gelu_tanh(acc)
    rows = (pid_m * BLOCK_M + tile_rows).to(tl.int64)  # (C may pass 2^31 elements)
    cols = pid_n * BLOCK_N + tile_cols
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    if ACTIVATION == "gelu_backward":
        g = tl.load(g_ptr + rows[:, None] * N + cols[None, :], mask=mask)
        acc = g.to(tl.float32) * gelu_tanh_grad(acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


# %% Autotuning
# The large tiles of matmul.py's GPU_CONFIGS, persistent and flattened (lesson 7 times each step).
# 4 stages of 128 x 256 fit an H100's 227 KB with C's tile stored in halves only (224 KB; whole, 256).
GPU_TMA_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "FLATTEN": True,
                   "EPILOGUE_SPLIT": pieces}, num_stages=stages, num_warps=8)
    for bm, bn, stages, pieces in ((128, 256, 3, 1), (128, 256, 4, 2), (256, 128, 3, 1), (128, 128, 4, 1))
]
TMA_CONFIGS = GPU_TMA_CONFIGS if not INTERPRET else [  # the interpreter: one small configuration
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "FLATTEN": True, "EPILOGUE_SPLIT": 1})]


def shared_bytes(config, itemsize: int = 2, *, c_itemsize: int = 2, activation: str | None = None) -> int:
    """Shared memory a TMA configuration (a triton.Config, or launch_tma's meta) needs, as the
    compiler lays it out for sm_90: num_stages tiles of A and B in flight (fp16 / bf16: `itemsize`
    2), and the buffer C's tile, or its piece (EPILOGUE_SPLIT), goes out through (c_itemsize: 2, or
    4 for a float32 C). (128, 128, 64), 4 stages: 4 x 32 KB + 32 KB = 160 KB; (128, 256, 64), 4
    stages, C in halves: 4 x 48 + 32 = 224 KB. With SPLIT_K > 1 a part's float32 piece goes out too,
    through a buffer of its own beside a 16-bit C's (a float32 C's serves both; SPLIT_ATOMIC's parts
    go out by atomics, from registers): 128 x 128 in 4 stages, 160 + 64 = 224 KB. "gelu_backward"
    adds the buffer its tile of dL/dC is rearranged in, as the compiler lays it out: BLOCK_M x 128
    16-bit numbers (32 KB for 128 rows, 64 for 256)."""
    meta = config if isinstance(config, dict) else {**config.kwargs, "num_stages": config.num_stages}
    BM, BN, BK = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    piece = BM * BN // meta.get("EPILOGUE_SPLIT", 1)  # elements of C's piece
    parts = piece * 4 if meta.get("SPLIT_K", 1) > 1 and c_itemsize != 4 and not meta.get("SPLIT_ATOMIC") else 0
    return (meta["num_stages"] * (BM * BK + BK * BN) * itemsize + piece * c_itemsize + parts
            + (BM * min(BN, 128) * 2 if activation == "gelu_backward" else 0))


def tma_gpu(cc: int, shared: int) -> bool:
    """Does a GPU of compute capability `cc` (90 for 9.0) with `shared` bytes of shared memory per
    program run this kernel? TMA came with Hopper (9.0); these tiles also need the shared memory of
    the data-centre parts: an H100 or B200 (227 KB) has it, an RTX 5090 (12.0, 99 KB) does not."""
    return cc >= 90 and shared >= min(shared_bytes(config) for config in GPU_TMA_CONFIGS)


HOPPER = not INTERPRET and torch.cuda.is_available() and tma_gpu(capability(), shared_memory())  # the TMA path here?
matmul_kernel_tma_tuned = recorded("matmul_kernel_tma_tuned",
                                   triton.autotune(TMA_CONFIGS, key=["M", "N", "K"], cache_results=True)(matmul_kernel_tma))


# %% Which products take this kernel, and its launcher
def layout(t) -> tuple[bool, int]:
    """How TMA reads the 2-D operand t: (False, row stride) where t's rows are contiguous, (True,
    t^T's row stride) where its columns are (a transposed view: read as it lies, turned on chip)."""
    return (False, t.stride(0)) if t.stride(1) == 1 or t.shape[1] == 1 else (True, t.stride(1))


def starts_aligned(t) -> bool:
    """Does t's first element sit on a 16-byte boundary? Read from its address; while torch.compile
    traces, from its offset in its storage (a traced tensor has no address yet: common/traced.py), as
    inductor itself reads it: PyTorch's allocator starts every storage on a 512-byte boundary, and
    inductor's code copies an input that arrives misaligned where it was aligned when traced, so the
    choice holds."""
    if torch.compiler.is_compiling():
        from common.traced import storage_offset_bytes  # (imported here: it imports the compiler)

        return storage_offset_bytes(t) % 16 == 0
    return t.data_ptr() % 16 == 0


def tma_ok(a, b, N) -> bool:
    """Can the TMA engine address A, B and an (M, N) C? Each operand's rows, or its columns (a
    transposed view), contiguous; the other stride and the base 16-byte aligned; C's rows too."""
    for t in (a, b):
        if not (t.stride(1) == 1 or t.stride(0) == 1) or not starts_aligned(t):
            return False
        if (layout(t)[1] * t.element_size()) % 16:
            return False
    return (N * a.element_size()) % 16 == 0


def check_tma(a, b, *, gpu_has_tma: bool) -> None:
    """Raise, with the reason, where this kernel cannot compute a @ b (matmul.choose_kernel asks,
    for tma=True). gpu_has_tma: does this GPU run it (HOPPER)?"""
    if a.dtype == torch.float32:
        raise TypeError("the TMA kernel takes float16 or bfloat16 inputs, got float32")
    N = b.shape[1]
    if not tma_ok(a, b, N):
        raise ValueError(f"the TMA kernel needs each operand's rows or columns contiguous, its other stride and "
                         f"its base 16-byte aligned: a.stride() = {a.stride()}, b.stride() = {b.stride()}, N = {N} "
                         f"(a multiple of 8 for C's rows)")
    if not INTERPRET and not gpu_has_tma:  # (the interpreter imitates TMA: the tests run the kernel on a CPU)
        raise ValueError(f"the TMA kernel needs a GPU of compute capability 9.0 or newer with 160 KB of shared memory "
                         f"per program (H100, H200, B200); this one: {capability() / 10:.1f}, "
                         f"{shared_memory() >> 10} KB")


def split_tiles(tiles: int, programs: int) -> int:
    """How many of `tiles` split K (given SPLIT_K > 1) on `programs` persistent programs: the last
    wave's, which would leave programs idle; every tile, where there are fewer than programs."""
    return tiles % programs


def split_for(M: int, N: int, K: int, BLOCK_M: int, BLOCK_N: int) -> int:
    """SPLIT_K for an M x N x K product in tiles of BLOCK_M x BLOCK_N: where the tiles make at most
    two waves, the last wave's (every tile, where they are fewer than SMs) split K into as many parts
    as fill the SMs, each at least 4 steps of 64; behind more waves the idle SMs of the last are a
    small share of the time, less than the split's second launch costs (1: no split)."""
    SMs = sm_count()
    tiles = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)
    last_wave = split_tiles(tiles, SMs) if tiles <= 2 * SMs else 0
    return max(1, min(SMs // last_wave if last_wave else 1, cdiv(K, 64) // 4))


def rule(M: int, N: int, K: int, *, activation: str | None = None, out_dtype=None) -> dict:
    """config()'s configuration where no pick was timed for the product: rules measured on the
    training step's products on an H100 (lesson 4, section 17). Tiles of 128 x 256 (3 stages) where
    they make at least a wave (a tile for every SM), else 128 x 128 (4 stages), K split as
    split_for says: a weight's gradient, 768 x 768, is 36 tiles for 132 SMs, each split in 3.
    activation "gelu_backward" and a float32 C (out_dtype) take 128 x 128 tiles: with C stored
    whole, 128 x 256 would need 240 and 272 KB of the 227 (shared_bytes). C in pieces makes room
    for both; candidates() has them, for tune() to time."""
    if INTERPRET:
        return dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, FLATTEN=True, SPLIT_K=2 if K >= 128 else 1,
                    EPILOGUE_SPLIT=1)
    wide = activation != "gelu_backward" and out_dtype != torch.float32  # (the two that need 128 x 128 tiles)
    if wide and cdiv(M, 128) * cdiv(N, 256) >= sm_count():  # 128 x 256 tiles, a wave at least: no split
        return dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, FLATTEN=True, SPLIT_K=1, EPILOGUE_SPLIT=1,
                    num_warps=8, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, FLATTEN=True, SPLIT_K=split_for(M, N, K, 128, 128),
                EPILOGUE_SPLIT=1, num_warps=8, num_stages=4)


# %% Which configuration: a pick timed on this GPU model, or the rule
# triton.autotune cannot choose split K: a split product is two launches (the parts, then
# split_k_sum_kernel), and the split decides the grid. So the choice is made a level up, by the
# launcher's caller: tune() times candidates() for one product, config() returns the fastest from
# then on, and the picks of a recorded run are kept per GPU model (common/tuned.py), as the
# autotuners' are: a first run on a recorded GPU times nothing.
# The tiles and stages candidates() tries: cuBLAS's favourite on Hopper is 256 x 128 in 4 stages (the
# profiler names its kernels: lesson 6, section 8), each of 2 warpgroups on 128 x 128 of the tile.
TRIES = ((128, 256, 3), (128, 256, 4), (256, 128, 3), (256, 128, 4), (128, 128, 4), (128, 128, 5))
ATOMIC_TRIES = ((128, 256, 3), (256, 128, 3), (128, 128, 4))  # each tile once, with atomics (SPLIT_ATOMIC)


def pick_key(M: int, N: int, K: int, activation: str | None, out_dtype) -> tuple:
    """What a pick depends on: the product's sizes, its epilogue and C's dtype (None: the inputs')."""
    return (M, N, K, activation or "", str(out_dtype) if out_dtype is not None else "")


def fill_split(M: int, N: int, K: int, BLOCK_M: int, BLOCK_N: int) -> int:
    """SPLIT_K whose parts of the last wave's tiles fill the SMs most evenly: the fewest parts s
    that bring the waves of parts per tile, ceil(last * s / SMs) / s, lowest (each part at least 4
    steps of 64). 36 tiles on 132 SMs: 11 parts, 396 units in 3 full waves (split_for's 3 leave 24
    SMs idle). Parts that cheap to add (SPLIT_ATOMIC) can be many."""
    SMs = sm_count()
    tiles = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)
    last_wave = split_tiles(tiles, SMs) if tiles <= 2 * SMs else 0
    if not last_wave:
        return 1
    return min(range(1, max(1, cdiv(K, 64) // 4) + 1), key=lambda s: (Fraction(cdiv(last_wave * s, SMs), s), s))


def candidates(M: int, N: int, K: int, *, activation: str | None = None, out_dtype=None) -> list[dict]:
    """The configurations tune() times for an M x N x K product: the rule's first, then each of
    TRIES with K split as split_for says and C in the fewest pieces (1, 2 or 4) that let it fit this
    GPU's shared memory (shared_bytes, 1 KB left for the barriers). A product with a wave to split
    (a weight's gradient) also tries each tile of ATOMIC_TRIES with its parts added by atomics
    (SPLIT_ATOMIC), split as fill_split says. (Each one is compiled before it is timed, seconds each.)"""
    first = rule(M, N, K, activation=activation, out_dtype=out_dtype)
    if INTERPRET:  # small tiles the interpreter runs: the rule's, and C in halves, K whole
        return [first, dict(first, BLOCK_N=64, SPLIT_K=1, EPILOGUE_SPLIT=2)]
    c_itemsize = 4 if out_dtype == torch.float32 else 2
    found = [first]
    for BM, BN, stages in TRIES:
        for pieces in (1, 2, 4):
            meta = dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=64, GROUP_M=8, FLATTEN=True,
                        SPLIT_K=split_for(M, N, K, BM, BN), EPILOGUE_SPLIT=pieces, num_warps=8, num_stages=stages)
            if shared_bytes(meta, c_itemsize=c_itemsize, activation=activation) + 1024 <= shared_memory():
                found.append(meta)
                if (BM, BN, stages) in ATOMIC_TRIES and fill_split(M, N, K, BM, BN) > 1:
                    found.append(dict(meta, SPLIT_K=fill_split(M, N, K, BM, BN), SPLIT_ATOMIC=True))
                break
    return [meta for i, meta in enumerate(found) if meta not in found[:i]]


def valid_pick(key, meta) -> bool:
    """Is a recorded pick one of candidates() for its key (on this GPU)? A pick the rules or TRIES
    no longer offer is left out (its product takes the rule)."""
    M, N, K, activation, out_dtype = key
    out_dtype = getattr(torch, out_dtype.removeprefix("torch.")) if out_dtype else None
    return meta in candidates(M, N, K, activation=activation or None, out_dtype=out_dtype)


PICKS = picks("matmul_kernel_tma config", valid_pick)  # pick_key -> configuration: recorded, or timed by tune()


def config(M: int, N: int, K: int, *, activation: str | None = None, out_dtype=None) -> dict:
    """The configuration matmul() launches matmul_kernel_tma with for an M x N x K product, no
    autotuner on the way (its choice costs host time at every call, and minutes on a first run):
    the pick timed for the product on this GPU model (tune(), or a recorded run's), else rule()'s;
    rule()'s too where the pick adds by atomics and torch.use_deterministic_algorithms is on."""
    pick = PICKS.get(pick_key(M, N, K, activation, out_dtype))
    if pick is None or (pick.get("SPLIT_ATOMIC") and torch.are_deterministic_algorithms_enabled()):
        return rule(M, N, K, activation=activation, out_dtype=out_dtype)  # (atomics add in any order)
    return dict(pick)


def tune(a, b, activation: str | None = None, grad=None, out_dtype=None, *, timer=None) -> list[tuple[dict, float]]:
    """Time each of candidates() computing activation(a @ b) as launch_tma runs it (grad, out_dtype:
    as there), and make the fastest config()'s pick for this product from now on (recorded with the
    process's picks, common/tuned.py). First each candidate's C is checked against C in float32 by
    the rule's configuration: correct configurations differ only in the order they add in, so each
    may be off it by twice what the rule's own C is (C's rounding) plus float32 sums over K in
    another order (4 sqrt(K) float32 steps: on an H100, 11 atomic parts of a float32 768 x 3072
    over 16384 were 1.1 sqrt(K) off). timer: {name: fn} -> {name: ms}, by default
    bench.side_by_side (kernel time, taken in turns). Returns (configuration, ms) for each
    candidate, the rule's first."""
    from common import bench  # (here: timing imports the profiler, which a model never needs)
    from common.checks import rel_error

    (M, K), N = a.shape, b.shape[1]
    configs = candidates(M, N, K, activation=activation, out_dtype=out_dtype)
    runs = {i: (lambda meta=meta: launch_tma(matmul_kernel_tma, a, b, activation, grad=grad, out_dtype=out_dtype,
                                             **meta)) for i, meta in enumerate(configs)}
    exact = launch_tma(matmul_kernel_tma, a, b, activation, grad=grad, out_dtype=torch.float32,
                       **rule(M, N, K, activation=activation, out_dtype=torch.float32))
    allowed = 2 * rel_error(runs[0](), exact) + 4 * K ** 0.5 * torch.finfo(torch.float32).eps
    for i, run in runs.items():
        error = rel_error(run(), exact)
        if not error <= allowed:
            raise AssertionError(f"candidate {configs[i]} for {M} x {N} x {K} is off C by {error:.2e}, more than "
                                 f"the {allowed:.2e} the rule's configuration allows")
    ms = (timer or bench.side_by_side)(runs)
    PICKS[pick_key(M, N, K, activation, out_dtype)] = configs[min(ms, key=ms.get)]
    return [(meta, ms[i]) for i, meta in enumerate(configs)]


def launch_tma(kernel, a, b, activation=None, programs: int | None = None, grad=None, out_dtype=None,
               **meta) -> torch.Tensor:
    """activation(a @ b) by `kernel`: matmul_kernel_tma with a configuration in `meta` (config()'s),
    or matmul_kernel_tma_tuned, which picks one; on `programs` persistent programs (default: one per
    SM, or one per unit of work where there are fewer). With SPLIT_K > 1 in meta (a given
    configuration: the autotuner's have none), the tiles of the last wave (every tile, where there
    are fewer than programs) split K into SPLIT_K parts; the waves before take their tiles whole.
    whole_tiles is a multiple of the programs, so the last wave's units start on program 0. For
    inputs check_tma accepted. activation "gelu_backward": grad * gelu'(a @ b), grad contiguous, C's shape.
    out_dtype: C's (by default the inputs'; float32 keeps the accumulator's bits). EPILOGUE_SPLIT in
    meta (1, 2 or 4; by default 1): C's tiles, and split K's parts, stored in that many pieces.
    SPLIT_ATOMIC in meta: each split tile's parts added by atomics into one zeroed float32 block
    (then cast by split_k_sum_kernel), or, C float32 with no activation, into C, zeroed: no second
    kernel."""
    (M, K), N = a.shape, b.shape[1]
    atomic = meta.pop("SPLIT_ATOMIC", False)
    into_c = atomic and out_dtype == torch.float32 and not activation  # (the sum itself is C)
    if not K and activation == "gelu_backward":  # (an empty sum, Z = 0, and gelu'(0) = 1/2)
        return (grad * 0.5).to(out_dtype or grad.dtype)
    # K = 0: act(0) = 0; atomics add into zeros
    c = a.new_empty((M, N), dtype=out_dtype) if K and not into_c else a.new_zeros((M, N), dtype=out_dtype)
    (a_t, stride_a), (b_t, stride_b) = layout(a), layout(b)
    a, b = interpretable(a), interpretable(b)  # (bf16 as fp32 under the interpreter)
    grad = interpretable(grad) if grad is not None else None
    # the descriptors' memory, set on every call (common.launch.scratch says why); not while torch.compile
    # traces: its code sets its own at each launch, and refuses a call to it in a traced function
    if not torch.compiler.is_compiling():
        triton.set_allocator(scratch)
    programs = programs or sm_count()
    if not (M and N and K):
        return c
    if meta.get("EPILOGUE_SPLIT", 1) not in (1, 2, 4):
        raise ValueError(f"EPILOGUE_SPLIT must be 1, 2 or 4 (C's tile stored whole, in halves or in quarters), "
                         f"got {meta['EPILOGUE_SPLIT']!r}")
    if "BLOCK_M" in meta:  # a given configuration (the autotuner's each name their own pieces):
        meta = {"EPILOGUE_SPLIT": 1, **meta}  # every argument, defaults too (common.launch says why)
        if meta["BLOCK_N"] // meta["EPILOGUE_SPLIT"] * c.element_size() < 16:
            raise ValueError(f"a piece of C's tile must be at least 16 bytes wide, as any TMA tile: BLOCK_N "
                             f"{meta['BLOCK_N']} in {meta['EPILOGUE_SPLIT']} pieces of {dtype_name(c.dtype)}")
    split, split_count = meta.get("SPLIT_K", 1), 0
    if split > 1:
        if "BLOCK_M" not in meta:
            raise ValueError("SPLIT_K > 1 needs the whole configuration (BLOCK_M, BLOCK_N, GROUP_M: config()'s); "
                             "the autotuned kernel takes no SPLIT_K")
        tiles = cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])
        split_count = split_tiles(tiles, programs)  # the waves before the last take their tiles whole
        if not split_count:  # (no last wave to split: the tiles fill the programs exactly)
            split, meta = 1, {**meta, "SPLIT_K": 1}
    if split == 1:  # every tile whole
        def grid(meta):  # meta: the configuration in use, given or picked by the autotuner
            return (min(programs, cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])),)

        kernel[grid](a, b, c, M, N, K, stride_a, stride_b, N, ACTIVATION=activation or "", g_ptr=grad, A_T=a_t,
                     B_T=b_t, whole_tiles=0, parts_ptr=None, SPLIT_ATOMIC=False, **meta)  # every argument
        return c                                                                  # (common.launch says why)
    BM, BN = meta["BLOCK_M"], meta["BLOCK_N"]
    whole = tiles - split_count
    if into_c:
        parts = None
    elif atomic:  # one float32 block a split tile, zeroed, its parts added in by atomics
        parts = torch.zeros((split_count * BM, BN), dtype=torch.float32, device=c.device)
    else:  # one float32 block a part
        parts = torch.empty((split_count * split * BM, BN), dtype=torch.float32, device=c.device)
    kernel[(min(programs, whole + split_count * split),)](
        a, b, c, M, N, K, stride_a, stride_b, N, ACTIVATION=activation or "", g_ptr=grad, A_T=a_t, B_T=b_t,
        whole_tiles=whole, parts_ptr=parts, SPLIT_ATOMIC=atomic, **meta)
    if into_c:  # (the sum is in C already)
        return c
    rows = min(BM, 16)  # the split tiles' parts added (with atomics, one block a tile), the activation applied
    split_k_sum_kernel[(split_count, BM // rows)](parts, c, M, N, N, whole, SPLIT_K=1 if atomic else split,
                                                 BLOCK_M=BM, BLOCK_N=BN, GROUP_M=meta["GROUP_M"], ROWS=rows,
                                                 ACTIVATION=activation or "", g_ptr=grad)
    return c
