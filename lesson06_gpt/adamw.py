"""Lesson 6's optimizer: AdamW, torch.optim.AdamW's update of every parameter in one launch.

AdamW keeps two numbers per parameter, m (a running mean of the gradient) and v (of its square),
and moves each parameter p with gradient g by, at its step t,

    p <- p * (1 - lr * weight_decay)                      (decoupled weight decay)
    m <- beta1 * m + (1 - beta1) * g,    v <- beta2 * v + (1 - beta2) * g^2
    p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

which is torch.optim.AdamW's arithmetic, operation for operation. Every element is independent:
lesson 1's kind of kernel, reading p, g, m, v and writing p, m, v back (28 bytes per parameter in
float32). A model's parameters are dozens of tensors, each in memory of its own, and one launch per
tensor pays one launch cost each. So a step launches once for all of them: the host writes a table
with a row per tensor (the addresses of p, of p.grad, of m and v, its size, the first block of the
grid that is its) and a row of its hyperparameters (its group's lr and weight decay, its own bias
corrections, as each parameter counts its own steps), and a list of which tensor each block of the
grid belongs to. A program finds its row, turns the addresses (int64) into pointers and updates
its block of that tensor. The parameters stay ordinary tensors, and the gradient is whatever
p.grad holds, whoever put it there: a backward, clipping, a user.

The class around the kernel is a torch.optim.Optimizer: parameters, named parameters or groups of
them with their own lr, betas, eps and weight_decay; zero_grad(); state_dict() and
load_state_dict() in torch.optim.AdamW's format (each parameter's "step", "exp_avg",
"exp_avg_sq"), so either optimizer's state loads into the other. A parameter whose .grad is None
is skipped, as torch skips it: no decay, no moments, its step count unchanged.

The table holds 1 - beta1 and 1 - beta2, computed on the host in double precision and rounded to
float32 once, not the betas: 0.999 is not a float32 (the nearest is 0.99900001), so `1 - beta2` taken
in float32 from a float32 beta2 is 0.0009999871, 1.3e-5 off, and every v with it.

What it refuses, beyond torch's own refusals: parameters that are not float32 (the kernel reads and
writes through float32 pointers, one compiled kernel for every tensor; the course keeps float32
weights and optimizer state under bfloat16 activations), parameters on several devices (one launch
runs on one), strided views as parameters (a program walks each tensor's memory as one run), a
parameter given twice (two programs would update it at once), amsgrad and maximize (not written).
"""
import common.device  # noqa: F401  (first: it decides how triton is imported)

import torch
import triton
import triton.language as tl

from common.checks import check_tensors, real
from common.launch import cdiv

BLOCK_SIZE = 1024


@triton.jit
def adamw_kernel(
    table_ptr,    # int64, a row per tensor: the addresses of p, g, m, v; its size; its first block
    hyper_ptr,    # float32, a row per tensor: lr, weight_decay, 1 - beta1, 1 - beta2, eps, bias1, bias2
    blocks_ptr,   # int32, one per program: the tensor (row) its block belongs to
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    t = tl.load(blocks_ptr + pid)               # my tensor
    row, hyper = table_ptr + t * 6, hyper_ptr + t * 7
    p_ptr = tl.load(row).to(tl.pointer_type(tl.float32))      # an address, read as an int64, made a pointer
    g_ptr = tl.load(row + 1).to(tl.pointer_type(tl.float32))
    m_ptr = tl.load(row + 2).to(tl.pointer_type(tl.float32))
    v_ptr = tl.load(row + 3).to(tl.pointer_type(tl.float32))
    n, first = tl.load(row + 4), tl.load(row + 5)
    lr, weight_decay = tl.load(hyper), tl.load(hyper + 1)
    one_minus_beta1, one_minus_beta2, eps = tl.load(hyper + 2), tl.load(hyper + 3), tl.load(hyper + 4)
    bias1, bias2 = tl.load(hyper + 5), tl.load(hyper + 6)  # 1 - beta1^t, 1 - beta2^t: this tensor's step t
    offsets = (pid - first) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # my block of it (int64: first is)
    mask = offsets < n
    p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0)
    m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    p = p * (1 - lr * weight_decay)
    m = m + one_minus_beta1 * (g - m)      # = beta1 * m + (1 - beta1) * g (torch's lerp_)
    v = v + one_minus_beta2 * (g * g - v)  # = beta2 * v + (1 - beta2) * g^2
    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)
    tl.store(p_ptr + offsets, p, mask=mask)
    tl.store(m_ptr + offsets, m, mask=mask)
    tl.store(v_ptr + offsets, v, mask=mask)


def hyperparameters(group: dict) -> tuple:
    """A group's lr, betas, eps and weight_decay as floats, refused where torch.optim.AdamW refuses them."""
    lr, eps, weight_decay = real("lr", group["lr"]), real("eps", group["eps"]), real("weight_decay", group["weight_decay"])
    beta1, beta2 = (real(f"betas[{i}]", b) for i, b in enumerate(group["betas"]))
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    for i, beta in enumerate((beta1, beta2)):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    if group.get("amsgrad") or group.get("maximize"):
        raise ValueError("amsgrad and maximize are not written here: use torch.optim.AdamW for them")
    return lr, beta1, beta2, eps, weight_decay


class AdamW(torch.optim.Optimizer):
    """torch.optim.AdamW(params, lr, betas, eps, weight_decay) for float32 parameters on one device,
    every parameter with a gradient updated by one launch per step."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.blocks = (None, None)  # (the tensors' sizes, the block table): made again when they change
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)  # (torch's checks; the defaults filled in)
        group = self.param_groups[-1]
        try:
            hyperparameters(group)
            params = group["params"]
            names = group.get("param_names") or [f"params[{i}]" for i in range(len(params))]
            if len(set(params)) != len(params):
                raise ValueError("a parameter is given twice: two programs would update it at once")
            check_tensors(dict(zip(names, params)), (torch.float32,))  # float32, on the kernels' device
            first = next((q for g in self.param_groups for q in g["params"]), None)
            for name, p in zip(names, params):
                if p.device != first.device:
                    raise ValueError(f"{name} is on {p.device}, the first parameter on {first.device}: one launch "
                                     "runs on one device")
                if torch.empty_like(p, device="meta").stride() != p.stride():  # (empty_like keeps dense strides)
                    raise ValueError(f"{name} is a strided view (strides {p.stride()}): the kernel walks each "
                                     "parameter's memory as one run; make it a tensor of its own (.contiguous())")
        except Exception:
            self.param_groups.pop()
            raise

    def __setstate__(self, state: dict) -> None:
        """After load_state_dict: the step counts on the host (torch's fused AdamW keeps them on the GPU),
        the moments of their parameter's shape and laid out as it is (the kernel walks them side by side)."""
        super().__setstate__(state)
        self.blocks = (None, None)
        for p, s in self.state.items():
            if s:
                s["step"] = torch.tensor(float(s["step"]))
                for key in ("exp_avg", "exp_avg_sq"):
                    if s[key].shape != p.shape:
                        raise ValueError(f"the state's {key} has shape {tuple(s[key].shape)}, its parameter "
                                         f"{tuple(p.shape)}: a state dict of another model?")
                    if s[key].stride() != p.stride():
                        s[key] = torch.empty_like(p).copy_(s[key])

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        rows, hypers, sizes, kept = [], [], [], []
        blocks = 0
        for group in self.param_groups:
            lr, beta1, beta2, eps, weight_decay = hyperparameters(group)  # (a scheduler may have changed them)
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if g.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                if g.stride() != p.stride() or g.is_neg():  # a gradient set by hand, laid out otherwise
                    g = torch.empty_like(p).copy_(g)
                    kept.append(g)  # (alive until the launch reads it)
                state = self.state[p]
                if not state:
                    state.update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                t = state["step"].item()
                rows.append([p.data_ptr(), g.data_ptr(), state["exp_avg"].data_ptr(), state["exp_avg_sq"].data_ptr(),
                             p.numel(), blocks])
                hypers.append([lr, weight_decay, 1 - beta1, 1 - beta2, eps, 1 - beta1 ** t, 1 - beta2 ** t])
                sizes.append(p.numel())
                blocks += cdiv(p.numel(), BLOCK_SIZE)
                device = p.device
        if blocks:
            adamw_kernel[(blocks,)](to_device(rows, torch.int64, device), to_device(hypers, torch.float32, device),
                                    self.block_table(sizes, device), BLOCK_SIZE=BLOCK_SIZE)
        return loss

    def block_table(self, sizes: list, device) -> torch.Tensor:
        """For each block of the grid, the row of the tensor it belongs to: made once for a set of sizes."""
        if self.blocks[0] != (sizes, device):
            counts = torch.tensor([cdiv(n, BLOCK_SIZE) for n in sizes])
            table = torch.repeat_interleave(torch.arange(len(sizes), dtype=torch.int32), counts).to(device)
            self.blocks = ((sizes, device), table)
        return self.blocks[1]


def to_device(rows: list, dtype: torch.dtype, device) -> torch.Tensor:
    """A table made on the host, copied to the device without waiting: from pinned memory on a GPU
    (a copy from ordinary memory would wait for the GPU to finish the backward first)."""
    table = torch.tensor(rows, dtype=dtype, pin_memory=device.type == "cuda")
    return table.to(device, non_blocking=True)
