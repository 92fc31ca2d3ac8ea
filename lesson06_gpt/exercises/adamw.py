"""Exercise 6.3 (write): one AdamW step as one element-wise kernel, the decay only where offsets < n_decay.

Worth doing after section 6 (training: the loss falls).

The statement. AdamW keeps two numbers per parameter, m (a running mean of the gradient) and v (of
its square). At step t, for a parameter p with gradient g, torch.optim.AdamW computes

    p <- p * (1 - lr * weight_decay)                 decoupled weight decay (not added to g)
    m <- beta1 * m + (1 - beta1) * g
    v <- beta2 * v + (1 - beta2) * g^2
    p <- p - lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps),   bias1 = 1 - beta1^t, bias2 = 1 - beta2^t

(the new m and v in the last line). Every element is independent: lesson 1's kind of kernel. The
lesson lays every parameter of the model out in one flat float32 buffer, the weights that decay
(matrices, embeddings) first, so one launch updates them all and tells the decaying ones by their
offset: the first n_decay elements decay, the others (norms' weights) do not. Write the kernel:
p, g, m, v are flat float32 tensors of N elements; the launcher below (given) computes bias1 and
bias2 from the step t on the host and launches cdiv(N, BLOCK_SIZE) programs. It hands the kernel
1 - beta1 and 1 - beta2, not the betas: a float argument arrives as a float32, and 0.999 is not one
(the nearest is 0.99900001), so `1 - beta2` taken on the GPU is 1.3e-5 off. Write the moments as
torch's lerp_ does, m <- m + (1 - beta1) * (g - m): the same value as beta1 * m + (1 - beta1) * g.
The lesson's kernel (lesson06_gpt/adamw.py) writes p, m and v back in place and zeros g; here the
checker wants every input left as it is, so write the new values to p_new, m_new and v_new (same
size, float32).
About 14 lines.

The check: p_new, m_new and v_new against the formula above in float64 (which is
torch.optim.AdamW's arithmetic, with one parameter group decaying and one not).

The cases: a single element, decaying and not; N = 127, 128 and 129 in blocks of 128 with the
decay ending inside a block (n_decay = 100); 1000 elements in blocks of 256, n_decay = 600; the
first step (m = v = 0, bias1 = 0.1 and bias2 = 0.001, far from 1: an update without the bias
corrections is (1 - beta1) / sqrt(1 - beta2) = 3.2 times too large); step 1000 with nanoGPT's
betas (0.9, 0.95); all decaying (n_decay = N). The gradients have both signs and some zeros, m
and v come from earlier steps, lr = 0.01 and weight_decay = 0.1 (so the decay moves p by 1e-3 of
itself: plainly more than a rounding).

Run it: python lesson06_gpt/exercises/adamw.py   (--hint for a hint, --solution for ours)
"""
import common.device  # noqa: F401  (chooses GPU or interpreter before triton is imported)
import torch
import triton
import triton.language as tl

from common.exercise import Case, Exercise
from common.launch import cdiv


@triton.jit
def adamw_kernel(p_ptr, g_ptr, m_ptr, v_ptr, p_new_ptr, m_new_ptr, v_new_ptr, N, n_decay,
                 lr, one_minus_beta1, one_minus_beta2, eps, weight_decay, bias1, bias2, BLOCK_SIZE: tl.constexpr):
    """One AdamW step for elements [pid * BLOCK_SIZE, (pid + 1) * BLOCK_SIZE) of the flat buffers,
    the decay only where offsets < n_decay; the new p, m, v stored in p_new, m_new, v_new."""
    pass


def launch(adamw_kernel, p, g, m, v, p_new, m_new, v_new, n_decay, lr, beta1, beta2, eps, weight_decay, step,
           BLOCK_SIZE=128):
    """Given: 1 - beta1, 1 - beta2 and the bias corrections of step `step` (counted from 1), once on the
    host in double precision; one program per block."""
    N = p.numel()
    bias1, bias2 = 1 - beta1 ** step, 1 - beta2 ** step
    adamw_kernel[(cdiv(N, BLOCK_SIZE),)](p, g, m, v, p_new, m_new, v_new, N, n_decay, lr, 1 - beta1, 1 - beta2, eps,
                                         weight_decay, bias1, bias2, BLOCK_SIZE=BLOCK_SIZE)


def reference(p, g, m, v, n_decay, lr, beta1, beta2, eps, weight_decay, step):
    """torch.optim.AdamW's update, operation for operation, in p's dtype (float64 for the exact yardstick)."""
    bias1, bias2 = 1 - beta1 ** step, 1 - beta2 ** step
    decays = torch.arange(p.numel(), device=p.device) < n_decay
    p = torch.where(decays, p * (1 - lr * weight_decay), p)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    p = p - (lr / bias1) * m / (v.sqrt() / bias2 ** 0.5 + eps)
    return {"p_new": p, "m_new": m, "v_new": v}


def case(N: int, n_decay: int, BLOCK_SIZE: int, step: int = 2, betas=(0.9, 0.999), seed: int = 0) -> Case:
    i = torch.arange(N, dtype=torch.float64)
    p = torch.sin(0.731 * i + seed) + 0.3 * torch.cos(0.113 * i) + 0.1        # weights, both signs
    g = 0.05 * (torch.cos(0.419 * i + 2.0 * seed) - 0.3)                      # gradients, both signs
    g[(i % 7) == 3] = 0.0                                                     # and some zeros
    if step == 1:
        m, v = torch.zeros(N, dtype=torch.float64), torch.zeros(N, dtype=torch.float64)
    else:  # the moments of earlier steps: gradients of their own, nonnegative v
        old = 0.05 * torch.sin(0.277 * i + 3.0 * seed + 1.0)
        m, v = 0.5 * old, 0.8 * old * old + 1e-6
    inputs = dict(p=p.float(), g=g.float(), m=m.float(), v=v.float(), n_decay=n_decay, lr=1e-2,
                  beta1=betas[0], beta2=betas[1], eps=1e-8, weight_decay=0.1, step=step)
    name = f"N = {N}, n_decay = {n_decay}, BLOCK_SIZE {BLOCK_SIZE}, step {step}, betas {betas}"
    return Case(name, inputs, dict(BLOCK_SIZE=BLOCK_SIZE))


EXERCISE = Exercise(
    lesson="lesson06_gpt", name="adamw", kind="write", parts=("adamw_kernel",), stub="a8f4d5bf566f",
    launch=launch, reference=reference, lines=14,
    cases=[case(1, 1, 128), case(1, 0, 128, seed=1), case(127, 100, 128, seed=2), case(128, 100, 128, seed=3),
           case(129, 100, 128, seed=4), case(1000, 600, 256, seed=5), case(300, 150, 128, step=1, seed=6),
           case(500, 200, 128, step=1000, betas=(0.9, 0.95), seed=7), case(257, 257, 64, seed=8)],
    bench_case=lambda: case(1 << 24, 1 << 23, 1024),
    hints=["Lesson 1's six steps (offsets, mask, loads, compute, stores), with four loads and three stores: "
           "load p, g, m, v (masked with offsets < N), compute the new m and v first, then the new p from "
           "them, and store all three.",
           "The decay is a choice per element, not a branch per program (n_decay can fall inside a block): "
           "p = tl.where(offsets < n_decay, p * (1 - lr * weight_decay), p), before the step. The step uses the "
           "new m and v, and divides by bias1 and by sqrt(bias2) where the formula does.",
           "m and v first, each from its old value and g; the step then uses the new ones, with the bias "
           "corrections where the formula puts them: under m, and under sqrt(v). Which elements decay, and does "
           "the decay use p before or after the step?"],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
