"""SPOILER: the answer of exercise 4.4."""
GIVEN = "72f7dcb94b8d"  # common.exercise.given_fingerprint of when_to_write.py as the course ships it


ANSWER = "b"


import torch


# The answer and why (read only when checking, or with --solution).
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
