"""SPOILER: the solution of exercise 1.2 (dropout), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


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


@triton.jit
def a_hash_of_the_offsets(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    r = ((offsets * 40503 + seed * 9973) % 65536).to(tl.float32) / 65536  # a formula, not random numbers
    tl.store(out_ptr + offsets, tl.where(r > p, x / (1 - p), 0.0), mask=mask)


@triton.jit
def one_number_a_program(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    r = tl.rand(seed, pid)  # one number for the whole block
    tl.store(out_ptr + offsets, tl.where(r > p, x / (1 - p), 0.0), mask=mask)


@triton.jit
def lanes_not_offsets(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    r = tl.rand(seed, tl.arange(0, BLOCK_SIZE))  # the lane, not the offset: the same mask in every block
    tl.store(out_ptr + offsets, tl.where(r > p, x / (1 - p), 0.0), mask=mask)


@triton.jit
def no_randomness(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    keep = offsets >= p * N + seed % 2  # the right share dropped, the first elements: no randomness at all
    tl.store(out_ptr + offsets, tl.where(keep, x / (1 - p), 0.0), mask=mask)


WRONG = [Wrong("kept elements not scaled", "values", "neither 0 nor", dict(dropout_kernel=not_scaled)),
         Wrong("keeps with probability p", "values", "the right way round", dict(dropout_kernel=backwards)),
         Wrong("the seed ignored, the lanes' numbers", "values", "another seed gave the same output",
               dict(dropout_kernel=same_numbers_every_block)),
         Wrong("a hash of the offsets", "values", "neighbours' random numbers follow from each other",
               dict(dropout_kernel=a_hash_of_the_offsets)),
         Wrong("tl.rand(seed, pid)", "values", "one random number served the whole block",
               dict(dropout_kernel=one_number_a_program)),
         Wrong("tl.rand(seed, lane)", "values", "not on its lane in the block or its program",
               dict(dropout_kernel=lanes_not_offsets)),
         Wrong("the first p N dropped, no randomness", "values", "neighbours' random numbers follow from each other",
               dict(dropout_kernel=no_randomness))]
