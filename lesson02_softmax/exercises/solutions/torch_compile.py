"""SPOILER: the answer of exercise 2.5: "b", the Python if on a tensor's value breaks the graph."""
GIVEN = "50c85b5e9efa"  # common.exercise.given_fingerprint of torch_compile.py as the course ships it


ANSWER = "b"


import torch

from lesson02_softmax.exercises.torch_compile import softmax_naive, OPTIONS  # the statement's own code


# The answer and why (read only when checking, or with --solution).
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
