"""Which kernels does an implementation launch, and which operations does it call? torch.profiler knows.

kernels_launched (a CUDA GPU needed): one row per CUDA kernel name, how many launches, total GPU
time. Lessons print it to show what fusion saves (eager PyTorch launches one kernel per operator; a
fused kernel, one in all), and common.bench reads the kernels' own timestamps from it.
ops_called (any machine): the operations each phase of a computation calls, in order, with their
inputs' shapes: aten::* for PyTorch's operators, an autograd function's class name for one of ours,
and in a backward the nodes autograd's engine runs (MmBackward0, RMSNormBackward, ...).
"""
import collections
import contextlib
import os
import re
import sys
import warnings

import torch
from torch.profiler import ProfilerActivity, profile


def kernels_launched(fn, repeat: int = 1, between=None) -> list[tuple[str, int, float]]:
    """Run fn() `repeat` times under the profiler (between() before each, if given); return
    (name, calls, total microseconds) per CUDA kernel, the longest first."""
    fn()  # warm-up: compilation, autotuning and caches stay out of the picture
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    warnings.filterwarnings("ignore", message=".*Profiler clears events")
    prof = profile(activities=activities)
    with _quiet_stderr():
        prof.start()
    for _ in range(repeat):
        if between is not None:
            between()
        fn()
    torch.cuda.synchronize()
    with _quiet_stderr():
        prof.stop()
    calls, micros = collections.Counter(), collections.Counter()
    for e in prof.key_averages():  # (a record_function range, such as an optimizer's step, also shows on the
        # GPU's timeline, around its kernels: not a kernel, and counted twice if summed with them)
        if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False):
            calls[e.key] += e.count
            micros[e.key] += e.self_device_time_total
    return sorted(((k, calls[k], micros[k]) for k in calls), key=lambda r: -r[2])


CUDA_API = re.compile(r"cuda[A-Z]|cu[A-Z]")  # the CUDA runtime's and driver's calls: cudaLaunchKernel, cuLaunchKernelEx


def ops_called(phases: dict) -> list[tuple[str, str, tuple]]:
    """Run each fn of phases = {phase: fn}, in order, under the profiler; return (phase, name, input
    shapes) for each operation a phase calls itself (not those called inside it), and for each
    backward node autograd's engine runs while it does (on a thread of its own on a GPU: matched by
    time), "autograd::engine::evaluate_function: " left off their names."""
    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    with _quiet_stderr():
        prof.start()
    for phase, fn in phases.items():
        with torch.profiler.record_function(phase):
            fn()
    with _quiet_stderr():
        prof.stop()
    events = prof.events()
    spans = {e.name: e.time_range for e in events if e.name in phases}
    called = []
    for e in sorted(events, key=lambda e: e.time_range.start):
        if e.name in phases or not (e.cpu_parent is None or e.cpu_parent.name in phases) or CUDA_API.match(e.name):
            continue  # (a bare launch's cuLaunchKernel, say: the caller names that launch)
        phase = next((p for p, span in spans.items() if span.start <= e.time_range.start <= span.end), None)
        if phase is not None:
            name = e.name.removeprefix("autograd::engine::evaluate_function: ")
            called.append((phase, name, tuple(tuple(shape) for shape in e.input_shapes if shape)))
    return called


@contextlib.contextmanager
def _quiet_stderr():
    """Some torch builds (2.13, CPU) print 'USDT: ... profiler_start' lines from C++ when the
    profiler starts and stops; send the process's stderr to /dev/null for just those moments."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def short(name: str, width: int = 72) -> str:
    """Kernel names are C++ templates hundreds of characters long. Keep the kernel's own name and
    the functors or lambdas in its template arguments, which say what it computes:
    'vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<..., MulFunctor<float>>, ...>'
    becomes 'vectorized_elementwise_kernel <MulFunctor>'."""
    name = re.sub(r"void |\(anonymous namespace\)::|\b\w+::", "", name)
    base = re.split(r"[<(]", name, maxsplit=1)[0]
    inner = dict.fromkeys(w for w in re.findall(r"\w+", name[len(base):])
                          if w != base and (w.endswith("Functor") and not w.startswith("AUnary")
                                            or "_kernel" in w or w.endswith(("_op", "Ops"))))
    text = base + (f" <{', '.join(inner)}>" if inner else "")
    return text if len(text) <= width else text[: width - 3] + "..."
