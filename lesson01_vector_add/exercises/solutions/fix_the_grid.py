"""SPOILER: the mended code of exercise 1.3, and half-mended ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched
from common.launch import cdiv


GIVEN = "9468c9bc6d01"  # common.exercise.given_fingerprint of fix_the_grid.py as the course ships it


@triton.jit
def scale_kernel(x_ptr, out_ptr, N, BLOCK_SIZE: tl.constexpr):
    """out = 2 x, one block of BLOCK_SIZE elements per program."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2 * x, mask=mask)


def launch(scale_kernel, x, out, BLOCK_SIZE=256):
    """One program per BLOCK_SIZE elements."""
    N = x.numel()
    grid = (cdiv(N, BLOCK_SIZE),)
    scale_kernel[grid](x, out, N, BLOCK_SIZE=BLOCK_SIZE)


# The mistakes, each an edit of the solution above (common.exercise.patched): the two bugs as shipped
MASK = ("offsets < N", "offsets <= N")
GRID = ("cdiv(N, BLOCK_SIZE)", "N // BLOCK_SIZE")
WRONG = [Wrong("as shipped", "memory", "left unwritten", dict(scale_kernel=patched(scale_kernel, MASK),
                                                                   launch=patched(launch, GRID))),
         Wrong("only the mask mended", "memory", "left unwritten", dict(launch=patched(launch, GRID))),
         Wrong("only the grid mended", "memory", "past the end of x", dict(scale_kernel=patched(scale_kernel, MASK)))]
