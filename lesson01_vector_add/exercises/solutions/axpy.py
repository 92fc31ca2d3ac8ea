"""SPOILER: the solution of exercise 1.1 (axpy), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


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


# The mistakes, each an edit of the solution above (common.exercise.patched)
WRONG = [Wrong("no mask", "memory", "past the end of x",
               dict(axpy_kernel=patched(axpy_kernel, (", mask=mask", "", 3)))),
         Wrong("every program on block 0", "memory", "is written 2 times",
               dict(axpy_kernel=patched(axpy_kernel, ("pid * BLOCK_SIZE + tl.arange", "tl.arange")))),
         Wrong("x and y swapped", "values", "are wrong",
               dict(axpy_kernel=patched(axpy_kernel, ("(a * x + y)", "(a * y + x)")))),
         Wrong("tl.arange of 100", "runs", "power of two",
               dict(axpy_kernel=patched(axpy_kernel, ("tl.arange(0, BLOCK_SIZE)", "tl.arange(0, 100)")))),
         Wrong("stored into y", "memory", "writes into y, an input",
               dict(axpy_kernel=patched(axpy_kernel, ("tl.store(out_ptr", "tl.store(y_ptr")))),
         # bf16 arithmetic: the interpreter computes garbage on it
         Wrong("no float32 arithmetic", "values", "they cancel",
               dict(axpy_kernel=patched(axpy_kernel, (".to(tl.float32)", "", 2))))]
