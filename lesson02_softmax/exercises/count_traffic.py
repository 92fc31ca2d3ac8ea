"""Exercise 2.1 (predict): how much memory traffic the five-step softmax moves.

Worth doing after section 1 (and before reading its last comment line).

The question. Written in PyTorch, softmax is five operators, and eager PyTorch runs each as its
own kernel: it reads its inputs from memory and writes its result back (nothing stays on chip
from one kernel to the next). For x of shape (M, N), with M and N large (say 4096 x 4096):

    def softmax_naive(x):
        x_max = x.amax(dim=1, keepdim=True)               # 1. a max per row
        z = x - x_max                                     # 2. subtract it
        numerator = torch.exp(z)                          # 3. exp
        denominator = numerator.sum(dim=1, keepdim=True)  # 4. a sum per row
        return numerator / denominator                    # 5. divide

Count, for every kernel, the elements it reads and the elements it writes, and add them up.
How many elements move through memory in all, per element of x? (A fused kernel, one read of x
and one write of y, moves 2.) Write one number, ANSWER = ...; the check allows 10%, so the
M-sized terms (one max and one sum per row) do not matter: the MN-sized ones do.

Then run this file. The right number is not written in it: answer() below counts it, by running
softmax_naive with every operator's tensors logged (its inputs read, its outputs written), and
once you have it, the count is shown step by step.

Run it: python lesson02_softmax/exercises/count_traffic.py   (--hint for a hint, --solution for ours)
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode  # torch's hook on every operator (torch >= 1.13)
from torch.utils._pytree import tree_leaves

from common.exercise import Exercise, fingerprint

ANSWER = None  # elements moved per element of x: a number


def softmax_naive(x):
    x_max = x.amax(dim=1, keepdim=True)
    z = x - x_max
    numerator = torch.exp(z)
    denominator = numerator.sum(dim=1, keepdim=True)
    return numerator / denominator


class Traffic(TorchDispatchMode):
    """Each operator PyTorch runs, with the elements of its tensor inputs (read) and outputs (written)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        size = lambda tree: sum(t.numel() for t in tree_leaves(tree) if isinstance(t, torch.Tensor))  # noqa: E731
        self.ops.append((func.__name__, size((args, kwargs)), size(out)))
        return out


WHY = ("Reads 5MN and writes 3MN, plus a few M (the max, its indices and the sum: one per row). A fused kernel "
       "moves 2MN, one read of x and one write of y: a quarter. Softmax does a handful of FLOPs per element, so its "
       "time follows its traffic: on the H200, 4096 x 4096 float32, 194 µs for the five steps against 32 µs for the "
       "one-pass kernel (RESULTS.md, section 10: more than 4x, as five small kernels also each fall short of the "
       "copy bandwidth).")


def answer():
    M, N = 1024, 1024
    x = torch.randn(M, N)
    try:
        with Traffic() as traffic:
            softmax_naive(x)
    except Exception as error:  # noqa: BLE001  (a torch without dispatch modes: the count as section 1 makes it)
        return 8, f"{WHY} (The operators could not be logged here, {type(error).__name__}: the count is section 1's.)"
    per_element = sum(r + w for _, r, w in traffic.ops) / (M * N)
    steps = "; ".join(f"{op.split('.')[0]} reads {r / (M * N):.3g} MN, writes {w / (M * N):.3g} MN"
                      for op, r, w in traffic.ops)
    return round(per_element, 2), (f"Counted by running it ({M} x {N}): {steps}. In all {per_element:.3f} elements "
                                   f"per element of x. {WHY}")


EXERCISE = Exercise(
    lesson="lesson02_softmax", name="count_traffic", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}), answer=answer,
    hints=["Take the steps one at a time. x.amax(dim=1) reads all of x (MN elements) and writes M maxima; "
           "what do the other four read and write?",
           "An element-wise operator reads its inputs and writes a full MN result: x - x_max reads MN + M and writes "
           "MN. A row reduction reads MN and writes M. Only the MN terms count here.",
           "Reads: max MN, subtract MN, exp MN, sum MN, divide MN. Writes: subtract MN, exp MN, divide MN. "
           "Add the two lines and divide by MN."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
