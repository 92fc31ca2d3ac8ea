"""Exercise 3.2 (predict): how long programs take when they come in waves.

The question (lesson 3, sections 3 and 4). Each program of spin_kernel is 1024 threads doing a
fixed chain of multiply-adds, touching no memory. An H100 or H200 has 132 SMs, and one such
program alone keeps an SM's cores busy: two side by side on one SM take twice as long. Measured on
an H100 (lesson 3's RESULTS.md), 1 program takes about 146 µs, and so do 132 (one on each SM, all
at once). How long, in
µs, do 300 programs take?

Write a number below (µs; within 10% counts), then run this file. (Section 4's RESULTS table has
the staircase, so predict first, then look.)

Run it: python lesson03_rowsum/exercises/waves.py   (--hint for a hint, --solution for ours)
"""
from common.exercise import Exercise, fingerprint

ANSWER = None  # a number of µs


EXERCISE = Exercise(
    lesson="lesson03_rowsum", name="waves", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}),
    hints=["How many programs run at the same time on 132 SMs, when each program fills an SM by itself?",
           "The programs run in rounds (waves) of 132; a round takes 146 µs whether it has 132 programs or 1.",
           "Count the rounds: 300 programs are two full waves and a third, partial one."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
