"""Lesson 1, second part: timing a GPU honestly, what a call costs the host, and CUDA graphs.

A GPU runs what the host queues. A Python call such as add(x, y) checks its inputs, allocates
the output, and asks the driver to queue the kernel; then it returns, usually before the kernel
has even started. Four consequences, one section each of main.py (the calls timed are
elementwise.py's ops and kernels):

- "pitfalls": a host clock around a call measures the queueing, not the work, unless the clock
  waits for the GPU (torch.cuda.synchronize); the first call also compiles. Which number answers
  which question.
- "host": what a call costs the host, piece by piece, against what its kernel costs the GPU, by
  size. Below the size where the two cross, the caller waits for Python and the driver, not for
  the GPU.
- "graphs": the cure for small kernels in a loop. Record the launches once as a CUDA graph and
  replay the whole sequence with one call; or let torch.compile do it.
- "blocks": BLOCK_SIZE (data per program) against num_warps (threads per program), timed.
Every function here needs a CUDA GPU.
"""
import contextlib
import math
import os
import statistics
import tempfile
import time

import common.device  # noqa: F401  (first: it decides how triton is imported)

import torch
import triton

from common import bench
from common.launch import cdiv
from common.table import print_table
from lesson01_vector_add.elementwise import add, add_kernel, gelu, gelu_kernel, launch  # the lesson's ops


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
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if synchronize:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        torch.cuda.synchronize()
    return statistics.median(times) * 1e3


# %% [markdown]
# ## The pitfalls, measured on one call
# add(x, y) on 2^24 floats (200 MB moved): seven ways to time it. A fresh copy of add_kernel
# (triton.jit of the same Python function) has nothing compiled in memory, so its first call
# compiles, or loads from Triton's disk cache when an earlier run left the result there.


# %%
def pitfalls(n: int = 1 << 24):
    """The table, in the lesson's own process (which has run the profiler by the time section 11
    runs: its host rows can read up to about twice section 12's, which measures the host in fresh
    processes)."""
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")

    def first_call(cache_dir=None):
        fresh = triton.jit(add_kernel.fn)  # a new kernel object: its in-memory cache is empty
        with triton_cache(cache_dir) if cache_dir else contextlib.nullcontext():
            return host_clock_ms(lambda: launch(fresh, x, y), synchronize=True, repeat=1)

    add(x, y)  # add_kernel compiled in memory and, so, in Triton's disk cache
    with tempfile.TemporaryDirectory() as empty:
        rows = [("first call, empty Triton cache", first_call(empty), "what a first run on a fresh machine pays: compilation")]
    rows += [
        ("first call, Triton's disk cache warm", first_call(),
         "a new run of a script: the compiled kernel is loaded from ~/.triton/cache"),
        ("host clock, no synchronize", host_clock_ms(lambda: add(x, y), synchronize=False),
         "the launch only: the kernel is still running when the clock stops"),
        ("host clock, synchronize after", host_clock_ms(lambda: add(x, y), synchronize=True),
         "one call, start to finish: launch + kernel + the wait"),
        ("do_bench median (warm-up, L2 flushed)", bench.time_ms(lambda: add(x, y)),
         "the kernel, from CUDA events around each call (the launch hides behind the flush)"),
        ("profiler: the kernel's own time", bench.kernel_time_ms(lambda: add(x, y)),
         "the kernel alone, from its GPU timestamps: what the lessons' tables compare"),
        ("calls back to back, per call", bench.call_time_ms(lambda: add(x, y)),
         "what a loop of calls pays: the larger of host time and kernel time"),
    ]
    return print_table([(how, ms * 1e3, answers) for how, ms, answers in rows],
                       ["how add(x, y) was timed", "µs", "what it measures"],
                       title="Timing pitfalls: one call of add, seven ways",
                       note=f"N = 2^{int(math.log2(n))} float32. The one-call rows are single calls (median of 5), in the "
                            "lesson's own process; the host's cost per call in a loop, measured in a fresh process, is "
                            "the 'Host cost per call' table's.")


# %% [markdown]
# ## What a call costs the host
# Every call of a public function runs Python before its kernel starts: the checks, the output's
# allocation, the grid, then Triton's launch, `kernel[grid](...)`, which on every call binds the
# arguments to the kernel's parameters, works out what the compiled code was specialized on (each
# tensor's dtype and whether its address is a multiple of 16 bytes; each integer's class: 1, a
# multiple of 16, past 32 bits), looks the compiled kernel up by it, and hands it to the driver.
# The table takes that apart with calls that do less and less:
# - add(x, y) whole: its checks, Add.apply (the autograd function of section 5) and the launcher;
#   the same add registered as an operator, torch.ops.lessons.add (section 5): the dispatcher's
#   share; and each again on inputs that require grad, where autograd records every call (torch's
#   x + y too);
# - add_kernel[grid](...) alone, its arguments ready: Triton's launch of four arguments;
# - empty kernels of two and of eight arguments: the floor, and what each argument adds (binding
#   and specialization grow with the arguments);
# - one launch replayed from a CUDA graph: the driver's part alone, no Python at all.
# Then the kernel's own time by size, against those host costs: where the kernel line is below
# the host cost, a caller pays for the launch, not the work. That size is where a kernel is
# "small", and fusing it with its neighbours, or a CUDA graph, is what helps. The host's speed
# varies from one process to the next, so the host costs are the best of three fresh processes.


# %%
@triton.jit
def empty_kernel_8(a_ptr, b_ptr, c_ptr, d_ptr, M, N, K, L):
    """Does nothing, with eight arguments (four pointers, four integers)."""
    pass


ADD = "add(x, y): checks, Add.apply, output, grid, launch"


def host_cases(add_op, n: int = 4096) -> dict:
    """For bench.host_costs: {label: call} on n floats; add_op: add registered as an operator (section 5)."""
    x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
    xg, yg = x.clone().requires_grad_(), y.clone().requires_grad_()
    grid = (cdiv(n, 1024),)
    graph, _ = capture(lambda: add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024))
    return {"empty @triton.jit kernel, 8 arguments": lambda: empty_kernel_8[(1,)](x, x, x, x, n, n, n, n),
            "one add_kernel launch replayed from a CUDA graph (graph.replay())": graph.replay,
            f"torch x + y ({n} floats)": lambda: x + y,
            "add_kernel[grid](...) alone, arguments ready": lambda: add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024),
            ADD: lambda: add(x, y),
            "the same add registered as an operator, torch.ops.lessons.add": lambda: add_op(x, y),
            "torch x + y, x and y requiring grad (autograd records it)": lambda: xg + yg,
            "add(x, y), x and y requiring grad (Add records its backward)": lambda: add(xg, yg),
            "torch.ops.lessons.add(x, y), x and y requiring grad": lambda: add_op(xg, yg),
            "F.gelu(x)": lambda: torch.nn.functional.gelu(x, approximate="tanh"),
            "gelu_kernel[grid](...) alone, arguments ready": lambda: gelu_kernel[grid](x, out, n, BLOCK_SIZE=1024),
            "gelu(x)": lambda: gelu(x)}


def crossover(ns: list, host_us: float, kernel_us: list) -> float | None:
    """The N where kernel time first reaches the host cost, interpolated on log2(N) between the two
    measured sizes around it; None if the kernel never catches up within ns."""
    for i in range(1, len(ns)):
        before, after = kernel_us[i - 1] - host_us, kernel_us[i] - host_us
        if before < 0 <= after:
            t = -before / (after - before)
            return 2 ** (math.log2(ns[i - 1]) + t * (math.log2(ns[i]) - math.log2(ns[i - 1])))
    return None


def host_section(cases: str, processes: int = 3, sizes=tuple(2**k for k in range(10, 27, 2))) -> list:
    """The host cost table (cases: 'module:function' returning host_cases' dict, timed in `processes`
    fresh processes), then kernel time by size."""
    host_table = bench.host_cost_table(cases, processes)
    us = {label: t for label, t, _ in host_table.rows}
    torch_us, add_us = us["torch x + y (4096 floats)"], us[ADD]
    inputs = {n: (torch.randn(n, device="cuda"), torch.randn(n, device="cuda")) for n in sizes}
    rows = [[n, bench.kernel_time_ms(lambda: x + y) * 1e3, bench.kernel_time_ms(lambda: add(x, y)) * 1e3,
             torch_us, add_us] for n, (x, y) in inputs.items()]
    headers = ["N", "torch x + y: kernel µs", "Triton add: kernel µs", "torch x + y: host µs", "add(x, y): host µs"]
    print()
    by_size = print_table(rows, headers, title="Kernel time against host cost, by size",
                          note="float32. Kernel: bench.kernel_time_ms (L2 flushed); host: the 'Host cost per call' "
                               "table (the host's cost does not grow with N).",
                          plot=dict(x="N", y=headers[1:], series=[], ceiling=None, logy=True, ylabel="µs"))
    for name, host, column in (("torch x + y", torch_us, 1), ("Triton add", add_us, 2)):
        n = crossover(list(sizes), host, [row[column] for row in rows])
        where = f"N = 2^{math.log2(n):.1f} = {n / 1e6:.1f} M elements ({12 * n / 1e6:.0f} MB moved)" if n else "never"
        print(f"{name}: the kernel outlasts the call's host cost from {where}.")
    return [host_table, by_size]


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


def graphs(n: int = 4096, chain: int = 10):
    """`chain` adds in a row (z = z + y) on n floats: eager against one CUDA graph replay, per add
    (the host's speed varies between processes, so take its ratios, not its microseconds, from here)."""
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")

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
        compiled = torch.compile(chain_of(torch.add), mode="reduce-overhead")
        for _ in range(3):  # the first calls compile, then record the graph
            ok = torch.allclose(compiled(x, y), expected, atol=1e-4)
        rows.append(("torch x + y", 'torch.compile(mode="reduce-overhead"): fused, then a graph',
                     bench.call_time_ms(lambda: compiled(x, y)) * 1e3 / chain, ok))
    return print_table(rows, ["add", "how the chain runs", "µs per add", "correct"],
                       title=f"CUDA graphs: {chain} adds of {n} floats in a row",
                       note=f"Time per add = time per chain (calls back to back, bench.call_time_ms) / {chain}, in the "
                            f"lesson's own process (a process's host can be twice as slow as another's; the 'Host "
                            f"cost per call' table keeps the best of three fresh ones). torch.compile fuses the {chain} "
                            "adds into one kernel before recording it, both cures at once, but each call also pays "
                            "its guards and the graph's own bookkeeping on the host: at a size this small, that can "
                            "cost more than it saves.")


# %% [markdown]
# ## BLOCK_SIZE against num_warps
# BLOCK_SIZE is how much data a program owns; num_warps how many threads share it. Too little
# data per thread and the loads cannot stream; too much and registers run out.


# %%
def block_size_sweep(n: int = 1 << 26):
    """Triton add over a grid of BLOCK_SIZE x num_warps, by kernel time (do_bench)."""
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    torch_us = bench.time_ms(lambda: x + y) * 1e3
    rows = []
    for BLOCK_SIZE in (512, 1024, 2048, 4096, 8192):
        row = [BLOCK_SIZE]
        for num_warps in (4, 8, 16):
            row.append(bench.time_ms(lambda: add(x, y, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)) * 1e3)
        rows.append(row)
    return print_table(rows, ["BLOCK_SIZE", "µs, num_warps 4", "num_warps 8", "num_warps 16"],
                       title="BLOCK_SIZE against num_warps",
                       note=f"Triton add, N = 2^{int(math.log2(n))} float32 (torch x + y: {torch_us:.1f} µs), do_bench "
                            "(L2 flushed). Elements per thread = BLOCK_SIZE / (32 num_warps). The launchers use 1024 and 4.")
