"""Lesson 6: a GPT trained on the course's own kernels, side by side with PyTorch.

Every earlier lesson built a kernel and timed it alone. Here they work together: a small GPT, as
direct as nanoGPT, whose every operation on the hot path is a course kernel with its backward, and
the same model on PyTorch's own operations, chosen by one argument (ops="course" or ops="torch").
The linears are lesson 4's matmul, the MLP's GELU fused into its epilogue; attention is lesson 5's,
causal, with grouped-query heads; RMSNorm is lesson 3's row walk (lesson03_rowsum/rmsnorm.py), the
residual add fused into it; the loss is a cross-entropy by lesson 2's online softmax
(lesson02_softmax/cross_entropy.py), which never stores the probabilities; and AdamW updates every
parameter in one element-wise launch (adamw.py, lesson 1's kind of kernel). The data needs no
download: the bytes of this repository's own text.

What to look at: the first loss, near ln(256) (section 2); the two op sets agreeing from the same
weights on the same batches (section 5); the loss falling (section 6); which kernels a training step
launches, in order (section 7); and on a GPU, the step's time kernel by kernel, tokens per second and
peak memory against PyTorch eager and torch.compile, the cross-entropy alone at real vocabularies,
and what each op's call costs the host against PyTorch's (sections 8-11). Section 12 runs the same
training on several GPUs.

Run:   python lesson06_gpt/main.py            (every section)
       python lesson06_gpt/main.py --help     (sections, --data FILE, --steps)
Without a CUDA GPU the kernels run under Triton's interpreter on the CPU, on a toy model (2 layers,
d_model 64, seq 64) in float32: exact kernels, a few training steps; the sections that need a GPU
show what a GPU printed (RESULTS.md, which names it).
"""
# %% Set-up: common.device chooses GPU or interpreter before triton is imported
import argparse
import math
import statistics
import time

from common.device import DEVICE, INTERPRET

import torch
import torch.nn.functional as F

from common import bench, profile, roofline
from common.chapter import Chapter, positive_int
from common.launch import cdiv
from common.checks import dtype_name, grad_ok, rel_error
from common.table import print_table
from lesson01_vector_add.elementwise import add, gelu                           # lesson 1 (section 11's costs)
from lesson02_softmax.cross_entropy import cross_entropy, cross_entropy_kernel  # lesson 2's online softmax
from lesson02_softmax.softmax import softmax
from lesson03_rowsum.rmsnorm import rms_norm, rms_norm_kernel                   # lesson 3's row walk
from lesson03_rowsum.row_sum import row_sum
from lesson04_matmul.matmul import matmul                                       # lesson 4
from lesson05_flash_attention.attention import attention                        # lesson 5
from lesson06_gpt import adamw  # the optimizer (adamw.py)
from lesson06_gpt.data import batch, corpus_files, file_problem, load_bytes, split  # the corpus (data.py)
from lesson06_gpt.model import BETAS, DTYPE, GPT, GPT2_SMALL, LR, OPS, TOY, Config, optimizer, param_groups  # model.py

SECTIONS = {  # the chapter, in reading order: `--sections` picks some, `--skip` leaves some out
    "data": "1. The data: the bytes of this repository",
    "model": "2. The model: nanoGPT's shape on two op sets, and its first loss",
    "trace": "3. The trace: the two new kernels on one row each",
    "check": "4. Correctness: each new kernel against PyTorch",
    "agree": "5. The whole model: the course's losses and gradients against torch's",
    "train": "6. Training: the loss falls",
    "anatomy": "7. The anatomy of a training step: what runs, in order, and what is kept for the backward",
    "profile": "8. The step on a GPU, kernel by kernel (torch.profiler)",
    "bench": "9. Training side by side: eager, torch.compile, the course, the course compiled",
    "bench_loss": "10. The cross-entropy alone, at the vocabularies models use",
    "costs": "11. What a call costs, forward and backward: every op against PyTorch's",
    "ddp": "12. Beyond one GPU: the same training under torchrun",
}


TOY_BATCH = 1  # windows per batch of the toy runs: the interpreter runs one program at a time
# The GPU sections' sizes: a quick look, or with --full what RESULTS.md holds (minutes). model/batch/
# steps/lr: section 9's training runs (steps timed after `warmup`); rows/vocabs: section 10's;
# checked: the dtypes section 4 checks (each one compiles its own kernels: on a fresh GPU, seconds).
SIZES = {"quick": dict(model=Config(layers=4, d_model=512, heads=8, kv_heads=4, seq=512), batch=8, steps=20,
                       warmup=5, lr=1e-3, rows=4096, vocabs=[50264], checked=[torch.bfloat16]),
         "full": dict(model=GPT2_SMALL, batch=16, steps=200, warmup=10, lr=6e-4, rows=4096,
                      vocabs=[32000, 50264, 128256], checked=[torch.float32, torch.bfloat16])}


def data_file(path: str) -> str:
    """An argparse type: a --data file long enough to split into windows (data.file_problem says why not)."""
    problem = file_problem(path)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return path


chapter = Chapter("lesson06_gpt", __doc__, SECTIONS, running=__name__ == "__main__")
chapter.parser.add_argument("--data", metavar="FILE", type=data_file,
                            help="train on this text file (default: the repository's text)")
chapter.parser.add_argument("--steps", type=positive_int, default=None,
                            help="section 6's training steps (default: 5 on the CPU, 200 on a GPU)")
chapter.parser.add_argument("--dtype", default=DTYPE, choices=["float32", "bfloat16"],
                            help=f"the activations' dtype (default here {DTYPE}: float32 on the CPU, bfloat16 on a GPU); "
                                 "parameters stay float32")
args = chapter.start()

# %% [markdown]
# ## 1. The data: the bytes of this repository
# A byte-level tokenizer is no tokenizer at all: each byte of UTF-8 text is a token, so the
# vocabulary is the 256 byte values and any text file is a dataset. The default corpus is this
# repository's own text (data.py): the README and every chapter, op file and helper, not the
# exercises, which a learner edits; a few hundred kilobytes, read in a fixed order. The first 90%
# trains, the last 10% validates. A batch is `batch` windows of seq + 1 bytes at random offsets: the
# model reads bytes 0..seq-1 and predicts 1..seq.
#
# A fresh model's weights are small (std 0.02), so its logits are near 0 and its softmax near
# uniform: 1/256 for every byte. The loss is the negative log of the probability given to the
# right byte, so the first loss is about -ln(1/256) = ln(256) = 5.545 nats. Bits per byte (the loss
# over ln 2) reads on a scale from 8 (a uniform guess over 256 bytes) down to a compressor's 2 or so.


# %%
def bits_per_byte(loss_nats: float) -> float:
    return loss_nats / math.log(2)


def data_section():
    data = load_bytes(args.data)
    train, val = split(data)
    sample = bytes(train[:60].tolist()).decode("utf-8", "replace")
    print(f"Corpus: {args.data or f'{len(corpus_files())} files of this repository'}, {len(data):,} bytes: "
          f"{len(train):,} to train on, {len(val):,} to validate.\nIts first 60 bytes as the model sees them "
          f"(token ids): {train[:12].tolist()}...\n  = {sample!r}")
    return train


def unigram_entropy(train: torch.Tensor) -> float:
    """The loss of a predictor that knows only how often each byte occurs (nats)."""
    p = torch.bincount(train, minlength=256).double()
    p = p[p > 0] / p.sum()
    return -(p * p.log()).sum().item()


# %%
chapter.run("data", data_section)

# %% [markdown]
# ## 2. The model: nanoGPT's shape, on two op sets
# Token and position embeddings, then `layers` blocks, each two residual branches:
# h = h + attention(rms_norm(h)) and h = h + mlp(rms_norm(h)); a final rms_norm, and the LM head,
# which is the token embedding again (tied weights: the logits are h @ wte^T). Attention has
# `heads` query heads and `kv_heads` key/value heads (grouped-query attention: fewer keys and
# values to project and keep); the MLP is d_model -> 4 d_model -> d_model with a GELU between.
#
# The op set is one argument: the model calls ops.linear, ops.attention, ops.norm and ops.loss, and
# the two sets implement the same four functions. In the course's set every residual add is fused
# into the norm that follows it (norm(h, branch) returns h + branch and its norm from one launch),
# so the block never launches an add of its own; and ops.attention takes the QKV projection itself,
# viewed by head (lesson 5's attention_qkv), so that the backward writes the three gradients into
# one d(QKV) buffer where autograd would join three with a copy.
#
# Mixed precision, the same for both sets: parameters and the optimizer's state are float32;
# activations are bfloat16 on a GPU, while norms, softmaxes and the loss accumulate in float32
# inside their kernels; the loss is float32. Torch's set casts each weight to bfloat16 where it is
# used, as torch.autocast does: two casts per weight and step, the weight to bfloat16 and its
# gradient back to float32. The course's set launches one at most: its norm reads the float32
# weight as it is (lesson 3's kernels read any float dtype, compute in float32), and its matmul
# takes the float32 weight beside bfloat16 activations (lesson 4's matmul casts it for the product
# and writes its gradient in float32 from the kernel's float32 accumulator): no cast back.
# (autocast also keeps the residual stream in float32; here it is bfloat16 in both sets, which
# halves its memory.)


# %%
def model_section():
    train, _ = split(load_bytes(args.data))
    model = GPT(TOY, "course", seed=0)
    count = sum(p.numel() for p in model.parameters())
    print(f"The toy model: {TOY}, {count:,} parameters ({args.dtype} activations).")
    x, y = batch(train, 4, TOY.seq, torch.Generator().manual_seed(0))  # (one window's loss varies by ~0.07)
    with torch.no_grad():
        first = {ops: GPT(TOY, ops, seed=0)(x, y).item() for ops in OPS}
    unigram = unigram_entropy(train)
    rows = [("a uniform guess: ln(256)", math.log(256), 8.0),
            *[(f"a fresh model (std 0.02 weights), {ops} ops, 4 windows", loss, bits_per_byte(loss))
              for ops, loss in first.items()],
            ("each byte's frequency alone (the train split's unigram entropy)", unigram, bits_per_byte(unigram))]
    return print_table(rows, ["predictor", "loss (nats)", "bits per byte"], floatfmt=".3f",
                       title="The first loss, and what beats it",
                       note="A fresh model's logits are near 0, its softmax near uniform: the loss starts near "
                            "ln(256), below it by as much as a tenth or two where the windows' bytes often repeat the "
                            "one before (the tied head gives the input byte a slightly higher logit; a tenth of this "
                            "text's bytes repeat the one before, more in some windows), above it by a few hundredths "
                            "where they rarely do (the logits' small random spread raises it). "
                            "The unigram line is what knowing only how often each byte occurs reaches; training "
                            "(section 6) must go below it.")


# %%
chapter.run("model", model_section)

# %% [markdown]
# ## 3. The trace: the two new kernels on one row each
# The cross-entropy kernel walks a row of 10 logits in tiles of 4, carrying lesson 2's running max m
# and sum l, and picks up the target's logit on the way; then loss = lse - x[target]. The RMSNorm
# kernel takes the row [3, 4] plus the residual [1, 0]: h = [4, 4], mean(h^2) = 16, rstd = 1/4.


# %%
def trace() -> None:
    x = torch.tensor([[1.0, 3.0, 0.5, 2.0, 4.0, -1.0, 0.0, 2.5, 1.5, -0.5]], device=DEVICE)
    t = torch.tensor([3], device=DEVICE)
    loss, lse = x.new_empty(1), x.new_empty(1)
    print("cross_entropy_kernel: one row of 10 logits, target 3, BLOCK_V = 4: three tiles, the last padded with -inf")
    cross_entropy_kernel[(1,)](x, t, loss, lse, M=1, V=10, stride_xm=x.stride(0), stride_xv=x.stride(1),
                               stride_t=t.stride(0), ignore_index=-100,  # (F.cross_entropy's: no target is -100)
                               BLOCK_M=1, BLOCK_V=4, TRACE=True)
    print(f"loss = {loss.item():.4f} (F.cross_entropy: {F.cross_entropy(x, t).item():.4f})\n")
    row, residual = torch.tensor([[3.0, 4.0]], device=DEVICE), torch.tensor([[1.0, 0.0]], device=DEVICE)
    w, h, y, rstd = torch.tensor([0.5, 2.0], device=DEVICE), torch.empty_like(row), torch.empty_like(row), x.new_empty(1)
    print("rms_norm_kernel: the row [3, 4] plus the residual [1, 0], weights [0.5, 2], BLOCK_N = 2")
    rms_norm_kernel[(1,)](row, residual, h, w, y, rstd, M=1, N=2, stride_x=2, stride_r=2, stride_h=2, stride_y=2,
                          stride_w=1, eps=1e-6, BLOCK_M=1, BLOCK_N=2, HAS_RESIDUAL=True, TRACE=True)
    print(f"h = {h.tolist()[0]}, y = h * rstd * w = {y.tolist()[0]} "
          f"(F.rms_norm: {F.rms_norm(row + residual, (2,), w, 1e-6).tolist()[0]})")


# %%
chapter.run("trace", trace, trace=True)

# %% [markdown]
# ## 4. Correctness: each new kernel against PyTorch
# The cross-entropy and RMSNorm (plain and with the residual fused) against torch's autograd in
# float64, their forward and every gradient, at awkward sizes: a vocabulary of 1, one that is not a
# tile's multiple, one of several tiles; rows of 5 and 1000 columns. The error of the same
# computation by torch in the same dtype is the yardstick (as in every lesson's gradient check).
# A quick run checks bfloat16, the model's dtype; --full adds float32 (tests/test_lesson06.py checks
# both every time). AdamW against torch.optim.AdamW over 5 steps.


# %%
def errors(ours, theirs, inputs) -> list:
    """[(our error, torch's error)] for every output and every input's gradient, both relative to torch
    in float64 (theirs) from the same inputs: d(sum(out * g))/d(input) for one random g per output."""
    def run(fn, dtype, cotangents=None):
        xs = [x.detach().to(dtype).requires_grad_() for x in inputs]
        out = fn(*xs)
        out = out if isinstance(out, tuple) else (out,)
        if cotangents is None:  # (the first run, float64's, draws them)
            gen = torch.Generator().manual_seed(1)
            cotangents = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.device) for o in out]
        grads = torch.autograd.grad([o.double().mul(g).sum() for o, g in zip(out, cotangents)], xs)
        return [*out, *grads], cotangents

    exact, cotangents = run(theirs, torch.float64)
    dtype = inputs[0].dtype
    mine, torch_s = (run(fn, dtype, cotangents)[0] for fn in (ours, theirs))
    return [(rel_error(a, e), rel_error(b, e)) for a, b, e in zip(mine, torch_s, exact)]


def check():
    table = []
    gen = torch.Generator().manual_seed(7)  # the same inputs on every run, whatever ran before

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(DEVICE)

    for dtype in chapter.sizes(SIZES)["checked"]:
        for rows, V in [(3, 1), (5, 1000), (4, 20000)]:
            logits = randn(rows, V) * 3
            targets = torch.randint(0, V, (rows,), generator=gen).to(DEVICE)
            errs = errors(lambda x: cross_entropy(x, targets),
                          lambda x: F.cross_entropy(x.double(), targets).to(torch.float32 if x.dtype != torch.float64
                                                                            else x.dtype),
                          [logits.to(dtype)])
            for what, (ours, theirs) in zip(("loss", "d logits"), errs):
                table.append(("cross_entropy", dtype_name(dtype), f"{rows} x {V}", what, ours, theirs,
                              grad_ok(ours, theirs)))
        for M, N in [(3, 5), (7, 1000)]:
            x, w, r = randn(M, N), torch.rand(N, generator=gen).to(DEVICE) + 0.5, randn(M, N)
            cases = {"rms_norm": (lambda x, w: rms_norm(x, w, 1e-6), lambda x, w: F.rms_norm(x, (N,), w, 1e-6), [x, w],
                                  ("y", "dx", "dw")),
                     "rms_norm, residual": (lambda x, w, r: rms_norm(x, w, 1e-6, residual=r),
                                            lambda x, w, r: (x + r, F.rms_norm(x + r, (N,), w, 1e-6)), [x, w, r],
                                            ("h", "y", "dx", "dw", "dresidual"))}
            for name, (ours, theirs, inputs, names) in cases.items():
                for what, (a, b) in zip(names, errors(ours, theirs, [t.to(dtype) for t in inputs])):
                    table.append((name, dtype_name(dtype), f"{M} x {N}", what, a, b, grad_ok(a, b)))
    table += adamw_check()
    return print_table(table, ["kernel", "dtype", "shape", "output", "relative error", "torch's, same dtype", "ok"],
                       floatfmt=".1e", title="Check: the new kernels against torch in float64",
                       note="Relative error against torch's autograd in float64 from the same inputs; beside it, "
                            "torch's own in the same dtype. ok: within twice torch's, plus 1e-5 (AdamW: plus 1e-6). AdamW: "
                            "after 5 steps of both optimizers on the same gradients, against torch.optim.AdamW in "
                            "float64.")


def adamw_check(steps: int = 5) -> list:
    gen = torch.Generator().manual_seed(2)
    shapes = [(30, 20), (20,), (7, 3)]
    start = [torch.randn(s, generator=gen).to(DEVICE) for s in shapes]
    grads = [[torch.randn(s, generator=gen).to(DEVICE) for s in shapes] for _ in range(steps)]
    results = {}
    for name, dtype in (("course", torch.float32), ("torch", torch.float32), ("exact", torch.float64)):
        params = [torch.nn.Parameter(p.clone().to(dtype)) for p in start]
        groups = [{"params": [params[0], params[2]], "weight_decay": 0.1}, {"params": [params[1]], "weight_decay": 0.0}]
        opt = (adamw.AdamW if name == "course" else torch.optim.AdamW)(groups, lr=1e-2)
        for g in grads:
            for p, gi in zip(params, g):
                p.grad = gi.to(dtype)
            opt.step()
        results[name] = torch.cat([p.detach().double().flatten() for p in params])
    ours, theirs = rel_error(results["course"], results["exact"]), rel_error(results["torch"], results["exact"])
    return [("AdamW (one launch)", "float32", "3 tensors, 627 values", f"parameters after {steps} steps", ours, theirs,
             ours <= 2 * theirs + 1e-6)]


# %%
chapter.run("check", check)

# %% [markdown]
# ## 5. The whole model: the course's losses and gradients against torch's
# The two models start from the same weights (one seed) and see the same batches. If every kernel is
# right, their losses agree to the dtype's rounding at every step, and so does every parameter's
# gradient of the first step. The yardstick is again torch: the torch model in float64 is the exact
# answer, and the torch model in the run's dtype shows how far rounding alone takes it.


# %%
def agree(steps: int = 3):
    """Both op sets (and torch in float64) trained `steps` steps from one seed on the same batches, each
    with its own AdamW: the losses at every step, and every gradient of the first step."""
    train, _ = split(load_bytes(args.data))
    gen = torch.Generator().manual_seed(3)
    batches = [batch(train, TOY_BATCH, TOY.seq, gen) for _ in range(steps)]
    runs = {}
    for name, ops, dtype in (("course", "course", args.dtype), ("torch", "torch", args.dtype),
                             ("exact", "torch", "float64")):
        model = GPT(TOY, ops, seed=0, dtype=dtype)
        if dtype == "float64":
            model.double()
            opt = torch.optim.AdamW(param_groups(model, 0.1), lr=LR, betas=BETAS)
        else:
            opt = optimizer(model)
        losses, first = [], None
        for x, y in batches:
            loss = model(x, y)
            loss.backward()
            losses.append(loss.item())
            if first is None:
                first = {n: p.grad.detach().double().clone() for n, p in model.named_parameters()}
            opt.step()
            opt.zero_grad()
        runs[name] = (losses, first)
    (course, g_course), (torch_, g_torch), (exact, g_exact) = runs["course"], runs["torch"], runs["exact"]
    rows = [(f"step {i + 1}", course[i], torch_[i], exact[i], abs(course[i] - exact[i]), abs(torch_[i] - exact[i]))
            for i in range(steps)]
    t1 = print_table(rows, ["loss", "course", "torch", "torch, float64", "course's error", "torch's error"],
                     floatfmt=".7f", title=f"The same weights, the same batches, each with its AdamW ({args.dtype})")
    ratios = {n: (rel_error(g_course[n], g_exact[n]), rel_error(g_torch[n], g_exact[n])) for n in g_exact}
    worst = max(ratios, key=lambda n: ratios[n][0] / (ratios[n][1] + 1e-12))
    shown = list(dict.fromkeys(list(ratios)[:4] + [worst]))
    ok = all(a <= 2 * b + 1e-5 for a, b in ratios.values())
    t2 = print_table([(n, *ratios[n], ratios[n][0] <= 2 * ratios[n][1] + 1e-5) for n in shown],
                     ["parameter", "course: relative error", "torch's, same dtype", "ok"], floatfmt=".1e",
                     title=f"Gradients of the first step: {len(ratios)} parameters, the first four and the worst"
                           + (" (one of them)" if worst in list(ratios)[:4] else ""),
                     note=f"All {len(ratios)} within twice torch's error plus 1e-5: {ok}. Errors against the torch "
                          "model in float64 from the same weights and batch.")
    return [t1, t2]


# %%
chapter.run("agree", agree)

# %% [markdown]
# ## 6. Training: the loss falls
# The course's model trained with the course's AdamW on the corpus: the training loss every few
# steps and the validation loss (on a fixed set of validation windows) at the start and the end.


# %%
@torch.no_grad()
def evaluate(model: GPT, val: torch.Tensor, batches: int = 2, batch_size: int = 4) -> float:
    gen = torch.Generator().manual_seed(4)
    seq = model.config.seq
    return sum(model(*batch(val, batch_size, seq, gen)).item() for _ in range(batches)) / batches


def training():
    steps = args.steps or (5 if INTERPRET else 200)
    train, val = split(load_bytes(args.data))
    model = GPT(TOY, "course", seed=0)
    opt = optimizer(model)
    gen = torch.Generator().manual_seed(5)
    rows = [("validation, before", None, evaluate(model, val))]
    start = time.perf_counter()
    for step in range(1, steps + 1):
        loss = model(*batch(train, TOY_BATCH if INTERPRET else 16, TOY.seq, gen))
        loss.backward()
        opt.step()
        opt.zero_grad()  # (set_to_none: the next backward stores its gradients instead of adding them)
        if step == 1 or step == steps or step % max(1, steps // 8) == 0:
            rows.append((f"train, step {step}", step, loss.item()))
    seconds = time.perf_counter() - start
    after = evaluate(model, val)
    rows.append(("validation, after", steps, after))
    windows = TOY_BATCH if INTERPRET else 16
    unigram = unigram_entropy(train)
    where = (f"below the unigram loss, {unigram:.3f} (section 2): the model has learnt more than each byte's frequency"
             if after < unigram else
             f"still above the unigram loss, {unigram:.3f} (section 2): {steps} steps have seen {steps * windows * TOY.seq:,} "
             f"bytes, too few to learn even how often each byte occurs; more steps (--steps, or a GPU's 200 in "
             "RESULTS.md) go below it")
    return print_table([(what, loss, bits_per_byte(loss)) for what, _, loss in rows],
                       ["", "loss (nats)", "bits per byte"], floatfmt=".3f",
                       title=f"Training the toy model ({TOY.layers} layers, d_model {TOY.d_model}) on the course ops",
                       note=f"{steps} steps of {windows} x {TOY.seq} bytes, lr {LR}, in {seconds:.1f} s"
                            f"{' under the interpreter' if INTERPRET else ''}. Each step's loss is on its own few "
                            "windows, so from one step to the next it can rise while the model improves; the "
                            f"validation loss, on the same held-out windows before and after, is the measure: after "
                            f"them it is {where}.")


# %%
chapter.run("train", training)

# %% [markdown]
# ## 7. The anatomy of a training step
# What a step runs, in order: forward, backward, optimizer. torch.profiler (lesson 1, section 6)
# records every operation a step calls, with its inputs' shapes: the course's ops show as their
# autograd functions (AddRMSNorm, Matmul, ...; each launches one kernel or several: KERNELS says
# which) and, in the backward, as those functions' backward nodes; PyTorch's own as aten::* ops and
# their backward nodes. Views and allocations, which launch nothing, are left out. Beside it, the
# activations each op set keeps for the backward (torch.autograd.graph.saved_tensors_hooks sees
# every tensor saved). Rows to expect: in torch's step, aten::to, the weights cast to the
# activations' dtype (bfloat16 on a GPU; on the CPU's float32 a cast that copies nothing), and on
# a GPU only ToCopyBackward0, their gradients cast back (the course casts its weights inside Matmul, and
# casts no gradient back); in both, the embeddings' sum cast once; HAS_RESIDUAL and HAS_DH, the
# flags of lesson 3's fused norm (the residual add in the forward, the residual stream's own
# gradient joined to dx in the backward); and on the CPU only, the model's check of the token ids
# (aten::stack, aminmax, item: model.check_tokens), and torch's RMSNorm backward in its pieces (CPU
# PyTorch has no fused kernel for it).


# %%
KERNELS = {  # the course's autograd functions and the kernels each one launches
    "Matmul": "matmul_kernel (or, for large bfloat16 products on Hopper, hopper.py's TMA kernel), after a "
              "float32 weight's cast",
    "MatmulBackward": "matmul_kernel or the TMA kernel twice (dX, and dW in the weight's float32, with "
                      "split_k_sum_kernel where K is split, unless its parts add into dW by atomics: lesson 4, "
                      "section 17); where the GELU was fused, first once more: Z recomputed, dL/dZ = dL/dC * "
                      "gelu'(Z) in its epilogue",
    "AttentionQKV": "attention_kernel, on q, k and v as views of the QKV projection",
    "AttentionQKVBackward": "preprocess_kernel, then on Hopper at head_dim 64 or 128 attention_bwd_kernel_hopper "
                            "(Gluon), else dkdv_kernel (sum_parts_kernel where it runs in parts) and dq_kernel, "
                            "writing d(QKV) in one buffer",
    "RMSNorm": "rms_norm_kernel", "AddRMSNorm": "rms_norm_kernel (HAS_RESIDUAL)",
    "RMSNormBackward": "rms_norm_backward_kernel, then row_sum's kernels for dw",
    "AddRMSNormBackward": "rms_norm_backward_kernel (HAS_DH), then row_sum's kernels for dw",
    "CrossEntropy": "cross_entropy_kernel", "CrossEntropyBackward": "cross_entropy_backward_kernel",
}
VIEWS = {"view", "_unsafe_view", "t", "transpose", "expand", "split", "split_with_sizes", "detach", "as_strided",
         "alias", "slice", "select", "unsqueeze", "squeeze", "permute", "reshape", "_reshape_alias", "lift_fresh",
         "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "unbind",
         "accumulategrad"}  # they launch nothing (a first gradient is stored, not added)


def launches_nothing(name: str) -> bool:
    """aten::view, ViewBackward0, torch::autograd::AccumulateGrad, ...: a view, an allocation or their backward."""
    op = name.split("::")[-1].lower()
    return op in VIEWS or op.removesuffix("backward0").removesuffix("backward") in VIEWS


def step_ops(ops: str) -> tuple[list, int]:
    """The operations of one training step of the toy model, in order, as (phase, name, input shapes),
    and the bytes kept for the backward."""
    model = GPT(TOY, ops, seed=0)
    opt = optimizer(model)
    x, y = batch(split(load_bytes(args.data))[0], TOY_BATCH, TOY.seq, torch.Generator().manual_seed(6))
    saved = {}

    def pack(t):  # each saved tensor once (the same memory may be saved by two ops)
        saved[(t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))] = t.numel() * t.element_size()
        return t

    def forward():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            forward.loss = model(x, y)

    called = profile.ops_called({"forward": forward, "backward": lambda: forward.loss.backward(),
                                 "optimizer": opt.step})
    recorded = [(phase, name, shapes) for phase, name, shapes in called if not launches_nothing(name)]
    if ops == "course":  # the step is one bare Triton launch, which the profiler sees as the optimizer's step:
        sizes = [p.numel() for p in model.parameters()]  # named here by its kernel and the shapes of its tables
        tables = ((len(sizes), 6), (len(sizes), 7), (sum(cdiv(n, adamw.BLOCK_SIZE) for n in sizes),))
        recorded = [(phase, "adamw_kernel (adamw.py)", tables) if name.startswith("Optimizer.step") else
                    (phase, name, shapes) for phase, name, shapes in recorded]
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = sum(b for (ptr, *_), b in saved.items() if ptr not in params)  # activations, not the weights
    return recorded, kept


def anatomy():
    """The step's operations by first appearance: each distinct (phase, operation, shapes) once, with how
    many times a step runs it."""
    tables = []
    for ops in ("course", "torch"):
        recorded, kept = step_ops(ops)
        counts = {}
        for entry in recorded:
            counts[entry] = counts.get(entry, 0) + 1
        rows = [(phase, name, " ".join("x".join(map(str, s)) or "()" for s in shapes[:3]), n,
                 KERNELS.get(name, "one launch" if name.startswith("adamw") else "PyTorch's own"))
                for (phase, name, shapes), n in counts.items()]
        course = sum(n for (_, name, _), n in counts.items() if name in KERNELS or name.startswith("adamw"))
        tables.append(print_table(rows, ["phase", "operation", "input shapes", "per step", "kernels"],
                                  title=f"One training step of the toy model, {ops} ops: {len(recorded)} operations "
                                        f"({course} of them the course's)",
                                  note=f"In order of first appearance; views and allocations, which launch nothing, "
                                       f"left out. Kept for the backward: {kept / 1e6:.2f} MB of activations (saved "
                                       "tensors that are not parameters, each counted once)."))
    return tables


# %%
chapter.run("anatomy", anatomy)

# %% [markdown]
# ### Your turn: the exercises
# lesson06_gpt/exercises/, each checked when you run its file (`--hint` for a hint): rmsnorm_backward
# (write: dx from the stored rstd, after section 4), adamw (write: the optimizer's element-wise step,
# after section 6), cross_entropy_backward (write: softmax minus the one-hot, tile by tile, after
# section 7) and add_rms_norm (a stretch: the residual add fused into the norm's two walks).

# %% [markdown]
# ## 8. The step on a GPU, kernel by kernel
# torch.profiler over training steps of GPT-2 small's shape (12 layers, d_model 768: section 9 trains
# it): each kernel's share of the GPU time of a step, for the torch model (eager) and the course's,
# side by side: where the course's kernels take longer, which of them. Then the step's wall clock
# against the sum of its kernels: where the wall clock is longer, the GPU waited for the host, and
# faster kernels would not shorten the step (section 11 says which op's call costs the host most).
# Two things besides the launches can stretch the wall clock; the steps here avoid both, and the
# table times the second. A copy to the GPU returns at once only when it is non_blocking=True and
# its source is pinned (page-locked) memory, which the OS cannot move, so the GPU's DMA engine (not
# lesson 4's TMA) reads it while the host goes on. From ordinary (pageable) memory, or without
# non_blocking, the host first waits for every kernel already queued: each step would begin by
# waiting for the last, and host and GPU would no longer overlap. data.py stacks each batch, then
# pins it whole: a non-contiguous view of a pinned tensor would first be made contiguous in ordinary
# memory, and that copy waits. And loss.backward() on a GPU runs the backward on a worker thread
# that autograd keeps for that GPU, while the calling thread sleeps; the course's backwards are
# Python (torch.autograd.Function), each handed to that thread and run there. The steps here run
# the backward on the calling thread instead (torch.autograd.set_multithreading_enabled(False)),
# and the table times PyTorch's default beside it. Section 6's loop keeps the default.
#
# Where the host is the limit, lesson 1's cure (timing.py, "CUDA graphs") applies to a whole step:
# record the forward and the backward once as a CUDA graph, every launch with its arguments, and
# replay the recording at each step, one call for hundreds of kernels: lesson 1's
# torch.cuda.graph(g) captures the launches into g instead of running them, g.replay() runs them
# all. torch.compile(mode="reduce-overhead") records for you; here it is done by hand, to replay
# the very eager kernels this section profiles. The rules are lesson 1's:
# - Nothing inside waits for the host: no .item(), no print of a tensor, no synchronize (a replay
#   runs no Python at all). That is why the model's check_tokens reads no id back on a GPU.
# - Static addresses: each batch is copied into the tensors the recording read (of the same shape
#   and dtype: a recording is of one shape), and the loss comes out in the graph's memory,
#   overwritten by the next replay (the step returns a copy). The weights stay where they were
#   recorded: the optimizer updates them in place, and a weight given new memory (p.data = ...,
#   model.to(...)) would leave the replay reading the old one, so the step refuses to replay.
# - The gradients too. Recorded while every .grad was None, the backward writes each gradient (it
#   does not add to one) into the graph's memory, and every replay writes it there again: p.grad
#   must keep pointing at that memory. So the step never sets .grad to None after recording, which
#   zero_grad() does by default (set_to_none=True): the optimizer would find no gradient and skip
#   every parameter, and training would stop without an error (the step checks, and refuses to go
#   on). Nor can it accumulate gradients over several batches: each replay overwrites them.
# - The first step runs eagerly and warms everything up: compilation and autotuning (which times
#   candidates and waits for them: not something a recording can hold), the allocator's first
#   requests, and the optimizer's state (8 bytes a parameter), made at its first step. The state
#   must exist before the recording: after it, the recorded activations stay in the graph's pool but
#   no longer count as allocated, so a state made later would never be counted beside them, and
#   torch.cuda.max_memory_allocated (section 9's peak) would miss it. Then, as PyTorch's recipe has
#   it, one forward and backward on a side stream, gradients dropped, and the recording; neither
#   changes a weight.
# - The optimizer runs after each replay, outside the graph. The course's AdamW computes each
#   step's bias corrections in Python, and a replay runs no Python: it would reuse the recorded
#   step's. Outside, a scheduler's learning rate applies too. Its one launch (torch's fused AdamW:
#   a few) costs the host little.
# The same kernels run in the same order as in the eager step, so where every kernel is deterministic
# the losses are the eager step's, bit for bit (the toy model's are, on a GPU: tests/test_lesson06.py).
# Where a kernel adds by atomics, in whatever order its programs arrive (lesson 5's attention
# backward adds dQ so on Hopper, and so does cuDNN's, the torch model's attention through
# F.scaled_dot_product_attention), no two runs agree in the last bits, eager or replayed: section 9
# gives the step where they part and how far.

# %%
def train_runner(ops: str, config: Config, batch_size: int, lr: float, compiled: bool = False, seed: int = 0,
                 nudge: float = 0.0, draw: int = 1, autograd_thread: bool = False, graphed: bool = False):
    """A model, its optimizer and step(): one training step on fixed-seed batches. nudge: each weight
    multiplied by 1 + nudge or 1 - nudge (a random sign, the same for the same draw), a difference of
    rounding's size. autograd_thread: the backward on autograd's own thread for the GPU (PyTorch's
    default), not on the calling thread (section 8 times both). graphed: the first step eager, then
    its forward and backward recorded as a CUDA graph, replayed at every later step (record_step)."""
    if graphed and (compiled or autograd_thread):
        raise ValueError("graphed=True records the uncompiled model's step on the calling thread (a replay runs no "
                         "autograd at all); torch.compile(mode='reduce-overhead') records its own")
    model = GPT(config, ops, seed=seed)
    if nudge:
        g = torch.Generator().manual_seed(seed + draw)
        with torch.no_grad():
            for p in model.parameters():
                sign = torch.randint(0, 2, p.shape, generator=g).to(p.device, p.dtype) * 2 - 1
                p.mul_(1 + nudge * sign)
    opt = optimizer(model, lr=lr)
    forward = torch.compile(model) if compiled else model
    train, _ = split(load_bytes(args.data))
    gen = torch.Generator().manual_seed(seed)

    def forward_backward(idx, targets) -> torch.Tensor:
        loss = forward(idx, targets)
        with torch.autograd.set_multithreading_enabled(autograd_thread):  # False: on this thread (section 8)
            loss.backward()
        return loss

    def next_batch() -> tuple:
        return batch(train, batch_size, config.seq, gen)

    def step() -> torch.Tensor:
        loss = forward_backward(*next_batch())
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return record_step(forward_backward, opt, next_batch) if graphed else step


def record_step(forward_backward, opt, next_batch):
    """step() as train_runner's. Its first call: an eager step (forward_backward(idx, targets),
    opt.step(), zero_grad()), then one more forward and backward on a side stream, its gradients
    dropped, and forward_backward recorded as a CUDA graph. Every later call: the batch copied into
    the recorded inputs, a replay, opt.step(), and no zero_grad(): each replay writes the gradients
    over the recorded ones (the section says why)."""
    if not torch.cuda.is_available():
        raise RuntimeError("a CUDA graph records the launches of a CUDA GPU: there is none here (the interpreter "
                           "runs each kernel on the CPU as it is called)")
    params = [p for group in opt.param_groups for p in group["params"]]
    recorded = {}

    def record(idx, targets) -> None:
        inputs = idx.clone(), targets.clone()  # the recording reads these: each batch is copied into them
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # a warm-up on a side stream, as PyTorch's recipe has it
            forward_backward(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        for p in params:
            p.grad = None  # (the recorded backward then writes each gradient, in the graph's memory)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            loss = forward_backward(*inputs)
        recorded.update(graph=graph, inputs=inputs, loss=loss.detach(), grads=[p.grad for p in params],
                        weights=[p.data_ptr() for p in params])

    def step() -> torch.Tensor:
        idx, targets = next_batch()
        if not recorded:  # the first step: eager, then the recording
            loss = forward_backward(idx, targets)
            opt.step()
            opt.zero_grad()
            record(idx, targets)
            return loss.detach()
        for static, new in zip(recorded["inputs"], (idx, targets)):
            if (new.shape, new.dtype, new.device) != (static.shape, static.dtype, static.device):
                raise ValueError(f"the step was recorded for batches of shape {tuple(static.shape)} ({static.dtype}, "
                                 f"{static.device}); got {tuple(new.shape)} ({new.dtype}, {new.device})")
            static.copy_(new)
        if any(p.grad is not g for p, g in zip(params, recorded["grads"])):
            raise RuntimeError("a parameter's .grad is no longer the gradient the recording writes (zero_grad() "
                               "between replays?): its optimizer step would use a stale or no gradient")
        if any(p.data_ptr() != ptr for p, ptr in zip(params, recorded["weights"])):
            raise RuntimeError("a parameter's memory moved since the recording (p.data = ..., model.to(...)?): a "
                               "replay reads the weights where they were, and would train on stale ones")
        recorded["graph"].replay()
        opt.step()
        return recorded["loss"].clone()  # (the next replay overwrites the graph's own)

    return step


def profile_section():
    sizes = chapter.sizes(SIZES)
    shares, bound = {}, []
    for ops in ("torch", "course"):
        step = train_runner(ops, sizes["model"], sizes["batch"], sizes["lr"])
        kernels = profile.kernels_launched(step, repeat=2)  # (its first call warms up: compilation and autotuning)
        total = sum(us for _, _, us in kernels)
        kernel_ms = total / 2 / 1000  # per step
        walls = {f"{ops} ops": bench.call_time_ms(step, kernel_ms=kernel_ms)}  # (a few steps per loop, not 100)
        shares[ops] = [(profile.short(name, 60), calls // 2, us / 2 / 1000, 100 * us / total)
                       for name, calls, us in kernels[:12]] + [("(all kernels)", sum(c for _, c, _ in kernels) // 2,
                                                                kernel_ms, 100.0)]
        del step
        for how, kwargs in ((f"{ops} ops, backward on autograd's thread", dict(autograd_thread=True)),
                            (f"{ops} ops, replayed from a CUDA graph", dict(graphed=True))):
            walls[how] = bench.call_time_ms(train_runner(ops, sizes["model"], sizes["batch"], sizes["lr"], **kwargs),
                                            kernel_ms=kernel_ms)
        bound += [(how, ms, kernel_ms, ms / kernel_ms) for how, ms in walls.items()]
    model = f"{sizes['model'].layers} layers, d_model {sizes['model'].d_model}, batch {sizes['batch']} x {sizes['model'].seq}"
    tables = [print_table(shares[ops], ["kernel", "launches per step", "ms per step", "% of the step"],
                          title=f"Kernels of one training step, {ops} ops ({model})",
                          note="GPU time per kernel from torch.profiler over 2 steps, the 12 longest.")
              for ops in ("torch", "course")]
    tables.append(print_table(bound, ["step", "wall clock ms per step", "its kernels' ms", "wall / kernels"],
                              floatfmt=".2f", title=f"Is the step bound by its kernels? ({model})",
                              note="Wall clock: steps back to back, synchronized at the end (bench.call_time_ms), the "
                                   "time a caller pays. Kernels: the sum of the tables above. A ratio near 1: the GPU "
                                   "never waits for the host; above it, the host's Python and launches are the limit. "
                                   "Every step here runs its backward on the calling thread; 'on autograd's thread': "
                                   "PyTorch's default, the same step with the backward handed to autograd's thread "
                                   "for the GPU (the same kernels: the thread changes only the host's work). "
                                   "'Replayed from a CUDA graph': the same kernels again, the forward and backward "
                                   "recorded once and replayed (record_step), the optimizer launched after each replay."))
    return tables


# %%
chapter.run("profile", profile_section, gpu=True)

# %% [markdown]
# ## 9. Training side by side
# Four implementations of the same model from the same weights on the same batches: torch eager,
# torch.compile of the torch model, the course's ops, and the course's ops under torch.compile
# (which sees into every course kernel inside its autograd function and fuses the casts and reshapes
# between them). Beside the two eager runs, the same two replayed from a CUDA graph (section 8's
# record_step): the same kernels without the host's cost per launch, the speed the op set's kernels
# allow. The two compiled runs come with --full: torch.compile spends most of a minute on each model
# before its first step, which a default run leaves out (RESULTS.md has all four). Tokens per second
# over the steps after the warm-up (compilation and autotuning stay out), the peak memory of the
# whole run (weights, gradients, optimizer state and activations), and the loss at each step. The
# four curves lie on top of each other for the first steps; then bfloat16's roundings, which differ
# between any two implementations (eager and torch.compile of the same torch model too), are
# amplified step by step as in any training run, and the curves part by a few hundredths of a nat or
# more: the same training, another trajectory. How far is "a few"? A last run measures it: torch
# eager again, each starting weight nudged by a relative 2^-9 (a quarter of bfloat16's rounding
# step), nothing else changed. Its gap to eager is what rounding alone does to this training; the
# table sets each implementation's gap beside it (RESULTS.md has the numbers).
#
# Where do the curves part? Look for a step where the loss jumps in every run at once: a batch that
# the weights of that moment predict badly (this short run has no learning-rate warm-up and no
# gradient clipping, which a long run would have), followed by a large update. Runs that agreed to a
# hundredth of a nat the step before land far apart on that batch, and from there each follows its
# own trajectory; how far apart depends on the trajectory, so one nudged run is one sample of the
# spread, not its bound: the section nudges three times, with other signs, and the table's note
# gives the range. To tell an op that is wrong from one that rounds differently, swap the course's
# ops for PyTorch's one at a time (a CourseOps method for TorchOps'): a wrong op parts the curves
# from the first steps (section 5 compares those), and swapping it out closes the gap; a rounding
# difference parts them only at such a jump, and every swap leaves a gap of the same size.


# %%
NUDGED = "torch eager, weights nudged by 2^-9"
NUDGE_DRAWS = 3  # the nudge's random signs drawn this many times: the yardstick is a range, not one sample
GRAPHED = {"torch eager": "torch eager, CUDA graph", "course": "course, CUDA graph"}  # (section 8's record_step)


def bench_training():
    sizes = chapter.sizes(SIZES)
    cfg, B, steps, warmup = sizes["model"], sizes["batch"], sizes["steps"], sizes["warmup"]
    runs = {"torch eager": ("torch", False, 0.0), GRAPHED["torch eager"]: ("torch", False, 0.0),
            "torch.compile": ("torch", True, 0.0), "course": ("course", False, 0.0),
            GRAPHED["course"]: ("course", False, 0.0), "course, torch.compile": ("course", True, 0.0),
            NUDGED: ("torch", False, 2**-9)}  # the yardstick: rounding's size of difference, nothing else
    if not args.full:  # (torch.compile compiles each model for most of a minute before its first step)
        runs = {name: run for name, run in runs.items() if not run[1]}
    losses, rows = {}, []
    for name, (ops, compiled, nudge) in runs.items():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step = train_runner(ops, cfg, B, sizes["lr"], compiled, nudge=nudge, graphed=name in GRAPHED.values())
        curve = []
        for i in range(steps):
            if i == warmup:
                torch.cuda.synchronize()
                start = time.perf_counter()
            curve.append(step())
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        losses[name] = [c.item() for c in curve]
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30
        rows.append([name, round(B * cfg.seq * (steps - warmup) / seconds), peak, losses[name][-1]])
        del step
    last = slice(steps - max(1, steps // 4), steps)  # the last quarter of the steps

    def gap_to_eager(curve: list) -> float:
        return statistics.mean(abs(a - b) for a, b in zip(curve[last], losses["torch eager"][last]))

    yardstick = []  # the nudge again with other signs: how far rounding alone takes this training
    for draw in range(2, NUDGE_DRAWS + 1):
        step = train_runner("torch", cfg, B, sizes["lr"], nudge=2**-9, draw=draw)
        yardstick.append(gap_to_eager([step().item() for _ in range(steps)]))
        del step
    tokens = {name: tps for name, tps, _, _ in rows}
    eager, compiled, eager_peak = tokens["torch eager"], tokens.get("torch.compile"), rows[0][2]
    params = sum(p.numel() for p in GPT(cfg, "torch").parameters())
    state = 16 * params / 2**30  # float32 weights, gradients and AdamW's two moments: the same in every run
    gap = {name: gap_to_eager(losses[name]) for name in runs}
    rows = [[name, tps, tps / eager, *([tps / compiled] if compiled else []), peak, peak / eager_peak, peak - state,
             loss, gap[name]] for name, tps, peak, loss in rows]
    t1 = print_table(rows, ["implementation", "tokens/s", "x eager", *(["x torch.compile"] if compiled else []),
                            "peak GiB", "peak x eager", "of it not weights nor AdamW, GiB", "loss, last step",
                            "gap to eager, last quarter"],
                     floatfmt=".3f",
                     title=f"Training: {cfg.layers} layers, d_model {cfg.d_model}, {cfg.heads} heads ({cfg.kv_heads} "
                           f"key heads), seq {cfg.seq}, batch {B}, {params / 1e6:.1f} M parameters, {args.dtype}",
                     note=f"tokens/s: {steps - warmup} steps after {warmup} of warm-up, the time a caller pays "
                          "(wall clock, synchronized), every backward on the calling thread (section 8). Peak: "
                          "torch.cuda.max_memory_allocated over the run, above what was allocated before it;"
                          f" of it, {state:.2f} GiB are the float32 weights, their gradients and "
                          "AdamW's two moments (16 bytes a parameter, in every run), the rest activations kept for the "
                          "backward and the step's temporaries. Gap to eager: the mean |loss - eager's loss| over the "
                          f"last quarter of the steps, in nats; '{NUDGED}' is the yardstick, what a difference of "
                          f"rounding's size does to this training: over {NUDGE_DRAWS} draws of the nudge's signs (the "
                          f"row shows the first), gaps of {min([gap[NUDGED], *yardstick]):.3f} to "
                          f"{max([gap[NUDGED], *yardstick]):.3f}."
                          + ("" if compiled else " torch.compile's two runs (the torch model, the course's) run with "
                                                 "--full: each compiles for most of a minute first (RESULTS.md)."))
    every, curves = max(1, steps // 20), [name for name in runs if name not in GRAPHED.values()]
    curve_rows = [[i + 1] + [losses[name][i] for name in curves] for i in range(0, steps, every)]
    t2 = print_table(curve_rows, ["step", *curves], floatfmt=".3f", title="Training loss by step (nats)",
                     note="The CUDA graph runs leave no curve of their own: each replays its eager run's step. "
                          "Against that eager run: " + "; ".join(parting(GRAPHED[eager], losses[GRAPHED[eager]],
                                                                         losses[eager], last)
                                                                 for eager in GRAPHED) + ".",
                     plot=dict(x="step", y=curves, series=[], ceiling=None, logx=False, ylabel="loss (nats)"))
    return [t1, t2]


def parting(name: str, curve: list, eager: list, last: slice) -> str:
    """Where a replayed run's losses part from its eager run's, and how far they are apart at the end."""
    first = next((i + 1 for i, (a, b) in enumerate(zip(curve, eager)) if a != b), None)
    if first is None:
        return f"{name}, the same losses at every step, bit for bit"
    gap = statistics.mean(abs(a - b) for a, b in zip(curve[last], eager[last]))
    return (f"{name}, the same losses, bit for bit, up to step {first - 1}, then apart (section 8 says what parts "
            f"them): a mean gap of {gap:.3f} nats over the last quarter")


# %%
chapter.run("bench", bench_training, gpu=True)

# %% [markdown]
# ## 10. The cross-entropy alone, at the vocabularies models use
# A language model's logits are rows x vocabulary: 4096 rows of Llama-3's 128,256 are 1 GB in
# bfloat16, and F.cross_entropy in eager mode (log_softmax, then nll_loss) keeps its log_softmax, as
# large again, for the backward, which writes two more of that size: nll_loss's gradient with
# respect to the log-probabilities (zeros but one entry per row), then from it the logits' gradient.
# The course's kernel keeps two float32 numbers per row and writes only the gradient. Forward and
# backward together, kernel time and peak memory, against F.cross_entropy and (with --full, as in
# section 9) torch.compile of it.


# %%
def bench_loss():
    sizes = chapter.sizes(SIZES)
    rows = []
    for V in sizes["vocabs"]:
        M = sizes["rows"]
        logits = torch.randn(M, V, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
        targets = torch.randint(0, V, (M,), device=DEVICE)

        def step(fn):  # (torch.autograd.grad: the gradient returned, not accumulated into logits.grad)
            return lambda: torch.autograd.grad(fn(logits, targets), logits)

        compiled = {"torch.compile(F.cross_entropy)": step(torch.compile(F.cross_entropy))} if args.full else {}
        cases = {"F.cross_entropy": step(F.cross_entropy), **compiled, "course cross_entropy": step(cross_entropy)}
        peaks = {}
        for name, fn in cases.items():
            fn()  # (compilation and the autotuner first)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            fn()
            peaks[name] = (torch.cuda.max_memory_allocated() - base) / 2**20
        ms = bench.side_by_side(cases)
        nbytes = 3 * M * V * 2  # read the logits twice (forward, backward), write their gradient once
        for name in cases:
            rows.append([f"{M} x {V:,}", name, 1000 * ms[name], bench.gbps(nbytes, ms[name]),
                         ms["F.cross_entropy"] / ms[name], peaks[name]])
    table = print_table(rows, ["logits", "implementation", "kernel µs", "GB/s", "x F.cross_entropy",
                               "peak MiB above the logits"], floatfmt=".1f",
                       title="Cross-entropy, forward and backward, bfloat16 logits",
                       note="'kernel µs': the GPU kernels' own time (profiler timestamps, L2 flushed between calls). "
                            "GB/s: the bytes a forward and backward must move, the logits read twice (forward, "
                            "backward) and their gradient written once, over that time. x F.cross_entropy: its time "
                            f"over this one's. {bench.SIDE_BY_SIDE_NOTE} Peak: one forward and backward, above what "
                            "was allocated before it (the gradient itself included).")
    print()
    M, V = sizes["rows"], sizes["vocabs"][-1]  # the roofline (README): about 7 operations per logit, fwd + bwd
    logits = torch.randn(M, V, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
    targets = torch.randint(0, V, (M,), device=DEVICE)
    size, flops, nbytes = f"{M} x {V} bfloat16", 7 * M * V, 3 * M * V * 2
    points = roofline.points({
        ("course cross_entropy, fwd + bwd", size): (lambda: torch.autograd.grad(cross_entropy(logits, targets), logits),
                                                    flops, nbytes),
        ("F.cross_entropy, fwd + bwd", size): (lambda: torch.autograd.grad(F.cross_entropy(logits, targets), logits),
                                               flops, nbytes)})
    return [table, points]


# %%
chapter.run("bench_loss", bench_loss, gpu=True)

# %% [markdown]
# ## 11. What a call costs, forward and backward: every op against PyTorch's
# A model calls each op as ops.norm(...) and then loss.backward(): the host enqueues the forward's
# kernels and later the backward's, and the GPU runs them. Where the host takes longer than the
# kernels, the GPU waits for it. For every op of the course beside PyTorch's own, at shapes of
# GPT-2 small's scale: the host's time to enqueue one forward and its backward with the GPU idle
# (bench.enqueue_time_ms), and the GPU time of the kernels that call launched (bench.kernel_time_ms).
# Each course op goes op -> autograd function -> launcher -> kernel[grid] (lesson 1, section 5).


# %%
def call_costs():
    """Host µs to enqueue one forward + backward, and its kernels' µs, of each op and torch's counterpart."""
    def leaf(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device=DEVICE, dtype=dtype).requires_grad_()

    def fwd_bwd(fn, *inputs):  # the gradients returned, not accumulated: every call the same work
        out = fn(*inputs)
        cotangent = torch.randn_like(out)
        return lambda: torch.autograd.grad(fn(*inputs), inputs, cotangent)

    x, y, w = leaf(16384, 768), leaf(16384, 768), leaf(768)
    rows, v = leaf(4096, 4096), leaf(768, 768)
    logits, targets = leaf(4096, 32000), torch.randint(0, 32000, (4096,), device=DEVICE)
    q, k, val = leaf(16, 12, 1024, 64), leaf(16, 4, 1024, 64), leaf(16, 4, 1024, 64)
    pairs = {  # op, shape: (PyTorch's, the course's)
        "add, 16384 x 768": (fwd_bwd(torch.add, x, y), fwd_bwd(add, x, y)),
        "GELU (tanh), 16384 x 768": (fwd_bwd(lambda t: F.gelu(t, approximate="tanh"), x), fwd_bwd(gelu, x)),
        "softmax, 4096 x 4096": (fwd_bwd(lambda t: torch.softmax(t, dim=1), rows), fwd_bwd(softmax, rows)),
        "row sum, 4096 x 4096": (fwd_bwd(lambda t: t.sum(dim=1), rows), fwd_bwd(row_sum, rows)),
        "RMSNorm, 16384 x 768": (fwd_bwd(lambda t, w: F.rms_norm(t, (768,), w, 1e-6), x, w), fwd_bwd(rms_norm, x, w)),
        "matmul, 16384 x 768 @ 768 x 768": (fwd_bwd(torch.matmul, x, v), fwd_bwd(matmul, x, v)),
        "attention, causal, 16 x 12 (4) x 1024 x 64": (
            fwd_bwd(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), q, k, val),
            fwd_bwd(lambda q, k, v: attention(q, k, v, causal=True), q, k, val)),
        "cross-entropy, 4096 x 32000": (fwd_bwd(lambda t: F.cross_entropy(t.float(), targets), logits),
                                        fwd_bwd(lambda t: cross_entropy(t, targets), logits)),
    }
    host = {name: [bench.enqueue_time_ms(fn) * 1e3 for fn in fns] for name, fns in pairs.items()}  # before the profiler
    table = []
    for name, fns in pairs.items():
        kernels = [bench.kernel_time_ms(fn) * 1e3 for fn in fns]
        table.append([name, host[name][0], host[name][1], host[name][1] / host[name][0], kernels[0], kernels[1]])
    return print_table(table, ["op, bfloat16, forward + backward", "torch: host µs", "course: host µs",
                               "course host x torch's", "torch: kernels µs", "course: kernels µs"], floatfmt=".1f",
                       title="What one forward and backward costs the host, and its kernels",
                       note="host µs: the host's time to enqueue the forward and torch.autograd.grad's backward, the "
                            "GPU idle before the call (synchronize, time, synchronize; median of 50: "
                            "bench.enqueue_time_ms), in a fresh process before any profiling. kernels µs: the GPU time "
                            "of every kernel the call launched (profiler timestamps, L2 flushed between calls: "
                            "bench.kernel_time_ms). The attention: 12 query heads on 4 key heads, as the model's. Torch's "
                            "cross-entropy takes the logits cast to float32, as the torch model's loss does "
                            "(autocast's way): the cast and its backward are part of its time.")


# %%
chapter.run("costs", call_costs, gpu=True, fresh=True)

# %% [markdown]
# ## 12. Beyond one GPU: the same training under torchrun
# The course's ops are autograd functions, so DistributedDataParallel takes the course's model as
# it takes any other: each process trains a replica on its own batches, and DDP averages the
# gradients (an all-reduce, overlapped with the backward) before each optimizer step. ddp.py is the
# whole script; on a machine with several GPUs:
#
#     torchrun --nproc_per_node=2 lesson06_gpt/ddp.py --steps 50
#
# On a CPU it runs with the gloo backend and the interpreter (the suite runs two processes for one
# step, tests/test_lesson06.py).


# %%
def ddp_section():
    print("torchrun --nproc_per_node=NUM_GPUS lesson06_gpt/ddp.py --steps 50   (NCCL on GPUs, gloo on the CPU)")


# %%
chapter.run("ddp", ddp_section)
