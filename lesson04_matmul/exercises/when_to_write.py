"""Exercise 4.4 (predict): when is a matmul worth writing yourself?

The question (lesson 4, sections 10, 12 and 14, and RESULTS.md). cuBLAS, behind torch.matmul, is
years of tuning by the GPU's maker; the lesson's Triton kernels come close to it (90-100% on the
H200) but do not pass it where the work is only a product. In which of these situations, on
that H200, does a call of the lesson's Triton matmul() finish sooner than PyTorch's way of
computing the same thing?

    "a": C = A @ B, float16, 4096 x 4096 x 4096, nothing else: a large plain product
    "b": C = relu(A @ B), float16, 4096^3, where PyTorch runs torch.matmul and then torch.relu
    "c": C = A @ B, float16, 128 x 128 x 128, called from Python in a loop: section 15 found
         matmul_kernel at 1.9 µs per launch there, against 2.1 µs for cuBLAS's kernel
    "d": none of them: cuBLAS is faster at every matmul

Write your choice below, then run this file. (Think about what each way moves to and from
memory, and what a call costs before any kernel runs.)

Run it: python lesson04_matmul/exercises/when_to_write.py   (--hint for a hint, --solution for ours)
"""
from common.exercise import Exercise, fingerprint

ANSWER = None  # "a", "b", "c" or "d"


def answer():
    n, bytes_per = 4096, 2
    extra_mb = 2 * n * n * bytes_per / 1e6  # C read back and written again by the relu
    return "b", (f"Only the fused epilogue pays. Unfused, C ({n * n * bytes_per / 1e6:.0f} MB) is written by the "
                 f"matmul, then read and written again by the relu: {extra_mb:.0f} MB more traffic, about 16 µs at "
                 "the H200's 4.2 TB/s. RESULTS.md, 'The fused epilogue, timed': torch.matmul then relu 194.3 µs, "
                 "Triton matmul() with relu fused 182.1 µs, though as a plain product Triton is the slower one "
                 "(section 10: torch.matmul 178.6 µs, the pointer kernel 188.5, the TMA one 183.3): the saved round "
                 "trip of C is worth more than cuBLAS's lead. (a) cuBLAS wins the plain product. (c) The kernel is "
                 "0.2 µs faster, but a call costs the host 46 µs in matmul(), and 19.7 µs even as a bare "
                 "matmul_kernel[grid](...), against 12.5 µs for torch.matmul ('What a call costs the host', measured "
                 "at 2048^3: the host's cost does not grow with the size): a small product waits for the host, not "
                 "the GPU. So write "
                 "the matmul yourself for what the library cannot fuse: an epilogue (bias, activation, a "
                 "dequantisation of the weights, a reduction of C), never for a plain GEMM.")


EXERCISE = Exercise(
    lesson="lesson04_matmul", name="when_to_write", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}), answer=answer,
    hints=["A hand-written kernel wins by doing less work than the other way, not by doing the same work faster.",
           "Count what each way writes and reads: torch.relu is a second kernel; C of 4096 x 4096 float16 is 34 MB, "
           "and the H200 moves about 4.2 TB/s. For the small product, compare the kernel's 2 µs with the host's "
           "cost of one call (lesson 4, section 14).",
           "RESULTS.md, section 12: 'torch.matmul, then the activation' against 'Triton matmul(), activation "
           "fused'; section 10 for the plain product; section 14 for the host."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
