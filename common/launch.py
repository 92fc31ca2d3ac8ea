"""Launching: the grid arithmetic, and the memory TMA descriptors built on the device live in.

A launcher computes its grid with plain integers: `triton.cdiv` is a "constexpr function" (the same
function runs inside kernels), and a call from Python goes through that machinery, far slower than
`(a + b - 1) // b`, which is a few bytecodes. Then it launches the one way Triton documents,
`kernel[grid](...)`, passing every argument of the kernel, defaults too: torch.compile records the
launch as it is written, and its analysis of which tensors a kernel writes needs them all (without
them it takes every input to be written).
"""
import torch

from common.device import INTERPRET, shared_memory, sm_count


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


def traced_config(configs: list, dtype: torch.dtype) -> dict:
    """The one configuration of an autotuned kernel's list that a launch takes while torch.compile
    traces: the tracer (torch 2.11) refuses an autotuner that a traced model launches more than once
    ("ListVariable ... is already tracked for mutation"), and a model launches each of its kernels
    once a layer. The list's first, the fastest in the sweeps, for 16-bit inputs on a GPU with an
    H100's shared memory; its last, which fits every GPU in float32 too, otherwise. As kwargs of
    `kernel[grid](...)`: the block sizes, num_warps and num_stages."""
    big = shared_memory() >= 160 << 10 if torch.cuda.is_available() else True  # (no GPU: a trace only, as an H100's)
    config = configs[0] if dtype != torch.float32 and big else configs[-1]
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
