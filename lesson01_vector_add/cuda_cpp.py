"""Lesson 1, beside Triton: the same GELU in CUDA C++.

A GELU written by hand in CUDA C++, bound to Python with PyTorch's
`torch.utils.cpp_extension.load_inline`, which writes the source to disk, compiles it with nvcc
and ninja, and imports the result. Reading it next to `gelu_kernel` shows what Triton does for
us: a CUDA kernel is written for ONE thread, a Triton kernel for one program (a block of
threads), and everything between the two (how the block's elements are spread over threads,
vector loads, shared memory, barriers) the compiler decides.

main.py imports this file: its section 9 prints the source and the comparison; on a GPU, section
10 builds the kernel, checks it against F.gelu and times it beside the others. Building needs a
CUDA GPU, the CUDA toolkit's nvcc and the ninja build tool; the first build takes about half a
minute, later runs load it from torch's extension cache.
"""
import functools
import os
import shutil

import torch
import torch.nn.functional as F

from common.table import print_table

# The textbook kernel, one thread per element, with two details worth copying, both marked: float
# constants (0.5 and 1.0 written as doubles would make the compiler do the arithmetic in float64)
# and PyTorch's current stream (the default stream ignores torch.cuda.stream() and cannot be
# captured in a CUDA graph).
SOURCE = r"""
#include <ATen/cuda/CUDAContext.h>

__global__ void gelu_kernel(const float* in, float* out, int num_elements) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;   // this thread's ONE element
    if (i < num_elements) {                          // the mask, for one lane
        float x = in[i];
        out[i] = 0.5f * x * (1.0f + tanhf(0.79788456f * (x + 0.044715f * x * x * x)));  // float, not double
    }
}

inline unsigned int cdiv(unsigned int a, unsigned int b) {
    return (a + b - 1) / b;                          // enough blocks to cover every element
}

torch::Tensor gelu(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cuda(), "gelu: x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "gelu: x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "gelu: x must be float32");
    TORCH_CHECK(x.numel() < (1LL << 31), "gelu: more than 2^31 - 1 elements");

    torch::Tensor y = torch::empty_like(x);
    int num_elements = x.numel();
    int block_size = 1024;                           // threads per block: we choose
    int num_blocks = cdiv(num_elements, block_size);
    if (num_blocks == 0) return y;
    auto stream = at::cuda::getCurrentCUDAStream();  // PyTorch's stream, not the default one
    gelu_kernel<<<num_blocks, block_size, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), num_elements);
    C10_CUDA_KERNEL_LAUNCH_CHECK();                  // a bad launch raises here, not later
    return y;
}
"""
DECLARATION = "torch::Tensor gelu(torch::Tensor x);"  # what load_inline binds to Python

# Who manages what. Left: what the CUDA C++ above spells out. Right: the same in gelu_kernel.
WHO_MANAGES_WHAT = [
    ("the kernel is written for", "one thread: i = blockIdx.x * blockDim.x + threadIdx.x",
     "one program: offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)"),
    ("threads per block", "you: block_size = 1024, one element each",
     "num_warps x 32; the compiler spreads BLOCK_SIZE over them (8 each at 1024 / 128)"),
    ("the edge", "if (i < num_elements), per thread", "mask=offsets < N, per block"),
    ("vector loads (16 bytes)", "by hand (float4 and an alignment check)", "the compiler, from alignment (main.py section 8)"),
    ("shared memory", "declared and indexed by hand (__shared__)", "allocated by the compiler (reductions, tl.dot tiles)"),
    ("synchronization", "__syncthreads() wherever threads share data", "barriers inserted by the compiler"),
    ("the launch", "<<<num_blocks, block_size, 0, stream>>> + a launch check", "kernel[grid](...)"),
    ("building", "nvcc + ninja through load_inline, ~30 s the first time", "JIT-compiled at the first call"),
]


def unavailable() -> str | None:
    """Why the CUDA C++ kernel cannot be built here, or None if it can."""
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME is None or not (shutil.which("nvcc") or os.path.exists(
            os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc"))):
        return "no nvcc (the CUDA toolkit) found"
    if not cpp_extension.is_ninja_available():
        return "no ninja build tool found (pip install ninja)"
    return None


@functools.cache
def build():
    """Compile SOURCE and import it as a Python module (cached by torch between runs)."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(name="lesson01_gelu_cuda", cpp_sources=DECLARATION, cuda_sources=SOURCE, functions=["gelu"])


def section():
    """The source, and who manages what in each of the two languages."""
    print(SOURCE.strip())
    print()
    return print_table(WHO_MANAGES_WHAT, ["", "CUDA C++ (above)", "Triton (gelu_kernel)"])


def built_and_checked():
    """The CUDA C++ gelu (a Python function), built and checked against F.gelu; None where it cannot be
    built, with the reason printed."""
    reason = unavailable()
    if reason:
        print(f"(The CUDA C++ GELU is not built here: {reason}.)")
        return None
    module = build()
    for n in (1, 1000, 1025, 1 << 20):
        x = torch.randn(n, device="cuda")
        err = (module.gelu(x) - F.gelu(x, approximate="tanh")).abs().max().item()
        print(f"CUDA C++ gelu, N = {n:>7}: max |CUDA C++ - F.gelu| = {err:.1e}")
    return module.gelu
