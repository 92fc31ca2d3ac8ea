"""Lesson 1: vector add and a fused GELU. Programs, the grid, offsets, masks; element-wise fusion.

A Triton kernel is written for ONE program (an instance of the kernel); the launch grid says how
many programs run. Each program asks for its number (pid), works out which elements are its own
(offsets), masks off the ones past the end (mask), then loads, computes and stores. This lesson
builds that with `add(x, y)`, traces it program by program, then uses the same pattern to fuse a
whole GELU formula into one pass over memory; then the machine the timings run on, the PTX the
compiler makes of the kernel, and the timings themselves. A first reading can stop after section
5 (training); sections 11-14, in timing.py, are about measuring a GPU honestly.

Run:   python lesson01_vector_add/main.py            (every section)
       python lesson01_vector_add/main.py --help     (sections, sizes, dtype)
Without a CUDA GPU the kernels run under Triton's interpreter on the CPU: the same kernels, exact
results, the traces; the sections that need a GPU show what a GPU printed (RESULTS.md, which names it).
"""
# %% Set-up: common.device chooses GPU or interpreter before triton is imported
import math

from common.device import DEVICE

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.library import wrap_triton

from common import bench, profile, ptx, roofline
from common.chapter import Chapter, add_compile_option, positive_int
from common.checks import GRAD_NOTE, dtype_name, grad_errors, grad_ok
from common.exercise import explain
from common.launch import cdiv
from common.table import print_table
from common.trace import show
from lesson01_vector_add import cuda_cpp, timing  # the lesson's other files: sections 9 and 11-14
from lesson01_vector_add.elementwise import DTYPES, add, add_kernel, checked, gelu, launch  # the ops

SECTIONS = {  # the chapter, in reading order: `--sections` picks some, `--skip` leaves some out
    "trace": "2. The trace: add_kernel, program by program",
    "check": "4. Correctness: against PyTorch on random and awkward sizes",
    "grad": "5. Training: gradients through autograd functions",
    "fusion": "6. Fusion, seen by the profiler: how many kernels each GELU launches",
    "machine": "7. The machine: what the timings are measured against",
    "ptx": "8. Under the hood: add_kernel's PTX, compiled for sm_90 without a GPU",
    "cuda": "9. The same GELU in CUDA C++ (cuda_cpp.py)",
    "bench": "10. Timing: torch against Triton, GB/s and % of the copy bandwidth",
    "pitfalls": "11. How to time a GPU call, and how not to (timing.py)",
    "host": "12. What a call costs the host (timing.py)",
    "graphs": "13. CUDA graphs: one launch for a whole sequence (timing.py)",
    "blocks": "14. BLOCK_SIZE against num_warps (timing.py)",
    "debug": "15. When a kernel is wrong: printing, asserting, a debugger, and the errors everyone hits",
}
SIZES = {"quick": [2**12, 2**20, 2**24, 2**26], "full": [2**12, 2**16, 2**20, 2**24, 2**26, 2**28]}  # section 10's N

chapter = Chapter("lesson01_vector_add", __doc__, SECTIONS, running=__name__ == "__main__")
chapter.parser.add_argument("--sizes", type=positive_int, nargs="+", metavar="N",
                            help=f"section 10's sizes (default {SIZES['quick']}, {SIZES['full']} with --full)")
chapter.parser.add_argument("--dtype", default="float32", choices=[dtype_name(d) for d in DTYPES],
                            help="section 10's dtype (default float32)")
chapter.parser.add_argument("--ir", choices=["ttir", "ttgir", "ptx"], help="section 8: also print this IR in full")
add_compile_option(chapter.parser)
args = chapter.start()

# %% [markdown]
# ## 1. The add kernel
# Six steps, the same in every kernel of this course:
# who am I (pid) -> which elements (offsets) -> which are real (mask) -> load -> compute -> store.
# The kernel, add_kernel, is in elementwise.py, the file a model imports (this chapter imports it
# from there): open it beside this chapter. Each step is a numbered comment there.
#
# The launcher, launch() beside it, allocates the output, chooses the grid and launches:
# `kernel[grid](...)` runs len(grid) programs. Two numbers say how big a program is. BLOCK_SIZE is
# data: the elements it owns. num_warps is threads: a warp is 32 threads that a GPU runs in lockstep,
# so num_warps = 4 gives each program 128 threads, and the compiler spreads BLOCK_SIZE over them
# (1024 / 128 = 8 elements each; section 8 shows what it makes of that, section 14 times the choice).
# One launcher serves every element-wise kernel of this lesson. add(x, y), the public op, checks its
# inputs first (tensors of one shape, dtype and device; the two numbers powers of two), then hands
# them to the launcher through Add, an autograd function (section 5).


# %% [markdown]
# ## 2. The trace: add_kernel, program by program
# Under Triton's interpreter the programs run one after another, in order, so what each one holds
# can be printed from inside the kernel (the `if TRACE:` lines; a compiled kernel drops them).


# %%
def trace() -> None:
    """The worked examples: 1000 elements in blocks of 256, then [1, 2, 3, 4] + [5, 6, 7, 8]."""
    x = torch.arange(1000, dtype=torch.float32, device=DEVICE)
    N, BLOCK_SIZE = x.numel(), 256
    grid = (cdiv(N, BLOCK_SIZE),)
    print(f"N = {N}, BLOCK_SIZE = {BLOCK_SIZE} -> grid = (cdiv({N}, {BLOCK_SIZE}),) = {grid}")
    out = torch.empty_like(x)
    add_kernel[grid](x, x, out, N, BLOCK_SIZE=BLOCK_SIZE, TRACE=True)
    print("Program 3 covers 768..1023: the first 232 lanes are real (768..999), the last 24 are "
          "masked off,\nso nothing is read or written past x[999].")

    print("\nThe tiny example: A = [1, 2, 3, 4], B = [5, 6, 7, 8], one program of 4 lanes")
    a = torch.tensor([1.0, 2, 3, 4], device=DEVICE)
    b = torch.tensor([5.0, 6, 7, 8], device=DEVICE)
    c = torch.empty_like(a)
    add_kernel[(1,)](a, b, c, 4, BLOCK_SIZE=4, TRACE=True)
    show("C", c, indent=0)


# %%
chapter.run("trace", trace, trace=True)

# %% [markdown]
# ## 3. Element-wise fusion: GELU
# GELU (tanh form): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Written in PyTorch it is
# eight operators, and eager PyTorch runs each as its own kernel: each reads its inputs from
# memory and writes its result back. The arithmetic is trivial; the memory traffic is not.


# %%
def gelu_naive(x):
    """The formula as written. Per operator, reads and writes of N elements:"""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    # x**3: r N, w N | 0.044715*(.): r N, w N | x + (.): r 2N, w N | sqrt(2/pi)*(.): r N, w N
    # tanh: r N, w N | 1.0 + (.): r N, w N    | 0.5*x: r N, w N   | (.)*(.): r 2N, w N
    # total: 8 kernels, 10N reads + 8N writes = 18N, against N + N for one fused kernel.


NAIVE_TRAFFIC = 18  # elements moved per input element by gelu_naive, counted above
GELU_FLOPS = 9      # floating-point operations per element in the formula (tanh counted as one)


def gelu_torch(x):
    """PyTorch's own fused CUDA kernel (one read, one write)."""
    return F.gelu(x, approximate="tanh")


# torch.compile traces gelu_naive, sees eight element-wise ops and generates ONE Triton kernel for
# them: bench.compiled(gelu_naive), timed in section 10.
#
# Ours is one kernel written by hand: elementwise.py's gelu_kernel, add_kernel's six steps with the
# whole formula as step 5, computed by gelu_tanh, a @triton.jit function that the kernel inlines
# (and lesson 4 inlines into its matmul). gelu(x) is its op, checked and launched as add(x, y) is.


# %% [markdown]
# ## 4. Correctness: against PyTorch on random and awkward sizes
# Sizes that are not multiples of the block (1, 7, 1025) exercise the mask; a strided view
# exercises the launcher's copy. add rounds the exact sum once, as torch does, so it must match
# bit for bit; gelu in float16/bfloat16 may differ by the rounding of its output.


# %%
def check(sizes=(1, 7, 1000, 1025, 65536 + 3)):
    """Max error of add and gelu against PyTorch."""
    step = {torch.float32: 1e-6, torch.float16: 2**-10, torch.bfloat16: 2**-7}  # one rounding step, relative
    rows = []
    cases = [(dtype, n, torch.randn(n, device=DEVICE, dtype=dtype)) for dtype in DTYPES for n in sizes]
    cases.append(("float32, x[::2]", 2048, torch.randn(4096, device=DEVICE)[::2]))  # a strided view
    for dtype, n, x in cases:
        y = torch.randn_like(x)
        add_err = (add(x, y).float() - (x + y).float()).abs().max().item()
        gelu_err = (gelu(x).float() - gelu_torch(x.float())).abs().max().item()
        ok = add_err == 0 and gelu_err <= step[x.dtype] * max(1.0, x.abs().max().item())
        rows.append((dtype if isinstance(dtype, str) else dtype_name(dtype), n, add_err, gelu_err, ok))
    return print_table(rows, ["dtype", "N", "add: max |err| vs torch", "gelu: max |err| vs fp32 F.gelu", "ok"],
                       title="Check: add and gelu against PyTorch", floatfmt=".2e",
                       note="gelu in float16/bfloat16: the rounding of the output to 11 / 8 significant bits.")


# %%
chapter.run("check", check)

# %% [markdown]
# ## 5. Training: gradients through autograd functions
# Autograd records each operation on tensors that require grad, then walks the record backwards
# with the chain rule: given dL/d(output), each operation returns dL/d(each input). A bare Triton
# launch is invisible to it: its output has no grad_fn and the gradient stops there. Two things
# make a kernel a citizen of PyTorch:
# - a backward. For out = x + y both gradients are dL/dout itself: no kernel. For y = gelu(x),
#   dL/dx = dL/dy * gelu'(x): one more element-wise kernel, fused like the forward (reads dy and
#   x, writes dx): elementwise.py's gelu_backward_kernel, gelu' (gelu_tanh_grad) worked out there.
# - an autograd function: a subclass of torch.autograd.Function whose forward launches the forward
#   kernel and whose backward takes dL/d(output) and returns one gradient per input of forward (None
#   for an int). ctx carries what the backward needs: Gelu's forward keeps x with
#   ctx.save_for_backward(x), and autograd checks that nobody changed x in place in between.
# elementwise.py's add() checks its inputs and calls Add.apply(x, y, ...), gelu() Gelu.apply(x, ...):
# always, with or without gradients. Where nothing requires grad (inference, torch.no_grad()),
# apply runs the forward and records nothing. So a call passes three of the course's functions on
# its way to the kernel, the op, the autograd function's forward and the launcher, as Liger-Kernel's
# ops and Triton's attention tutorial do (Function.apply -> forward -> kernel[grid]). torch.compile
# traces the same path: Dynamo follows the Python of the op, the forward and the launcher into
# `kernel[grid](...)`, and records the launch of the Triton kernel in its graph, the backward's too
# (PyTorch's recipe "Using User-Defined Triton Kernels with torch.compile").
#
# An operator PyTorch knows is something more. torch.library.triton_op registers a function under a
# name ("lessons::add" below) with PyTorch's dispatcher, the layer every torch operation passes, and
# register_autograd gives it its backward. Then torch.export can save a graph that calls it,
# tensor-level tools (FlopCounterMode, a TorchDispatchMode) see it as one operation, and a CPU
# implementation can be registered beside the GPU one. Inside the operator a launch is written
# `torch.library.wrap_triton(kernel)[grid](...)`: while torch.compile traces the operator it records
# the launch instead of running it (it is the kernel itself otherwise), and it wants every argument
# of the kernel, defaults included (TRACE). A call of a Python-registered operator passes the
# dispatcher's registered kernels before ours, which adds host time to every call: section 12 times
# add() through Add beside the same add registered as torch.ops.lessons.add. The lessons' ops are
# autograd functions; register an operator where the dispatcher's services are the point.


# %%
@torch.library.triton_op("lessons::add", mutates_args=())  # mutates_args: it writes no input
def add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """add(x, y) as an operator PyTorch's dispatcher knows: torch.ops.lessons.add(x, y)."""
    (x, y), BLOCK_SIZE, num_warps = checked({"x": x, "y": y}, 1024, 4)
    return launch(wrap_triton(add_kernel), x, y, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, TRACE=False)


add_op.register_autograd(lambda ctx, dout: (dout, dout))  # its backward: both gradients are dL/dout


def grad_check(sizes=(1, 1000, 65536 + 3)):
    """Gradients through add and gelu against torch's autograd of the same formulas (common.checks.grad_errors)."""
    rows = []
    for dtype in DTYPES:
        for n in sizes:
            x, y = torch.randn(2, n, device=DEVICE, dtype=dtype) * 3
            errs = grad_errors(add, torch.add, [x, y]) + grad_errors(gelu, gelu_naive, [x])
            rows.append((dtype_name(dtype), n, *(f"{a:.1e} ({b:.1e})" for a, b in errs),
                         all(grad_ok(a, b) for a, b in errs)))
    return print_table(rows, ["dtype", "N", "add: grad of x", "add: grad of y", "gelu: grad of x", "ok"],
                       title="Check: gradients against float64 autograd",
                       note=GRAD_NOTE + " Here the formula gelu_naive is torch's. A relative error grows where the "
                            "gradient is near 0 (GELU's slope crosses 0 near x = -0.75): an input that falls near "
                            "there give torch's float16 a large one, and the bar with it.")


# %%
chapter.run("grad", grad_check)

# %% [markdown]
# ### Your turn: the exercises
# lesson01_vector_add/exercises/ holds six exercises, each checked when you run its file
# (`python lesson01_vector_add/exercises/axpy.py`; `--hint` for a hint): axpy and dropout (write
# them now), fix_the_grid (two planted bugs), cuda_unit (a prediction, after section 9), host_clock
# (a prediction, after section 12) and swiglu (a stretch: to a read-once budget). When one fails,
# its message names the program and the elements; section 15 shows the tools for looking inside a
# kernel yourself. `python -m common.exercise` shows your progress over every lesson.

# %% [markdown]
# ## 6. Fusion, seen by the profiler: how many kernels each GELU launches
# torch.profiler lists the CUDA kernels a call launches (common/profile.py). The naive formula's
# eight operators launch eight kernels; F.gelu, torch.compile's generated kernel and ours, one.


# %%
def fusion(n: int = 1 << 20, use_compile: bool = True) -> list:
    x = torch.randn(n, device=DEVICE)
    impls = {"naive formula": gelu_naive, "F.gelu": gelu_torch, "Triton gelu": gelu}
    if use_compile:
        impls["torch.compile(naive)"] = bench.compiled(gelu_naive)
    tables = []
    for name, fn in impls.items():
        moved = NAIVE_TRAFFIC if name == "naive formula" else 2
        rows = profile.kernels_launched(lambda: fn(x))
        print()
        tables.append(print_table([(profile.short(k), c, us) for k, c, us in rows], ["CUDA kernel", "calls", "total µs"],
                                  title=f"Kernels launched: {name}",
                                  note=f"About {moved}N elements of memory traffic ({moved * n * 4 / 1e6:.1f} MB at N = {n}, "
                                       "float32)."))
    return tables


# %%
chapter.run("fusion", lambda: fusion(use_compile=args.compile), gpu=True)

# %% [markdown]
# ## 7. The machine: what the timings are measured against
# A GPU is a few dozen to a few hundred SMs (streaming multiprocessors) around one memory. Each SM
# has its own registers, shared memory (a small scratchpad its programs share, a few hundred KB at
# most, much faster than memory) and cores, and runs a few programs at a time, each as its warps of 32
# threads; all SMs share the L2 cache and the HBM (the GPU's main memory) behind it. Two numbers
# bound every kernel: how fast memory delivers bytes (measured: a device-to-device copy) and how
# fast the tensor cores, the units that multiply small matrices in one instruction, multiply
# (measured: cuBLAS on a bf16 8192^3 matmul). Lesson 3 counts programs against SMs; the roofline
# (README) puts every lesson's kernels under the two ceilings.


# %%
DOCUMENTED = [  # the vendors' figures (registers: 65,536 per SM on all three, CUDA guide)
    ("A100 (documented)", 108, "40 MB", "192 KB (L1 + shared; up to 164 KB shared)", "65,536"),
    ("H100 (documented)", 132, "50 MB", "228 KB", "65,536"),
    ("B200 (documented)", 148, "-", "-", "65,536"),
]


def machine():
    p = torch.cuda.get_device_properties(0)
    shared, regs = (getattr(p, k, None) for k in ("shared_memory_per_multiprocessor", "regs_per_multiprocessor"))
    rows = [row + ("-", "-") for row in DOCUMENTED]
    rows.append((f"{p.name} (this GPU)", p.multi_processor_count, f"{p.L2_cache_size >> 20} MB",
                 f"{shared >> 10} KB" if shared else "-", f"{regs:,}" if regs else "-",
                 f"{bench.copy_bandwidth():.0f}", f"{bench.matmul_rate():.0f}"))
    return print_table(rows, ["GPU", "SMs", "L2 cache", "shared memory per SM", "registers per SM",
                              "copy GB/s (measured)", "bf16 matmul TFLOP/s (measured)"], title="The machine")


# %%
chapter.run("machine", machine, gpu=True)

# %% [markdown]
# ## 8. Under the hood: add_kernel's PTX, compiled for sm_90 without a GPU
# Triton compiles a kernel in stages down to PTX, NVIDIA's assembly for ONE thread (common/ptx.py
# runs the compiler for a named GPU on any machine). Counting its global loads and stores shows
# what the compiler did with a program's 1024 elements over 128 threads.


# %%
def look_at_ptx(ir: str | None = None) -> dict:
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "N": "i32",
           "BLOCK_SIZE": "constexpr", "TRACE": "constexpr"}
    consts = {"BLOCK_SIZE": 1024, "TRACE": False}
    pointers = ("x_ptr", "y_ptr", "output_ptr")  # torch allocations are 16-byte aligned
    cases = {"N a multiple of 16": pointers + ("N",), "N not a multiple of 16": pointers}
    compiled_asm = ptx.compile_kernels([dict(module="lesson01_vector_add.elementwise", kernel=add_kernel, signature=sig,
                                             constexprs=consts, divisible_by_16=div) for div in cases.values()])
    rows, found = [], {}
    for label, asm in zip(cases, compiled_asm):
        ops = ptx.memory_ops(asm["ptx"])
        found[label] = ops
        for op, count in sorted(ops.items()):
            rows.append((label, op, count, ptx.access_bits(op)))
        if ir:
            print(f"\n----- {ir} ({label}) -----\n{asm[ir]}")
    print_table(rows, ["case", "instruction", "per thread", "bits each"])
    print("BLOCK_SIZE = 1024 elements over num_warps = 4 -> 128 threads: 8 elements per thread "
          "(thread coarsening,\ndone by the compiler). When N is a multiple of 16, a run of 4 "
          "neighbours is either all in or all out\nof the mask, so each thread loads its 8 floats of "
          "each input as two 128-bit vector loads (4 for x and y). When it is not, every\nelement needs its own predicate: "
          "8 scalar 32-bit loads per input. Same kernel, same answer, 4x the\nload instructions. "
          "(Triton checks N % 16 == 0 at each launch and compiles both versions as needed.)")
    return found


# %%
chapter.run("ptx", lambda: look_at_ptx(args.ir))

# %% [markdown]
# ## 9. The same GELU in CUDA C++ (cuda_cpp.py)
# cuda_cpp.py holds the same GELU written by hand in CUDA C++, one thread per element, built with
# torch.utils.cpp_extension.load_inline. Beside gelu_kernel it shows what Triton decides for us.
# Section 10 builds it and times it with --full: nvcc takes half a minute over it the first time.


# %%
chapter.run("cuda", cuda_cpp.section)

# %% [markdown]
# ## 10. Timing: torch against Triton, GB/s and % of the copy bandwidth
# Each implementation's kernel time (common/bench.py says how it is measured), turned into GB/s
# with the bytes a fused kernel must move (add: 3 streams of N elements; gelu: 2), for every
# implementation alike, and into % of the copy bandwidth of section 7.


# %%
def bench_all(sizes, dtype=torch.float32, use_compile: bool = True, gelu_cuda=None):
    """Every implementation of add and gelu at each size; gelu_cuda: cuda_cpp.py's CUDA C++ GELU, where built."""
    elem = torch.tensor([], dtype=dtype).element_size()
    rows = []
    for n in sizes:
        x = torch.randn(n, device=DEVICE, dtype=dtype)
        y = torch.randn(n, device=DEVICE, dtype=dtype)
        cases = [("add", "torch x + y", lambda: x + y, 3), ("add", "Triton add", lambda: add(x, y), 3),
                 ("gelu", "naive formula", lambda: gelu_naive(x), 2),
                 ("gelu", "F.gelu", lambda: gelu_torch(x), 2)]
        if use_compile:
            cases.append(("gelu", "torch.compile", lambda: bench.compiled(gelu_naive)(x), 2))
        if gelu_cuda is not None and dtype == torch.float32:
            cases.append(("gelu", "CUDA C++ (load_inline)", lambda: gelu_cuda(x), 2))
        cases.append(("gelu", "Triton gelu", lambda: gelu(x), 2))
        ms = {name: bench.kernel_time_ms(fn) for _, name, fn, _ in cases}
        baseline = {"add": ms["torch x + y"], "gelu": ms["F.gelu"]}  # PyTorch's own kernel for each op
        for op, name, _, streams in cases:
            rows.append([op, name, f"2^{int(math.log2(n))}" if n & (n - 1) == 0 else n,
                         *bench.timing_cells(ms[name], streams * n * elem), baseline[op] / ms[name]])
    return print_table(rows, ["op", "implementation", "N", *bench.TIMING_HEADERS, "x PyTorch"],
                       title=f"Timing, {dtype_name(dtype)}", note=bench.TIMING_NOTE,
                       plot=dict(x="N", y="GB/s", series=["op", "implementation"], ceiling=bench.copy_bandwidth(),
                                 ceiling_label="device copy (measured)"))


def timing_section() -> list:
    if args.full:
        gelu_cuda = cuda_cpp.built_and_checked()
    else:  # (nvcc builds it for half a minute the first time: more than the rest of a default run)
        gelu_cuda = None
        print("(The CUDA C++ GELU of section 9 is built, checked and timed with --full; RESULTS.md has its row.)")
    table = bench_all(args.sizes or chapter.sizes(SIZES), getattr(torch, args.dtype), args.compile, gelu_cuda)
    n = 1 << 26  # the roofline (README): FLOPs per byte at the largest size
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    print()
    points = roofline.points({("Triton add", "2^26 float32"): (lambda: add(x, y), n, 12 * n),
                              ("torch x + y", "2^26 float32"): (lambda: x + y, n, 12 * n),
                              ("Triton gelu", "2^26 float32"): (lambda: gelu(x), GELU_FLOPS * n, 8 * n),
                              ("gelu_naive (8 kernels, 18N traffic)", "2^26 float32"):
                                  (lambda: gelu_naive(x), GELU_FLOPS * n, 4 * NAIVE_TRAFFIC * n)})
    return [table, points]


# %%
chapter.run("bench", timing_section, gpu=True)

# %% [markdown]
# ## 11. How to time a GPU call, and how not to (timing.py)
# A host clock around a call measures the queueing, not the work, unless it waits for the GPU; the
# first call also compiles. One call of add, timed seven ways, and which question each answers.


# %%
chapter.run("pitfalls", timing.pitfalls, gpu=True)

# %% [markdown]
# ## 12. What a call costs the host (timing.py)
# Where the host's microseconds per call go (the checks, Triton's launch and each of its
# arguments, the dispatcher, the driver), and the size below which that cost, not the kernel, is
# what a caller waits for.


# %%
def host_cases() -> dict:  # bench.host_costs calls it in fresh processes
    return timing.host_cases(add_op)


# %%
chapter.run("host", lambda: timing.host_section("lesson01_vector_add.main:host_cases", 3 if args.full else 1), gpu=True)

# %% [markdown]
# ## 13. CUDA graphs: one launch for a whole sequence (timing.py)
# The cure for small kernels in a loop: record the launches once, replay them with one call; or
# let torch.compile(mode="reduce-overhead") fuse them and record the graph for you.


# %%
chapter.run("graphs", timing.graphs, gpu=True)

# %% [markdown]
# ## 14. BLOCK_SIZE against num_warps (timing.py)
# Data per program against threads per program, timed over a grid of both.


# %%
chapter.run("blocks", lambda: timing.block_size_sweep(1 << 26 if args.full else 1 << 24), gpu=True)

# %% [markdown]
# ## 15. When a kernel is wrong: printing, asserting, a debugger, and the errors everyone hits
# Under the interpreter a kernel is plain Python running one program after another, so the usual
# tools work inside it:
# - tl.device_print("name", block) prints a block with the program's id in front (on a GPU too,
#   where the programs' lines come in any order);
# - tl.static_print(...) prints while the kernel compiles: once per compilation on a GPU (so once
#   per BLOCK_SIZE), once per program under the interpreter, which compiles nothing;
# - tl.static_assert(condition, "message") refuses, at compile time, a launch its kernel was not
#   written for (a block size too small, say): a clear error instead of a wrong answer;
# - breakpoint() on a line of the kernel, run with TRITON_INTERPRET=1: pdb stops there for each
#   program in turn; `p offsets` shows a block as a numpy array, `c` goes on to the next program.
# And the errors everyone hits first, each raised below by a small kernel, with Triton's own
# message and what it means (the exercises' checker says the same, naming your line).


# %%
@triton.jit
def debug_kernel(x_ptr, N, BLOCK_SIZE: tl.constexpr):
    tl.static_assert(BLOCK_SIZE >= 8, "debug_kernel wants BLOCK_SIZE >= 8")
    tl.static_print("compiling debug_kernel, BLOCK_SIZE =", BLOCK_SIZE)
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    tl.device_print("mask", mask)
    tl.store(x_ptr + offsets, offsets.to(tl.float32), mask=mask)


@triton.jit
def arange_of_100(x_ptr, BLOCK_SIZE: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, 100), 1.0)  # tl.arange needs a power of two


@triton.jit
def block_not_constexpr(x_ptr, BLOCK_SIZE):  # BLOCK_SIZE: tl.constexpr forgotten
    tl.store(x_ptr + tl.arange(0, BLOCK_SIZE), 1.0)


@triton.jit
def shapes_that_do_not_match(x_ptr, BLOCK_SIZE: tl.constexpr):
    rows, cols = tl.arange(0, BLOCK_SIZE), tl.arange(0, 2 * BLOCK_SIZE)
    tl.store(x_ptr + rows + cols, 1.0)  # [8] + [16]: rows[:, None] + cols[None, :] makes a table


def debugging() -> None:
    x = torch.zeros(12, device=DEVICE)
    print("tl.device_print and tl.static_print, N = 12 in blocks of 8 (2 programs):")
    debug_kernel[(2,)](x, 12, BLOCK_SIZE=8)
    for label, launch_it in (("tl.static_assert, BLOCK_SIZE = 4", lambda: debug_kernel[(1,)](x, 12, BLOCK_SIZE=4)),
                             ("tl.arange(0, 100)", lambda: arange_of_100[(1,)](x, BLOCK_SIZE=8)),
                             ("a block size that is not a tl.constexpr", lambda: block_not_constexpr[(1,)](x, 8)),
                             ("blocks of shapes [8] and [16] added", lambda: shapes_that_do_not_match[(1,)](x, BLOCK_SIZE=8))):
        try:
            launch_it()
        except Exception as error:  # noqa: BLE001  (each of these is meant to fail: we print why)
            cause = error.__cause__ or error
            print(f"\n{label}:\n    Triton says: {type(cause).__name__}: {str(cause).strip().splitlines()[0]}")
            if explain(error):
                print(f"    which means: {explain(error)}")


# %%
chapter.run("debug", debugging, trace=True)
