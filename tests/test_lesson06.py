"""Lesson 6: the new kernels (cross-entropy, RMSNorm with the residual fused, AdamW) against PyTorch,
the whole model against torch's from the same weights, the step's anatomy (the course's ops on the
hot path), two processes under DDP, and the chapter's runs (notebook, script)."""
import contextlib
import copy
import math
import os
import re
import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, INTERPRET, ROOT, run_as_notebook, run_script, parse_command_line
from common.checks import grad_ok, rel_error
from lesson02_softmax.cross_entropy import cross_entropy
from lesson03_rowsum import rmsnorm
from lesson03_rowsum.rmsnorm import MAX_N, rms_norm
from lesson06_gpt import adamw
from lesson06_gpt import main as chapter
from lesson06_gpt.data import batch, load_bytes, split
from lesson06_gpt.main import KERNELS, SECTIONS, agree, bits_per_byte, errors, step_ops
from lesson06_gpt.model import GPT, TOY, optimizer

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


SHAPES = [(30, 20), (20,), (3, 7), (5,), (4, 6), (6,), (2, 3)]  # the last: frozen; the one before: used on odd steps


def adamw_run(optimizer_class, dtype, how: str, steps: int = 5, reload_at: int | None = None) -> tuple:
    """AdamW over SHAPES's parameters for `steps` steps, every way a user steps it: two groups with their
    own lr, betas, eps and weight decay (or one, for `how` = "params" and "named"), gradients set by hand,
    added into, clipped; a frozen parameter (never a gradient), one without a gradient every other step;
    zero_grad() after each step. reload_at: after that step, a fresh optimizer loads the state_dict and
    goes on. Returns (the parameters, the optimizer)."""
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(s, generator=gen) for s in SHAPES]
    grads = [[torch.randn(s, generator=gen) for s in SHAPES] for _ in range(steps)]
    params = [torch.nn.Parameter(p.to(DEVICE, dtype)) for p in start]
    params[-1].requires_grad_(False)
    params[0] = torch.nn.Parameter(params[0].detach().t().contiguous().t())  # a transposed (dense) parameter

    def make():
        if how == "params":
            return optimizer_class((p for p in params), lr=1e-2, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.3)
        if how == "named":
            return optimizer_class(((f"w{i}", p) for i, p in enumerate(params)), lr=1e-2, betas=(0.8, 0.9), eps=1e-6,
                                   weight_decay=0.3)
        return optimizer_class([{"params": params[0::2], "weight_decay": 0.3, "lr": 2e-2},
                                {"params": params[1::2], "betas": (0.5, 0.99), "eps": 1e-3}], lr=1e-2, betas=(0.8, 0.9),
                               eps=1e-6, weight_decay=0.0)

    opt = make()
    for step in range(steps):
        for i, p in enumerate(params[:-1]):
            if i == len(params) - 2 and step % 2 == 0:
                continue  # unused this step: no gradient
            g = grads[step][i].to(DEVICE, dtype)
            if i == 1:
                p.grad = torch.zeros_like(p)
                p.grad += g  # accumulated into, as a backward does
            else:
                p.grad = g.t().contiguous().t() if i == 2 and g.ndim == 2 else g  # laid out otherwise than p: none
        torch.nn.utils.clip_grad_norm_(params[:-1], max_norm=5.0)  # in place, as users clip
        opt.step()
        opt.zero_grad()
        assert all(p.grad is None for p in params)
        if step == reload_at:
            state = copy.deepcopy(opt.state_dict())
            opt = make()
            opt.load_state_dict(state)
    return params, opt


@pytest.mark.parametrize("how", ["params", "named", "groups"])
def test_adamw_matches_torch_in_float64(how):
    ours, opt = adamw_run(adamw.AdamW, torch.float32, how)
    torch32, ref32 = adamw_run(torch.optim.AdamW, torch.float32, how)
    exact, ref64 = adamw_run(torch.optim.AdamW, torch.float64, how)
    for i, (a, b, e) in enumerate(zip(ours, torch32, exact)):  # within twice torch's own float32 error
        assert rel_error(a.detach(), e.detach()) <= 2 * rel_error(b.detach(), e.detach()) + 1e-7, i
        for key in ("exp_avg", "exp_avg_sq") if a in opt.state else ():  # (v: 1 - beta2 from the host's double)
            mine, theirs, want = (o.state[q][key] for o, q in ((opt, a), (ref32, b), (ref64, e)))
            assert rel_error(mine, want) <= 2 * rel_error(theirs, want) + 1e-7, (i, key)
    assert torch.equal(ours[-1], torch32[-1])  # frozen: never decayed
    counts = [float(opt.state[p]["step"]) if p in opt.state else 0 for p in ours]
    assert counts == [5, 5, 5, 5, 5, 2, 0]  # each parameter's steps with a gradient, as torch counts them
    assert counts == [float(ref32.state[p]["step"]) if p in ref32.state else 0 for p in torch32]


def test_adamw_state_dict_round_trip_and_torchs_format():
    straight, opt = adamw_run(adamw.AdamW, torch.float32, "groups", steps=5)
    reloaded, _ = adamw_run(adamw.AdamW, torch.float32, "groups", steps=5, reload_at=2)
    assert all(torch.equal(a, b) for a, b in zip(straight, reloaded))  # the same run, bit for bit
    theirs = adamw_run(torch.optim.AdamW, torch.float32, "groups", steps=5)[1].state_dict()
    ours = opt.state_dict()
    assert ours["state"].keys() == theirs["state"].keys()
    for i, state in ours["state"].items():
        assert state.keys() == theirs["state"][i].keys() == {"step", "exp_avg", "exp_avg_sq"}
        assert state["step"].dtype == torch.float32 and state["step"].device.type == "cpu"
        assert rel_error(state["exp_avg"], theirs["state"][i]["exp_avg"]) < 1e-5
    for mine, torch_s in zip(ours["param_groups"], theirs["param_groups"]):
        assert {k: mine[k] for k in ("lr", "betas", "eps", "weight_decay", "params")} == \
            {k: torch_s[k] for k in ("lr", "betas", "eps", "weight_decay", "params")}
    # either optimizer's state loads into the other and steps on from it as the other would
    params = [p.detach().clone().requires_grad_() for p in straight]
    for load_into, source in [(adamw.AdamW, theirs), (torch.optim.AdamW, ours)]:
        moved = [p.detach().clone().requires_grad_() for p in params]
        other = [p.detach().clone().requires_grad_() for p in params]
        a = load_into([{"params": moved[0::2]}, {"params": moved[1::2]}])
        b = (torch.optim.AdamW if load_into is adamw.AdamW else adamw.AdamW)(
            [{"params": other[0::2]}, {"params": other[1::2]}])
        a.load_state_dict(copy.deepcopy(source))
        b.load_state_dict(copy.deepcopy(source))
        for p, q in zip(moved[:-1], other[:-1]):
            p.grad = q.grad = torch.ones_like(p)
        a.step()
        b.step()
        assert all(rel_error(p.detach(), q.detach()) < 1e-6 for p, q in zip(moved, other))


def test_adamw_loads_moments_laid_out_otherwise_than_their_parameter():
    gen = torch.Generator().manual_seed(1)
    w, g1, g2 = (torch.randn(6, 4, generator=gen).to(DEVICE) for _ in range(3))
    plain = torch.nn.Parameter(w.clone())
    a = adamw.AdamW([plain])
    plain.grad = g1
    a.step()
    transposed = torch.nn.Parameter(plain.detach().t().contiguous().t())  # the same values, column by column
    b = adamw.AdamW([transposed])
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # row-major moments for a column-major parameter
    plain.grad, transposed.grad = g2, g2.clone()
    a.step()
    b.step()
    assert torch.equal(plain.detach(), transposed.detach())  # element by element, the same arithmetic


def test_adamw_steps_every_tensor_in_one_launch(monkeypatch):
    launches = []

    class Counting:  # adamw_kernel[grid](...), counted
        def __getitem__(self, grid):
            launches.append(grid)
            return kernel[grid]

    kernel = adamw.adamw_kernel
    monkeypatch.setattr(adamw, "adamw_kernel", Counting())
    adamw_run(adamw.AdamW, torch.float32, "groups", steps=3)
    blocks = sum(-(-math.prod(s) // adamw.BLOCK_SIZE) for s in SHAPES[:-1])
    assert launches == [(blocks - 1,), (blocks,), (blocks - 1,)]  # one launch a step, for both groups (the
    # parameter without a gradient on even steps has no block then)


@pytest.mark.filterwarnings("ignore:optimizer contains a parameter group with duplicate parameters")
def test_adamw_bad_input():
    def param(*shape, dtype=torch.float32):
        return torch.nn.Parameter(torch.zeros(shape, dtype=dtype, device=DEVICE))

    w = param(3)
    for kwargs, phrase in [(dict(lr=-1.0), "Invalid learning rate: -1.0"), (dict(eps=-1e-8), "Invalid epsilon value"),
                           (dict(weight_decay=-0.1), "Invalid weight_decay value"),
                           (dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
                           (dict(betas=(-0.1, 0.9)), "Invalid beta parameter at index 0")]:
        for optimizer_class in (adamw.AdamW, torch.optim.AdamW):  # torch's reasons, in torch's words
            with pytest.raises(ValueError, match=phrase):
                optimizer_class([w], **kwargs)
    with pytest.raises(ValueError, match="empty parameter list"):
        adamw.AdamW([])
    with pytest.raises(TypeError, match="float16; supported: float32"):
        adamw.AdamW([("w", param(3, dtype=torch.float16))])
    with pytest.raises(ValueError, match="given twice"):
        adamw.AdamW([w, w])
    with pytest.raises(ValueError, match="strided view"):
        adamw.AdamW([torch.nn.Parameter(torch.zeros(4, 6, device=DEVICE)[:, ::2])])
    opt = adamw.AdamW([w])
    with pytest.raises(ValueError, match="Invalid learning rate"):  # a group's own lr, checked too
        opt.add_param_group({"params": [param(2)], "lr": -1.0})
    assert len(opt.param_groups) == 1  # and not kept
    opt.param_groups[0]["lr"] = -1.0  # changed later (by hand, by a scheduler): checked at the step
    w.grad = torch.ones_like(w)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        opt.step()
    opt.param_groups[0]["lr"] = 1e-3
    opt.step()
    other = adamw.AdamW([param(4)])
    with pytest.raises(ValueError, match="shape"):  # another model's state: the kernel would read past the end
        other.load_state_dict(opt.state_dict())
    w.grad = torch.ones(3, device=DEVICE).to_sparse()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()


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


@pytest.mark.parametrize("ops", ["course", "torch"])
def test_a_later_token_leaves_earlier_logits_unchanged(ops):
    model = GPT(TOY, ops, seed=0)
    logits, base = [], model.ops

    class Keep(base):  # the op set, keeping the logits the loss gets
        @staticmethod
        def loss(x, targets):
            logits.append(x.detach().view(2, TOY.seq, -1))  # (batch, position, vocabulary)
            return base.loss(x, targets)

    model.ops = Keep
    x, y = batch(split(load_bytes())[0], 2, TOY.seq, torch.Generator().manual_seed(7))
    later = x.clone()
    j = TOY.seq // 2
    later[:, j] = (later[:, j] + 1) % TOY.vocab  # one token changed, half way
    with torch.no_grad():
        model(x, y)
        model(later, y)
    assert torch.equal(logits[0][:, :j], logits[1][:, :j])  # what comes before it cannot see it
    assert not torch.equal(logits[0][:, j], logits[1][:, j])  # (and the change does reach its own position)


def test_bits_per_byte():
    assert bits_per_byte(math.log(256)) == pytest.approx(8.0, rel=1e-15)  # a uniform guess over 256 bytes
    assert bits_per_byte(math.log(2)) == pytest.approx(1.0, rel=1e-15)


@pytest.mark.parametrize("ops", ["course", "torch"])
def test_the_optimizer_decays_the_matrices_and_embeddings_only(ops):
    opt = optimizer(GPT(TOY, ops, seed=0), weight_decay=0.1)
    decayed = {n for g in opt.param_groups if g["weight_decay"] == 0.1 for n in g["param_names"]}
    kept = {n for g in opt.param_groups if g["weight_decay"] == 0.0 for n in g["param_names"]}
    blocks = {f"blocks.{i}.{w}" for i in range(TOY.layers) for w in ("wqkv", "wo", "up", "down")}
    assert decayed == {"wte", "wpe"} | blocks
    assert kept == {"norm_f"} | {f"blocks.{i}.norm{k}" for i in range(TOY.layers) for k in (1, 2)}
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(GPT(TOY, ops).parameters()))


def test_the_validation_split_shares_no_byte_with_the_training_split():
    data = torch.arange(1000)  # every position its own value
    train, val = split(data)
    assert len(train) + len(val) == len(data) and len(val) == 100  # the last 10%
    assert not set(train.tolist()) & set(val.tolist())
    gen = torch.Generator().manual_seed(0)
    window, _ = batch(val, 64, 16, gen)
    assert set(window.flatten().tolist()) <= set(val.tolist())  # a validation batch reads the split only


def test_a_batch_is_windows_of_the_text_with_targets_one_byte_ahead():
    data = torch.arange(1000)  # every position its own value: a window's values say where it starts
    x, y = batch(data, 8, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 16) and x.device.type == y.device.type == DEVICE
    x, y = x.cpu(), y.cpu()
    assert torch.equal(x[:, 1:], x[:, :1] + torch.arange(1, 16)) and torch.equal(y, x + 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory and a GPU's queue need a GPU")
def test_a_batch_is_copied_to_the_gpu_without_waiting_for_it():
    # A copy from pageable memory first waits for every kernel queued before it (so does one of a
    # strided view of pinned memory: it goes through a pageable temporary). batch() must not: with
    # the GPU busy for a while, it returns while the GPU is still busy.
    data = torch.arange(100_000) % 256
    batch(data, 16, 1024, torch.Generator().manual_seed(0))  # (the pinned allocator's first block)
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # about a second of GPU time at 2 GHz, queued
    x, y = batch(data, 16, 1024, torch.Generator().manual_seed(0))
    busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert busy, "batch() waited for the GPU's queue to drain"
    assert torch.equal(y.cpu(), (x.cpu() + 1) % 256)


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
    assert {"Matmul", "AttentionQKV", "AddRMSNorm", "CrossEntropy", "MatmulBackward", "AttentionQKVBackward",
            "AddRMSNormBackward", "CrossEntropyBackward", "adamw_kernel (adamw.py)"} <= names
    # what stays PyTorch's: the token ids' range read back on the CPU (stack, aminmax, item), the embedding
    # and its backward, the casts, the mean's sum over the rows that count (ne, sum, div), the gradients'
    # accumulation. No copy of q, k, v or O and no cat of their gradients: the attention reads the QKV
    # projection where it lies and writes d(QKV) in one buffer
    allowed = {"aten::stack", "aten::aminmax", "aten::item", "aten::embedding", "aten::add", "aten::to", "aten::sum",
               "aten::ne", "aten::div", "aten::ones_like", "EmbeddingBackward0", "AddBackward0", "SumBackward0",
               "DivBackward0", "ToCopyBackward0"}
    assert names - set(KERNELS) - {"adamw_kernel (adamw.py)"} <= allowed
    torch_ops, torch_kept = step_ops("torch")
    assert {"aten::linear", "aten::scaled_dot_product_attention", "aten::rms_norm"} <= {n for _, n, _ in torch_ops}
    assert kept < torch_kept  # fewer activations kept for the backward (RMSNorm's and the loss's)


def test_two_processes_under_ddp_draw_their_own_batches_and_keep_equal_replicas():
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", TRITON_INTERPRET="1")  # CPU processes, gloo
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           os.path.join(ROOT, "lesson06_gpt", "ddp.py"), "--steps", "1", "--size", "toy"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # two processes write to one pipe: a line's text and its newline can reach it apart, so another
    # rank's line may start on the same line; each rank's report is found by its pattern, not by line
    ranks = re.findall(r"rank (\d) of 2: first loss (-?\d+\.\d{6}), parameters' sum (-?\d+\.\d{10})", done.stdout)
    losses, sums = [loss for _, loss, _ in ranks], [total for _, _, total in ranks]
    assert len(sums) == 2 and sums[0] == sums[1], done.stdout  # the replicas stay equal
    assert losses[0] != losses[1], done.stdout  # each on batches of its own: the same weights, other losses


def test_the_chapter_zeroes_the_gradients_for_both_op_sets(monkeypatch):
    made = []

    def recording(model, **kwargs):  # model.optimizer, each model it is given kept
        made.append(model)
        return optimizer(model, **kwargs)

    monkeypatch.setattr(chapter, "optimizer", recording)
    monkeypatch.setattr(chapter.args, "steps", 1)
    for ops in ("course", "torch"):
        chapter.train_runner(ops, TOY, 1, 1e-3)()  # section 9's step
    chapter.training()  # section 6
    assert len(made) == 3 and all(p.grad is None for model in made for p in model.parameters())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="on the CPU every backward runs on the calling thread")
@pytest.mark.parametrize("autograd_thread", [False, True])
def test_the_benchmarks_step_runs_its_backward_on_the_thread_it_is_asked_to(monkeypatch, autograd_thread):
    import threading
    from lesson03_rowsum import rmsnorm
    threads, launch_backward = set(), rmsnorm.launch_backward

    def recording(*args, **kwargs):  # the course's RMSNorm backward, its thread noted
        threads.add(threading.current_thread() is threading.main_thread())
        return launch_backward(*args, **kwargs)

    monkeypatch.setattr(rmsnorm, "launch_backward", recording)
    chapter.train_runner("course", TOY, 2, 1e-3, autograd_thread=autograd_thread)()
    assert threads == {not autograd_thread}  # False: every backward on this thread; True: on autograd's


def test_the_steps_kernels_and_wall_clock_with_a_fake_clock_and_profiler(monkeypatch):
    # section 8's tables from made-up timings: each op set's kernels (the 12 longest, then all), and
    # its wall clock against their sum, with the backward on this thread and on autograd's (a runner
    # each: the clock tells them apart by the thread the step's backward asks for)
    from common import bench, profile
    walls = {("torch", False, False): 30.0, ("torch", True, False): 33.0, ("torch", False, True): 20.0,
             ("course", False, False): 40.0, ("course", True, False): 50.0, ("course", False, True): 21.0}
    made = []

    def runner(ops, *args, autograd_thread=False, graphed=False, **kwargs):
        made.append((ops, autograd_thread, graphed))
        return lambda: None  # nothing runs: the fake clock and profiler below answer for it

    kernels = {"torch": [("gemm", 40, 6000.0), ("softmax", 4, 2000.0)], "course": [("matmul_kernel_tma", 20, 8000.0)]}
    monkeypatch.setattr(chapter, "train_runner", runner)
    monkeypatch.setattr(chapter.chapter, "sizes", lambda table: dict(model=TOY, batch=2, lr=1e-3))
    monkeypatch.setattr(bench, "call_time_ms", lambda fn, kernel_ms: walls[made[-1]] if kernel_ms == 4.0 else None)
    monkeypatch.setattr(profile, "kernels_launched", lambda fn, repeat: kernels[made[-1][0]])
    torch_kernels, course_kernels, bound = chapter.profile_section()
    assert made == [(ops, thread, graphed) for ops in ("torch", "course")
                    for thread, graphed in ((False, False), (True, False), (False, True))]
    assert torch_kernels.rows[-1] == ["(all kernels)", 22, 4.0, 100.0]  # over repeat=2 steps: per step
    assert course_kernels.rows[0] == ["matmul_kernel_tma", 10, 4.0, 100.0]
    assert bound.rows == [["torch ops", 30.0, 4.0, 7.5], ["torch ops, backward on autograd's thread", 33.0, 4.0, 8.25],
                          ["torch ops, replayed from a CUDA graph", 20.0, 4.0, 5.0],
                          ["course ops", 40.0, 4.0, 10.0], ["course ops, backward on autograd's thread", 50.0, 4.0, 12.5],
                          ["course ops, replayed from a CUDA graph", 21.0, 4.0, 5.25]]


def test_runs_as_a_notebook_each_sections_output_under_its_cell():
    cells = run_as_notebook("lesson06_gpt")
    text = "".join(cells)
    check = next(c for c in cells if "=== 4. Correctness" in c)
    assert "AdamW (one launch)" in check and "| False |" not in check  # every kernel and AdamW within torch's error
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


def test_a_default_runs_training_table_leaves_torch_compile_to_full(monkeypatch):
    # section 9 without --full: torch eager, the course and the nudged yardstick, no compiled run and
    # no column against one (torch.compile spends most of a minute per model); the GPU's memory counters
    # answered by made-up numbers where there is no GPU
    monkeypatch.setattr(chapter.chapter, "sizes", lambda table: dict(model=TOY, batch=1, steps=4, warmup=1, lr=1e-3))
    monkeypatch.setattr(chapter, "NUDGE_DRAWS", 2)
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model: compiled.append(model) or model)
    if INTERPRET:
        for name, answer in dict(empty_cache=None, reset_peak_memory_stats=None, synchronize=None,
                                 memory_allocated=0, max_memory_allocated=2**30).items():
            monkeypatch.setattr(torch.cuda, name, lambda answer=answer: answer)
        monkeypatch.setattr(chapter, "record_step", eager_stand_in)  # (no CUDA graph without a GPU)
    table, curves = chapter.bench_training()
    assert table.column("implementation") == ["torch eager", "torch eager, CUDA graph", "course", "course, CUDA graph",
                                              chapter.NUDGED] and not compiled
    assert "x torch.compile" not in table.headers and "--full" in table.note
    assert curves.headers == ["step", "torch eager", "course", chapter.NUDGED]  # a graph's curve is its eager run's:
    assert ("torch eager, CUDA graph, the same losses at every step, bit for bit; course, CUDA graph, the same "
            "losses at every step" in curves.note)  # (the note compares them: the toy model has no atomics)


def test_where_a_replayed_run_parts_from_its_eager_run():
    same = chapter.parting("g", [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], slice(2, 3))
    assert same == "g, the same losses at every step, bit for bit"
    said = chapter.parting("g", [1.0, 2.5, 3.25], [1.0, 2.0, 3.0], slice(1, 3))
    assert "up to step 1, then" in said and "mean gap of 0.375 nats" in said


def eager_stand_in(forward_backward, opt, next_batch):
    """record_step's step without the graph, for the CPU: the eager step."""
    def step():
        loss = forward_backward(*next_batch())
        opt.step()
        opt.zero_grad()
        return loss.detach()
    return step


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a CUDA GPU")
@pytest.mark.parametrize("ops", ["course", "torch"])
def test_a_step_replayed_from_a_cuda_graph_trains_as_the_eager_step(ops):
    # the same kernels in the same order: the same losses and weights, bit for bit, step after step
    # (step 1 runs eagerly and records; a replay whose batch was not copied in would part at step 3)
    runs = {}
    for graphed in (False, True):
        made = []
        recording = lambda model, **kwargs: made.append(model) or optimizer(model, **kwargs)  # noqa: E731
        with pytest.MonkeyPatch.context() as m:
            m.setattr(chapter, "optimizer", recording)
            step = chapter.train_runner(ops, TOY, 4, 1e-2, graphed=graphed)
        runs[graphed] = [step().item() for _ in range(4)], [p.detach().clone() for p in made[0].parameters()]
    (eager_losses, eager_weights), (graph_losses, graph_weights) = runs[False], runs[True]
    assert graph_losses == eager_losses
    assert all(torch.equal(a, b) for a, b in zip(graph_weights, eager_weights))


def record_on_the_cpu(monkeypatch) -> None:
    """Without a GPU, torch.cuda's recording calls stood in for: the recording runs the forward and
    backward once, a replay does nothing. Enough for the checks a replay makes before it replays."""
    if torch.cuda.is_available():
        return
    stream = types.SimpleNamespace(wait_stream=lambda other: None)
    for name, fake in (("is_available", lambda: True), ("Stream", lambda: stream), ("current_stream", lambda: stream),
                       ("stream", lambda s: contextlib.nullcontext()), ("graph", lambda g: contextlib.nullcontext()),
                       ("CUDAGraph", lambda: types.SimpleNamespace(replay=lambda: None))):
        monkeypatch.setattr(torch.cuda, name, fake)


def test_a_replayed_step_refuses_gradients_set_to_none_moved_weights_and_a_batch_of_another_shape(monkeypatch):
    record_on_the_cpu(monkeypatch)  # (on a GPU, the real recording)
    made = []
    monkeypatch.setattr(chapter, "optimizer",
                        lambda model, **kwargs: made.append(optimizer(model, **kwargs)) or made[-1])
    step = chapter.train_runner("course", TOY, 2, 1e-3, graphed=True)
    step(), step()  # the eager first step and its recording, then a replay
    made[0].zero_grad()  # .grad None: the replay would write gradients that no parameter points at
    with pytest.raises(RuntimeError, match="zero_grad"):
        step()
    made.clear()
    step = chapter.train_runner("course", TOY, 2, 1e-3, graphed=True)
    step(), step()
    weight = made[0].param_groups[0]["params"][0]
    weight.data = weight.data.clone()  # new memory: the replay would read the old weight
    with pytest.raises(RuntimeError, match="memory moved"):
        step()
    step = chapter.train_runner("course", TOY, 2, 1e-3, graphed=True)
    step()
    draw = chapter.batch
    monkeypatch.setattr(chapter, "batch", lambda data, batch_size, seq, gen: draw(data, batch_size + 1, seq, gen))
    with pytest.raises(ValueError, match=r"recorded for batches of shape \(2, 64\)"):
        step()


def test_a_cuda_graph_step_refuses_what_it_cannot_record():
    for kwargs in (dict(compiled=True), dict(autograd_thread=True)):
        with pytest.raises(ValueError, match="calling thread.*reduce-overhead"):
            chapter.train_runner("course", TOY, 1, 1e-3, graphed=True, **kwargs)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no.*CUDA GPU|there is none here"):
            chapter.record_step(None, None, None)
