"""SPOILER: the answer of exercise 1.6."""
GIVEN = "ee112ff03c71"  # common.exercise.given_fingerprint of cuda_unit.py as the course ships it


ANSWER = (1024, 1048576, 1024, 131072)


# The answer and why (read only when checking, or with --solution).
def answer():
    N, block_size, BLOCK_SIZE, num_warps = 2**20, 1024, 1024, 4
    cuda_blocks = (N + block_size - 1) // block_size
    programs = (N + BLOCK_SIZE - 1) // BLOCK_SIZE
    right = (cuda_blocks, cuda_blocks * block_size, programs, programs * num_warps * 32)
    return right, (f"Both launches start {cuda_blocks} blocks (a Triton program IS a CUDA thread block), but CUDA's "
                   f"hold 1024 threads of one element each, {right[1]} threads in all, while each Triton program "
                   f"runs 128 threads over its 1024 elements, 8 each: {right[3]} threads in all. Triton chose "
                   "the elements per thread (thread coarsening), which the PTX of section 8 shows as two 128-bit "
                   "loads per thread.")
