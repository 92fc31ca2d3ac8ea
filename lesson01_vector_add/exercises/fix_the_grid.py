"""Exercise 1.3 (fix): two planted bugs, one in the kernel, one in the launcher.

The statement. scale(x) should return 2 * x for a 1-D float32 x of any length N. The code below
was written in a hurry: it gives the right answer when N is a multiple of BLOCK_SIZE, and is wrong
otherwise, in two places. Find both and mend them; change as little as you can (two characters
in one line, a few in another). The checker names what goes wrong first: read its message, mend
that, run it again.

The cases: N = 1, 255, 256, 257 and 1000, with BLOCK_SIZE 256 and 64.

Run it: python lesson01_vector_add/exercises/fix_the_grid.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise


@triton.jit
def scale_kernel(x_ptr, out_ptr, N, BLOCK_SIZE: tl.constexpr):
    """out = 2 x, one block of BLOCK_SIZE elements per program."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets <= N
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2 * x, mask=mask)


def launch(scale_kernel, x, out, BLOCK_SIZE=256):
    """One program per BLOCK_SIZE elements."""
    N = x.numel()
    grid = (N // BLOCK_SIZE,)
    scale_kernel[grid](x, out, N, BLOCK_SIZE=BLOCK_SIZE)


def reference(x):
    return {"out": 2 * x}


def case(N: int, BLOCK_SIZE: int) -> Case:
    return Case(f"N = {N}, BLOCK_SIZE {BLOCK_SIZE}", dict(x=torch.arange(N, dtype=torch.float32).sub(N / 3)),
                dict(BLOCK_SIZE=BLOCK_SIZE))


EXERCISE = Exercise(
    lesson="lesson01_vector_add", name="fix_the_grid", kind="fix", parts=("scale_kernel", "launch"),
    stub="4f290a72a905", reference=reference,
    cases=[case(256, 256), case(1, 256), case(255, 256), case(257, 256), case(1000, 64)],
    hints=["Think of N = 257 with BLOCK_SIZE = 256: how many programs must run, and which offsets may the last "
           "one touch?",
           "The mask decides which lanes load and store: offset N itself is one past the last element.",
           "mask = offsets < N; and the grid rounds up: (cdiv(N, BLOCK_SIZE),), which is "
           "(N + BLOCK_SIZE - 1) // BLOCK_SIZE."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
