"""Exercise 6.3 (write): one AdamW step for several tensors in one launch, through a table of addresses.

Worth doing after section 6 (training: the loss falls).

The statement. AdamW keeps two numbers per parameter, m (a running mean of the gradient) and v (of
its square). At step t, for a parameter p with gradient g, torch.optim.AdamW computes

    p <- p * (1 - lr * weight_decay)                 decoupled weight decay (not added to g)
    m <- beta1 * m + (1 - beta1) * g
    v <- beta2 * v + (1 - beta2) * g^2
    p <- p - lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps),   bias1 = 1 - beta1^t, bias2 = 1 - beta2^t

(the new m and v in the last line). Every element is independent: lesson 1's kind of kernel. But a
model's parameters are many tensors, each in memory of its own, and the lesson's optimizer
(lesson06_gpt/adamw.py) updates them all in one launch. The host writes three tables:

    table   int64, a row of 9 per tensor: the addresses of p, g, m, v, p_new, m_new, v_new (the
            outputs: here the checker wants every input left as it is), the tensor's size n, and
            `first`, the first program (block) of the grid that is its
    hyper   float32, a row of 7 per tensor: lr, weight_decay, 1 - beta1, 1 - beta2, eps, bias1, bias2
            (each tensor has its group's lr and weight decay, and its own step t)
    blocks  int32, one per program: the row of the tensor whose block that program updates

Write the kernel. A program reads its entry of blocks, then that tensor's rows; makes each address a
pointer with `.to(tl.pointer_type(tl.float32))` (an int64 holding an address becomes a pointer to
float32s); and updates elements (pid - first) * BLOCK_SIZE ... + BLOCK_SIZE - 1 of that tensor (the
ones below n). The launcher below (given) fills table and blocks and launches one program per
block. 1 - beta1 and 1 - beta2 come from the host, computed in double precision: 0.999 is not a
float32 (the nearest is 0.99900001), so `1 - beta2` taken on the GPU from beta2 would be 1.3e-5 off.
Write the moments as torch's lerp_ does, m <- m + (1 - beta1) * (g - m): the same value as
beta1 * m + (1 - beta1) * g. About 22 lines.

The check: p_new, m_new and v_new of every tensor against the formula above in float64.

The cases: a single element; three tensors of 127, 128 and 129 elements in blocks of 128 (the last
block of each ends inside it or at its end); 1000, 5 and 300 elements in blocks of 256, one tensor
at its first step (m = v = 0, bias1 = 0.1 and bias2 = 0.001, far from 1: an update without the
bias corrections is 3.2 times too large), one at step 1000 with nanoGPT's betas (0.9, 0.95); a
tensor of no elements among others; nine tensors in blocks of 32. The even tensors decay
(weight_decay 0.1, lr 0.01), the odd ones do not (lr 0.02): two parameter groups. The gradients
have both signs and some zeros; m and v come from earlier steps.

Run it: python lesson06_gpt/exercises/adamw.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def adamw_kernel(table_ptr, hyper_ptr, blocks_ptr, BLOCK_SIZE: tl.constexpr):
    """One AdamW step for one block of one tensor: the tensor's row is blocks[pid]; its addresses,
    size and first block are in table (9 a row), its hyperparameters in hyper (7 a row)."""
    pass


NAMES = ("p", "g", "m", "v", "p_new", "m_new", "v_new")  # the addresses in a row of table, in order


def launch(adamw_kernel, table, hyper, blocks, BLOCK_SIZE=128, **tensors):
    """Given: table and blocks filled (the checker's tensors, so that it sees every read), then one
    program per block. tensors: p0, g0, m0, v0, p_new0, m_new0, v_new0, p1, ... for each row."""
    first = 0
    for i in range(len(table)):
        n = tensors[f"p{i}"].numel()
        table[i] = torch.tensor([tensors[f"{name}{i}"].data_ptr() for name in NAMES] + [n, first])
        blocks[first:first + cdiv(n, BLOCK_SIZE)] = i
        first += cdiv(n, BLOCK_SIZE)
    adamw_kernel[(first,)](table, hyper, blocks, BLOCK_SIZE=BLOCK_SIZE)


def reference(table, hyper, blocks, **tensors):
    """torch.optim.AdamW's update of each tensor, in hyper's dtype (float64 for the exact yardstick)."""
    out = {}
    for i, (lr, weight_decay, one_minus_beta1, one_minus_beta2, eps, bias1, bias2) in enumerate(hyper):
        p, g, m, v = (tensors[f"{name}{i}"] for name in "pgmv")
        p = p * (1 - lr * weight_decay)
        m = m + one_minus_beta1 * (g - m)
        v = v + one_minus_beta2 * (g * g - v)
        out.update({f"p_new{i}": p - (lr / bias1) * m / (v.sqrt() / bias2.sqrt() + eps), f"m_new{i}": m,
                    f"v_new{i}": v})
    return out


def case(sizes, BLOCK_SIZE: int, steps=None, betas=(0.9, 0.999), seed: int = 0) -> Case:
    """Tensors of `sizes`, tensor i at step steps[i] (2 if not given); the even ones decay."""
    steps = steps or [2] * len(sizes)
    inputs, hyper = {}, []
    for k, (N, step) in enumerate(zip(sizes, steps)):
        i = torch.arange(N, dtype=torch.float64)
        s = seed + 10 * k
        p = torch.sin(0.731 * i + s) + 0.3 * torch.cos(0.113 * i) + 0.1        # weights, both signs
        g = 0.05 * (torch.cos(0.419 * i + 2.0 * s) - 0.3)                      # gradients, both signs
        g[(i % 7) == 3] = 0.0                                                  # and some zeros
        old = 0.05 * torch.sin(0.277 * i + 3.0 * s + 1.0)                      # earlier steps' gradients
        m, v = (0 * old, 0 * old) if step == 1 else (0.5 * old, 0.8 * old * old + 1e-6)
        inputs.update({f"p{k}": p.float(), f"g{k}": g.float(), f"m{k}": m.float(), f"v{k}": v.float()})
        lr, weight_decay = (1e-2, 0.1) if k % 2 == 0 else (2e-2, 0.0)
        hyper.append([lr, weight_decay, 1 - betas[0], 1 - betas[1], 1e-8, 1 - betas[0] ** step, 1 - betas[1] ** step])
    blocks = sum(cdiv(n, BLOCK_SIZE) for n in sizes)
    inputs.update(table=torch.zeros(len(sizes), 9, dtype=torch.int64), hyper=torch.tensor(hyper, dtype=torch.float32),
                  blocks=torch.zeros(blocks, dtype=torch.int32))
    name = f"sizes {list(sizes)}, BLOCK_SIZE {BLOCK_SIZE}, steps {steps}, betas {betas}"
    return Case(name, inputs, dict(BLOCK_SIZE=BLOCK_SIZE))


EXERCISE = Exercise(
    lesson="lesson06_gpt", name="adamw", kind="write", parts=("adamw_kernel",), stub="1e3f47470089",
    launch=launch, reference=reference, lines=22,
    cases=[case([1], 128), case([127, 128, 129], 128, seed=1),
           case([1000, 5, 300], 256, steps=[1, 7, 1000], betas=(0.9, 0.95), seed=2), case([3, 0, 200], 64, seed=3),
           case([33, 1, 64, 65, 7, 100, 31, 32, 2], 32, steps=[1, 2, 3, 4, 5, 6, 7, 8, 9], seed=4)],
    bench_case=lambda: case([1 << 23, 1 << 22, 1 << 20, 3000], 1024),
    hints=["Lesson 1's six steps with one step before them: find your tensor. t = tl.load(blocks_ptr + pid) is its "
           "row; its addresses are table_ptr + t * 9 + 0 ... 6, its size and first block + 7 and + 8, its "
           "hyperparameters hyper_ptr + t * 7 + 0 ... 6. Then offsets, mask, four loads, the update, three stores.",
           "tl.load(table_ptr + t * 9).to(tl.pointer_type(tl.float32)) is p's pointer; the others likewise. Your "
           "block of the tensor is its block number pid - first: offsets = (pid - first) * BLOCK_SIZE + "
           "tl.arange(0, BLOCK_SIZE), masked with offsets < n (n from the table, not the grid's size).",
           "m and v first, each from its old value and g; the step then uses the new ones, with the bias "
           "corrections where the formula puts them: under m, and under sqrt(v). The decay multiplies p before "
           "the step, for every element (a tensor that does not decay has weight_decay 0)."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
