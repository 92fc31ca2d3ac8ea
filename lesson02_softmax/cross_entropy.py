"""Lesson 2, a file lesson 6 uses: cross-entropy, a language model's loss, by this lesson's online softmax.

For one row of logits x (a score per token of the vocabulary) and its target t,

    loss = -log softmax(x)[t] = logsumexp(x) - x[t],     logsumexp(x) = m + log(sum_j exp(x_j - m)).

The forward walks each row in tiles as softmax_online_kernel does (section 3 of the chapter:
the max m and the sum l carried along, l rescaled when m grows), and picks up x[t] on the way. It
stores two float32 numbers per row: the loss and lse = logsumexp(x). The backward needs the
probabilities p = softmax(x) = exp(x - lse): it recomputes them tile by tile from the stored lse and
writes dL/dx = (p - onehot(t)) * dL/dloss in the logits' dtype, in one walk. The rows x vocabulary
float32 probabilities are never stored; F.cross_entropy in eager mode keeps its log_softmax (rows x
vocabulary, in the logits' dtype) from the forward to the backward.

As F.cross_entropy: a row whose target is ignore_index (-100 by default: how padding is masked)
adds nothing, its loss and its gradient 0; reduction="sum" adds the rows' losses, and "mean" divides
that sum by the rows that count (NaN where none does: 0 / 0). The kernel writes one loss per row;
torch's .sum() and a division do the rest, small launches on one number per row whose order of
additions is fixed for a given number of rows, so the result is the same bits every time. How many
rows count is known only on the device: counting them there costs two more small launches, where a
count brought to the host would wait for the GPU. A target outside [0, vocabulary) that is not
ignore_index gives a NaN loss (found on the GPU without a synchronisation; F.cross_entropy stops
with a device-side assert instead).

The op has the course's one shape (lesson 1, section 5): cross_entropy() checks its inputs,
CrossEntropy (an autograd function) says what the forward and the backward launch, and the launchers
run `kernel[grid](...)`.
"""
import common.device  # noqa: F401  (first: it decides how triton is imported)

import torch
import triton
import triton.language as tl

from common import checks
from common.checks import check_tensors, whole
from common.launch import cdiv, next_power_of_2
from common.trace import show

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
REDUCTIONS = ("mean", "sum", "none")


@triton.jit
def cross_entropy_kernel(
    x_ptr,                   # logits, M x V
    t_ptr,                   # targets: one integer per row
    loss_ptr, lse_ptr,       # outputs: one float32 per row each
    M, V,                    # rows; the vocabulary: columns per row
    stride_xm, stride_xv,    # elements between rows / columns of the logits
    stride_t,                # elements between targets (a view such as t[::2] needs no copy)
    ignore_index,            # a row with this target adds nothing: loss 0
    BLOCK_M: tl.constexpr,   # rows per program (short rows packed, as lesson 3 packs them)
    BLOCK_V: tl.constexpr,   # a tile's width along the rows
    INDEX_TYPE: tl.constexpr = tl.int32,
    TRACE: tl.constexpr = False,
):
    rows = tl.program_id(axis=0).to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    t = tl.load(t_ptr + rows * stride_t, mask=row_ok, other=0)  # compared in its own integer type
    ignored = t == ignore_index
    in_range = (t >= 0) & (t < V)
    target = tl.where(in_range, t, -1).to(INDEX_TYPE)   # -1: no column is picked
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)   # running max, per row
    l = tl.zeros([BLOCK_M], dtype=tl.float32)           # running sum of exp(x - m)
    picked = tl.zeros([BLOCK_M], dtype=tl.float32)      # x[target], found in whichever tile holds it
    for start in range(0, V, BLOCK_V):                  # the one walk: lesson 2's online softmax
        cols = start + tl.arange(0, BLOCK_V).to(INDEX_TYPE)
        mask = row_ok[:, None] & (cols[None, :] < V)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xv, mask=mask,
                    other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row all -inf so far: subtract 0, not -inf
        l = l * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe[:, None]), axis=1)
        m = m_new
        picked += tl.sum(tl.where(cols[None, :] == target[:, None], x, 0.0), axis=1)
        if TRACE:
            show("tile", x)
            show("m", m)
            show("l", l)
    lse = m + tl.log(l)
    loss = tl.where(ignored, 0.0, tl.where(in_range, lse - picked, float("nan")))  # out of range: NaN
    if TRACE:
        show("x[target]", picked)
        show("lse = m + log(l)", lse)
        show("loss = lse - x[target]", loss)
    tl.store(loss_ptr + rows, loss, mask=row_ok)
    tl.store(lse_ptr + rows, lse, mask=row_ok)


@triton.jit
def cross_entropy_backward_kernel(
    x_ptr, t_ptr, lse_ptr,   # the forward's logits, targets and lse
    dloss_ptr,               # dL/dloss, one per row (stride_dl apart: 0 when one number is broadcast)
    dx_ptr,                  # output: dL/dlogits, M x V, contiguous
    M, V, stride_xm, stride_xv, stride_t, stride_dl,
    ignore_index,            # the forward's: those rows get no gradient
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr,
    INDEX_TYPE: tl.constexpr = tl.int32,
):
    rows = tl.program_id(axis=0).to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    t = tl.load(t_ptr + rows * stride_t, mask=row_ok, other=0)
    target = tl.where((t >= 0) & (t < V), t, -1).to(INDEX_TYPE)
    lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
    dloss = tl.load(dloss_ptr + rows * stride_dl, mask=row_ok, other=0.0).to(tl.float32)
    dloss = tl.where(t == ignore_index, 0.0, dloss)
    for start in range(0, V, BLOCK_V):           # one walk: p recomputed from lse, never stored
        cols = start + tl.arange(0, BLOCK_V).to(INDEX_TYPE)
        mask = row_ok[:, None] & (cols[None, :] < V)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xv, mask=mask,
                    other=0.0).to(tl.float32)
        p = tl.exp(x - lse[:, None])              # softmax(x), tile by tile
        dx = (p - tl.where(cols[None, :] == target[:, None], 1.0, 0.0)) * dloss[:, None]
        tl.store(dx_ptr + rows[:, None] * V + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


def settings(V: int) -> tuple[int, int, int]:
    """BLOCK_M, BLOCK_V, num_warps: rows in tiles of up to 8192 columns; short rows packed until a
    program holds 2048 elements (lesson 3's rule); 16 elements per thread."""
    BLOCK_V = min(next_power_of_2(V), 8192)
    BLOCK_M = max(1, 2048 // BLOCK_V)
    return BLOCK_M, BLOCK_V, max(1, min(16, BLOCK_M * BLOCK_V // 512))


def launch(x: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> tuple:
    """(loss per row, lse), both float32, for x and targets as cross_entropy() checked them."""
    M, V = x.shape
    loss, lse = x.new_empty(M, dtype=torch.float32), x.new_empty(M, dtype=torch.float32)
    if M:
        BLOCK_M, BLOCK_V, num_warps = settings(V)
        cross_entropy_kernel[(cdiv(M, BLOCK_M),)](x, targets, loss, lse, M, V, x.stride(0), x.stride(1),
                                                  targets.stride(0), ignore_index, BLOCK_M=BLOCK_M, BLOCK_V=BLOCK_V,
                                                  INDEX_TYPE=checks.index_type(x, targets), TRACE=False,
                                                  num_warps=num_warps)  # (every argument: softmax.py's launch says why)
    return loss, lse


def launch_backward(x, targets, lse, dloss, ignore_index: int) -> torch.Tensor:
    """dL/dlogits, (M, V) in the logits' dtype, from the forward's lse and dL/dloss (one per row)."""
    M, V = x.shape
    dx = x.new_empty((M, V))
    if M:
        BLOCK_M, BLOCK_V, num_warps = settings(V)
        cross_entropy_backward_kernel[(cdiv(M, BLOCK_M),)](x, targets, lse, dloss, dx, M, V, x.stride(0), x.stride(1),
                                                           targets.stride(0), dloss.stride(0), ignore_index,
                                                           BLOCK_M=BLOCK_M, BLOCK_V=BLOCK_V,
                                                           INDEX_TYPE=checks.index_type(x, targets, dx),
                                                           num_warps=num_warps)
    return dx


class CrossEntropy(torch.autograd.Function):
    """Each row's loss; the backward recomputes the probabilities from the logits and lse, the
    forward's one float32 per row: the rows x vocabulary probabilities are never stored."""

    @staticmethod
    def forward(ctx, x, targets, ignore_index):
        loss, lse = launch(x, targets, ignore_index)
        ctx.save_for_backward(x, targets, lse)  # the logits, the targets and lse: no probabilities
        ctx.ignore_index = ignore_index
        return loss

    @staticmethod
    def backward(ctx, dloss):
        x, targets, lse = ctx.saved_tensors
        return launch_backward(x, targets, lse, dloss, ctx.ignore_index), None, None  # none for targets, ignore_index


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100,
                  reduction: str = "mean") -> torch.Tensor:
    """F.cross_entropy(logits, targets, ignore_index=..., reduction=...) for 2-D logits (rows,
    vocabulary) of float32, float16 or bfloat16 and integer targets (rows,), any strides, the
    arithmetic in float32. The loss is float32 whatever the logits' dtype (F.cross_entropy's is the
    logits' dtype): one per row ("none", 0 where the target is ignore_index), their sum ("sum"), or
    their mean over the rows whose target is not ignore_index ("mean": NaN where there is none). A
    target outside [0, vocabulary) that is not ignore_index gives NaN."""
    (logits,) = check_tensors({"logits": logits}, DTYPES, ndim=2)
    if not isinstance(targets, torch.Tensor) or targets.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"targets must be an int64 or int32 tensor (token ids), got "
                        f"{targets.dtype if isinstance(targets, torch.Tensor) else type(targets).__name__}")
    if targets.shape != logits.shape[:1]:
        raise ValueError(f"targets must hold one id per row of logits: logits {tuple(logits.shape)}, "
                         f"targets {tuple(targets.shape)}")
    if targets.device != logits.device:
        raise ValueError(f"targets are on {targets.device}, logits on {logits.device}: put them on one device")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    ignore_index = whole("ignore_index", ignore_index, least=-2**63)
    if logits.shape[1] == 0:
        raise ValueError("logits have no columns: a vocabulary of 0 has no cross-entropy")
    losses = CrossEntropy.apply(logits, targets, ignore_index)
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / (targets != ignore_index).sum()  # the mean over the rows that count, as torch's
