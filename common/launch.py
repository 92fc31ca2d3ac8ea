"""Launching: the grid arithmetic, and a kernel as a PyTorch operator launches it.

A launcher computes its grid with plain integers: `triton.cdiv` is a "constexpr function" (the
same function runs inside kernels), and a call from Python goes through that machinery, about a
microsecond against a few nanoseconds for `(a + b - 1) // b` (lesson 1, "What a call costs the
host"). Then it launches the one way Triton documents, `kernel[grid](...)`.

Lesson 1 section 5 registers each public function as a PyTorch operator
(torch.library.triton_op), so that autograd has its backward and torch.compile can trace it. Two
helpers serve that:
- `needs_op`: whether a call must go through the operator (autograd records it, or torch.compile
  traces it). A call through PyTorch's dispatcher pays microseconds more on the host, so every
  other call runs the launcher directly.
- `traceable(kernel)`: the kernel as an operator's body launches it. torch.library.wrap_triton
  records the launch in torch.compile's graph instead of running it (in eager mode it hands back
  the kernel itself), and its tracer wants every argument, defaults included, which
  `traceable` fills in from the kernel's signature.
"""
import inspect

import torch
from torch.library import wrap_triton

from common.device import INTERPRET, sm_count
from triton.runtime import Autotuner


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for whole numbers: how many blocks of b cover a."""
    return (a + b - 1) // b


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


def dot_block(n: int) -> int:
    """n padded to a power of two, at least 16: a block's width along a dimension that tl.dot
    multiplies over (a head dim of 80 computes as 128, its padding masked)."""
    return max(16, next_power_of_2(n))


def splits_to_fill(programs: int, most: int) -> int:
    """Into how many parts to split each program's work so that the grid holds at least 4 programs
    per SM (lesson 3's rule of thumb): 1 where `programs` are enough already, never more than `most`."""
    return max(1, min(cdiv(4 * sm_count(), programs), most))


def scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory for the TMA descriptors a kernel's programs build (tl.make_tensor_descriptor),
    which Triton asks for at each launch: `triton.set_allocator(scratch)` before the launch (lesson 4's
    hopper.py). PyTorch's allocator aligns every block to at least 256 bytes, more than the
    `alignment` Triton asks for. Triton keeps the allocator per thread (a context variable), and
    autograd runs a backward on a thread of its own: set it on every call."""
    return torch.empty(size, dtype=torch.int8, device="cuda" if not INTERPRET else "cpu")


def needs_op(*tensors) -> bool:
    """Must this call go through the registered operator? Where autograd records the call (grad mode
    on and an input that requires grad) or torch.compile traces it; not otherwise."""
    if torch.is_grad_enabled():  # a plain loop: this runs on every call
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return True
    if torch.compiler.is_compiling():
        if INTERPRET:
            raise RuntimeError("torch.compile cannot trace kernels that Triton's interpreter runs (no CUDA GPU "
                               "here): on the CPU, call the lessons' functions without torch.compile")
        return True
    return False


class traceable:
    """`traceable(kernel)[grid](*args, **kwargs)`: the launch inside a registered operator's body.
    The same as `torch.library.wrap_triton(kernel)[grid](*args, **kwargs)`, with the kernel's
    default arguments (TRACE=False, ...) passed as well, for torch.compile's tracer wants them all."""

    def __init__(self, kernel):
        fn = kernel.fn if isinstance(kernel, Autotuner) else kernel  # @triton.autotune wraps a @triton.jit
        self.kernel = kernel
        # fn.fn: the Python function. A parameter the autotuner's configurations set (DIM_SPLIT, say)
        # is the autotuner's to pass: a default for it would conflict with their values.
        tuned = {name for config in getattr(kernel, "configs", []) for name in config.kwargs}
        self.params = list(inspect.signature(fn.fn).parameters.values())
        self.defaults = {p.name: p.default for p in self.params if p.default is not p.empty and p.name not in tuned}

    def __getitem__(self, grid):
        if INTERPRET:  # nothing traces the interpreter's kernels (needs_op says why)
            return self.kernel[grid]
        launch = wrap_triton(self.kernel)[grid]

        def run(*args, **kwargs):
            given = {p.name for p in self.params[:len(args)]} | kwargs.keys()
            defaults = {name: value for name, value in self.defaults.items() if name not in given}
            return launch(*args, **kwargs, **defaults)
        return run
