"""Exercise 4.1 (write): the K loop of a matmul, with its masks.

The statement. C = A @ B for A (M, K) and B (K, N), float16 or float32 (one dtype for both), C
(M, N) in that dtype. A and B may be views with any strides (a transposed view arrives as swapped
strides, not as a copy). The launcher below is given: a 2-D grid, one program per BLOCK_M x
BLOCK_N tile of C, and the kernel already knows its tile (rows, cols) and ends with the store of
`acc`. Write what comes in between (lesson 4, section 4):
- the accumulator, a BLOCK_M x BLOCK_N block of float32 whatever the inputs;
- the loop over K in steps of BLOCK_K, enough steps to cover all of K;
- in each step the tile A[rows, ks] and the tile B[ks, cols], their addresses from the strides,
  their masks on both of each tile's dimensions, 0 in the padding (0 adds nothing to a sum);
- acc = tl.dot(a, b, acc, input_precision="ieee"): float32 multiplied in full precision, as the
  float64 reference is (on a GPU the default, TF32, keeps 10 bits of each float32 input; float16
  inputs ignore the setting).
About 10 lines.

The cases, each chosen to catch a mistake:
- 1 x 1 x 1 with 16-blocks: one program, all but one lane of every tile masked off;
- 20 x 12 x 16: K exactly one BLOCK_K step, M and N ragged;
- 33 x 47 x 17: K one past BLOCK_K (the second step holds one column of A), ragged everywhere;
- 40 x 24 x 100 with BLOCK_K 32: four steps, the last holding 4 of 32;
- 50 x 37 x 200, float16, 13 steps: A positive, and B's lower half the negative of its upper
  half, so each partial sum climbs to about 140 and falls back to a few units. A float16 running
  sum is rounded at every step to the climb's spacing, 1/8 (float16 keeps 11 bits), while the
  result itself is rounded once, to 1/256: a float32 accumulator passes, a float16 one does not;
- 45 x 29 x 70 from transposed views (A = X.t(), B = Y.t()): strides that are not (K, 1) and (N, 1);
- 64 x 64 x 64 with 32-blocks, float16: everything a multiple of the blocks.
The values are not symmetric (sines of scaled indices), so a swapped index shows.

Run it: python lesson04_matmul/exercises/k_loop.py      (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[rows, cols] = A[rows, :] @ B[:, cols] for this program's tile, in float32, stored in C's dtype."""
    pid_m = tl.program_id(axis=0)  # given: this program's tile of C
    pid_n = tl.program_id(axis=1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # its rows of C (and of A)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # its columns of C (and of B)

    # Yours: the accumulator `acc`, and the loop over K that adds A[rows, ks] @ B[ks, cols] into it.

    c_offsets = rows[:, None] * stride_cm + cols[None, :] * stride_cn  # given: the store
    c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptr + c_offsets, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


def launch(matmul_kernel, a, b, c, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16):
    """Given: one program per tile of C, on a 2-D grid (pid_m, pid_n)."""
    (M, K), N = a.shape, b.shape[1]
    grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)


def reference(a, b):
    return {"c": a @ b}


def values(rows: int, cols: int, scale: float, shift: float = 0.0) -> torch.Tensor:
    """A rows x cols block of sines of scaled indices: no symmetry to hide a transpose or a sign."""
    return torch.arange(rows * cols, dtype=torch.float32).mul(scale).sin().add(shift).reshape(rows, cols)


def case(M: int, N: int, K: int, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, dtype=torch.float32, transposed=False,
         climb=False) -> Case:
    if transposed:  # A = X.t(), B = Y.t(): the same memory, strides swapped
        a, b = values(K, M, 0.37, 0.1).to(dtype).t(), values(N, K, 0.23, -0.1).to(dtype).t()
    elif climb:  # partial sums far larger than the result: A > 0, B's lower half = -(its upper half), roughly
        a, b = values(M, K, 0.37, 1.2), values(K, N, 0.23, 1.2)
        b[K // 2:] *= -1
        a, b = a.to(dtype), b.to(dtype)
    else:
        a, b = values(M, K, 0.37, 0.1).to(dtype), values(K, N, 0.23, -0.1).to(dtype)
    name = (f"{M} x {N} x {K}{' (transposed views)' if transposed else ''}, blocks {BLOCK_M} x {BLOCK_N} x {BLOCK_K}, "
            f"{str(dtype)[6:]}")
    return Case(name, dict(a=a, b=b), dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K))


EXERCISE = Exercise(
    lesson="lesson04_matmul", name="k_loop", kind="write", parts=("matmul_kernel",), stub="8a58a00a11d4",
    launch=launch, reference=reference, lines=10,
    cases=[case(1, 1, 1), case(20, 12, 16), case(33, 47, 17), case(40, 24, 100, BLOCK_K=32),
           case(50, 37, 200, BLOCK_M=32, dtype=torch.float16, climb=True), case(45, 29, 70, transposed=True),
           case(64, 64, 64, 32, 32, 32, dtype=torch.float16)],
    bench_case=lambda: case(2048, 2048, 2048, 128, 128, 64, dtype=torch.float16),
    hints=["Section 1's plan, in Triton: acc starts at zero; each step of the loop takes the next BLOCK_K columns "
           "of A's rows and the same BLOCK_K rows of B's columns and adds their product into acc; the number of steps "
           "rounds up, so the last one may be ragged, and its masks say which ks exist.",
           "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32); for step in range(0, tl.cdiv(K, BLOCK_K)): "
           "ks = step * BLOCK_K + tl.arange(0, BLOCK_K). Element (i, j) of A is at a_ptr + i * stride_am + "
           "j * stride_ak, so rows[:, None] * stride_am + ks[None, :] * stride_ak is the tile's whole table of offsets, "
           "and (rows[:, None] < M) & (ks[None, :] < K) its mask; B's tile is the same with (ks, cols).",
           "a = tl.load(a_ptr + a_offsets, mask=a_mask, other=0.0), the same for b; "
           "acc = tl.dot(a, b, acc, input_precision=\"ieee\"). The store after the loop is already there."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
