"""Lesson 4's TMA kernel: Hopper's copy engine and a persistent grid, the last few percent of a matmul.

cuBLAS on Hopper (H100, H200) feeds its tensor cores (lesson 4's main.py, section 2) with two things
matmul.py's kernel does not use:
- TMA, the tensor memory accelerator: a copy engine beside each SM that moves a whole tile
  between memory and shared memory on one thread's request. A tensor descriptor holds a matrix's
  base, shape, strides and tile shape; desc.load([row, col]) asks the engine for a tile. The
  hardware computes every address, fills what falls outside the shape with zeros (no masks), and
  lands the tile in shared memory already in the swizzled layout the tensor cores read;
  desc.store clips at the edges. The rules: the last stride is 1, the other strides and the base
  are multiples of 16 bytes. Each program builds its three descriptors as it starts
  (tl.make_tensor_descriptor: 128 bytes each, written to a scratch buffer that Triton asks the
  allocator, common.launch.scratch, for at every launch). The host could build them instead
  (TensorDescriptor) and pass them as arguments; but then Triton's launcher encodes all three on
  the host at every call, time a small product's kernel cannot hide, while building them on the
  device costs kernel time instead: each program pays it once, as it starts.
- A persistent grid: one program per SM (132 on an H200), each looping over output tiles
  tile_id, tile_id + 132, ... . No program launches and retires per tile, and with flatten=True
  the compiler pipelines across the tile boundary: the next tile's first loads are in flight
  while this tile's epilogue computes and stores.
Triton's pipeliner already turns matmul.py's pointer loads into asynchronous copies (cp.async, a
copy from memory to shared memory that each thread starts and does not wait for), so the gains
here are the last few percent. matmul() runs this kernel where it can and where it pays
(matmul.choose_kernel, the route: a Hopper GPU, float16 or bfloat16, rows TMA can address, and
M * N * K >= TMA_FROM). Each program builds its descriptors once: with one program per tile that is
once per tile, with a persistent grid once per SM. A short kernel pays the descriptors' cost on a
larger share of its time, and a small problem leaves SMs idle, so below some size the pointer
kernel is the faster: TMA_FROM is where lesson 7's table ("What each step bought", RESULTS.md)
and lesson 4's timing table found the crossing.

This file is an op file: the kernel, its configurations, its preconditions and its launcher.
matmul.py's route imports it (not the other way round); lesson 7's chapter (lesson07_hopper/main.py)
takes it apart: the instructions it compiles to, and each step timed.
"""
from common.device import INTERPRET, capability, interpretable, shared_memory, sm_count  # first: it picks triton's mode

import torch
import triton
import triton.language as tl

from common.launch import cdiv, scratch
from lesson01_vector_add.elementwise import gelu_tanh  # lesson 1's GELU, fused into the epilogue as in matmul.py

TMA_FROM = 4096**3  # M * N * K from which this kernel was the faster (lesson 7's RESULTS.md, "What each step bought")


# %% The kernel: matmul.py's, with descriptor loads and a loop over tiles
@triton.jit
def matmul_kernel_tma(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_bk, stride_cm,    # the row strides; each row's elements are adjacent
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr,              # pipeline across tiles (a persistent grid)
    ACTIVATION: tl.constexpr = "",
):
    # The descriptors: each matrix's base, shape and strides, and the tile a load or store moves.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # A grid of one program per tile runs this loop once; a smaller grid makes it persistent:
    # program p takes tiles p, p + programs, p + 2 programs, ...
    for tile_id in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0), flatten=FLATTEN):
        # matmul.py's grouped order (grouped_pid; main.py, section 3), from Triton's standard library:
        # tl.swizzle2d takes the row-major (row, column) of tile_id and returns the grouped one.
        pid_m, pid_n = tl.swizzle2d(tile_id // num_pid_n, tile_id % num_pid_n, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, step * BLOCK_K])   # the tile A[rows, ks], zero-padded
            b = b_desc.load([step * BLOCK_K, pid_n * BLOCK_N])   # B[ks, cols]
            acc = tl.dot(a, b, acc)
        if ACTIVATION == "relu":
            acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)
        if ACTIVATION == "gelu":
            acc = gelu_tanh(acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))  # clipped at the edges


# %% Autotuning
# The large tiles of matmul.py's GPU_CONFIGS, persistent and flattened (lesson 7 times each step).
GPU_TMA_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "FLATTEN": True},
                  num_stages=stages, num_warps=8)
    for bm, bn, stages in ((128, 256, 3), (128, 256, 4), (256, 128, 3), (128, 128, 4))
]
TMA_CONFIGS = GPU_TMA_CONFIGS if not INTERPRET else [  # the interpreter: one small configuration
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "FLATTEN": True})]


def shared_bytes(config, itemsize: int = 2) -> int:
    """Shared memory a TMA configuration needs: num_stages tiles of A and B in flight, and C's tile
    on its way out (fp16 / bf16: 2 bytes each). (128, 128, 64), 4 stages: 4 x 32 KB + 32 KB = 160 KB."""
    BM, BN, BK = (config.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return (config.num_stages * (BM * BK + BK * BN) + BM * BN) * itemsize


def tma_gpu(cc: int, shared: int) -> bool:
    """Does a GPU of compute capability `cc` (90 for 9.0) with `shared` bytes of shared memory per
    program run this kernel? TMA came with Hopper (9.0); these tiles also need the shared memory of
    the data-centre parts: an H100 or B200 (227 KB) has it, an RTX 5090 (12.0, 99 KB) does not."""
    return cc >= 90 and shared >= min(shared_bytes(config) for config in GPU_TMA_CONFIGS)


HOPPER = not INTERPRET and torch.cuda.is_available() and tma_gpu(capability(), shared_memory())  # the TMA path here?
matmul_kernel_tma_tuned = triton.autotune(TMA_CONFIGS, key=["M", "N", "K"], cache_results=True)(matmul_kernel_tma)


# %% Which products take this kernel, and its launcher
def tma_ok(a, b, N) -> bool:
    """Can the TMA engine address A, B and an (M, N) C? Rows contiguous, rows and base 16-byte aligned."""
    rows_ok = all(t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0
                  for t in (a, b))
    return rows_ok and (N * a.element_size()) % 16 == 0


def check_tma(a, b, *, gpu_has_tma: bool, compiling: bool) -> None:
    """Raise, with the reason, where this kernel cannot compute a @ b (matmul.choose_kernel asks,
    for tma=True, with real tensors). gpu_has_tma: does this GPU run it (HOPPER)?"""
    if compiling:
        raise ValueError("tma=True: the TMA kernel needs the inputs' memory to check its alignment, which "
                         "torch.compile's tensors do not have; under torch.compile leave tma=None")
    if a.dtype == torch.float32:
        raise TypeError("the TMA kernel takes float16 or bfloat16 inputs, got float32")
    N = b.shape[1]
    if not tma_ok(a, b, N):
        raise ValueError(f"the TMA kernel needs rows that are contiguous and 16-byte aligned: a.stride() = "
                         f"{a.stride()}, b.stride() = {b.stride()}, N = {N} (a multiple of 8 for C's rows)")
    if not INTERPRET and not gpu_has_tma:  # (the interpreter imitates TMA: the tests run the kernel on a CPU)
        raise ValueError(f"the TMA kernel needs a GPU of compute capability 9.0 or newer with 160 KB of shared memory "
                         f"per program (H100, H200, B200); this one: {capability() / 10:.1f}, "
                         f"{shared_memory() >> 10} KB")


def launch_tma(kernel, a, b, activation=None, programs: int | None = None) -> torch.Tensor:
    """activation(a @ b) by `kernel` (matmul_kernel_tma_tuned), on `programs` persistent programs
    (default: one per SM, or one per tile where there are fewer tiles). For inputs check_tma accepted."""
    (M, K), N = a.shape, b.shape[1]
    c = a.new_empty((M, N)) if K else a.new_zeros((M, N))  # K = 0: an empty sum, and act(0) = 0
    a, b = interpretable(a), interpretable(b)  # (bf16 as fp32 under the interpreter)
    triton.set_allocator(scratch)  # the descriptors' memory (common.launch.scratch says why on every call)

    def grid(meta):  # meta: the configuration the autotuner picked
        tiles = cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])
        return (min(programs or sm_count(), tiles),)

    if M and N and K:
        kernel[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), ACTIVATION=activation or "")
    return c
