"""Exercise 3.3 (write): a row sum split across programs, the partial sums added with tl.atomic_add.

The statement. x is an M x N tensor (float32, float16 or bfloat16) with few rows and long ones;
y, of M float32 elements, holds each row's sum. Lesson 3's section 5 splits a row between several
programs and adds their partial sums in a second launch; here the programs add them themselves,
into y, with tl.atomic_add: a read-modify-write of one address that the GPU makes indivisible, so
that programs adding into the same element at the same time lose nothing. The grid is 2-D,
(M, cdiv(N, COLS_PER_PROGRAM)): program (m, j) sums columns j * COLS_PER_PROGRAM ... (j + 1) *
COLS_PER_PROGRAM - 1 of row m (the last stretch stops at N), walking them in tiles of BLOCK_N with
an fp32 accumulator (COLS_PER_PROGRAM is a whole number of tiles), and adds its one partial sum
into y[m], once, after its loop. Row m starts at x_ptr + m * stride_xm; its columns are
contiguous. About 10 lines.

The launcher below is given, and it is a part: the checker takes yours, so keep its y.zero_().
The programs add into y, so y must start at 0; the checker hands the launcher a y full of NaN
(as torch.empty may be), and NaN + anything is NaN. (The order the programs add in is not fixed,
so on a GPU the last bits of a sum can change from run to run: float addition is not
associative. Where that matters, section 5's second launch is deterministic.)

The budget, checked under the interpreter: x read once, and one atomic add per program (an
atomic per tile works too, but atomics into one address take turns: keep the partial sum in
registers and add it once).

The cases: a single element; 3 x 129 with stretches of 128 (two programs per row, the second
with one column); 2 x 1000 with stretches of 256 in tiles of 128 (four programs per row, two tiles
each, the last ragged); 4 x 3000 float16, stretches of 512 (six programs per row); 5 x 700
bfloat16 read through a slice (stride_xm = 800), a tile per stretch.

Run it: python lesson03_rowsum/exercises/split_row_atomic.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def row_sum_atomic_kernel(x_ptr, y_ptr, N, stride_xm, COLS_PER_PROGRAM, BLOCK_N: tl.constexpr):
    """y[m] += the sum of row m's columns j * COLS_PER_PROGRAM ..., for program (m, j)."""
    pass


def launch(row_sum_atomic_kernel, x, y, COLS_PER_PROGRAM=1024, BLOCK_N=256):
    """Given: y zeroed, then one program per row and stretch of COLS_PER_PROGRAM columns."""
    M, N = x.shape
    assert COLS_PER_PROGRAM % BLOCK_N == 0, "a stretch is a whole number of tiles"
    y.zero_()  # the programs add into y
    grid = (M, cdiv(N, COLS_PER_PROGRAM))
    row_sum_atomic_kernel[grid](x, y, N, x.stride(0), COLS_PER_PROGRAM, BLOCK_N=BLOCK_N)


def reference(x):
    return {"y": x.to(torch.promote_types(x.dtype, torch.float32)).sum(dim=1)}


def one_atomic_per_program(log, x):
    """Each program adds into y once."""
    adds = {}
    for kind, program, name, indices in log.accesses:
        if kind == "atomic" and name == "y":
            adds[program] = adds.get(program, 0) + len(indices)
    for program, n in adds.items():
        if n > 1:
            p = ", ".join(str(int(i)) for i in program[:2])
            return (f"program ({p}) made {n} atomic adds into y ({sum(adds.values())} for {len(adds)} "
                    f"program{'s' if len(adds) > 1 else ''}; one each is enough): keep the partial sums in registers "
                    "(acc) across the tiles and add one number, tl.sum(acc, axis=0), once, after the loop; atomics "
                    "into one address take turns")
    return None


def case(M: int, N: int, COLS_PER_PROGRAM: int, BLOCK_N: int, dtype=torch.float32, stride: int | None = None) -> Case:
    i = torch.arange(M * N, dtype=torch.float32).reshape(M, N)
    x = ((i * 0.37).sin() + 0.3 * (i * 0.071).cos() + 0.4 + 0.1 * torch.arange(M)[:, None]).to(dtype)
    if stride is not None:  # a slice of a wider tensor: rows `stride` elements apart
        x = torch.cat([x, torch.zeros(M, stride - N, dtype=dtype)], dim=1)[:, :N]
    per_row = cdiv(N, COLS_PER_PROGRAM)
    name = (f"{M} x {N}, {per_row} program{'s' if per_row > 1 else ''} per row of {COLS_PER_PROGRAM} columns, "
            f"BLOCK_N {BLOCK_N}, {str(dtype)[6:]}" + (f", rows {stride} apart" if stride else ""))
    return Case(name, dict(x=x), dict(COLS_PER_PROGRAM=COLS_PER_PROGRAM, BLOCK_N=BLOCK_N))


EXERCISE = Exercise(
    lesson="lesson03_rowsum", name="split_row_atomic", kind="write", parts=("row_sum_atomic_kernel", "launch"),
    stub="7c23466341d0", reference=reference, lines=10,
    budget={"x": 1}, budget_note="Each program walks its own stretch of its row, each tile once.",
    budget_check=one_atomic_per_program,
    cases=[case(1, 1, 256, 256), case(3, 129, 128, 64), case(2, 1000, 256, 128),
           case(4, 3000, 512, 256, torch.float16), case(5, 700, 128, 128, torch.bfloat16, stride=800)],
    bench_case=lambda: case(4, 1 << 24, 1 << 17, 4096),
    hints=["Two program ids: m = tl.program_id(axis=0) is the row, j = tl.program_id(axis=1) the stretch, whose "
           "first column is first = j * COLS_PER_PROGRAM. The loop: for start in range(0, COLS_PER_PROGRAM, "
           "BLOCK_N), with cols = first + start + tl.arange(0, BLOCK_N).",
           "The mask is cols < N (the last stretch runs past the row's end); acc = tl.zeros([BLOCK_N], "
           "dtype=tl.float32) adds each tile, loaded with other=0.0 and .to(tl.float32).",
           "After the loop, one add: tl.atomic_add(y_ptr + m, tl.sum(acc, axis=0)). Not tl.store: several "
           "programs write y[m], and a store keeps only the last one's partial sum."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
