"""Lesson 6, second file: AdamW as one element-wise kernel over every parameter of the model.

AdamW keeps two numbers per parameter, m (a running mean of the gradient) and v (of its square),
and moves each parameter p by, at step t,

    p <- p * (1 - lr * weight_decay)                      (decoupled weight decay: 2-D weights only)
    m <- beta1 * m + (1 - beta1) * g,    v <- beta2 * v + (1 - beta2) * g^2
    p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

which is torch.optim.AdamW's arithmetic, operation for operation. Every element is independent:
lesson 1's kind of kernel, reading p, g, m, v and writing p, m, v back (28 bytes per parameter in
float32). A model's parameters are dozens of tensors; one launch per tensor pays one launch cost
each. So the optimizer lays every parameter out in one flat float32 buffer (each parameter becomes
a view of its stretch), and every gradient in another, and one launch updates them all. The
weights that decay (matrices and embeddings) come first, so the kernel tells them apart by offset:
`offsets < n_decay`. The step reads the gradient for the last time, so it writes zeros there:
the next backward accumulates into a zeroed buffer and zero_grad() costs nothing.

The kernel takes 1 - beta1 and 1 - beta2, computed on the host in double precision, not the betas:
a float argument reaches a kernel as a float32, and 0.999 is not one (the nearest is 0.99900001),
so `1 - beta2` on the GPU is 0.0009999871, 1.3e-5 off, and every v with it. Triton's interpreter
keeps Python's double and hides this; the exercise checker's compiled run on a GPU showed it.
"""
import torch
import triton
import triton.language as tl

from common.checks import real
from common.launch import cdiv

BLOCK_SIZE = 1024


@triton.jit
def adamw_kernel(
    p_ptr, g_ptr, m_ptr, v_ptr,   # parameters, gradients, first and second moments: flat float32
    N, n_decay,                   # elements; the first n_decay of them decay
    lr, one_minus_beta1, one_minus_beta2, eps, weight_decay,  # 1 - beta: from the host (see below)
    bias1, bias2,                 # 1 - beta1^t, 1 - beta2^t: computed once per step on the host
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0)
    m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    p = tl.where(offsets < n_decay, p * (1 - lr * weight_decay), p)
    m = m + one_minus_beta1 * (g - m)      # = beta1 * m + (1 - beta1) * g (torch's lerp_)
    v = v + one_minus_beta2 * (g * g - v)  # = beta2 * v + (1 - beta2) * g^2
    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)
    tl.store(p_ptr + offsets, p, mask=mask)
    tl.store(m_ptr + offsets, m, mask=mask)
    tl.store(v_ptr + offsets, v, mask=mask)
    tl.store(g_ptr + offsets, tl.zeros_like(g), mask=mask)  # the gradient's last reader leaves it zeroed


def decays(name: str, p: torch.Tensor) -> bool:
    """nanoGPT's rule: matrices and embeddings decay; norms' weights and biases (vectors) do not."""
    return p.ndim >= 2


class AdamW:
    """torch.optim.AdamW(params, lr, betas, eps, weight_decay) for float32 parameters on one device,
    in one launch per step; weight decay on the parameters of two or more dimensions only. The
    parameters become views of one flat buffer (their values are copied in), their .grad views of
    another, so a backward accumulates into it. step() leaves the gradients zeroed."""

    def __init__(self, named_parameters, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, *, kernel=adamw_kernel):
        params = list(named_parameters)
        if not params:
            raise ValueError("AdamW got no parameters")
        for name, p in params:
            if p.dtype != torch.float32:
                raise TypeError(f"{name} is {p.dtype}: the optimizer keeps float32 parameters (cast the model "
                                "with .float(); activations may still run in bfloat16)")
            if p.device != params[0][1].device:
                raise ValueError(f"{name} is on {p.device}, {params[0][0]} on {params[0][1].device}: one device")
        self.lr, self.eps, self.weight_decay = real("lr", lr), real("eps", eps), real("weight_decay", weight_decay)
        self.beta1, self.beta2 = (real("betas[0]", betas[0]), real("betas[1]", betas[1]))
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ValueError(f"betas must lie in [0, 1), got {tuple(betas)}")
        params.sort(key=lambda item: not decays(*item))  # the decaying ones first (a stable sort)
        self.kernel, self.t = kernel, 0
        self.n_decay = sum(p.numel() for name, p in params if decays(name, p))
        self.N = sum(p.numel() for _, p in params)
        device = params[0][1].device
        self.flat = torch.empty(self.N, device=device)
        self.grads = torch.zeros(self.N, device=device)
        self.m, self.v = torch.zeros(self.N, device=device), torch.zeros(self.N, device=device)
        start = 0
        with torch.no_grad():
            for _, p in params:
                n = p.numel()
                self.flat[start:start + n].copy_(p.flatten())
                p.data = self.flat[start:start + n].view_as(p)   # the parameter lives in the flat buffer now
                p.grad = self.grads[start:start + n].view_as(p)  # and a backward adds into this stretch
                start += n

    def step(self) -> None:
        self.t += 1
        bias1, bias2 = 1 - self.beta1 ** self.t, 1 - self.beta2 ** self.t
        self.kernel[(cdiv(self.N, BLOCK_SIZE),)](
            self.flat, self.grads, self.m, self.v, self.N, self.n_decay, self.lr, 1 - self.beta1, 1 - self.beta2,
            self.eps, self.weight_decay, bias1, bias2, BLOCK_SIZE=BLOCK_SIZE)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the gradients in place (step() leaves them zeroed already): they stay views of the flat
        buffer, so set_to_none is not honoured."""
        self.grads.zero_()
