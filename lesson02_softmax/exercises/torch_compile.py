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

Write your choice below, then run this file. The right letter is not written in it: answer()
runs torch._dynamo.explain on each function (it records, it does not compile: a second or two)
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
WHY = ("Dynamo records tensor operations without running them on values; a Python `if` on a tensor needs a "
       "True or False now, so the graph stops there: y.sum() > 1000 is computed, copied to the host (on a GPU, a "
       "synchronisation), Python takes the branch, and a second graph starts after it. The two reductions of "
       "softmax_naive are no obstacle: Inductor fuses a reduction with the one that needs its result when both run "
       "along the same row (section 9: one kernel for the five steps). A Python loop over constants is unrolled into "
       "one graph, and torch.where makes the choice data, inside the graph. Other graph breaks: .item() or "
       ".tolist(), print, calls into C extensions Dynamo does not know; torch._dynamo.explain(f)(x) lists them, and "
       "TORCH_LOGS=graph_breaks prints them as they happen. Beyond graph breaks, what no compiler does is change the "
       "algorithm: the online softmax of section 3, the heart of flash attention, is a rewrite, not a fusion.")


def graphs() -> dict:
    """{option: how many graphs Dynamo records for it}, by torch._dynamo.explain (nothing is compiled)."""
    import torch._dynamo as dynamo

    x = torch.arange(48, dtype=torch.float32).reshape(6, 8).mul(0.7).sin().mul(9)
    counts = {}
    for letter, fn in OPTIONS.items():
        dynamo.reset()
        counts[letter] = dynamo.explain(fn)(x).graph_count
    dynamo.reset()
    return counts


def answer():
    try:
        counts = graphs()
    except Exception as error:  # noqa: BLE001  (an old or unusual torch: the answer without the count)
        return "b", f"{WHY} (torch._dynamo.explain failed here, {type(error).__name__}: the counts are not shown.)"
    split = [letter for letter, n in counts.items() if n > 1]
    shown = ", ".join(f'"{k}" {n} graph{"s" if n > 1 else ""}' for k, n in counts.items())
    return (split[0] if len(split) == 1 else tuple(split)), f"torch._dynamo.explain counts {shown}. {WHY}"


EXERCISE = Exercise(
    lesson="lesson02_softmax", name="torch_compile", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}), answer=answer,
    hints=["Dynamo records operations on tensors without their values. Which line needs a value, now, in Python?",
           "Two reductions in a row are fine for Inductor when they run along the same row: section 9's profile of "
           "torch.compile(softmax_naive) shows one kernel. A loop over a tuple of constants is just three calls.",
           "`if tensor:` asks for bool(tensor): a number on the device that Python must have before it can choose "
           "the next line. torch.where chooses without asking."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
