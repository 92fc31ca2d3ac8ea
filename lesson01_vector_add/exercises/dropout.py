"""Exercise 1.2 (write): dropout with tl.rand, seeded and reproducible.

The statement. x is a 1-D float32 tensor of N elements, p a float in [0, 1), seed an integer.
Dropout zeroes each element with probability p and scales the ones it keeps by 1 / (1 - p), so
that the expected value is unchanged: out[i] = x[i] / (1 - p) if r[i] > p else 0, where r[i] is a
uniform random number in [0, 1). Make r[i] with tl.rand(seed, offsets): Triton's random numbers
are a function of the seed and of each element's offset (the Philox generator), so the same seed
gives the same mask on any GPU and any grid, and nothing has to be stored for the backward pass:
it regenerates the mask from the seed. About 8 lines.

The checks (no torch function makes Triton's random numbers, so they are properties):
- every element is 0 or x / (1 - p), rounded once;
- the same seed gives the same output twice, and the same output with blocks twice as large (the
  mask is a function of the seed and each element's offset, not of its lane or its program);
- the share of zeros is p, and neighbouring elements are dropped together as often as chance has
  it (p^2 of the pairs), each within 5 standard deviations of its count: a correct kernel fails one
  of the 8 counts by chance about once in 10^6 checks;
- no block dropped or kept whole (where chance does that less than once in 10^5), no block's mask
  repeating the first block's; another seed gives another mask.
The cases: N = 1, 129 and 12345 with blocks of 128, 512 or 1024, p = 0.1, 0.5 and 0.9.

Run it: python lesson01_vector_add/exercises/dropout.py      (--hint for a hint, --solution for ours)
"""
import math

import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def dropout_kernel(x_ptr, out_ptr, N, p, seed, BLOCK_SIZE: tl.constexpr):
    """out = x / (1 - p) where tl.rand(seed, offsets) > p, else 0."""
    pass


def launch(dropout_kernel, x, out, again, reblocked, other, p, seed, BLOCK_SIZE=1024):
    """Given: four runs, the seed, the same seed again, the same seed with blocks twice as large
    (half the programs), and another seed."""
    N = x.numel()
    grid = (cdiv(N, BLOCK_SIZE),)
    dropout_kernel[grid](x, out, N, p, seed, BLOCK_SIZE=BLOCK_SIZE)
    dropout_kernel[grid](x, again, N, p, seed, BLOCK_SIZE=BLOCK_SIZE)
    dropout_kernel[(cdiv(N, 2 * BLOCK_SIZE),)](x, reblocked, N, p, seed, BLOCK_SIZE=2 * BLOCK_SIZE)
    dropout_kernel[grid](x, other, N, p, seed + 1, BLOCK_SIZE=BLOCK_SIZE)


def outputs(x, p, seed):
    return {name: torch.empty_like(x) for name in ("out", "again", "reblocked", "other")}


def verify(outputs, x, p, seed, BLOCK_SIZE=1024):
    out, again, reblocked, other = (outputs[k].double().cpu() for k in ("out", "again", "reblocked", "other"))
    x = x.double().cpu()
    kept = x / (1 - p)
    # within 4 float32 steps: a compiled kernel gets p as a float32, whose rounding 1 - p turns into
    # up to 2 steps when p = 0.9; then the division's own rounding and the output's
    zero, scaled = out == 0, (out - kept).abs() <= 4 * torch.finfo(torch.float32).eps * kept.abs()
    if not (zero | scaled).all():
        i = int((~(zero | scaled)).nonzero()[0])
        return f"out[{i}] = {out[i].item():.6g} is neither 0 nor x[{i}] / (1 - p) = {kept[i].item():.6g}"
    if not torch.equal(out, again):
        return "the same seed gave two different outputs: the random numbers must come from tl.rand(seed, offsets)"
    if not torch.equal(out, reblocked):
        i = int((out != reblocked).nonzero()[0])
        return (f"the same seed with blocks of {2 * BLOCK_SIZE} instead of {BLOCK_SIZE} changed out[{i}]: each "
                "element's random number must depend on the seed and its own offset alone (tl.rand(seed, offsets) with "
                "offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)), not on its lane in the block or its program")
    n, dropped = x.numel(), zero.double()
    for b in range(n // BLOCK_SIZE):  # a whole block dropped or kept together: one number for the block
        block = zero[b * BLOCK_SIZE:(b + 1) * BLOCK_SIZE]
        if (block.all() or not block.any()) and p ** BLOCK_SIZE + (1 - p) ** BLOCK_SIZE < 1e-5:
            return (f"every element of block {b} was {'dropped' if block.all() else 'kept'}, all {BLOCK_SIZE} of them "
                    "(by chance: less than once in 10^5): one random number served the whole block (tl.rand(seed, pid)?); "
                    "each element needs its own, tl.rand(seed, offsets)")
    if n < 100:
        return None
    zeros, mean, sigma = int(dropped.sum()), p * n, math.sqrt(n * p * (1 - p))
    if abs(zeros - mean) > 5 * sigma:
        return (f"{zeros} of {n} elements are zero, where p = {p} makes about {mean:.0f} (within {5 * sigma:.0f}): "
                "is the test r > p (keep) the right way round?")
    # neighbours dropped together: n - 1 overlapping pairs, each p^2; the variance of their count counts
    # the overlaps (pairs i, i + 1 and i + 1, i + 2 share an element: p^3 together)
    both = int((dropped[1:] * dropped[:-1]).sum())
    q = p * p
    pairs_mean, pairs_var = (n - 1) * q, (n - 1) * q * (1 - q) + 2 * (n - 2) * (p ** 3 - q * q)
    if abs(both - pairs_mean) > 5 * math.sqrt(pairs_var):
        return (f"{both} pairs of neighbouring elements are both dropped, where independent ones make about "
                f"{pairs_mean:.0f} (within {5 * math.sqrt(pairs_var):.0f}): neighbours' random numbers follow from "
                "each other (a formula of the offset, such as a hash, is not random enough); take them from "
                "tl.rand(seed, offsets)")
    blocks = n // BLOCK_SIZE
    if blocks >= 2 and any(torch.equal(zero[:BLOCK_SIZE], zero[b * BLOCK_SIZE:(b + 1) * BLOCK_SIZE])
                           for b in range(1, blocks)):
        return ("a block's mask repeats the first block's: the random numbers must differ from block to block "
                "(tl.rand(seed, offsets), with each element's own offset)")
    if torch.equal(out, other):
        return "another seed gave the same output: the seed must go into tl.rand"
    return None


def case(N: int, BLOCK_SIZE: int, p: float) -> Case:
    x = torch.arange(1, N + 1, dtype=torch.float32).mul(0.7).sin().add(1.5)  # never 0: a zero is dropout's
    return Case(f"N = {N}, BLOCK_SIZE {BLOCK_SIZE}, p = {p}", dict(x=x, p=p, seed=1234), dict(BLOCK_SIZE=BLOCK_SIZE))


EXERCISE = Exercise(
    lesson="lesson01_vector_add", name="dropout", kind="write", parts=("dropout_kernel",), stub="bd2b6b77b675",
    launch=launch, verify=verify, outputs=outputs, lines=8,
    cases=[case(1, 128, 0.5), case(129, 128, 0.1), case(12345, 1024, 0.5), case(12345, 512, 0.9)],
    bench_case=lambda: case(1 << 24, 1024, 0.5),
    hints=["The six steps of add_kernel, with one more value per element: r = tl.rand(seed, offsets), a block of "
           "uniform numbers in [0, 1), one per offset.",
           "keep = r > p is a block of booleans; tl.where(keep, x / (1 - p), 0.0) picks, element by element.",
           "r must come from the seed and each element's own offset, the same offsets that address x: then "
           "another BLOCK_SIZE or grid gives the same mask. What goes into tl.rand, and what into tl.where?"],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
