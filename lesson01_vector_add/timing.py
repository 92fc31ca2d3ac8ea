"""Lesson 1, second part: timing a GPU honestly, what a launch costs, and CUDA graphs.

A GPU runs what the host queues. A Python call such as add(x, y) checks its inputs, allocates
the output, and asks the driver to queue the kernel; then it returns, usually before the kernel
has even started. Three consequences, one section each, all run from main.py:

- "pitfalls": a host clock around a call measures the queueing, not the work, unless the clock
  waits for the GPU (torch.cuda.synchronize); the first call also compiles. Which number answers
  which question.
- "launch": the host's time per call against the kernel's, by size. Below the size where the two
  lines cross, the caller waits for Python and the driver, not for the GPU; the lessons' public
  functions keep their share of it small.
- "graphs": the cure for small kernels in a loop. Record the launches once as a CUDA graph and
  replay the whole sequence with one call; or let torch.compile do it.

And "blocks": BLOCK_SIZE (data per program) against num_warps (threads per program), timed.
"""
import contextlib
import math
import os
import statistics
import tempfile
import time

import torch
import triton

from common import bench
from common.device import DEVICE, INTERPRET
from common.results import print_recorded


def sync() -> None:
    """Wait until the GPU has finished everything queued (nothing to wait for under the interpreter)."""
    if not INTERPRET:
        torch.cuda.synchronize()


@contextlib.contextmanager
def triton_cache(path: str):
    """Triton keeps compiled kernels on disk (~/.triton/cache) and reuses them in later runs;
    pointing it at an empty directory shows what a first run on a fresh machine pays."""
    saved = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = path
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TRITON_CACHE_DIR"]
        else:
            os.environ["TRITON_CACHE_DIR"] = saved


def host_clock_ms(fn, synchronize: bool, repeat: int = 5) -> float:
    """time.perf_counter() around ONE call (median of `repeat` single calls), with or without
    waiting for the GPU before reading the clock the second time."""
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        if synchronize:
            sync()
        times.append(time.perf_counter() - start)
        sync()
    return statistics.median(times) * 1e3


# %% [markdown]
# ## The pitfalls, measured on one call
# add(x, y) on 2^24 floats (200 MB moved): seven ways to time it. A fresh copy of add_kernel
# (triton.jit of the same Python function) has nothing compiled in memory, so its first call
# compiles, or loads from Triton's disk cache when an earlier run left the result there.


# %%
def pitfalls(n: int = 1 << 24) -> bench.Table:
    """The table. main.py runs it in a fresh process (bench.fresh): see "What a launch costs"."""
    from lesson01_vector_add.main import add, add_kernel, launch

    n = n if not INTERPRET else 1 << 16
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    inputs = {"x": x, "y": y}

    def first_call(cache_dir=None):
        fresh = triton.jit(add_kernel.fn)  # a new kernel object: its in-memory cache is empty
        with triton_cache(cache_dir) if cache_dir else contextlib.nullcontext():
            return host_clock_ms(lambda: launch(fresh, inputs, 1024, 4), synchronize=True, repeat=1)

    add(x, y)  # add_kernel compiled in memory and, so, in Triton's disk cache
    sync()
    rows = []
    with tempfile.TemporaryDirectory() as empty:
        rows.append(("first call, empty Triton cache", first_call(empty),
                     "what a first run on a fresh machine pays: compilation" + ("" if not INTERPRET else
                     " (the interpreter compiles nothing; it reads the kernel's source once)")))
    if not INTERPRET:
        rows.append(("first call, Triton's disk cache warm", first_call(),
                     "a new run of a script: the compiled kernel is loaded from ~/.triton/cache"))
    rows.append(("host clock, no synchronize", host_clock_ms(lambda: add(x, y), synchronize=False),
                 "the launch only: the kernel is still running when the clock stops" if not INTERPRET else
                 "the interpreter runs the kernel inside the call: here the clock sees it all"))
    if not INTERPRET:
        rows += [
            ("host clock, synchronize after", host_clock_ms(lambda: add(x, y), synchronize=True),
             "one call, start to finish: launch + kernel + the wait"),
            ("do_bench median (warm-up, L2 flushed)", bench.time_ms(lambda: add(x, y)),
             "the kernel, from CUDA events around each call (the launch hides behind the flush)"),
            ("profiler: the kernel's own time", bench.kernel_time_ms(lambda: add(x, y)),
             "the kernel alone, from its GPU timestamps: what the lessons' tables compare"),
            ("calls back to back, per call", bench.call_time_ms(lambda: add(x, y)),
             "what a loop of calls pays: the larger of host time and kernel time"),
        ]
    else:
        rows.append(("median of later calls (bench.time_ms)", bench.time_ms(lambda: add(x, y)),
                     "the interpreter's steady state: numpy's speed, not a GPU's"))
    return bench.print_table([(how, ms * 1e3, answers) for how, ms, answers in rows],
                             ["how add(x, y) was timed", "µs", "what it measures"],
                             title="Timing pitfalls: one call of add, seven ways" if not INTERPRET else "",
                             note=f"N = 2^{int(math.log2(n))} float32. {bench.stamp()}. In a fresh process.")


def pitfalls_section() -> None:
    bench.fresh("lesson01_vector_add.timing:pitfalls")
    if INTERPRET:
        print_recorded(__file__, "Timing pitfalls")


# %% [markdown]
# ## What a launch costs
# Host time per call (a loop of calls without a synchronize, timed on the host) against kernel
# time (profiler timestamps), for PyTorch's x + y and Triton's add, from 2^10 to 2^26 elements,
# with an empty Triton kernel as the floor. Where the kernel line is below the host line, a
# caller pays for the launch, not the work: the size where they cross is the size below which a
# kernel is "small", and fusing it with its neighbours, or a CUDA graph, is what helps.
#
# Then (main.py's "host" section, from host_cases below) the host's cost of each call beside the
# floor (an empty kernel), in three layers for add: Triton's own launch, add_kernel[grid](...),
# which on every call binds the arguments, works out what the compiled code was specialized on
# (dtypes, 16-byte alignment, integer classes) and looks it up; the same compiled kernel launched
# by common/launch.py, which does that work on the first call, then keeps the compiled kernel
# under a cheaper key and hands later calls' arguments straight to the launcher Triton generated
# for it (its docstring says what the key holds, and why reusing the kernel is safe); and
# add(x, y) whole, the checks and the output's allocation included. The host's speed varies from
# one process to the next, so the table is the best of three fresh ones (bench.host_costs).


# %%
def crossover(ns: list, host_us: list, kernel_us: list) -> float | None:
    """The N where kernel time first reaches host time, interpolated on log2(N) between the two
    measured sizes around it; None if the kernel never catches up within ns."""
    for i in range(1, len(ns)):
        before, after = kernel_us[i - 1] - host_us[i - 1], kernel_us[i] - host_us[i]
        if before < 0 <= after:
            t = -before / (after - before)
            return 2 ** (math.log2(ns[i - 1]) + t * (math.log2(ns[i]) - math.log2(ns[i - 1])))
    return None


def launch_cost(sizes=tuple(2**k for k in range(10, 27, 2))) -> bench.Table:
    """The table (GPU only). main.py runs it in a fresh process (bench.fresh): a process that has
    run torch.profiler or torch.compile pays more per call on the host, PyTorch included."""
    from lesson01_vector_add.main import add

    empty_x = torch.empty(1, device=DEVICE)
    inputs = {n: (torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)) for n in sizes}
    with torch.no_grad():  # host times first: once the profiler has run, every call costs the host more
        host = {n: (bench.host_time_ms(lambda: x + y), bench.host_time_ms(lambda: add(x, y)),
                    bench.host_time_ms(lambda: bench.empty_kernel[(1,)](empty_x, 1))) for n, (x, y) in inputs.items()}
        kernel = {n: (bench.kernel_time_ms(lambda: x + y), bench.kernel_time_ms(lambda: add(x, y)))
                  for n, (x, y) in inputs.items()}
    rows = [[n, host[n][0] * 1e3, kernel[n][0] * 1e3, host[n][1] * 1e3, kernel[n][1] * 1e3, host[n][2] * 1e3]
            for n in sizes]
    headers = ["N", "torch x + y: host µs", "torch x + y: kernel µs", "Triton add: host µs", "Triton add: kernel µs",
               "empty Triton kernel: host µs"]
    return bench.print_table(rows, headers, title="Host time against kernel time, by size", floatfmt=".1f",
                             note=f"float32. {bench.stamp()}. Host: bench.host_time_ms, in a fresh process; kernel: "
                                  "bench.kernel_time_ms (L2 flushed).",
                             plot=dict(x="N", y=headers[1:], series=[], ceiling=None, logy=True))


def launch_section() -> None:
    """The host-against-kernel table and where the lines cross (main.py's "host" section follows with
    the host cost of each function)."""
    if INTERPRET:
        print_recorded(__file__, "Host time against kernel time")
        return
    table = bench.fresh("lesson01_vector_add.timing:launch_cost")
    ns = table.column("N")
    for name in ("torch x + y", "Triton add"):
        n = crossover(ns, table.column(f"{name}: host µs"), table.column(f"{name}: kernel µs"))
        where = f"N = 2^{math.log2(n):.1f} = {n / 1e6:.1f} M elements ({12 * n / 1e6:.0f} MB moved)" if n else "never"
        print(f"{name}: the kernel outlasts its launch from {where}.")


def host_cases(n: int = 4096) -> dict:
    """For bench.host_costs: the host's µs per call of this lesson's functions, beside PyTorch's and
    the bare launch of the same kernel."""
    from common.launch import launch as launch_kernel
    from lesson01_vector_add.main import add, add_kernel, gelu

    x, y, out = (torch.randn(n, device=DEVICE) for _ in range(3))
    return {f"torch x + y ({n} floats)": lambda: x + y,
            "add_kernel[grid](...) alone, arguments ready": lambda: add_kernel[(4,)](x, y, out, n, BLOCK_SIZE=1024),
            "the same, through common.launch (compiled kernel kept)": lambda: launch_kernel(
                add_kernel, (4,), None, x, y, out, n, BLOCK_SIZE=1024),
            "add(x, y): checks, output, grid, launch": lambda: add(x, y),
            "F.gelu(x)": lambda: torch.nn.functional.gelu(x, approximate="tanh"),
            "gelu(x)": lambda: gelu(x)}


# %% [markdown]
# ## CUDA graphs: one launch for a whole sequence
# A CUDA graph records the kernels a piece of code launches (with their arguments) while it runs
# once, then replays the recording with one call: the host's per-kernel cost is paid once, at
# capture. The rules follow from "a recording of launches":
# - Static shapes and addresses: a replay reads and writes the very tensors the capture used. New
#   inputs are copied into them; outputs live in the graph's memory pool and are overwritten by
#   the next replay (clone what you keep).
# - Nothing that needs the host inside: no .item(), no print of a tensor, no host-to-device copy
#   from pageable memory, no torch.cuda.synchronize(). The capture would fail, or record nothing.
# - Warm up before capturing, on a side stream: compilation, autotuning (which times and
#   synchronizes) and the allocator's first requests must all be over when recording starts.
# torch.compile(mode="reduce-overhead") does the capture and the copying for you, behind guards
# that re-record when shapes change: the everyday form, for code torch.compile can trace.


# %%
def capture(fn):
    """(graph, output): fn() warmed up on a side stream, then recorded once."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def graphs(n: int = 4096, chain: int = 10, use_compile: bool = True) -> bench.Table:
    """`chain` adds in a row (z = z + y) on n floats: eager against one CUDA graph replay, per add
    (GPU only; main.py runs it in a fresh process, bench.fresh)."""
    from lesson01_vector_add.main import add

    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)

    def chain_of(add_fn):
        def run(x, y):
            z = x
            for _ in range(chain):
                z = add_fn(z, y)
            return z
        return run

    expected = x + chain * y
    rows = []
    with torch.no_grad():
        for name, add_fn in (("torch x + y", torch.add), ("Triton add", add)):
            eager = chain_of(add_fn)
            graph, out = capture(lambda: eager(x, y))
            graph.replay()
            ok = torch.allclose(out, expected, atol=1e-4)
            rows += [(name, "eager: one launch per add", bench.call_time_ms(lambda: eager(x, y)) * 1e3 / chain, ok),
                     (name, "one CUDA graph of the chain, replayed", bench.call_time_ms(graph.replay) * 1e3 / chain, ok)]
        if use_compile:
            compiled = torch.compile(chain_of(torch.add), mode="reduce-overhead")
            for _ in range(3):  # the first calls compile, then record the graph
                ok = torch.allclose(compiled(x, y), expected, atol=1e-4)
            rows.append(("torch x + y", 'torch.compile(mode="reduce-overhead"): fused, then a graph',
                         bench.call_time_ms(lambda: compiled(x, y)) * 1e3 / chain, ok))
    return bench.print_table(rows, ["add", "how the chain runs", "µs per add", "correct"],
                             title=f"CUDA graphs: {chain} adds of {n} floats in a row",
                             note=f"{bench.stamp()}. Time per add = time per chain (calls back to back, bench."
                                  f"call_time_ms) / {chain}. torch.compile fuses the {chain} adds into one kernel "
                                  "before recording it: both cures at once.")


def graphs_section(use_compile: bool) -> None:
    if INTERPRET:
        print_recorded(__file__, "CUDA graphs")
    else:
        bench.fresh("lesson01_vector_add.timing:graphs", use_compile=use_compile)


def block_size_sweep(add, n: int = 1 << 26) -> bench.Table:
    """BLOCK_SIZE (data per program) against num_warps (threads per program), for main.add, timed."""
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    torch_us = bench.time_ms(lambda: x + y) * 1e3
    rows = []
    for BLOCK_SIZE in (512, 1024, 2048, 4096, 8192):
        row = [BLOCK_SIZE]
        for num_warps in (4, 8, 16):
            row.append(bench.time_ms(lambda: add(x, y, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)) * 1e3)
        rows.append(row)
    return bench.print_table(rows, ["BLOCK_SIZE", "µs, num_warps 4", "num_warps 8", "num_warps 16"],
                             title="BLOCK_SIZE against num_warps",
                             note=f"Triton add, N = 2^{int(math.log2(n))} float32 (torch x + y: {torch_us:.1f} µs). "
                                  "Elements per thread = BLOCK_SIZE / (32 num_warps). The launchers use 1024 and 4.")


def blocks_section(add, full: bool) -> None:
    if INTERPRET:  # the interpreter ignores num_warps: only a GPU can answer this
        print_recorded(__file__, "BLOCK_SIZE against num_warps")
    else:
        block_size_sweep(add, 1 << 26 if full else 1 << 24)
