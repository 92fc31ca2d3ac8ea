"""Exercise 4.4 (predict): when is a matmul worth writing yourself?

The question (lesson 4, sections 10, 12 and 14, and RESULTS.md). cuBLAS, behind torch.matmul, is
years of tuning by the GPU's maker; the lesson's Triton kernels come close to it (94-96% at
4096^3 on an H100, lesson 4's RESULTS.md). In which of these situations, on that H100, does a
call of the lesson's Triton matmul() finish sooner than PyTorch's way of computing the same thing?

    "a": C = A @ B, float16, 4096 x 4096 x 4096, nothing else: a large plain product
    "b": C = relu(A @ B), float16, 4096^3, where PyTorch runs torch.matmul and then torch.relu
    "c": C = A @ B, float16, 128 x 128 x 128, called from Python in a loop: section 15 found
         matmul_kernel at 2.1 µs per launch there, against 2.3 µs for cuBLAS's kernel
    "d": none of them: cuBLAS is faster at every matmul

Write your choice below, then run this file. (Think about what each way moves to and from
memory, and what a call costs before any kernel runs.)

Run it: python lesson04_matmul/exercises/when_to_write.py   (--hint for a hint, --solution for ours)
"""
from common.exercise import Exercise, fingerprint

ANSWER = None  # "a", "b", "c" or "d"


EXERCISE = Exercise(
    lesson="lesson04_matmul", name="when_to_write", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}),
    hints=["A hand-written kernel wins by doing less work than the other way, not by doing the same work faster.",
           "Count what each way writes and reads: torch.relu is a second kernel; C of 4096 x 4096 float16 is 34 MB, "
           "and the H100 moves about 3.0 TB/s. For the small product, compare the kernel's 2 µs with the host's "
           "cost of one call (lesson 4, section 14).",
           "RESULTS.md, section 12: 'torch.matmul, then the activation' against 'Triton matmul(), activation "
           "fused'; section 10 for the plain product; section 14 for the host."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
