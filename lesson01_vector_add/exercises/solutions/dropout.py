"""SPOILER: the solution of exercise 1.2 (dropout), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "1a6637fa66c3"  # common.exercise.given_fingerprint of dropout.py as the course ships it


@triton.jit
def dropout_kernel(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    """out = x / (1 - p) where tl.rand(seed, offsets) > p, else 0."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    r = tl.rand(seed, offsets)
    tl.store(out_ptr + offsets, tl.where(r > p, x / (1 - p), 0.0), mask=mask)


# The mistakes, each an edit of the solution above (common.exercise.patched)
RAND = "r = tl.rand(seed, offsets)"
WRONG = [Wrong("kept elements not scaled", "values", "neither 0 nor",
               dict(dropout_kernel=patched(dropout_kernel, ("x / (1 - p), 0.0", "x, 0.0")))),
         Wrong("keeps with probability p", "values", "the right way round",
               dict(dropout_kernel=patched(dropout_kernel, ("r > p", "r < p")))),
         Wrong("the seed ignored, the lanes' numbers", "values", "another seed gave the same output",
               dict(dropout_kernel=patched(dropout_kernel, (RAND, "r = tl.rand(0, tl.arange(0, BLOCK_SIZE))")))),
         Wrong("a hash of the offsets", "values", "neighbours' random numbers follow from each other",
               dict(dropout_kernel=patched(dropout_kernel, (RAND, "r = ((offsets * 40503 + seed * 9973) % 65536)"
                                                                  ".to(tl.float32) / 65536")))),
         Wrong("tl.rand(seed, pid)", "values", "one random number served the whole block",
               dict(dropout_kernel=patched(dropout_kernel, (RAND, "r = tl.rand(seed, pid)")))),
         Wrong("tl.rand(seed, lane)", "values", "not on its lane in the block or its program",
               dict(dropout_kernel=patched(dropout_kernel, (RAND, "r = tl.rand(seed, tl.arange(0, BLOCK_SIZE))")))),
         # the right share dropped, the first elements: no randomness at all
         Wrong("the first p N dropped, no randomness", "values", "neighbours' random numbers follow from each other",
               dict(dropout_kernel=patched(dropout_kernel, ("r > p", "offsets >= p * N + seed % 2"))))]
