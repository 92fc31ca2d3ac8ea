"""Exercise 2.5 (predict, then explain): where torch.compile cannot fuse.

Worth doing after section 9 (fusion, seen by the profiler).

The question. torch.compile works in two steps: Dynamo runs your Python and records the tensor
operations it meets into a graph; Inductor turns the graph into fused Triton kernels (section 9:
for softmax_naive, one kernel, triton_red_fused_div_exp_max_sub_sum_0). Inductor can only fuse
what is in one graph. Where Dynamo cannot go on recording, it breaks the graph: the code before
the break and after it are compiled apart, Python runs in between, and nothing fuses across.
Of the four functions below (x a float32 matrix), which ONE does Dynamo split in two?

    "a": softmax_naive: a max per row, then a sum per row that needs the max: two reductions,
         the second waiting on the first.
    "b": rescaled: exp(x - max), then `if y.sum() > 1000: y = y / y.sum()`, a Python `if` on a
         value the tensors hold.
    "c": layered: a Python `for` loop applying tanh(x * scale) for three scales.
    "d": rescaled_where: the same as "b", the choice made by torch.where, row by row.

Write your choice below, then run this file. The right letter is not written in it: the checker's
answer() (in solutions/, read only when checking) runs torch._dynamo.explain on each function (it records, it does not compile: a second or two)
and counts the graphs; once you have it, the counts are shown, with why.

Then explain it to yourself, before reading the answer: what does Python need at that line that
a graph cannot give it? How would you write that function so that it fuses?

Run it: python lesson02_softmax/exercises/torch_compile.py   (--hint for a hint, --solution for ours)
"""
import torch

from common.exercise import Exercise, fingerprint

ANSWER = None  # "a", "b", "c" or "d"


def softmax_naive(x):
    x_max = x.max(dim=1, keepdim=True).values
    numerator = torch.exp(x - x_max)
    return numerator / numerator.sum(dim=1, keepdim=True)


def rescaled(x):
    y = torch.exp(x - x.max(dim=1, keepdim=True).values)
    if y.sum() > 1000:
        y = y / y.sum()
    return y * 2


def layered(x):
    for scale in (0.5, 1.0, 2.0):
        x = torch.tanh(x * scale)
    return x


def rescaled_where(x):
    y = torch.exp(x - x.max(dim=1, keepdim=True).values)
    total = y.sum(dim=1, keepdim=True)
    return torch.where(total > 1000, y / total, y) * 2


OPTIONS = {"a": softmax_naive, "b": rescaled, "c": layered, "d": rescaled_where}


EXERCISE = Exercise(
    lesson="lesson02_softmax", name="torch_compile", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}),
    hints=["Dynamo records operations on tensors without their values. Which line needs a value, now, in Python?",
           "Two reductions in a row are fine for Inductor when they run along the same row: section 9's profile of "
           "torch.compile(softmax_naive) shows one kernel. A loop over a tuple of constants is just three calls.",
           "`if tensor:` asks for bool(tensor): a number on the device that Python must have before it can choose "
           "the next line. torch.where chooses without asking."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
