"""SPOILER: the answer of exercise 4.4."""
GIVEN = "4b9c2dbfb46b"  # common.exercise.given_fingerprint of when_to_write.py as the course ships it


ANSWER = "b"


import torch


# The answer and why (read only when checking, or with --solution).
def answer():
    n, bytes_per = 4096, 2
    extra_mb = 2 * n * n * bytes_per / 1e6  # C read back and written again by the relu
    return "b", (f"Only the fused epilogue pays. Unfused, C ({n * n * bytes_per / 1e6:.0f} MB) is written by the "
                 f"matmul, then read and written again by the relu: {extra_mb:.0f} MB more traffic, about 22 µs at "
                 "the H100's 3.0 TB/s. RESULTS.md (an H100), 'The fused epilogue, timed': torch.matmul then relu "
                 "198.4 µs, Triton matmul() with relu fused 184.3 µs, though as a plain product Triton is the slower "
                 "one (section 10: torch.matmul 178.8 µs, the pointer kernel 190.3, the TMA one 186.1): the saved "
                 "round trip of C is worth more than cuBLAS's lead. (a) cuBLAS wins the plain product. (c) The kernel "
                 "is 0.2 µs faster, but a call costs the host 64.6 µs in matmul(..., tma=False), and 28.2 µs even as "
                 "a bare matmul_kernel_tuned[grid](...), against 12.6 µs for torch.matmul ('What a call costs the "
                 "host', measured at 2048^3: the host's cost does not grow with the size): a small product waits for "
                 "the host, not the GPU. So write "
                 "the matmul yourself for what the library cannot fuse: an epilogue (bias, activation, a "
                 "dequantisation of the weights, a reduction of C), never for a plain GEMM.")
