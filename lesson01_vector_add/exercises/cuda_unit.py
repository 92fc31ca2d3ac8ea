"""Exercise 1.6 (predict): CUDA's unit of work against Triton's.

The question (lesson 1, sections 1 and 9). The CUDA C++ GELU of cuda_cpp.py is written for ONE
thread: each thread computes one element, in blocks of block_size = 1024 threads. gelu_kernel is
written for one program: a program owns BLOCK_SIZE = 1024 elements and runs as num_warps = 4
warps of 32 threads. For N = 2^20 elements:

    how many thread blocks (CUDA) and programs (Triton) does each launch start,
    and how many threads run in all, for each?

Write your answer below as four whole numbers, then run this file:
ANSWER = (CUDA blocks, CUDA threads, Triton programs, Triton threads).

Run it: python lesson01_vector_add/exercises/cuda_unit.py   (--hint for a hint, --solution for ours)
"""
from common.exercise import Exercise, fingerprint

ANSWER = None  # (CUDA blocks, CUDA threads, Triton programs, Triton threads)


EXERCISE = Exercise(
    lesson="lesson01_vector_add", name="cuda_unit", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}),
    hints=["A CUDA launch <<<num_blocks, block_size>>> starts num_blocks x block_size threads; a Triton launch "
           "kernel[grid] starts grid programs, each one CUDA thread block.",
           "Both grids are cdiv(N, 1024) = 1024. What differs is the threads per block.",
           "A Triton program has num_warps x 32 threads: 4 x 32 = 128."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
