"""Which kernels does an implementation launch? torch.profiler knows (a CUDA GPU needed).

One row per CUDA kernel name: how many launches, total GPU time. Lessons print it to show what
fusion saves (eager PyTorch launches one kernel per operator; a fused kernel, one in all), and
common.bench reads the kernels' own timestamps from it.
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
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            calls[e.key] += e.count
            micros[e.key] += e.self_device_time_total
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
