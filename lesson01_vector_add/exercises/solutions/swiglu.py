"""SPOILER: the solution of exercise 1.5 (SwiGLU's gate), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "130bbae5de07"  # common.exercise.given_fingerprint of swiglu.py as the course ships it


@triton.jit
def swiglu_kernel(a_ptr, b_ptr, out_ptr, N, BLOCK_SIZE: tl.constexpr):
    """out = a * sigmoid(a) * b, in float32, stored in out's dtype."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (a * tl.sigmoid(a) * b).to(out_ptr.dtype.element_ty), mask=mask)


# The mistakes, each an edit of the solution above (common.exercise.patched)
GATED = "a * tl.sigmoid(a) * b"
WRONG = [Wrong("a loaded twice", "budget", "a was read 2.00 times over",
               dict(swiglu_kernel=patched(swiglu_kernel, (GATED, "a * tl.sigmoid(tl.load(a_ptr + offsets, mask=mask)"
                                                                 ".to(tl.float32)) * b")))),
         Wrong("sigmoid(a) * b", "values", "are wrong",
               dict(swiglu_kernel=patched(swiglu_kernel, (GATED, "tl.sigmoid(a) * b"))))]
