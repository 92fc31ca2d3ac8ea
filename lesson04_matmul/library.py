"""Lesson 4, beside the library: torch.matmul runs a different kernel for each shape.

cuBLAS (and the CUTLASS-style kernels it ships) holds many matmul kernels, each written for one
tile shape, one pipeline depth, one way to split the work; for every call it picks one with a
heuristic of the shape, the dtypes and the GPU. The profiler shows it: the kernel's name changes
with the dimensions (127, 128, 129, ...). This file prints the names for a few shapes, beside the
kernel and configuration this lesson's matmul() runs: the same decision, made by the autotuner
from measurements (main.py, section 6), or on Hopper by hopper.config() (a pick timed for the
shape, else its rule), instead of a heuristic. main.py's section 15 runs it (a GPU section: the profiler sees no kernels on a CPU).
"""
import torch

from common import profile
from common.checks import dtype_name
from common.device import DEVICE
from common.table import Table, print_table
from lesson04_matmul import hopper
from lesson04_matmul.matmul import matmul, matmul_kernel_tuned

TITLE = "Which kernel runs, by shape"
CONFIGURATIONS = {  # {kernel: a function of n giving the configuration it ran for an n x n x n product}
    "matmul_kernel": lambda n: matmul_kernel_tuned.best_config,  # the autotuner's pick for the last call
    "matmul_kernel_tma": lambda n: hopper.config(n, n, n),  # (Hopper) what it launches with, no autotuner
}


def described(config) -> str:
    """A configuration in a few words: its tile, warps and pipeline stages (and K's parts, where
    split). config: a triton.Config (an autotuner's) or a dict of the same keys (hopper.config's)."""
    if isinstance(config, dict):
        kw, warps, stages = config, config["num_warps"], config["num_stages"]
    else:
        kw, warps, stages = config.kwargs, config.num_warps, config.num_stages
    split = f", K in {kw['SPLIT_K']} parts" if kw.get("SPLIT_K", 1) > 1 else ""
    return f"{kw['BLOCK_M']} x {kw['BLOCK_N']} x {kw['BLOCK_K']}, {warps} warps, {stages} stages{split}"


def kernels_by_shape(sizes=(127, 128, 129, 1024, 4095, 4096), dtype=torch.float16) -> Table:
    """For each n: the kernels torch.matmul and matmul() launch for an n x n x n product (profiler),
    and the configuration each of matmul()'s ran (CONFIGURATIONS, asked after the call)."""
    rows = []
    with torch.no_grad():
        for n in sizes:
            a, b = torch.randn(2, n, n, device=DEVICE, dtype=dtype)
            for who, fn in (("torch.matmul", lambda: a @ b), ("matmul()", lambda: matmul(a, b))):
                for name, calls, us in profile.kernels_launched(fn, repeat=10):  # (autotuning in its warm-up)
                    kernel = profile.short(name, width=100)
                    if who == "torch.matmul":
                        config = "(cuBLAS' heuristic)"
                    else:
                        chosen = CONFIGURATIONS.get(kernel)
                        config = described(chosen(n)) if chosen is not None else "-"
                    rows.append((f"{n}^3", who, kernel, config, us / calls))
    return print_table(rows, ["M = N = K", "who", "kernel", "configuration", "µs per launch"], title=TITLE,
                       note=f"{dtype_name(dtype)}. Kernel names and times from torch.profiler "
                            "(10 calls, no L2 flush).")
