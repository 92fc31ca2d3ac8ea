"""Exercise 4.5 (write): split K, a weight's gradient on every SM, its parts added with tl.atomic_add.

The statement. C = A @ B for A (M, K) and B (K, N) with K long and M, N small: a weight's
gradient, dW = dY^T @ X, sums over every token of the batch into an output only as large as the
weight (section 17: 768 x 768 is 36 tiles of 128 x 128, for an H100's 132 SMs). One program per
tile would leave most SMs idle, so K is split too. The grid is 3-D, (cdiv(M, BLOCK_M), cdiv(N,
BLOCK_N), cdiv(K, K_PER_PROGRAM)): program (m, n, s) sums its tile of C over its stretch of K, ks
from s * K_PER_PROGRAM to (s + 1) * K_PER_PROGRAM - 1 (the last stretch stops at K), in steps of
BLOCK_K (a stretch is a whole number of steps; K_PER_PROGRAM arrives as a plain integer, BLOCK_K
as a constexpr) with a float32 accumulator, exercise 4.1's loop.
Then it adds its partial sum into C with tl.atomic_add, as exercise 3.3 added a row's: C is
float32 (as a float32 weight's gradient is, straight from the accumulator), and the launcher,
given, zeroes it first. A and B are float16 or float32 (tl.dot with input_precision="ieee", as
in exercise 4.1), views with any strides: A arrives as dY^T, a transposed view. The tile (rows,
cols) is given. About 12 lines.

The budget, checked under the interpreter: each program adds into each element of its tile once
(an atomic per step of the loop is right too, but atomics into one address take turns, and a
stretch has many steps: keep the sum in acc and add it once, after the loop).

The cases: 1 x 1 x 1 (one program, one lane); 20 x 12 x 100 in stretches of 32 (four programs per
tile, the last holding 4 of K); 33 x 47 x 300 in stretches of 64 (ragged everywhere, the last
stretch 44 long); 48 x 40 x 256 float16 from a transposed A (dY^T, as lesson 6's gradients are);
50 x 37 x 512 float16 whose partial sums climb far above the result (a float16 accumulator rounds
them away, as in exercise 4.1); 64 x 64 x 64 in 32-blocks and one stretch (K not split at all).

(The programs add in no fixed order, so on a GPU the last bits of C can change from run to run:
float addition is not associative. Lesson 4's hopper.py does this with TMA tiles, SPLIT_ATOMIC;
its split_k_sum_kernel, a second launch that adds each tile's parts in order, is the way that
gives the same bits every run.)

Run it: python lesson04_matmul/exercises/split_k.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def split_k_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   K_PER_PROGRAM, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[rows, cols] += A[rows, stretch] @ B[stretch, cols], the stretch of K program axis 2 names."""
    pid_m = tl.program_id(axis=0)  # given: this program's tile of C
    pid_n = tl.program_id(axis=1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)

    # Yours: this program's stretch of K, the loop over it into a float32 acc, and one add into C.
    pass


def launch(split_k_kernel, a, b, c, K_PER_PROGRAM=64, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16):
    """Given: C zeroed, then one program per tile of C and stretch of K_PER_PROGRAM, on a 3-D grid."""
    (M, K), N = a.shape, b.shape[1]
    assert K_PER_PROGRAM % BLOCK_K == 0, "a stretch is a whole number of steps"
    c.zero_()  # the programs add into C
    grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N), cdiv(K, K_PER_PROGRAM))
    split_k_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                         c.stride(1), K_PER_PROGRAM, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)


def reference(a, b):
    dtype = torch.promote_types(a.dtype, torch.float32)  # C in float32 (float64 for the exact reference)
    return {"c": a.to(dtype) @ b.to(dtype)}


def one_add_per_element(log, a, b):
    """Each program adds into each element of its tile once."""
    adds = {}
    for kind, program, name, indices in log.accesses:
        if kind == "atomic" and name == "c":
            adds.setdefault(program, []).extend(int(i) for i in indices)
    for program, indices in adds.items():
        if len(indices) > len(set(indices)):
            p = ", ".join(str(int(i)) for i in program[:3])
            return (f"program ({p}) added into the same elements of c {len(indices) // len(set(indices))} times "
                    f"({len(indices)} atomic adds for {len(set(indices))} elements): keep the stretch's sum in acc "
                    "across the loop's steps and add it once, after the loop; atomics into one address take turns")
    return None


def values(rows: int, cols: int, scale: float, shift: float = 0.0) -> torch.Tensor:
    """A rows x cols block of sines of scaled indices: no symmetry to hide a transpose or a sign."""
    return torch.arange(rows * cols, dtype=torch.float32).mul(scale).sin().add(shift).reshape(rows, cols)


def case(M: int, N: int, K: int, K_PER_PROGRAM: int, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, dtype=torch.float32,
         transposed=False, climb=False) -> Case:
    if transposed:  # A = Y.t(), as dY^T: the same memory, strides swapped
        a, b = values(K, M, 0.37, 0.1).to(dtype).t(), values(K, N, 0.23, -0.1).to(dtype)
    elif climb:  # partial sums far larger than the result: A > 0, B's lower half = -(its upper half), roughly
        a, b = values(M, K, 0.37, 1.2), values(K, N, 0.23, 1.2)
        b[K // 2:] *= -1
        a, b = a.to(dtype), b.to(dtype)
    else:
        a, b = values(M, K, 0.37, 0.1).to(dtype), values(K, N, 0.23, -0.1).to(dtype)
    stretches = cdiv(K, K_PER_PROGRAM)
    name = (f"{M} x {N} x {K}{' (A transposed)' if transposed else ''}, {stretches} stretch"
            f"{'es' if stretches > 1 else ''} of {K_PER_PROGRAM}, blocks {BLOCK_M} x {BLOCK_N} x {BLOCK_K}, "
            f"{str(dtype)[6:]}")
    return Case(name, dict(a=a, b=b),
                dict(K_PER_PROGRAM=K_PER_PROGRAM, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K))


EXERCISE = Exercise(
    lesson="lesson04_matmul", name="split_k", kind="write", parts=("split_k_kernel",), stub="535db836bed6",
    launch=launch, reference=reference, budget_check=one_add_per_element, lines=12,
    cases=[case(1, 1, 1, 16), case(20, 12, 100, 32), case(33, 47, 300, 64),
           case(48, 40, 256, 64, dtype=torch.float16, transposed=True),
           case(50, 37, 512, 128, BLOCK_M=32, dtype=torch.float16, climb=True), case(64, 64, 64, 64, 32, 32, 32)],
    bench_case=lambda: case(768, 768, 16384, 1536, 128, 128, 64, dtype=torch.float16, transposed=True),
    hints=["The third program id is the stretch: first = tl.program_id(axis=2) * K_PER_PROGRAM is its first k. The "
           "loop is exercise 4.1's, over the stretch only: for start in range(0, K_PER_PROGRAM, BLOCK_K), with "
           "ks = first + start + tl.arange(0, BLOCK_K), and acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) "
           "before it.",
           "Each step loads A[rows, ks] and B[ks, cols] from the strides, masked on both dimensions of each tile "
           "(ks < K too: the last stretch runs past K's end), other=0.0, and acc = tl.dot(a, b, acc, "
           "input_precision=\"ieee\").",
           "After the loop, one add of the whole tile: tl.atomic_add(c_ptr + rows[:, None] * stride_cm + cols[None, :] "
           "* stride_cn, acc, mask=(rows[:, None] < M) & (cols[None, :] < N)). Not tl.store: every stretch's "
           "program writes the same tile, and a store keeps only the last one's sum."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
