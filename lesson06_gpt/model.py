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

from common.checks import dtype_name, whole
from lesson02_softmax.cross_entropy import cross_entropy  # lesson 2's online softmax
from lesson03_rowsum.rmsnorm import rms_norm              # lesson 3's row walk
from lesson04_matmul.matmul import matmul                 # lesson 4
from lesson05_flash_attention.attention import attention_qkv, split_heads  # lesson 5
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

    def __post_init__(self):
        """Refuse a shape no model has: every size a whole number >= 1, heads splitting d_model into
        head_dim, kv_heads splitting heads into groups."""
        for field in dataclasses.fields(self):
            whole(field.name, getattr(self, field.name))  # (0 heads would divide by zero, -64 widths...)
        if self.d_model % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide d_model ({self.d_model}): each head takes "
                             "d_model // heads of it")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads}): each key head serves "
                             "heads // kv_heads query heads")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


TOY = Config()  # the CPU's model, and every run's agreement check (section 5)
GPT2_SMALL = Config(layers=12, d_model=768, heads=12, kv_heads=4, seq=1024)  # GPT-2 small's size, 4 key heads
# float32 on the CPU: the interpreter computes bfloat16 through float32 anyway, only slower
DTYPE = "float32" if INTERPRET else "bfloat16"
DTYPES = ("float32", "bfloat16", "float16", "float64")  # the activations' (float64: the torch ops' exact reference)


class TorchOps:
    """PyTorch's own operations: F.linear, F.scaled_dot_product_attention, F.rms_norm, F.cross_entropy."""
    name = "torch"

    @staticmethod
    def linear(x, w, activation=None):
        y = F.linear(x, w.to(x.dtype))
        return F.gelu(y, approximate="tanh") if activation == "gelu" else y

    @staticmethod
    def attention(qkv, heads):
        q, k, v = split_heads(qkv, heads)  # (the three views of the packed projection, as lesson 5 takes them)
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
        # lesson 4: x @ W^T (with activation="gelu", GELU in the epilogue); the float32 W cast inside,
        # its gradient written in float32
        return matmul(x, w.t(), activation=activation)

    @staticmethod
    def attention(qkv, heads):
        return attention_qkv(qkv, heads, causal=True)  # lesson 5: grouped-query heads by index, d(qkv) in one buffer

    @staticmethod
    def norm(h, branch, w, eps):
        # the float32 weight as it is: lesson 3's kernels read a weight of any float dtype, so no cast
        # is launched before (to bfloat16) nor after (its gradient back to float32): dw comes out in float32
        if branch is None:
            return h, rms_norm(h, w, eps)
        return rms_norm(branch, w, eps, residual=h)  # lesson 3: (h + branch, its norm), one launch

    @staticmethod
    def loss(logits, targets):
        return cross_entropy(logits, targets)  # lesson 2: float32 inside, no probabilities stored


OPS = {"torch": TorchOps, "course": CourseOps}


class GPT(torch.nn.Module):
    def __init__(self, config: Config, ops: str = "course", *, seed: int = 0, dtype: str | None = None):
        """A fresh model: the same seed gives the same weights whatever the op set. dtype: the
        activations' (one of DTYPES, a name or a torch.dtype; by default DTYPE)."""
        super().__init__()
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, got {type(config).__name__}")
        if ops not in OPS:
            raise ValueError(f"ops must be one of {list(OPS)}, got {ops!r}")
        dtype = DTYPE if dtype is None else dtype_name(dtype) if isinstance(dtype, torch.dtype) else dtype
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        if ops == "course" and dtype == "float64":
            raise ValueError("the course's kernels take float32, bfloat16 or float16; float64 is for ops='torch'")
        self.config, self.ops = config, OPS[ops]
        self.dtype = getattr(torch, dtype)
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
        """The mean cross-entropy of predicting targets (B, T) from idx (B, T), in nats: token ids of
        the vocabulary, at most config.seq of them a row (the position table's length)."""
        ops, cfg = self.ops, self.config
        self.check_tokens(idx, targets)
        B, T = idx.shape
        H, KV, D = cfg.heads, cfg.kv_heads, cfg.head_dim
        h = (F.embedding(idx, self.wte) + self.wpe[:T]).to(self.dtype).view(B * T, cfg.d_model)  # the residual stream
        branch = None
        for block in self.blocks:
            h, x = ops.norm(h, branch, block.norm1, 1e-6)
            qkv = ops.linear(x, block.wqkv).view(B, T, H + 2 * KV, D)  # q's H heads, then k's KV, then v's
            y = ops.attention(qkv, H)  # (B, H, T, D)
            branch = ops.linear(y.transpose(1, 2).reshape(B * T, H * D), block.wo)
            h, x = ops.norm(h, branch, block.norm2, 1e-6)
            branch = ops.linear(ops.linear(x, block.up, activation="gelu"), block.down)
        h, x = ops.norm(h, branch, self.norm_f, 1e-6)
        logits = ops.linear(x, self.wte)  # the tied LM head: h @ wte^T
        return ops.loss(logits, targets.reshape(-1))

    def check_tokens(self, idx, targets) -> None:
        """idx and targets: integer tensors of one shape (B, T), T at most config.seq, and, for tensors
        on the CPU, every id in [0, vocab). On a GPU the range is not read back: that would make the host
        wait for the GPU at every step, and the two would no longer overlap; there F.embedding stops
        with a device-side assert on an id out of range, and the course's loss gives NaN for a target
        out of range. Nor while torch.compile traces (a value read back would split its graph)."""
        for name, t in (("idx", idx), ("targets", targets)):
            if not isinstance(t, torch.Tensor) or t.dtype not in (torch.int64, torch.int32):
                what = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
                raise TypeError(f"{name} must be an int64 or int32 tensor of token ids, got {what}")
            if t.ndim != 2:
                raise ValueError(f"{name} must be 2-D (batch, time), got shape {tuple(t.shape)}")
        if targets.shape != idx.shape:
            raise ValueError(f"targets must have idx's shape: idx {tuple(idx.shape)}, targets {tuple(targets.shape)}")
        if idx.shape[1] > self.config.seq:
            raise ValueError(f"idx holds {idx.shape[1]} tokens a row, more than the position table's "
                             f"config.seq = {self.config.seq}")
        if idx.numel() and not idx.is_cuda and not torch.compiler.is_compiling():
            low, high = (int(v) for v in torch.aminmax(torch.stack((idx, targets))))
            if low < 0 or high >= self.config.vocab:
                raise ValueError(f"token ids must be in [0, {self.config.vocab}) (config.vocab): idx and targets "
                                 f"hold ids from {low} to {high}")


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
