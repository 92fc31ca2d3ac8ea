"""Lesson 6's model: a GPT as direct as nanoGPT on two op sets, the course's kernels or PyTorch's.

Token and position embeddings, then `layers` blocks of two residual branches, h = h +
attention(rms_norm(h)) and h = h + mlp(rms_norm(h)); a final rms_norm and the tied LM head (the
logits are h @ wte^T). The op set is one argument: the model calls ops.linear, ops.attention,
ops.norm and ops.loss, and the two sets implement the same four functions (main.py, section 2).
This file imports the earlier lessons' op files, never their chapters: what a user's model would do.
"""
import dataclasses
import math

from common.device import DEVICE, INTERPRET

import torch
import torch.nn.functional as F

from lesson02_softmax.cross_entropy import cross_entropy  # lesson 2's online softmax
from lesson03_rowsum.rmsnorm import rms_norm              # lesson 3's row walk
from lesson04_matmul.matmul import matmul                 # lesson 4
from lesson05_flash_attention.attention import attention  # lesson 5
from lesson06_gpt import adamw                            # the optimizer: one launch for every parameter


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int = 2
    d_model: int = 64
    heads: int = 4
    kv_heads: int = 2       # grouped-query attention: heads // kv_heads query heads share a key head
    seq: int = 64
    vocab: int = 256        # bytes
    mlp: int = 4            # the MLP's hidden width, in d_model's

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


TOY = Config()  # the CPU's model, and every run's agreement check (section 5)
GPT2_SMALL = Config(layers=12, d_model=768, heads=12, kv_heads=4, seq=1024)  # GPT-2 small's size, 4 key heads
# float32 on the CPU: the interpreter computes bfloat16 through float32 anyway, only slower
DTYPE = "float32" if INTERPRET else "bfloat16"


class TorchOps:
    """PyTorch's own operations: F.linear, F.scaled_dot_product_attention, F.rms_norm, F.cross_entropy."""
    name = "torch"

    @staticmethod
    def linear(x, w, activation=None):
        y = F.linear(x, w.to(x.dtype))
        return F.gelu(y, approximate="tanh") if activation == "gelu" else y

    @staticmethod
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    @staticmethod
    def norm(h, branch, w, eps):
        if branch is not None:
            h = h + branch
        return h, F.rms_norm(h, (h.shape[-1],), w.to(h.dtype), eps)

    @staticmethod
    def loss(logits, targets):
        return F.cross_entropy(logits.float(), targets)  # autocast's way: the logits in float32


class CourseOps:
    """The course's kernels, each an autograd function with its backward."""
    name = "course"

    @staticmethod
    def linear(x, w, activation=None):
        return matmul(x, w.to(x.dtype).t(), activation=activation)  # lesson 4: x @ W^T, GELU in the epilogue

    @staticmethod
    def attention(q, k, v):
        return attention(q, k, v, causal=True)  # lesson 5: grouped-query heads by index

    @staticmethod
    def norm(h, branch, w, eps):
        if branch is None:
            return h, rms_norm(h, w.to(h.dtype), eps)
        return rms_norm(branch, w.to(h.dtype), eps, residual=h)  # lesson 3: (h + branch, its norm), one launch

    @staticmethod
    def loss(logits, targets):
        return cross_entropy(logits, targets)  # lesson 2: float32 inside, no probabilities stored


OPS = {"torch": TorchOps, "course": CourseOps}


class GPT(torch.nn.Module):
    def __init__(self, config: Config, ops: str = "course", *, seed: int = 0, dtype: str | None = None):
        """A fresh model: the same seed gives the same weights whatever the op set."""
        super().__init__()
        if ops not in OPS:
            raise ValueError(f"ops must be one of {list(OPS)}, got {ops!r}")
        if config.d_model % config.heads or config.heads % config.kv_heads:
            raise ValueError(f"d_model ({config.d_model}) must split into heads ({config.heads}), and heads into "
                             f"kv_heads ({config.kv_heads})")
        self.config, self.ops = config, OPS[ops]
        self.dtype = getattr(torch, dtype or DTYPE)
        C, D, L = config.d_model, config.head_dim, config.layers
        g = torch.Generator().manual_seed(seed)

        def normal(*shape, std=0.02):
            return torch.nn.Parameter((torch.randn(*shape, generator=g) * std).to(DEVICE))

        def ones(n):
            return torch.nn.Parameter(torch.ones(n, device=DEVICE))

        self.wte, self.wpe = normal(config.vocab, C), normal(config.seq, C)
        qkv = (config.heads + 2 * config.kv_heads) * D
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            block = torch.nn.Module()
            block.norm1, block.norm2 = ones(C), ones(C)
            block.wqkv, block.wo = normal(qkv, C), normal(C, C, std=0.02 / math.sqrt(2 * L))  # GPT-2's scaled init
            block.up, block.down = normal(config.mlp * C, C), normal(C, config.mlp * C, std=0.02 / math.sqrt(2 * L))
            self.blocks.append(block)
        self.norm_f = ones(C)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean cross-entropy of predicting targets (B, T) from idx (B, T), in nats."""
        ops, cfg = self.ops, self.config
        B, T = idx.shape
        H, KV, D = cfg.heads, cfg.kv_heads, cfg.head_dim
        h = (F.embedding(idx, self.wte) + self.wpe[:T]).to(self.dtype).view(B * T, -1)  # the residual stream
        branch = None
        for block in self.blocks:
            h, x = ops.norm(h, branch, block.norm1, 1e-6)
            q, k, v = ops.linear(x, block.wqkv).view(B, T, H + 2 * KV, D).split([H, KV, KV], dim=2)
            y = ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # (B, H, T, D)
            branch = ops.linear(y.transpose(1, 2).reshape(B * T, H * D), block.wo)
            h, x = ops.norm(h, branch, block.norm2, 1e-6)
            branch = ops.linear(ops.linear(x, block.up, activation="gelu"), block.down)
        h, x = ops.norm(h, branch, self.norm_f, 1e-6)
        logits = ops.linear(x, self.wte)  # the tied LM head: h @ wte^T
        return ops.loss(logits, targets.reshape(-1))


LR, BETAS = 3e-3, (0.9, 0.95)


def param_groups(model: GPT, weight_decay: float) -> list:
    """nanoGPT's two groups, by name: the matrices and embeddings decay; the norms' weights (vectors) do not."""
    named = list(model.named_parameters())
    return [{"params": [(n, p) for n, p in named if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [(n, p) for n, p in named if p.ndim < 2], "weight_decay": 0.0}]


def optimizer(model: GPT, lr: float = LR, weight_decay: float = 0.1) -> torch.optim.Optimizer:
    """AdamW on param_groups: the course's one-launch kernel for the course's model,
    torch.optim.AdamW(fused=True) for torch's."""
    if model.ops is CourseOps:
        return adamw.AdamW(param_groups(model, weight_decay), lr=lr, betas=BETAS)
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=BETAS, fused=True)
