"""Lesson 4, part 2: Hopper's TMA engine and a persistent grid, the last few percent of a matmul.

cuBLAS on Hopper (H100, H200) feeds its tensor cores (main.py, section 2) with two things main.py's
kernel does not use:
- TMA, the tensor memory accelerator: a copy engine beside each SM that moves a whole tile
  between memory and shared memory on one thread's request. A tensor descriptor holds a matrix's
  base, shape, strides and tile shape; desc.load([row, col]) asks the engine for a tile. The
  hardware computes every address, fills what falls outside the shape with zeros (no masks), and
  lands the tile in shared memory already in the swizzled layout the tensor cores read;
  desc.store clips at the edges. The rules: the last stride is 1, the other strides and the base
  are multiples of 16 bytes. Each program builds its three descriptors as it starts
  (tl.make_tensor_descriptor: 128 bytes each, written to a scratch buffer that Triton asks the
  allocator below for at every launch). The host could build them instead (TensorDescriptor) and
  pass them as arguments; but then Triton's launcher encodes all three on the host at every call,
  time a small product's kernel cannot hide (main.py's "Host cost per call"), while building them
  on the device costs kernel time instead: each program pays it once, as it starts.
- A persistent grid: one program per SM (132 on an H200), each looping over output tiles
  tile_id, tile_id + 132, ... . No program launches and retires per tile, and with flatten=True
  the compiler pipelines across the tile boundary: the next tile's first loads are in flight
  while this tile's epilogue computes and stores.
Triton's pipeliner already turns main.py's pointer loads into asynchronous copies (cp.async, a
copy from memory to shared memory that each thread starts and does not wait for: the PTX counts
of copy_instructions() show it), so the gains here are the last few percent. bench_steps() times
each step side by side (RESULTS.md, "What each step bought"); matmul() runs this kernel where it
can and where that table says it pays: a Hopper GPU, float16 or bfloat16, rows TMA can address,
and M * N * K >= 4096^3. Each program builds its descriptors once: with one program per tile that
is once per tile, with a persistent grid once per SM (132 times). From 4096^3 up this kernel won at
every shape in RESULTS.md; below, the pointer kernel did (the descriptors' cost is a larger share
of a short kernel, and small problems leave SMs idle).

main.py's sections 16-18 run this file's functions; main.py hands them its pointer kernel and
launcher as arguments (this file never imports main.py).
"""
from common.device import DEVICE, INTERPRET, capability, interpretable, shared_memory, sm_count

import torch
import triton
import triton.language as tl

from common import bench, ptx
from common.checks import dtype_name
from common.launch import cdiv
from common.table import Table, print_table
from lesson01_vector_add.main import gelu_tanh  # lesson 1's GELU, fused into the epilogue as in main.py

TMA_FROM = 4096**3  # M * N * K from which this kernel won on the H200 (RESULTS.md, "What each step bought")


# %% The kernel: main.py's, with descriptor loads and a loop over tiles
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
        # main.py's grouped order (its section 3, grouped_pid), from Triton's standard library:
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


# %% The scratch memory, and autotuning
def scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory for the descriptors the programs build, which Triton asks for at each launch
    (PyTorch's allocator aligns every block to at least 256 bytes, more than the `alignment` Triton
    asks for). launch_tma() hands it to Triton on every call: Triton keeps it per thread (a context
    variable), and autograd runs the backward's matmuls on a thread of its own."""
    return torch.empty(size, dtype=torch.int8, device=DEVICE)


# The large tiles of main.py's CONFIGS, persistent and flattened (bench_steps: each step paid).
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


def pays(a, b) -> bool:
    """Does main.matmul() take this kernel for a @ b, when it is not told (tma=None)? Where it can
    run, from TMA_FROM up. matmul() asks before its operator, with real tensors (the alignment is a
    fact of their memory), and not while torch.compile traces (whose tensors have no memory)."""
    M, K = a.shape
    N = b.shape[1]
    return HOPPER and a.dtype != torch.float32 and M * N * K >= TMA_FROM and tma_ok(a, b, N)


def check_tma(a, b) -> None:
    """Raise, with the reason, where this kernel cannot compute a @ b (main.matmul(tma=True) asks,
    with real tensors, before its operator)."""
    if torch.compiler.is_compiling():
        raise ValueError("tma=True: the TMA kernel needs the inputs' memory to check its alignment, which "
                         "torch.compile's tensors do not have; under torch.compile leave tma=None")
    if a.dtype == torch.float32:
        raise TypeError("the TMA kernel takes float16 or bfloat16 inputs, got float32")
    N = b.shape[1]
    if not tma_ok(a, b, N):
        raise ValueError(f"the TMA kernel needs rows that are contiguous and 16-byte aligned: a.stride() = "
                         f"{a.stride()}, b.stride() = {b.stride()}, N = {N} (a multiple of 8 for C's rows)")
    if not INTERPRET and not HOPPER:  # (the interpreter imitates TMA: the tests run the kernel on a CPU)
        raise ValueError(f"the TMA kernel needs a GPU of compute capability 9.0 or newer with 160 KB of shared memory "
                         f"per program (H100, H200, B200); this one: {capability() / 10:.1f}, "
                         f"{shared_memory() >> 10} KB")


def launch_tma(kernel, a, b, activation=None, programs: int | None = None) -> torch.Tensor:
    """activation(a @ b) by `kernel` (matmul_kernel_tma_tuned, or the operator's traceable form of
    it), on `programs` persistent programs (default: one per SM, or one per tile where there are
    fewer tiles). For inputs check_tma accepted."""
    (M, K), N = a.shape, b.shape[1]
    c = a.new_empty((M, N)) if K else a.new_zeros((M, N))  # K = 0: an empty sum, and act(0) = 0
    a, b = interpretable(a), interpretable(b)  # (bf16 as fp32 under the interpreter)
    triton.set_allocator(scratch)  # the descriptors' memory (scratch() says why on every call)

    def grid(meta):  # meta: the configuration the autotuner picked
        tiles = cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])
        return (min(programs or sm_count(), tiles),)

    if M and N and K:
        kernel[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), ACTIVATION=activation or "")
    return c


# %% Under the hood: which instructions move the tiles (runs everywhere: compiled for sm_90 in a child process)
def copy_instructions(pointer_kernel, BLOCK=(128, 128, 64)) -> dict:
    """Compile both kernels for sm_90 (no GPU needed: common/ptx.py) and count, in the PTX, the
    instructions that move tiles (cp.async: per-thread asynchronous copies; cp.async.bulk.tensor:
    TMA) and Hopper's tensor-core instruction (wgmma.mma_async: a warpgroup, 4 warps, multiplies
    tiles read straight from shared memory, asynchronously). pointer_kernel: main.py's matmul_kernel."""
    BM, BN, BK = BLOCK
    print(f"The PTX of both kernels for an H100/H200 (sm_90), {BM} x {BN} x {BK} tiles:")
    tile = dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, ACTIVATION="")
    sizes = {"M": "i32", "N": "i32", "K": "i32"}
    jobs = {
        "matmul_kernel (main.py, pointer loads)": dict(
            module="lesson04_matmul.main", kernel=pointer_kernel,
            signature={"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", **sizes, "stride_am": "i32",
                       "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr", "stride_cm": "i32",
                       "stride_cn": "constexpr", **dict.fromkeys(tile, "constexpr"),
                       "INPUT_PRECISION": "constexpr", "TRACE": "constexpr"},
            constexprs=dict(stride_ak=1, stride_bn=1, stride_cn=1, **tile, INPUT_PRECISION="tf32", TRACE=False),
            divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")),
        "matmul_kernel_tma (descriptors)": dict(
            module="lesson04_matmul.hopper", kernel="matmul_kernel_tma",
            signature={"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", **sizes, "stride_am": "i32",
                       "stride_bk": "i32", "stride_cm": "i32", **dict.fromkeys(tile, "constexpr"), "FLATTEN": "constexpr"},
            constexprs=dict(**tile, FLATTEN=True),
            divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")),
    }
    counts = {}
    for name, asm in zip(jobs, ptx.compile_kernels([dict(job, num_warps=8) for job in jobs.values()])):
        code = asm["ptx"]
        counts[name] = {"cp.async": code.count("cp.async.cg") + code.count("cp.async.ca"),
                        "cp.async.bulk.tensor": code.count("cp.async.bulk.tensor"),
                        "wgmma.mma_async": code.count("wgmma.mma_async")}
    print_table([(name, *c.values()) for name, c in counts.items()],
                ["kernel", "cp.async", "cp.async.bulk.tensor (TMA)", "wgmma.mma_async"])
    return counts


# %% What each step bought (a GPU section)
def bench_steps(launch, matmul_kernel, sizes=(4096, 8192), dtype=torch.float16) -> Table | None:
    """main.py's kernel (matmul_kernel, through main.py's launch), then TMA, a persistent grid and
    flatten, one tile shape throughout, side by side with cuBLAS."""
    if not HOPPER:
        print("This GPU cannot run the TMA kernel (tma_gpu: compute capability >= 9.0, and 160 KB of shared\n"
              "memory per program): nothing to time.")
        return None
    tile = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=3, num_warps=8)
    rows = []
    for n in sizes:
        a = torch.randn(n, n, device=DEVICE, dtype=dtype)
        b = torch.randn(n, n, device=DEVICE, dtype=dtype)
        c = torch.empty(n, n, device=DEVICE, dtype=dtype)
        tiles = cdiv(n, tile["BLOCK_M"]) * cdiv(n, tile["BLOCK_N"])
        triton.set_allocator(scratch)

        def tma(programs, flatten):
            matmul_kernel_tma[(programs,)](a, b, c, n, n, n, n, n, n, **tile, FLATTEN=flatten)

        cases = {"cuBLAS (torch.matmul)": lambda: a @ b,
                 "tl.dot tiles, pointer loads (main.py)": lambda: launch(matmul_kernel, a, b, **tile),
                 "+ TMA loads and stores, one program per tile": lambda: tma(tiles, False),
                 "+ persistent: one program per SM": lambda: tma(min(sm_count(), tiles), False),
                 "+ flatten: pipelined across tiles": lambda: tma(min(sm_count(), tiles), True)}
        times = bench.side_by_side(cases)
        for name, ms in times.items():
            rows.append((f"{n}^3", name, ms * 1e3, bench.tflops(2 * n**3, ms),
                         100 * times["cuBLAS (torch.matmul)"] / ms))
    return print_table(rows, ["size", "kernel", "kernel µs", "TFLOP/s", "% of cuBLAS"],
                       title=f"What each step bought, {dtype_name(dtype)}",
                       note="One tile: 128 x 256 x 64, 3 stages, 8 warps, grouped order. 'kernel µs': the kernels' own "
                            "time (profiler timestamps, L2 flushed between calls). " + bench.SIDE_BY_SIDE_NOTE)


# %% Addressing: offsets against coordinates (a GPU section)
def bench_offsets(launch, tuned_kernel, n: int = 4096) -> Table:
    """main.py's kernel computes addresses from offsets: int32, or int64 past 2^31 elements
    (common.checks.index_type); the TMA kernel hands the copy engine coordinates and needs neither.
    What int64 offsets would cost the pointer kernel (tuned_kernel, through main.py's launch, which
    takes the index type as an argument), timed side by side with int32."""
    ab = {t: torch.randn(2, n, n, device=DEVICE, dtype=t) for t in (torch.float16, torch.float32)}
    return bench.offsets_cost({f"pointer kernel (autotuned), {n}^3 {dtype_name(t)}":
                               (lambda index_type, a=a, b=b: launch(tuned_kernel, a, b, index_type=index_type))
                               for t, (a, b) in ab.items()})
