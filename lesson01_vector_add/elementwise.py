"""Lesson 1's ops: add(x, y) and gelu(x), element-wise, forward and backward.

Each kernel is written for ONE program: it asks for its number (pid), works out which elements are
its own (offsets), masks off the ones past the end (mask), then loads, computes and stores; the
launch grid says how many programs run. main.py, the chapter, traces the kernels, checks and times
them; this file is what a model imports. Lesson 4 imports two things from it: gelu_tanh, the GELU
its matmul fuses into its epilogue, and gelu_tanh_grad, its derivative, which the matmul's
backward fuses into its own.

The ops have the course's one shape (the chapter's section 5): add() and gelu() check their
inputs, Add and Gelu (autograd functions) say what the forward launches and what the backward
returns, and launch() runs `kernel[grid](...)`.
"""
from common.device import interpretable  # first: it decides how triton is imported

import torch
import triton
import triton.language as tl

from common.checks import check_tensors, whole
from common.launch import cdiv
from common.trace import show

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# The six steps, the same in every kernel of this course:
# who am I (pid) -> which elements (offsets) -> which are real (mask) -> load -> compute -> store.
@triton.jit
def add_kernel(
    x_ptr,                      # address of x[0] (Triton takes it from the torch tensor)
    y_ptr,                      # address of y[0]
    output_ptr,                 # address of output[0]
    N,                          # number of elements
    BLOCK_SIZE: tl.constexpr,   # elements per program; a compile-time constant
    TRACE: tl.constexpr = False,  # print what each program does (interpreter only)
):
    # 1. Which program am I? Programs are numbered 0 .. grid-1 along axis 0.
    pid = tl.program_id(axis=0)
    # 2. Which elements are mine? A whole block of positions at once: tl.arange(0, BLOCK_SIZE) is
    #    the vector [0, 1, ..., BLOCK_SIZE-1]; adding the start of my block shifts it.
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # 3. Which of them exist? The last block usually runs past the end of the array.
    mask = offsets < N
    if TRACE:
        show("pid", pid)
        show("offsets", offsets)
        show("lanes the mask keeps", tl.sum(mask.to(tl.int32), axis=0))
        show("lanes masked off", BLOCK_SIZE - tl.sum(mask.to(tl.int32), axis=0))
    # 4. Load: pointer + vector of offsets = vector of addresses (in elements, not bytes).
    #    Masked-off lanes are not read; they get `other` instead.
    x = tl.load(x_ptr + offsets, mask=mask, other=0)
    y = tl.load(y_ptr + offsets, mask=mask, other=0)
    # 5. Compute, on the whole block at once.
    output = x + y
    if TRACE and BLOCK_SIZE <= 8:  # small enough to print whole
        show("x", x)
        show("y", y)
        show("output", output)
    # 6. Store; masked-off lanes are not written (the sum is rounded to the output's dtype here).
    tl.store(output_ptr + offsets, output, mask=mask)


@triton.jit
def gelu_tanh(x):
    """GELU, tanh form, on a float32 block. A @triton.jit function called from kernels is
    inlined into them: lesson 4 fuses this same function into a matmul."""
    # 0.5 * (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)): the same GELU with one exp and
    # one division. (Triton's interpreter has no tanh; this form runs everywhere.)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2/pi) * (x + 0.044715 x^3)
    # For very negative x, exp(-2u) is inf and x / inf = -0.0: the right limit, no NaN.
    # ieee_rounding=False: a fast division (within 2 units in the last place) instead of the
    # correctly rounded one, which takes a dozen instructions. Here memory is the limit and it
    # makes no difference; in lesson 4's fused epilogue the arithmetic is what costs.
    return tl.fdiv(x, 1.0 + tl.exp(-2.0 * u), ieee_rounding=False)


@triton.jit
def gelu_kernel(x_ptr, y_ptr, N, BLOCK_SIZE: tl.constexpr):
    # The same six steps as add_kernel: only step 5 differs. The whole formula runs on numbers
    # already in registers, so eight operators cost one read and one write of memory.
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask, other=0).to(tl.float32)  # math in fp32, for every dtype
    y = gelu_tanh(x)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)  # back to the input's dtype


@triton.jit
def gelu_tanh_grad(x):
    """gelu'(x) for gelu_tanh, on a float32 block. gelu(x) = x s with s = sigmoid(2u), u = sqrt(2/pi)
    (x + 0.044715 x^3), and sigmoid' = s (1 - s), so gelu'(x) = s + x s (1 - s) 2 du/dx with du/dx =
    sqrt(2/pi) (1 + 3 * 0.044715 x^2). Lesson 4's matmul fuses it into its backward's epilogue."""
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    s = 1.0 / (1.0 + tl.exp(-2.0 * u))                   # exp overflows to inf for x << 0: s = 0, no NaN
    du = 0.7978845608028654 * (1.0 + 0.134145 * x * x)
    return s + 2.0 * x * s * (1.0 - s) * du


@triton.jit
def gelu_backward_kernel(dy_ptr, x_ptr, dx_ptr, N, BLOCK_SIZE: tl.constexpr):
    # dL/dx = dL/dy * gelu'(x): the six steps again, gelu' (gelu_tanh_grad above) in step 5.
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0).to(tl.float32)
    x = tl.load(x_ptr + offsets, mask=mask, other=0).to(tl.float32)
    dx = dy * gelu_tanh_grad(x)
    tl.store(dx_ptr + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


# %% The launcher, the autograd functions and the ops
def launch(kernel, *tensors: torch.Tensor, BLOCK_SIZE: int = 1024, num_warps: int = 4, **constants) -> torch.Tensor:
    """kernel(*tensors, output, N, BLOCK_SIZE, **constants) over tensors of one shape and dtype:
    the output is a new contiguous tensor of that shape, ceil(N / BLOCK_SIZE) programs fill it.

    The kernels walk memory with flat offsets 0..N-1, which is only right for a contiguous tensor,
    so a strided view (x[::2], x.t()) is copied into a contiguous one first: correct, at the cost
    of one extra pass over memory."""
    output = tensors[0].new_empty(tensors[0].shape)  # contiguous, whatever the inputs' strides
    N = output.numel()
    if N:
        grid = (cdiv(N, BLOCK_SIZE),)  # ceil(N / BLOCK_SIZE) programs
        inputs = [interpretable(t.contiguous()) for t in tensors]  # (bf16 as fp32 under the interpreter)
        kernel[grid](*inputs, output, N, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, **constants)
    return output


def gelu_backward(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dL/dx = dy * gelu'(x), in one pass, for dy and x of one shape and dtype. A plain launch, no
    checks and no autograd: Gelu's backward runs it."""
    return launch(gelu_backward_kernel, dy, x)


class Add(torch.autograd.Function):
    """out = x + y: both gradients are dL/dout itself. No backward kernel."""

    @staticmethod
    def forward(ctx, x, y, BLOCK_SIZE, num_warps):
        # every argument, TRACE too: torch.compile's analysis of what a kernel writes wants them all
        # (it takes a kernel called with fewer to write every input, x and y included)
        return launch(add_kernel, x, y, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, TRACE=False)

    @staticmethod
    def backward(ctx, dout):
        return dout, dout, None, None  # one gradient per input of forward; none for the two ints


class Gelu(torch.autograd.Function):
    """y = gelu(x); dL/dx = dL/dy * gelu'(x), from x, which the forward keeps."""

    @staticmethod
    def forward(ctx, x, BLOCK_SIZE, num_warps):
        ctx.save_for_backward(x)  # saved tensors: autograd checks they were not changed in place
        return launch(gelu_kernel, x, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return gelu_backward(dy, x), None, None


def checked(inputs: dict, BLOCK_SIZE, num_warps) -> tuple:
    """(tensors, BLOCK_SIZE, num_warps) as the kernels take them, or an error that names the problem."""
    tensors = check_tensors(inputs, DTYPES, same_shape=True)
    # tl.arange needs a power of two; a program has at most 32 warps (1024 threads)
    BLOCK_SIZE = whole("BLOCK_SIZE", BLOCK_SIZE, power_of_two_to=2**16)
    num_warps = whole("num_warps", num_warps, power_of_two_to=32)
    if tensors[0].numel() + BLOCK_SIZE > 2**31:  # the offsets are int32, up to a block past the end
        raise ValueError(f"{tensors[0].numel()} elements: this kernel's int32 offsets stop near 2**31 "
                         "(lesson 2, section 4: 64-bit offsets)")
    return tensors, BLOCK_SIZE, num_warps


def add(x: torch.Tensor, y: torch.Tensor, *, BLOCK_SIZE: int = 1024, num_warps: int = 4) -> torch.Tensor:
    """x + y, element-wise, for float32/float16/bfloat16 tensors of one shape on one device."""
    (x, y), BLOCK_SIZE, num_warps = checked({"x": x, "y": y}, BLOCK_SIZE, num_warps)
    return Add.apply(x, y, BLOCK_SIZE, num_warps)


def gelu(x: torch.Tensor, *, BLOCK_SIZE: int = 1024, num_warps: int = 4) -> torch.Tensor:
    """GELU (tanh approximation) in one pass: float32/float16/bfloat16, math in float32."""
    (x,), BLOCK_SIZE, num_warps = checked({"x": x}, BLOCK_SIZE, num_warps)
    return Gelu.apply(x, BLOCK_SIZE, num_warps)
