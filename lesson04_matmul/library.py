"""Lesson 4, beside the library: torch.matmul runs a different kernel for each shape.

cuBLAS (and the CUTLASS-style kernels it ships) holds many matmul kernels, each written for one
tile shape, one pipeline depth, one way to split the work; for every call it picks one with a
heuristic of the shape, the dtypes and the GPU. The source documents read this in the profiler:
the kernel's name changes with the dimensions (127, 128, 129, ...). This file prints the names
for a few shapes, beside the kernel and configuration this lesson's matmul() runs: the same
decision, made by the autotuner from measurements (main.py, section 6) instead of a heuristic.
main.py's section "library" calls it.
"""
import torch

from common import bench, profile
from common.device import DEVICE, INTERPRET
from common.launch import CHOSEN
from common.results import print_recorded

TITLE = "Which kernel runs, by shape"


def chosen_config(tuned, key: tuple) -> str:
    """The configuration the autotuner picked for `key` (common.launch remembers it per key)."""
    kw = CHOSEN[tuned, key][1]
    return f"{kw['BLOCK_M']} x {kw['BLOCK_N']} x {kw['BLOCK_K']}, {kw['num_warps']} warps, {kw['num_stages']} stages"


def kernels_by_shape(matmul, matmul_module, hopper_module, sizes=(127, 128, 129, 1024, 4095, 4096),
                     dtype=torch.float16) -> bench.Table | None:
    """For each n: the kernels torch.matmul and matmul() launch for an n x n x n product (profiler)."""
    if INTERPRET:  # the profiler sees ATen operators on the CPU, not kernels
        print_recorded(__file__, TITLE)
        return None
    rows = []
    with torch.no_grad():
        for n in sizes:
            a, b = torch.randn(2, n, n, device=DEVICE, dtype=dtype)
            matmul(a, b)  # autotuning, outside the profile
            for who, fn in (("torch.matmul", lambda: a @ b), ("matmul()", lambda: matmul(a, b))):
                for name, calls, us in profile.kernels_launched(fn, repeat=10):
                    tuned = hopper_module.matmul_kernel_tma_tuned if "tma" in name else matmul_module.matmul_kernel_tuned
                    config = chosen_config(tuned, (n, n, n, dtype)) if who == "matmul()" else "(cuBLAS' heuristic)"
                    rows.append((f"{n}^3", who, profile.short(name, width=100), config, us / calls))
    return bench.print_table(rows, ["M = N = K", "who", "kernel", "configuration", "µs per launch"], title=TITLE,
                             note=f"{bench.stamp()}, float16. Kernel names and times from torch.profiler (10 calls, "
                                  "no L2 flush).")
