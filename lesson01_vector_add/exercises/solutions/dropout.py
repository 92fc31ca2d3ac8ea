"""SPOILER: the solution of exercise 1.2 (dropout), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


GIVEN = "6325e35d68af"  # common.exercise.given_fingerprint of dropout.py as the course ships it


@triton.jit
def dropout_kernel(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    """out = x / (1 - p) where tl.rand(seed, offsets) > p, else 0."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    r = tl.rand(seed, offsets)
    tl.store(out_ptr + offsets, tl.where(r > p, x / (1 - p), 0.0), mask=mask)


@triton.jit
def not_scaled(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(tl.rand(seed, offsets) > p, x, 0.0), mask=mask)


@triton.jit
def backwards(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(tl.rand(seed, offsets) < p, x / (1 - p), 0.0), mask=mask)


@triton.jit
def same_numbers_every_block(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    r = tl.rand(0, tl.arange(0, BLOCK_SIZE))  # the seed left out: every seed, the same mask
    tl.store(out_ptr + offsets, tl.where(r > p, x / (1 - p), 0.0), mask=mask)


WRONG = [Wrong("kept elements not scaled", "values", "neither 0 nor", dict(dropout_kernel=not_scaled)),
         Wrong("keeps with probability p", "values", "the right way round", dict(dropout_kernel=backwards)),
         Wrong("the seed ignored", "values", "another seed gave the same output",
               dict(dropout_kernel=same_numbers_every_block))]
