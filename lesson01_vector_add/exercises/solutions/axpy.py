"""SPOILER: the solution of exercise 1.1 (axpy), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


GIVEN = "f3d1080cc704"  # common.exercise.given_fingerprint of axpy.py as the course ships it


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
    """out[i] = a * x[i] + y[i] for the BLOCK_SIZE elements of this program."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (a * x + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def no_mask(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets).to(tl.float32)
    y = tl.load(y_ptr + offsets).to(tl.float32)
    tl.store(out_ptr + offsets, (a * x + y).to(out_ptr.dtype.element_ty))


@triton.jit
def one_block_only(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)  # forgot pid: every program does block 0
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (a * x + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def swapped(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (a * y + x).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def not_a_power_of_two(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, 100)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (a * x).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def into_the_input(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(y_ptr + offsets, (a * x + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def no_float32(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)  # bf16 arithmetic: the interpreter computes garbage on it
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a * x + y, mask=mask)


WRONG = [Wrong("no mask", "memory", "past the end of x", dict(axpy_kernel=no_mask)),
         Wrong("every program on block 0", "memory", "is written 2 times", dict(axpy_kernel=one_block_only)),
         Wrong("x and y swapped", "values", "are wrong", dict(axpy_kernel=swapped)),
         Wrong("tl.arange of 100", "runs", "power of two", dict(axpy_kernel=not_a_power_of_two)),
         Wrong("stored into y", "memory", "writes into y, an input", dict(axpy_kernel=into_the_input)),
         Wrong("no float32 arithmetic", "values", "they cancel", dict(axpy_kernel=no_float32))]
