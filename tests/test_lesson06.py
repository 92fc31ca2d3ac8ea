"""Lesson 6: the new kernels (cross-entropy, RMSNorm with the residual fused, AdamW) against PyTorch,
the whole model against torch's from the same weights, the step's anatomy (the course's ops on the
hot path), two processes under DDP, and the chapter's runs (notebook, script)."""
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, INTERPRET, ROOT, run_as_notebook, run_script, parse_command_line
from common.checks import grad_ok, rel_error
from lesson02_softmax.cross_entropy import cross_entropy
from lesson03_rowsum import rmsnorm
from lesson03_rowsum.rmsnorm import MAX_N, rms_norm
from lesson06_gpt import adamw
from lesson06_gpt.data import batch, load_bytes, split
from lesson06_gpt.main import KERNELS, SECTIONS, agree, errors, step_ops
from lesson06_gpt.model import GPT, TOY

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def assert_as_good_as_torch(pairs):
    """The course's check (common.checks.grad_ok): within twice torch's own error in the dtype, plus 1e-5."""
    for i, (ours, theirs) in enumerate(pairs):
        assert grad_ok(ours, theirs), f"output/gradient {i}: {ours:.2e} against torch's {theirs:.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, V", [(1, 1), (3, 127), (37, 100), (5, 1000), (4, 20000)])  # packed rows, 3 tiles
def test_cross_entropy_and_its_gradient_match_float64(rows, V, dtype):
    logits = torch.randn(rows, V, device=DEVICE) * 4
    targets = torch.randint(0, V, (rows,), device=DEVICE)
    targets[-1] = V - 1  # a target in the last (partial) tile
    pairs = errors(lambda x: cross_entropy(x, targets),
                         lambda x: F.cross_entropy(x.float() if x.dtype != torch.float64 else x, targets),
                         [logits.to(dtype)])
    assert_as_good_as_torch(pairs)
    per_row = cross_entropy(logits.to(dtype), targets, reduction="none")
    assert per_row.dtype == torch.float32 and per_row.shape == (rows,)
    assert rel_error(per_row, F.cross_entropy(logits.to(dtype).double(), targets, reduction="none")) < 1e-5


def test_cross_entropy_any_upstream_gradient_and_strided_logits():
    logits = torch.randn(6, 300, device=DEVICE)[:, ::2]  # a view: columns 2 apart
    targets = torch.randint(0, 150, (6,), device=DEVICE)
    weights = torch.rand(6, device=DEVICE)
    pairs = errors(lambda x: cross_entropy(x, targets, reduction="none") * weights,
                         lambda x: F.cross_entropy(x, targets, reduction="none") * weights, [logits])
    assert_as_good_as_torch(pairs)


def test_cross_entropy_large_logits_stay_finite():
    logits = torch.tensor([[1000.0, 0.0, -1000.0], [-1e4, -1e4, -1e4]], device=DEVICE)  # exp overflows unshifted
    targets = torch.tensor([1, 2], device=DEVICE)
    got = cross_entropy(logits, targets, reduction="none")
    assert torch.allclose(got, F.cross_entropy(logits, targets, reduction="none"), rtol=1e-6, atol=1e-4)


def test_cross_entropy_bad_input():
    x = torch.randn(4, 10, device=DEVICE)
    for targets, error, phrase in [(torch.zeros(4, device=DEVICE), TypeError, "int64 or int32"),
                                   (torch.zeros(3, dtype=torch.long, device=DEVICE), ValueError, "one id per row")]:
        with pytest.raises(error, match=phrase):
            cross_entropy(x, targets)
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy(x, torch.zeros(4, dtype=torch.long, device=DEVICE), reduction="max")
    out = cross_entropy(x, torch.tensor([0, 10, -1, 3], device=DEVICE), reduction="none")  # out of range: NaN
    assert out.isnan().tolist() == [False, True, True, False]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 5), (37, 100), (2, 5000), (2, 3, 64)])  # packed rows, two tiles, 3-D
def test_rms_norm_and_the_fused_residual_match_float64(shape, dtype):
    N = shape[-1]
    x, r = torch.randn(*shape, device=DEVICE), torch.randn(*shape, device=DEVICE)
    w = torch.rand(N, device=DEVICE) + 0.5
    plain = errors(lambda x, w: rms_norm(x, w, 1e-6), lambda x, w: F.rms_norm(x, (N,), w, 1e-6),
                        [x.to(dtype), w.to(dtype)])
    fused = errors(lambda x, w, r: rms_norm(x, w, 1e-6, residual=r),
                        lambda x, w, r: (x + r, F.rms_norm(x + r, (N,), w, 1e-6)), [t.to(dtype) for t in (x, w, r)])
    assert_as_good_as_torch(plain)  # y, dx, dw
    assert_as_good_as_torch(fused)  # h, y, dx, dw, dresidual


def test_rms_norm_backward_stretches_of_rows(monkeypatch):
    # one SM: 4 programs for 19 blocks of 16 rows, each program a stretch of 5 blocks, the last one short
    monkeypatch.setattr(rmsnorm, "sm_count", lambda: 1)
    x, w = torch.randn(300, 100, device=DEVICE), torch.rand(100, device=DEVICE) + 0.5
    assert_as_good_as_torch(errors(lambda x, w: rms_norm(x, w, 1e-6), lambda x, w: F.rms_norm(x, (100,), w, 1e-6),
                                        [x, w]))


def test_rms_norm_bad_input():
    x = torch.randn(4, 8, device=DEVICE)
    with pytest.raises(ValueError, match="vector of x's last dimension"):
        rms_norm(x, torch.ones(7, device=DEVICE))
    with pytest.raises(ValueError, match="residual must match"):
        rms_norm(x, torch.ones(8, device=DEVICE), residual=torch.randn(4, 4, device=DEVICE))
    with pytest.raises(ValueError, match="eps must be > 0"):
        rms_norm(x, torch.ones(8, device=DEVICE), eps=0.0)
    with pytest.raises(TypeError, match="different dtypes"):
        rms_norm(x, torch.ones(8, device=DEVICE), residual=x.half())
    wide = torch.zeros(1, MAX_N + 1, device=DEVICE)
    with pytest.raises(ValueError, match=f"at most {MAX_N} columns"):
        rms_norm(wide, torch.ones(MAX_N + 1, device=DEVICE))


def test_adamw_matches_torch_over_steps_and_leaves_the_gradients_zeroed():
    gen = torch.Generator().manual_seed(0)
    shapes = [(30, 20), (20,), (3, 7), (5,)]
    start = [torch.randn(s, generator=gen).to(DEVICE) for s in shapes]
    ours = [torch.nn.Parameter(p.clone()) for p in start]
    theirs = [torch.nn.Parameter(p.clone().double()) for p in start]
    opt = adamw.AdamW([(str(i), p) for i, p in enumerate(ours)], lr=1e-2, betas=(0.8, 0.9), eps=1e-6,
                      weight_decay=0.3)
    ref = torch.optim.AdamW([{"params": [theirs[0], theirs[2]], "weight_decay": 0.3},
                             {"params": [theirs[1], theirs[3]], "weight_decay": 0.0}], lr=1e-2, betas=(0.8, 0.9),
                            eps=1e-6)
    assert opt.n_decay == 30 * 20 + 3 * 7  # the matrices first, whatever their order
    for _ in range(4):
        grads = [torch.randn(s, generator=gen).to(DEVICE) for s in shapes]
        for p, q, g in zip(ours, theirs, grads):
            p.grad += g  # the gradient lives in the optimizer's flat buffer: add into it, as a backward does
            q.grad = g.double()
        opt.step()
        ref.step()
        assert all(float(p.grad.abs().max()) == 0.0 for p in ours)  # zeroed by the step itself
    for p, q in zip(ours, theirs):
        assert rel_error(p.detach(), q.detach()) < 1e-6


def test_adamw_bad_input():
    with pytest.raises(TypeError, match="float32 parameters"):
        adamw.AdamW([("w", torch.nn.Parameter(torch.zeros(3, dtype=torch.float16, device=DEVICE)))])
    with pytest.raises(ValueError, match="betas"):
        adamw.AdamW([("w", torch.nn.Parameter(torch.zeros(3, device=DEVICE)))], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="no parameters"):
        adamw.AdamW([])


def test_a_fresh_model_starts_near_ln_256_with_either_op_set():
    train, _ = split(load_bytes())
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        # 16 windows: one window's loss varies by about 0.07, their mean by 0.02; the tied head favours
        # repeating the input byte (a tenth of this corpus's bytes repeat), a few hundredths below ln(256)
        fresh = GPT(TOY, "torch", seed=0)(*batch(train, 16, TOY.seq, gen)).item()
        x, y = batch(train, 1, TOY.seq, gen)
        losses = [GPT(TOY, ops, seed=0)(x, y).item() for ops in ("course", "torch")]
    assert abs(fresh - math.log(256)) < 0.15
    assert abs(losses[0] - losses[1]) < (1e-5 if INTERPRET else 2e-2)  # float32 here, bfloat16 on a GPU


def test_the_course_model_trains_as_torchs_from_the_same_weights():
    losses, grads = agree(steps=2)
    course, torch_, exact = (losses.column(c) for c in ("course", "torch", "torch, float64"))
    for a, b, e in zip(course, torch_, exact):  # float32 on the CPU, bfloat16 on a GPU: within twice torch's
        assert abs(a - e) <= 2 * abs(b - e) + (1e-5 if INTERPRET else 1e-2)
    assert all(grads.column("ok"))
    assert "All 15 within twice torch's error plus 1e-5: True" in grads.note


def test_a_step_on_the_course_ops_runs_the_course_kernels_only():
    ops, kept = step_ops("course")
    names = {name for _, name, _ in ops}
    assert {"Matmul", "Attention", "AddRMSNorm", "CrossEntropy", "MatmulBackward", "AttentionBackward",
            "AddRMSNormBackward", "CrossEntropyBackward", "adamw_kernel (adamw.py)"} <= names
    # what stays PyTorch's: the token ids' range read back (stack, aminmax, item), the embedding and its
    # backward, the casts, the mean's sum over the rows that count (ne, sum, div), the gradients'
    # accumulation, the optimizer's copies into its buffer, and the split's backward (a cat)
    allowed = {"aten::stack", "aten::aminmax", "aten::item", "aten::embedding", "aten::add", "aten::to", "aten::sum",
               "aten::ne", "aten::div", "aten::ones_like", "aten::set_", "aten::copy_", "EmbeddingBackward0",
               "AddBackward0", "SumBackward0", "DivBackward0", "ToCopyBackward0", "SplitWithSizesBackward0"}
    assert names - set(KERNELS) - {"adamw_kernel (adamw.py)"} <= allowed
    torch_ops, torch_kept = step_ops("torch")
    assert {"aten::linear", "aten::scaled_dot_product_attention", "aten::rms_norm"} <= {n for _, n, _ in torch_ops}
    assert kept < torch_kept  # fewer activations kept for the backward (RMSNorm's and the loss's)


def test_two_processes_under_ddp_keep_equal_replicas():
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", TRITON_INTERPRET="1")  # CPU processes, gloo
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           os.path.join(ROOT, "lesson06_gpt", "ddp.py"), "--steps", "1", "--size", "toy"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    sums = [line.split("sum ")[1] for line in done.stdout.splitlines() if "parameters' sum" in line]
    assert len(sums) == 2 and sums[0] == sums[1], done.stdout


def test_runs_as_a_notebook_each_sections_output_under_its_cell():
    cells = run_as_notebook("lesson06_gpt")
    text = "".join(cells)
    trace = next(c for c in cells if "=== 3. The trace" in c)
    assert "loss = lse - x[target] = [2.6547]" in trace and "rstd = [0.25]" in trace
    train = next(c for c in cells if "=== 6. Training" in c)
    before, after = (float(line.split("|")[2]) for line in train.splitlines() if line.startswith("| validation"))
    assert after < before - 0.3  # the loss falls
    headings = [line for line in text.splitlines() if line.startswith("=== ")]
    numbers = [int(h.split()[1].rstrip(".")) for h in headings]
    assert numbers == sorted(numbers) and len(headings) == len(SECTIONS)
    assert "ipykernel" not in text and "usage:" not in text
    if INTERPRET:
        assert text.count("This section needs a GPU") == 4  # sections 8-11


def test_script_and_its_command_line():
    done = run_script("lesson06_gpt", "--sections", "trace")
    assert done.returncode == 0, done.stderr
    assert "loss = 2.6547 (F.cross_entropy: 2.6547)" in done.stdout and "=== 4." not in done.stdout
    assert "Sections: data: 1. The data" in parse_command_line("lesson06_gpt", "--help")[1]
    code, _, err = parse_command_line("lesson06_gpt", "--steps", "0")
    assert code == 2 and "must be at least 1" in err
