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
- the share of zeros is p, within 5 standard deviations of a binomial count;
- the same seed gives the same output twice; another seed gives another mask.
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


def launch(dropout_kernel, x, out, again, other, p, seed, BLOCK_SIZE=1024):
    """Given: three runs, the seed, the same seed again, and another seed."""
    N = x.numel()
    grid = (cdiv(N, BLOCK_SIZE),)
    dropout_kernel[grid](x, out, N, p, seed, BLOCK_SIZE=BLOCK_SIZE)
    dropout_kernel[grid](x, again, N, p, seed, BLOCK_SIZE=BLOCK_SIZE)
    dropout_kernel[grid](x, other, N, p, seed + 1, BLOCK_SIZE=BLOCK_SIZE)


def outputs(x, p, seed):
    return {name: torch.empty_like(x) for name in ("out", "again", "other")}


def verify(outputs, x, p, seed):
    out, again, other = (outputs[k].double().cpu() for k in ("out", "again", "other"))
    x = x.double().cpu()
    kept = x / (1 - p)
    # within 4 float32 steps: a compiled kernel gets p as a float32, whose rounding 1 - p turns into
    # up to 2 steps when p = 0.9; then the division's own rounding and the output's
    zero, scaled = out == 0, (out - kept).abs() <= 4 * torch.finfo(torch.float32).eps * kept.abs()
    if not (zero | scaled).all():
        i = int((~(zero | scaled)).nonzero()[0])
        return f"out[{i}] = {out[i].item():.6g} is neither 0 nor x[{i}] / (1 - p) = {kept[i].item():.6g}"
    n = x.numel()
    zeros = int((zero & (x != 0)).sum())
    mean, sigma = p * n, math.sqrt(max(n * p * (1 - p), 1e-12))
    if n >= 100 and abs(zeros - mean) > 5 * sigma + 1:
        return (f"{zeros} of {n} elements are zero, where p = {p} makes about {mean:.0f} (within {5 * sigma:.0f}): "
                "is the test r > p (keep) the right way round?")
    if not torch.equal(out, again):
        return "the same seed gave two different outputs: the random numbers must come from tl.rand(seed, offsets)"
    if n >= 100 and torch.equal(out, other):
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
           "x = tl.load(x_ptr + offsets, mask=mask); r = tl.rand(seed, offsets); "
           "tl.store(out_ptr + offsets, tl.where(r > p, x / (1 - p), 0.0), mask=mask)."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
