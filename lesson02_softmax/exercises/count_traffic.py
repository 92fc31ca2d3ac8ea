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

Then run this file. The right number is not written in it: the checker's answer() (in
solutions/, read only when checking) counts it, by running softmax_naive with every operator's
tensors logged (its inputs read, its outputs written), and once you have it, the count is shown
step by step.

Run it: python lesson02_softmax/exercises/count_traffic.py   (--hint for a hint, --solution for ours)
"""
import torch

from common.exercise import Exercise, fingerprint

ANSWER = None  # elements moved per element of x: a number


def softmax_naive(x):
    x_max = x.amax(dim=1, keepdim=True)
    z = x - x_max
    numerator = torch.exp(z)
    denominator = numerator.sum(dim=1, keepdim=True)
    return numerator / denominator


EXERCISE = Exercise(
    lesson="lesson02_softmax", name="count_traffic", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}),
    hints=["Take the steps one at a time. x.amax(dim=1) reads all of x (MN elements) and writes M maxima; "
           "what do the other four read and write?",
           "An element-wise operator reads its inputs and writes a full MN result: x - x_max reads MN + M and writes "
           "MN. A row reduction reads MN and writes M. Only the MN terms count here.",
           "Reads: max MN, subtract MN, exp MN, sum MN, divide MN. Writes: subtract MN, exp MN, divide MN. "
           "Add the two lines and divide by MN."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
