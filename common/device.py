"""Where the kernels run: a CUDA GPU if there is one, Triton's interpreter on the CPU if not.

Triton reads TRITON_INTERPRET once, when it is first imported, and `@triton.jit` then builds
either a compiled kernel (GPU) or an interpreted one (numpy on the CPU). So this module must be
imported before triton; every lesson does that in its first lines. An explicit TRITON_INTERPRET
in the environment is respected (=1 forces the interpreter even on a GPU machine).
"""
import functools
import os
import sys

import torch

if "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules and not torch.cuda.is_available():
        raise RuntimeError(
            "triton was imported before common.device, in compiled mode, on a machine without a "
            "CUDA GPU: import common.device first (or set TRITON_INTERPRET=1)."
        )
    os.environ["TRITON_INTERPRET"] = "0" if torch.cuda.is_available() else "1"
# Triton 3.9 warns that the default for fusing a*b+c into one FMA instruction will change;
# keep today's default (fused) so results are the same across versions, and keep the output quiet.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

INTERPRET = os.environ["TRITON_INTERPRET"] == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_COUNT = 0 if INTERPRET else torch.cuda.device_count()  # how many CUDA GPUs this process sees

if INTERPRET:
    import common.interpreter  # noqa: F401  (what the interpreter needs here, before any kernel runs)


@functools.cache
def sm_count() -> int:
    """Streaming multiprocessors: how many programs run at once, roughly (one or a few per SM).
    Under the interpreter there is no GPU; we use an H200's 132 so that launch decisions (and the
    tables that show them) are the same as on the GPU these lessons were measured on."""
    return 132 if INTERPRET else torch.cuda.get_device_properties(0).multi_processor_count


# The GPUs learners run this course on, by compute capability (major x 10 + minor): an example of
# each, and the most shared memory one program may use there (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability"). A kernel whose tiles need more than that
# cannot launch: Triton raises OutOfResources, which the autotuner takes as "skip this config".
GPUS = {75: ("T4, RTX 20xx", 64 << 10), 80: ("A100", 163 << 10), 86: ("RTX 30xx, A10", 99 << 10),
        89: ("L4, RTX 40xx", 99 << 10), 90: ("H100, H200", 227 << 10), 100: ("B200", 227 << 10),
        120: ("RTX 50xx", 99 << 10)}


@functools.cache
def capability() -> int:
    """This GPU's compute capability as one number (90 for 9.0); an H200's under the interpreter."""
    if INTERPRET:
        return 90
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


@functools.cache
def shared_memory() -> int:
    """The most shared memory one program may use on this GPU, in bytes (an H200's under the interpreter)."""
    return GPUS[90][1] if INTERPRET else torch.cuda.get_device_properties(0).shared_memory_per_block_optin


def gpu_name() -> str:
    return "CPU (Triton interpreter)" if INTERPRET else torch.cuda.get_device_name()


def interpretable(x: torch.Tensor) -> torch.Tensor:
    """What a launcher hands its kernel: x itself, except bfloat16 under the interpreter, which
    becomes float32 (the interpreter cannot compute on bf16: common/interpreter.py says why)."""
    return x.float() if INTERPRET and x.dtype == torch.bfloat16 else x
