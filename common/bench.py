"""Timing a GPU honestly, and the arithmetic that turns a time into GB/s, TFLOP/s and % of a ceiling.

GPU work is asynchronous: the Python call returns before the kernel finishes, so a host clock
around it measures the launch, not the work (lesson 1's timing.py shows each pitfall measured).
The functions here answer three different questions; every table says which one its numbers are:
- kernel time (`kernel_time_ms`): the kernels' own start and end timestamps on the GPU, from the
  profiler, with the L2 cache flushed between calls. What the lessons compare.
- time per call in a loop (`call_time_ms`): calls back to back, one synchronize at the end: the
  larger of kernel time and host time, what a caller pays.
- the host's time per call (`host_time_ms`): Python, the checks, the launch, the driver; measured
  in fresh processes (`host_costs`), since a process that has run the profiler pays more.
- the host's time to enqueue one call with the GPU idle (`enqueue_time_ms`): a whole forward and
  backward, say, many launches, none of them waiting for a full queue.
Every function here needs a CUDA GPU: under the interpreter, sections that time things show the
tables their page recorded on a GPU instead (common/chapter.py).
"""
import functools
import importlib
import statistics
import time

import torch

from common import child
from common.profile import kernels_launched
from common.table import Table, print_table
import triton  # noqa: E402  (after common.device, which chooses the mode)
import triton.testing  # noqa: E402


def time_ms(fn) -> float:
    """Median time of one call of fn(), in milliseconds: triton.testing.do_bench, which warms up
    (compilation stays out), flushes the L2 cache before each call and reads CUDA events."""
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


_L2_FLUSH = []  # a 256 MB buffer, made on first use: more than any GPU's L2 cache


def kernel_time_ms(fn, repeat: int = 20) -> float:
    """GPU time of the kernels fn() launches, per call, in ms: the kernels' own timestamps (CUPTI,
    through torch.profiler), with the L2 cache flushed between calls. Unlike do_bench's events,
    this leaves out the host: where a kernel takes less time than launching it, events around the
    call measure the launch; these timestamps still measure the kernel."""
    if not _L2_FLUSH:
        _L2_FLUSH.append(torch.empty(64 << 20, dtype=torch.int32, device="cuda"))
    rows = kernels_launched(fn, repeat, between=_L2_FLUSH[0].bitwise_not_)  # a kernel fn never runs
    return sum(us for name, _, us in rows if "bitwise_not" not in name) / repeat / 1e3


def call_time_ms(fn, kernel_ms: float = 0.0) -> float:
    """What a caller pays per call, in ms: calls back to back, one synchronize at the end, the total
    divided by the count (median of 5 such loops). No cache flush, as in a loop of real work. While
    the GPU runs one kernel the host prepares the next, so the slower of the two sets the pace."""
    calls = max(3, min(100, int(2.0 / max(kernel_ms, 1e-3))))  # about 2 ms of work per loop
    return _loop_ms(fn, calls, wait_for_gpu=True)


def host_time_ms(fn, calls: int = 100) -> float:
    """The host's own time per call, in ms: a loop of calls with no synchronize, timed on the host
    clock until the last call returns (median of 5 loops). A launch only queues the kernel, so this
    is Python + checks + the driver, whatever the kernel costs."""
    return _loop_ms(fn, calls, wait_for_gpu=False)


def enqueue_time_ms(fn, calls: int = 50) -> float:
    """The host's time to enqueue one call of fn(), in ms, with the GPU's queue empty: synchronize,
    time the call on the host clock, synchronize; the median of `calls`. A call of many launches
    (a forward and its backward) can outrun a short queue in host_time_ms's loop; here none waits."""
    fn()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e3


def _loop_ms(fn, calls: int, wait_for_gpu: bool) -> float:
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


def side_by_side(cases: dict, rounds: int = 3) -> dict:
    """Kernel ms of each case in {name: fn}, for comparing them: the cases take turns, `rounds`
    times over, and each gets the median of its turns. A GPU's clock drifts with its power and
    temperature, so one kernel timed minutes apart can differ by several percent; taking turns
    exposes every case to the same drift, so the ratios between them hold."""
    turns = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            turns[name].append(kernel_time_ms(fn, repeat=7))
    return {name: statistics.median(ms) for name, ms in turns.items()}


SIDE_BY_SIDE_NOTE = "The implementations of each row group were timed in turns, 3 rounds, median (bench.side_by_side)."


@triton.jit
def empty_kernel(x_ptr, N):
    """Does nothing. Launching it costs what every Triton launch costs at least: the floor."""
    pass


def host_costs(cases: str, processes: int = 3) -> dict:
    """The host's µs per call of each call in cases() = {label: fn} ('package.module:name'), and of
    the floor, an empty Triton kernel launched with two arguments (first). Timed in `processes` fresh
    processes (common/child.py says why), in each the calls taking turns, 3 rounds; each call keeps its best. Why
    several processes: on a GPU's host one process can run every call, the floor included, up to
    twice as slow as another, as if on a slower core; noise only ever adds time, so the best is the
    cost of the code."""
    runs = [dict(child.run("common.bench:host_table", dict(cases=cases))[1].rows) for _ in range(processes)]
    return {label: min(run[label] for run in runs) for label in runs[0]}


FLOOR = "empty @triton.jit kernel, 2 arguments (the floor)"


def host_note(processes: int = 3) -> str:
    where = "In 3 fresh processes" if processes == 3 else f"In {processes} fresh process{'es' if processes > 1 else ''} (--full: 3)"
    return ("A loop of calls with no synchronize, timed on the host (bench.host_time_ms): Python, the checks and "
            f"the launch, not the kernel. {where}, the calls taking turns, 3 rounds in each; each "
            "call its best (bench.host_costs).")


def host_table(cases: str) -> Table:
    """host_costs' measurement, in the process that runs it: [label, µs] rows, the floor first."""
    module, name = cases.split(":")
    x = torch.empty(1, device="cuda")
    cases = {FLOOR: lambda: empty_kernel[(1,)](x, 1), **getattr(importlib.import_module(module), name)()}
    turns = {label: [] for label in cases}
    with torch.no_grad():
        for _ in range(3):
            for label, fn in cases.items():
                turns[label].append(host_time_ms(fn) * 1e3)
    return Table(["call", "host µs per call"], [(label, min(t)) for label, t in turns.items()])


def host_cost_table(cases: str, processes: int = 3) -> Table:
    """A lesson's "host" section: host_costs printed beside the floor. (A default run takes one
    process: each costs seconds to start, and --full, which writes RESULTS.md, takes three.)"""
    us = host_costs(cases, processes)
    floor = us[FLOOR]
    return print_table([(label, t, t / floor) for label, t in us.items()], ["call", "host µs per call", "x the floor"],
                       title="Host cost per call", note=host_note(processes))


OFFSETS_TITLE = "64-bit offsets: what they cost"


def offsets_cost(cases: dict) -> Table:
    """Kernel µs of each case in {label: fn(index_type)}, run with 32-bit and with 64-bit element
    offsets (the launchers pick int32 for every tensor below 2**31 elements, int64 past that; here
    the case is handed one, then the other), side by side."""
    import triton.language as tl

    ms = side_by_side({(label, bits): (lambda fn=fn, t=t: fn(t)) for label, fn in cases.items()
                       for bits, t in ((32, tl.int32), (64, tl.int64))})
    rows = [(label, ms[label, 32] * 1e3, ms[label, 64] * 1e3, ms[label, 64] / ms[label, 32]) for label in cases]
    return print_table(rows, ["case", "kernel µs, int32 offsets", "int64 offsets", "int64 / int32"],
                       title=OFFSETS_TITLE, floatfmt=".3f",
                       note=f"Kernel time of the same call with 32-bit and 64-bit element offsets. {SIDE_BY_SIDE_NOTE}")


TIMING_HEADERS = ["kernel µs", "GB/s", "% of copy"]
TIMING_NOTE = ("'kernel µs': the GPU kernels' own time (profiler timestamps, L2 flushed between calls). GB/s: "
               "the bytes the operation must move (each input read once, the output written once) over that time; "
               "'% of copy': of the measured copy bandwidth, which a kernel that reads more than it writes can pass "
               "a little (a copy reads and writes equally, and memory streams reads alone faster than a mix). A small "
               "kernel's caller pays its host cost instead, when that is larger: the lesson's 'Host cost per call' table.")


def timing_cells(ms: float, nbytes: float) -> list:
    """One row's TIMING_HEADERS cells: the kernel time, GB/s (nbytes over it) and % of the copy ceiling."""
    bandwidth = gbps(nbytes, ms)
    return [ms * 1e3, bandwidth, percent(bandwidth, copy_bandwidth())]


def gbps(nbytes: float, ms: float) -> float:
    """Bytes moved through memory per second, in GB/s (10^9 bytes)."""
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def percent(value: float, ceiling: float) -> float:
    return 100.0 * value / ceiling


@functools.cache
def copy_bandwidth() -> float:
    """The machine's memory ceiling, measured: a 1 GiB device-to-device copy, in GB/s. A copy reads
    every byte once and writes it once, so it moves 2 x size bytes; no memory-bound kernel can beat
    it by much (a kernel that reads what the copy reads can, a little: its '% of copy' may pass 100
    where its writes are smaller than its reads, as a row sum's are)."""
    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    return gbps(2 * src.numel() * src.element_size(), time_ms(lambda: dst.copy_(src)))


@functools.cache
def matmul_rate() -> float:
    """The machine's compute ceiling, measured: torch.matmul (cuBLAS) of bf16 8192^3, in TFLOP/s,
    by kernel time as in the tables."""
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return tflops(2 * 8192**3, kernel_time_ms(lambda: a @ b))


def ceilings() -> dict:
    """The two ceilings, as a results page's stamp names them."""
    return {"copy bandwidth (measured)": f"{copy_bandwidth():.0f} GB/s",
            "matmul rate (cuBLAS bfloat16 8192^3, measured)": f"{matmul_rate():.0f} TFLOP/s"}


@functools.cache
def compiled(fn):
    """torch.compile(fn), made on first use: importing the compiler takes seconds, which a lesson
    should not pay before it needs it. (Compilation itself happens at the first call per shape.)"""
    return torch.compile(fn)
