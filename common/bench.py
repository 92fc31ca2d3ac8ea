"""Timing done right, and the arithmetic that turns a time into GB/s, TFLOP/s and % of a ceiling.

GPU work is asynchronous: the Python call returns before the kernel finishes, so a host clock
around it measures the launch, not the work. triton.testing.do_bench records CUDA events around
each run, synchronises, warms up first (compilation and caches stay out of the numbers), clears
the L2 cache between runs (each run reads from HBM, as a real pipeline would) and reports the
median of many runs. On the CPU there is no such thing: we time wall-clock, median of several.
"""
import datetime
import functools
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import torch
from tabulate import tabulate

from common.device import DEVICE, INTERPRET, ROOT, gpu_name  # first: it decides how triton is imported
from common.checks import dtype_name
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


def time_ms(fn, cpu_budget_s: float = 0.3) -> float:
    """Median time of one call of fn(), in milliseconds (do_bench's CUDA events on a GPU)."""
    if not INTERPRET:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < cpu_budget_s and len(times) < 50):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


_L2_FLUSH = None


def kernel_time_ms(fn, repeat: int = 20) -> float:
    """GPU time of the kernels fn() launches, per call, in ms: the kernels' own start and end
    timestamps (CUPTI, through the profiler), with the 60 MB L2 cache flushed between calls.

    Unlike do_bench's events, this leaves out the host: when a kernel takes less time than
    launching it (a few µs of work against 5-40 µs of Python and driver), events around the call
    measure the launch; these timestamps still measure the kernel."""
    from common.profile import kernels_launched

    global _L2_FLUSH
    if _L2_FLUSH is None:
        _L2_FLUSH = torch.empty(64 << 20, dtype=torch.int32, device="cuda")  # 256 MB
    rows = kernels_launched(fn, repeat, between=_L2_FLUSH.bitwise_not_)  # a kernel fn never runs
    return sum(us for name, _, us in rows if "bitwise_not" not in name) / repeat / 1e3


def call_time_ms(fn, kernel_ms: float = 0.0) -> float:
    """What a caller pays per call, in ms: calls back to back, one synchronize at the end, the
    total divided by the count (median of 5 such runs). No cache flush between the calls, as in a
    loop of real work. Each call costs the larger of its host time (Python, checks, the launch)
    and its kernel time: while the GPU runs one kernel the host prepares the next, and the slower
    of the two sets the pace. (do_bench cannot answer this: it flushes the L2 before every call,
    and while the GPU clears 256 MB the host has already launched the next call, out of sight.)"""
    calls = max(3, min(100, int(2.0 / max(kernel_ms, 1e-3))))  # about 2 ms of work per run
    return _loop_ms(fn, calls, wait_for_gpu=True)


def host_time_ms(fn, calls: int = 100) -> float:
    """The host's own time per call, in ms: a loop of calls with no synchronize, timed on the host
    clock until the last call returns (median of 5 loops). A launch only queues the kernel, so this
    is Python + checks + the driver, whatever the kernel costs (as long as the queue of about a
    thousand pending launches does not fill up)."""
    return _loop_ms(fn, calls, wait_for_gpu=False)


def _loop_ms(fn, calls: int, wait_for_gpu: bool) -> float:
    """Median over 5 loops of `calls` calls of the time per call, the host clock stopped after the
    GPU has finished them (wait_for_gpu) or as soon as the last call returns."""
    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if wait_for_gpu:
            torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) / calls)
        torch.cuda.synchronize()
    return statistics.median(runs) * 1e3


def measure(fn) -> tuple[float, float]:
    """(kernel ms, ms per call back to back). On a GPU the first is the kernels' own time (profiler
    timestamps, L2 flushed) and the second what a loop of calls pays (call_time_ms); they part
    where launching costs more than the work. On the CPU both are the interpreter's wall clock."""
    if INTERPRET:
        ms = time_ms(fn)
        return ms, ms
    kernel_ms = kernel_time_ms(fn)
    return kernel_ms, call_time_ms(fn, kernel_ms)


def side_by_side(cases: dict, rounds: int = 3) -> dict:
    """Kernel ms of each case in {name: fn}, for comparing them: the cases take turns, `rounds`
    times over, and each gets the median of its turns. A GPU's clock drifts with its power and
    temperature, so one kernel timed minutes apart can differ by several percent; taking turns
    exposes every case to the same drift, so the ratios between them hold. (On the CPU: the
    interpreter's wall clock, once each.)"""
    if INTERPRET:
        return {name: time_ms(fn) for name, fn in cases.items()}
    turns = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            turns[name].append(kernel_time_ms(fn, repeat=7))
    return {name: statistics.median(ms) for name, ms in turns.items()}


@triton.jit
def empty_kernel(x_ptr, N):
    """Does nothing. Launching it costs what every Triton launch costs at least: the floor."""
    pass


HOST_TITLE = "Host cost per call"


def fresh(function: str, show: bool = True, **kwargs) -> "Table":
    """Run function(**kwargs) ('package.module:name', returning a Table) in a new Python process and
    print its table here (unless not `show`). For host timings: in a process that has run
    torch.profiler or torch.compile, every call costs more on the host, PyTorch's own operators
    included (measured on the H200: an empty Triton launch 11 -> 16 µs, torch's x + y 7 -> 13 µs),
    and a caller's process usually has done neither. Under the interpreter, here and now."""
    module, name = function.split(":")
    if INTERPRET:
        return getattr(importlib.import_module(module), name)(**kwargs)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "table.json")
        code = (f"import json, sys; sys.path.insert(0, {ROOT!r}); import {module} as m; "
                f"t = m.{name}(**json.loads({json.dumps(json.dumps(kwargs))})); json.dump(t.__dict__, open({path!r}, 'w'))")
        subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            table = Table(**json.load(f))
    return print_table(table.rows, table.headers, table.title, table.note, table.floatfmt, table.plot) if show else table


def host_costs(cases: str, script: str, processes: int = 3) -> "Table | None":
    """The host's µs per call of each call in cases() = {label: fn} ('package.module:name'), beside
    the floor: an empty Triton kernel launched with two arguments. Timed in `processes` fresh
    processes (see fresh), in each the calls taking turns, 3 rounds; each call keeps its best.
    Why several processes: on the H200's host one process can run every call, the floor
    included, half as slow again as the next, as if on a slower core; noise only ever adds time,
    so the best is the cost of the code. Under the interpreter nothing is timed (its host time is
    the kernel's) and the H200's table of `script`'s lesson is printed instead."""
    if INTERPRET:
        from common.results import print_recorded

        print_recorded(script, HOST_TITLE)
        return None
    runs = [dict(fresh("common.bench:host_table", show=False, cases=cases).rows) for _ in range(processes)]
    us = {label: min(run[label] for run in runs) for label in runs[0]}
    floor = next(iter(us.values()))
    return print_table([(label, t, t / floor) for label, t in us.items()],
                       ["call", "host µs per call", "x the floor"], title=HOST_TITLE,
                       note=f"{stamp()}. A loop of calls with no synchronize, timed on the host (bench.host_time_ms): "
                            f"Python, the checks and the launch, not the kernel. In {processes} fresh processes, "
                            "the calls taking turns, 3 rounds in each; each call its best (the median of 5 loops each).")


def host_table(cases: str) -> "Table":
    """host_costs' measurement, in the process that runs it: [label, µs] rows, the floor first."""
    module, name = cases.split(":")
    x = torch.empty(1, device=DEVICE)
    cases = {"empty @triton.jit kernel, 2 arguments (the floor)": lambda: empty_kernel[(1,)](x, 1),
             **getattr(importlib.import_module(module), name)()}
    turns = {label: [] for label in cases}
    with torch.no_grad():
        for _ in range(3):
            for label, fn in cases.items():
                turns[label].append(host_time_ms(fn) * 1e3)
    return Table(["call", "host µs per call"], [(label, min(t)) for label, t in turns.items()])


def offsets_cost(make_cases, script: str, run: bool = True) -> "Table | None":
    """Kernel µs of each call in make_cases() = {label: fn}, run with the offsets its launcher
    computes in int32 (what it picks for every tensor below 2**31 elements) and in int64 (what it
    picks past that): common.checks.index_type forced one way, then the other, side by side. Where
    nothing is timed (the interpreter, or `run` false), the H200's table of `script`'s lesson is
    printed instead; make_cases, which allocates the inputs, is called only when timing."""
    import triton.language as tl

    from common import checks

    if INTERPRET or not run:
        from common.results import print_recorded

        print_recorded(script, OFFSETS_TITLE)
        return None
    cases = make_cases()

    def forced(fn, offsets):
        def run():
            checks.FORCED_INDEX_TYPE = offsets
            try:
                fn()
            finally:
                checks.FORCED_INDEX_TYPE = None
        return run

    ms = side_by_side({(label, bits): forced(fn, offsets) for label, fn in cases.items()
                       for bits, offsets in ((32, tl.int32), (64, tl.int64))})
    rows = [(label, ms[label, 32] * 1e3, ms[label, 64] * 1e3, ms[label, 64] / ms[label, 32]) for label in cases]
    return print_table(rows, ["case", "kernel µs, int32 offsets", "int64 offsets", "int64 / int32"], title=OFFSETS_TITLE,
                       floatfmt=".3f", note=f"{stamp()}. Kernel time of the same call with 32-bit and 64-bit element "
                       f"offsets (common.checks.index_type forced).{SIDE_BY_SIDE_NOTE}")


OFFSETS_TITLE = "64-bit offsets: what they cost"
SIDE_BY_SIDE_NOTE = "" if INTERPRET else (
    " The implementations of each row group were timed in turns, 3 rounds, median (bench.side_by_side).")

TIMING_NOTE = (
    "INTERPRETER: these times measure numpy on the CPU, not a GPU." if INTERPRET else
    "'kernel µs': the GPU kernels' own time (profiler timestamps, L2 flushed between calls); "
    "'µs per call': calls back to back, synchronized at the end, no flush (bench.call_time_ms): what a loop "
    "of calls pays, which is the host's cost per call wherever that exceeds the kernel (small sizes). It is "
    "measured in the lesson's process, after the profiler has run, where host costs are up to twice a fresh "
    "process's (lesson 1, 'Host cost per call', is measured fresh).")


TIMING_HEADERS = ["interpreter µs"] if INTERPRET else ["kernel µs", "µs per call", "GB/s", "% of copy"]


def timing_cells(times: tuple, nbytes: float, ceiling: float) -> list:
    """One row's TIMING_HEADERS cells from measure()'s (kernel ms, ms per call): the two times,
    then GB/s (nbytes over the kernel time) and its percent of the copy ceiling. Under the
    interpreter only its time: numpy's GB/s would say nothing about a GPU."""
    ms, call_ms = times
    if INTERPRET:
        return [ms * 1e3]
    bandwidth = gbps(nbytes, ms)
    return [ms * 1e3, call_ms * 1e3, bandwidth, percent(bandwidth, ceiling)]


def gbps(nbytes: float, ms: float) -> float:
    """Bytes moved through memory per second, in GB/s (10^9 bytes)."""
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def percent(value: float, ceiling: float) -> float:
    return 100.0 * value / ceiling


CEILINGS: dict = {}  # the machine's ceilings measured in this process, by name (the results stamp)


@functools.cache
def copy_bandwidth() -> float:
    """The machine's memory ceiling, measured: a large device-to-device copy, in GB/s.

    A copy reads every byte once and writes it once, so it moves 2 x size bytes; no memory-bound
    kernel can beat it by much. Measured once per process (1 GiB on a GPU: far beyond the L2).
    """
    n = (1 << 28) if not INTERPRET else (1 << 25)  # float32 elements: 1 GiB on GPU, 128 MiB on CPU
    src = torch.randn(n, device=DEVICE)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    bandwidth = gbps(2 * src.numel() * src.element_size(), ms)
    CEILINGS["copy bandwidth (measured)"] = f"{bandwidth:.0f} GB/s"
    return bandwidth


@functools.cache
def matmul_rate() -> float:
    """The machine's compute ceiling, measured: torch.matmul (cuBLAS) of bf16 8192^3, in TFLOP/s
    (float32 256^3 on the CPU). Measured once per process, by kernel time as in the tables."""
    n, dtype = (8192, torch.bfloat16) if not INTERPRET else (256, torch.float32)
    a, b = torch.randn(n, n, device=DEVICE, dtype=dtype), torch.randn(n, n, device=DEVICE, dtype=dtype)
    rate = tflops(2 * n**3, measure(lambda: a @ b)[0])
    CEILINGS[f"matmul rate (cuBLAS {dtype_name(dtype)} {n}^3, measured)"] = f"{rate:.0f} TFLOP/s"
    return rate


def stamp() -> str:
    """What every timing table names: the hardware, the versions, the date."""
    import triton

    return (f"{gpu_name()}, torch {torch.__version__}, triton {triton.__version__}, "
            f"{datetime.date.today().isoformat()}")


@dataclass
class Table:
    """A table with a heading and a note: printed by the lessons, written to RESULTS.md by
    common/results.py (with a plot when `plot` holds common.results.plot's arguments)."""
    headers: list
    rows: list
    title: str = ""
    note: str = ""
    floatfmt: str = ".1f"
    plot: dict | None = None

    def markdown(self) -> str:
        return tabulate(self.rows, headers=self.headers, floatfmt=self.floatfmt, tablefmt="github")

    def column(self, name: str) -> list:
        i = self.headers.index(name)
        return [row[i] for row in self.rows]


TABLES: list[Table] = []  # every titled table printed in this process, in order (the results pages)


def print_table(rows: list, headers: list, title: str = "", note: str = "", floatfmt: str = ".1f",
                plot: dict | None = None) -> Table:
    table = Table(headers, [list(r) for r in rows], title, note, floatfmt, plot)
    print("\n".join(part for part in (title, table.markdown(), note) if part))
    if title:
        TABLES.append(table)
    return table


@functools.cache
def compiled(fn):
    """torch.compile(fn), made on first use: importing the compiler takes seconds, which a lesson
    should not pay before it needs it. (Compilation itself happens at the first call per shape.)"""
    return torch.compile(fn)
