"""torch.compile's analysis of which tensors a kernel writes, for tests/test_training.py: run in a
compiled-mode child process (common/child.py), whatever this machine's mode."""
import importlib
import io
import logging

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget


class H200:  # the analysis compiles to Triton's IR for the active GPU
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


def kernel_writes(launches: list) -> tuple[list, str]:
    """For each (module, kernel name, {argument: value}) launch: the arguments torch.compile takes it
    to write; and what the analysis warned of (its fallback, on an exception, is every input written)."""
    triton.runtime.driver.set_active(H200())
    from torch._higher_order_ops import triton_kernel_wrap as wrap

    warned = io.StringIO()
    logging.getLogger("torch._dynamo").addHandler(logging.StreamHandler(warned))
    out = []
    for module, name, args in launches:
        kernel = getattr(importlib.import_module(module), name)
        kwargs = {}
        for arg, value in args.items():
            if isinstance(value, dict) and "tensor" in value:
                kwargs[arg] = torch.empty(value["shape"], dtype=getattr(torch, value["tensor"]))
            elif isinstance(value, dict):
                kwargs[arg] = getattr(tl, value["dtype"])
            else:
                kwargs[arg] = value
        if hasattr(wrap, "identify_accessed_tensors"):  # torch >= 2.12
            writes = sorted(dep.name for dep in wrap.identify_accessed_tensors(kernel, kwargs, {}).read_writes.writes)
        else:  # older: the names it writes
            try:
                writes = sorted(wrap.identify_mutated_tensors(kernel, kwargs, {}))
            except TypeError:  # before TMA descriptors came into its signature
                writes = sorted(wrap.identify_mutated_tensors(kernel, kwargs))
        out.append(writes)
    return out, warned.getvalue()
