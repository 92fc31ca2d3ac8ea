"""Exercise 3.4 (predict): the occupancy a register count allows.

The question (lesson 3, section 10). One SM of an H100/H200 has 65,536 registers, 64 warp slots
and 32 program slots; a program of row_sum_kernel uses no shared memory. Registers are handed out
per warp, in blocks of 256: a warp of 32 threads needing r registers each takes 32 x r rounded
up to a multiple of 256. ptxas reports that a variant of the kernel, compiled with num_warps=4,
needs 102 registers per thread. How many programs fit on one SM at once, and so what occupancy
(the resident warps over the 64 slots) does that allow? Give the occupancy in percent (37.5 for
24 warps of 64).

Write a number below (within 10% counts), then run this file. (Section 10's table gives the
registers and occupancy of the kernel's real configurations; occupancy() in main.py computes it.)

Run it: python lesson03_rowsum/exercises/occupancy.py   (--hint for a hint, --solution for ours)
"""
from common.exercise import Exercise, fingerprint

ANSWER = None  # occupancy, in percent


EXERCISE = Exercise(
    lesson="lesson03_rowsum", name="occupancy", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}),
    hints=["Three limits: registers, warp slots (64 // warps per program) and program slots (32). The smallest "
           "number of programs wins; here it is the registers.",
           "A warp's registers: 32 threads x 102 = 3264, rounded up to a multiple of 256. A program: 4 such warps. "
           "How many programs fit in 65,536?",
           "3264 rounds up to 3328; 4 warps need 13,312 registers; 65,536 // 13,312 programs, each 4 warps, over 64 "
           "warp slots."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
