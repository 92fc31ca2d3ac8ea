"""Which kernels does an implementation launch? torch.profiler knows.

On a GPU the table lists the CUDA kernels (one row per kernel name: how many launches, total GPU
time). On the CPU there are no kernels: it lists the top-level ATen operators instead, which is
the same story one level up (each eager PyTorch operator is one pass over memory).
"""
import collections
import contextlib
import os
import re
import sys
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from common.device import INTERPRET


def kernels_launched(fn, repeat: int = 1, between=None) -> list[tuple[str, int, float]]:
    """Run fn() `repeat` times under the profiler (between() before each, if given); return
    (name, calls, total microseconds) per kernel (GPU) or top-level ATen op (CPU)."""
    fn()  # warm-up: compilation, autotuning and caches stay out of the picture
    activities = [ProfilerActivity.CPU] + ([] if INTERPRET else [ProfilerActivity.CUDA])
    warnings.filterwarnings("ignore", message=".*Profiler clears events")
    prof = profile(activities=activities)
    with _quiet_stderr():
        prof.start()
    for _ in range(repeat):
        if between is not None:
            between()
        fn()
    if not INTERPRET:
        torch.cuda.synchronize()
    with _quiet_stderr():
        prof.stop()
    calls, micros = collections.Counter(), collections.Counter()
    if INTERPRET:  # operators the code called, not the ones they call inside
        for e in prof.events():
            if e.cpu_parent is None and e.name.startswith(("aten::", "Torch-Compiled Region")):
                calls[e.name] += 1
                micros[e.name] += e.cpu_time_total
    else:
        for e in prof.key_averages():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                calls[e.key] += e.count
                micros[e.key] += getattr(e, "self_device_time_total", None) or e.self_cuda_time_total
    return sorted(((k, calls[k], micros[k]) for k in calls), key=lambda r: -r[2])


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
