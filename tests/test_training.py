"""Training: every public function has a backward. Gradients against
torch's autograd in float64 (the lessons' grad checks, awkward shapes included), the backward
trace's numbers, each op an autograd function, and torch.compile(fullgraph=True) of a
small model that calls every op, traced whole (GPU only: the interpreter's kernels cannot be traced)."""
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, INTERPRET, TESTS
from common import child
from common.checks import grad_errors, grad_ok, rel_error
from lesson01_vector_add.elementwise import add, gelu
from lesson01_vector_add.main import grad_check as grad_check01
from lesson02_softmax.main import grad_check as grad_check02
from lesson02_softmax.softmax import softmax, softmax_backward
from lesson02_softmax.cross_entropy import cross_entropy
from lesson03_rowsum.main import grad_check as grad_check03
from lesson03_rowsum.rmsnorm import rms_norm
from lesson03_rowsum.row_sum import row_sum
from lesson04_matmul.main import grad_check as grad_check04, reference
from lesson04_matmul.matmul import matmul
from lesson05_flash_attention import backward
from lesson05_flash_attention.attention import attention, attention_kernel, attention_kernel_tuned, launch
from lesson05_flash_attention.main import attention_standard, grad_check as grad_check05


@pytest.mark.parametrize("grad_check", [grad_check01, grad_check02, grad_check03, grad_check04, grad_check05])
def test_every_lessons_gradients_match_float64(grad_check):
    assert all(grad_check().column("ok"))


@pytest.mark.parametrize("head_dim", [16, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_gradients_other_head_dims_and_views(head_dim, causal):
    # (B, seq, H, D) memory seen as (B, H, seq, D): the backward copies such views once
    q, k, v = (torch.randn(2, 37, 3, head_dim, device=DEVICE).transpose(1, 2) for _ in range(3))
    errs = grad_errors(attention, attention_standard, [q, k, v], causal=causal)
    assert all(grad_ok(ours, theirs) for ours, theirs in errs), errs


@pytest.mark.skipif(not INTERPRET, reason="blocks of 4 are below tl.dot's 16 on a GPU (the trace runs interpreted)")
@pytest.mark.parametrize("atomic_dq", [False, True])  # dQ in a pass of its own, or by atomics in the dK/dV pass
def test_the_backward_in_tiny_blocks_matches_autograd(atomic_dq):
    # three key blocks, the last ragged: not causal, key block 1's walk starts at query block 1 and
    # wraps round to 0, key block 2's at the ragged block 2
    q, k, v = (torch.randn(1, 1, 11, 2, device=DEVICE) for _ in range(3))
    for causal in (False, True):
        o, lse = launch(attention_kernel, q, k, v, causal, 0.7, BLOCK_M=4, BLOCK_N=4)
        do = torch.randn_like(o)
        ours = backward.launch_backward(do, q, k, v, o, lse, causal, 0.7, atomic_dq=atomic_dq,
                                        dkdv=backward.dkdv_kernel,
                                        dq=backward.dq_kernel, dkdv_meta=dict(BLOCK_M=4, BLOCK_N=4),
                                        dq_meta=dict(BLOCK_M=4, BLOCK_N=4))
        leaves = [t.double().requires_grad_() for t in (q, k, v)]
        attention_standard(*leaves, causal=causal, sm_scale=0.7).backward(do.double())
        for grad, leaf in zip(ours, leaves):
            torch.testing.assert_close(grad.double(), leaf.grad, atol=1e-5, rtol=1e-5)


@pytest.fixture
def deterministic_algorithms():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def count_dq_runs(monkeypatch) -> list:
    runs, run = [], backward.dq_kernel_tuned.run

    def counted(*args, **kwargs):
        runs.append(kwargs["grid"])
        return run(*args, **kwargs)

    monkeypatch.setattr(backward.dq_kernel_tuned, "run", counted)
    return runs


def test_attention_backward_atomics_only_where_asked_and_allowed(deterministic_algorithms, monkeypatch):
    # atomic_dq=True adds dQ up with atomics (no dQ pass), except under
    # torch.use_deterministic_algorithms(True), where the dQ pass runs: the same bits every time
    q, k, v = (torch.randn(1, 2, 150, 32, device=DEVICE) for _ in range(3))
    o, lse = launch(attention_kernel_tuned, q, k, v, True, 0.3)
    do = torch.randn_like(o)
    runs = count_dq_runs(monkeypatch)
    grads = [backward.launch_backward(do, q, k, v, o, lse, True, 0.3, atomic_dq=True) for _ in range(2)]
    assert len(runs) == 2 and all(torch.equal(a, b) for a, b in zip(*grads))
    torch.use_deterministic_algorithms(False)
    atomic = backward.launch_backward(do, q, k, v, o, lse, True, 0.3, atomic_dq=True)
    assert len(runs) == 2  # no dQ pass
    for a, b in zip(atomic, grads[0]):  # the same gradients, to float32 rounding of the sums' order
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    with pytest.raises(TypeError, match="atomic_dq"):
        backward.launch_backward(do, q, k, v, o, lse, True, 0.3, atomic_dq=1)
    wide = torch.randn(1, 1, 8, 256, device=DEVICE)  # FlashAttention-2's design: head dims to 128
    with pytest.raises(ValueError, match="atomic_dq=True takes head dims to 128"):
        backward.launch_backward(wide, wide, wide, wide, wide, lse[:, :1, :8], True, 0.3, atomic_dq=True)
    with pytest.raises(ValueError, match="zeroes dq_sum_ptr"):  # its trial runs would pile up in dQ
        backward.launch_backward(do, q, k, v, o, lse, True, 0.3, atomic_dq=True, dkdv=backward.dkdv_kernel_tuned)


def test_tma_dq_compiles_for_hopper_to_bulk_reduce_adds():
    # tma_dq=True: the dK/dV kernel adds each dQ tile by TMA (cp.reduce.async.bulk.tensor, one
    # request per tile) instead of per-element atomics (red.global / atom.global); compiled for
    # sm_90 on any machine
    from common import ptx

    def job(tma):
        return dict(module="lesson05_flash_attention.backward", kernel="dkdv_kernel", num_warps=8, num_stages=3,
                    signature={"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "do_ptr": "*fp16",
                               "lse_ptr": "*fp32", "delta_ptr": "*fp32", "dk_ptr": "*fp16", "dv_ptr": "*fp16",
                               "dq_sum_ptr": "*fp32", "sm_scale": "fp32",
                               **dict.fromkeys(("H_KV", "GROUP", "seq_q", "seq_k", "parts", "part_stride"), "i32"),
                               **dict.fromkeys((f"stride_{t}{d}" for t in ("q", "k", "v", "do", "dk") for d in "bhn"), "i32")},
                    constexprs=dict(HEAD_DIM=64, BLOCK_D=64, BLOCK_M=64, BLOCK_N=128, CAUSAL=True, ATOMIC_DQ=True,
                                    TMA_DQ=tma, stride_qd=1, stride_kd=1, stride_vd=1, stride_dod=1, stride_dkd=1),
                    divisible_by_16=("q_ptr", "k_ptr", "v_ptr", "do_ptr", "lse_ptr", "delta_ptr", "dk_ptr", "dv_ptr",
                                     "dq_sum_ptr", "seq_q", "seq_k"), asm=("ptx",))
    tma, plain = (r["ptx"] for r in ptx.compile_kernels([job(True), job(False)], processes=2))
    atomics = re.compile(r"\b(?:red|atom)\.global")  # (not the end of "cp.async.cg.shared.global")
    assert "cp.reduce.async.bulk.tensor" in tma and not atomics.search(tma)
    assert "cp.reduce.async.bulk.tensor" not in plain and atomics.search(plain)


def test_tma_dq_only_with_atomic_dq_on_hopper():
    q, k, v = (torch.randn(1, 1, 64, 16, device=DEVICE) for _ in range(3))
    o, lse = launch(attention_kernel_tuned, q, k, v, False, 0.25)
    do = torch.randn_like(o)
    with pytest.raises(ValueError, match="needs atomic_dq=True too"):
        backward.launch_backward(do, q, k, v, o, lse, False, 0.25, tma_dq=True)
    with pytest.raises(TypeError, match="tma_dq"):
        backward.launch_backward(do, q, k, v, o, lse, False, 0.25, atomic_dq=True, tma_dq=1)
    if INTERPRET or torch.cuda.get_device_capability()[0] < 9:
        with pytest.raises(ValueError, match="compute capability 9.0 or newer"):
            backward.launch_backward(do, q, k, v, o, lse, False, 0.25, atomic_dq=True, tma_dq=True)


@pytest.mark.skipif(INTERPRET or torch.cuda.get_device_capability()[0] < 9, reason="TMA: Hopper GPUs and newer")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 2, 2, 200, 200, 64), (2, 1, 1, 1000, 1000, 128), (1, 1, 1, 64, 64, 16),
                                   (2, 4, 2, 300, 300, 64), (1, 2, 1, 100, 260, 64)])
def test_tma_dq_gradients_match_the_deterministic_backward(shape, causal):
    # the same dQ as the dQ pass's, to the float32 rounding of the sums' order; the ragged last
    # query block (rows past the end, clipped by the copy engine), grouped heads (a descriptor per
    # query head, at its own rows) and two lengths included. On a Hopper GPU only: the copy engine.
    B, H, H_KV, seq_q, seq_k, D = shape
    q = torch.randn(B, H, seq_q, D, device=DEVICE, dtype=torch.float16)
    k, v = (torch.randn(B, H_KV, seq_k, D, device=DEVICE, dtype=torch.float16) for _ in range(2))
    shape = q.shape
    o, lse = launch(attention_kernel_tuned, q, k, v, causal, shape[-1] ** -0.5)
    do = torch.randn_like(o)
    tma = backward.launch_backward(do, q, k, v, o, lse, causal, shape[-1] ** -0.5, atomic_dq=True, tma_dq=True)
    plain = backward.launch_backward(do, q, k, v, o, lse, causal, shape[-1] ** -0.5)
    for a, b in zip(tma, plain):  # float16 outputs: one rounding step apart at most
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_matmul_gradients_through_views_and_ragged_tiles(activation):
    a, b = torch.randn(255, 127, device=DEVICE).t(), torch.randn(33, 255, device=DEVICE).t()  # (127, 255) @ (255, 33)
    errs = grad_errors(lambda a, b: matmul(a, b, activation=activation, precision="ieee"),
                       lambda a, b: reference(a, b, activation), [a, b])
    assert all(grad_ok(ours, theirs) for ours, theirs in errs), errs


def sdpa64(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


FROZEN = {  # name: (function, shapes of its inputs, the float64 reference)
    "add": (add, [(5, 7), (5, 7)], torch.add),
    "matmul": (lambda a, b: matmul(a, b, precision="ieee"), [(37, 20), (20, 9)], torch.matmul),
    "matmul, gelu epilogue": (lambda a, b: matmul(a, b, activation="gelu", precision="ieee"), [(37, 20), (20, 9)],
                              lambda a, b: reference(a, b, "gelu")),
    "attention": (attention, [(1, 2, 40, 16)] * 3, sdpa64),
}


@pytest.mark.parametrize("name", FROZEN)
def test_each_input_frozen_in_turn(name):
    # A frozen input (a weight that does not train) gets no gradient; the others still get theirs.
    # (Swap Matmul.backward's needs_input_grad indices and the frozen a's gradient is the one computed.)
    fn, shapes, ref = FROZEN[name]
    for frozen in range(len(shapes)):
        inputs = [torch.randn(shape, device=DEVICE) for shape in shapes]
        leaves = [x.clone().requires_grad_(i != frozen) for i, x in enumerate(inputs)]
        out = fn(*leaves)
        g = torch.randn_like(out)
        out.backward(g)
        exact = [x.double().requires_grad_(i != frozen) for i, x in enumerate(inputs)]
        ref(*exact).backward(g.double())
        assert leaves[frozen].grad is None
        for i, (ours, theirs) in enumerate(zip(leaves, exact)):
            if i != frozen:  # float32 sums of at most a few hundred terms
                assert ours.grad is not None and rel_error(ours.grad, theirs.grad) < 1e-5, (name, frozen, i)


def test_autograd_records_a_call_only_where_a_gradient_is_needed():
    x = torch.randn(4, 8, device=DEVICE)
    assert softmax(x).grad_fn is None  # nothing requires grad: Softmax.apply recorded nothing
    y = softmax(x.requires_grad_())
    assert y.grad_fn is not None  # recorded: Softmax's backward
    with torch.no_grad():
        assert softmax(x).grad_fn is None


OPS = {"add": lambda x, w: add(x, x), "gelu": lambda x, w: gelu(x), "softmax": lambda x, w: softmax(x),
       "row_sum": lambda x, w: row_sum(x), "matmul": lambda x, w: matmul(x, w),
       "rms_norm": lambda x, w: rms_norm(x, w[:, 0].contiguous()),  # (a weight of x's width, 96)
       "rms_norm, residual fused": lambda x, w: torch.add(*rms_norm(x, w[:, 0].contiguous(), residual=x * 2)),
       "cross_entropy": lambda x, w: cross_entropy(x, torch.arange(64, device=x.device) % 96),
       "matmul, gelu epilogue": lambda x, w: matmul(x, w, activation="gelu"),
       "attention, causal": lambda x, w: attention(*x.view(3, 2, 1, 32, 32), causal=True),  # q, k, v: views of x
       # 4 query heads on 1 key head, 8 queries on 20 keys, head dim 24 (views of x)
       "attention, grouped and cross": lambda x, w: attention(
           x.flatten()[:768].view(1, 4, 8, 24), x.flatten()[768:1248].view(1, 1, 20, 24),
           x.flatten()[1248:1728].view(1, 1, 20, 24), causal=True),
       # decoding (decode.py): one query in each of 4 heads on 1 key head of 512 keys, head dim 8 (views of x)
       "attention, decoding": lambda x, w: attention(
           x.flatten()[:32].view(1, 4, 1, 8), x.flatten()[:4096].view(1, 1, 512, 8),
           x.flatten()[2048:6144].view(1, 1, 512, 8))}


@pytest.mark.skipif(INTERPRET, reason="torch.compile generates GPU code; the interpreter's kernels cannot be compiled")
@pytest.mark.parametrize("op", OPS)
def test_torch_compile_fullgraph_inductor(op):
    # The default backend: inductor generates the code that launches the lesson's kernels, forward
    # and backward, and hands Python floats (attention's sm_scale) to them as float64
    torch._dynamo.reset()
    x, w = torch.randn(64, 96, device=DEVICE), torch.randn(96, 128, device=DEVICE)
    g = torch.randn_like(OPS[op](x, w))
    grads = []
    for fn in (OPS[op], torch.compile(OPS[op], fullgraph=True)):
        leaves = [x.clone().requires_grad_(), w.clone().requires_grad_()]
        fn(*leaves).backward(g)
        grads.append([t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)


@pytest.mark.skipif(INTERPRET, reason="torch.compile traces GPU kernels only")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_every_op_traced(backend):
    # Dynamo and AOTAutograd trace the whole model, every backward included, with no graph break;
    # aot_eager then runs the traced graphs, the kernels as wrap_triton recorded them, and inductor
    # (the default) generates the code around them and launches them itself.
    def model(x, w1, w2, q, k, v):
        h = matmul(x, w1, activation="gelu")          # (64, 128)
        h = add(h, gelu(h))
        p = softmax(matmul(h, w2))                    # (64, 32)
        return row_sum(p).sum() + row_sum(attention(q, k, v, causal=True).flatten(0, 2).float()).sum()

    torch._dynamo.reset()
    inputs = [torch.randn(64, 96, device=DEVICE), torch.randn(96, 128, device=DEVICE) / 10,
              torch.randn(128, 32, device=DEVICE) / 10] + [
        torch.randn(2, 2, 64, 64, device=DEVICE, dtype=torch.float16) for _ in range(3)]
    eager = [x.clone().requires_grad_() for x in inputs]
    model(*eager).backward()
    compiled = [x.clone().requires_grad_() for x in inputs]
    torch.compile(model, fullgraph=True, backend=backend)(*compiled).backward()  # a graph break fails
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a.grad, b.grad, atol=2e-3, rtol=2e-3)


@pytest.mark.skipif(not INTERPRET, reason="the interpreter's limit")
def test_torch_compile_on_the_interpreter_says_why_not():
    torch._dynamo.reset()
    with pytest.raises(Exception, match="torch.compile cannot trace kernels that Triton's interpreter runs"):
        torch.compile(lambda x: softmax(x), fullgraph=True, backend="eager")(torch.randn(4, 8))


def test_backward_operators_take_views_of_their_saved_tensors():
    y, dy = torch.softmax(torch.randn(6, 40, device=DEVICE), dim=1), torch.randn(6, 40, device=DEVICE)
    y_view = y.t().contiguous().t()  # the same values, columns contiguous instead of rows
    torch.testing.assert_close(softmax_backward(dy, y_view), softmax_backward(dy, y))
    q, k, v, do = (torch.randn(1, 2, 40, 32, device=DEVICE) for _ in range(4))
    o, lse = launch(attention_kernel_tuned, q, k, v, False, 0.2)
    o_view = o.transpose(1, 2).contiguous().transpose(1, 2)
    for a, b in zip(backward.launch_backward(do, q, k, v, o_view, lse, False, 0.2),
                    backward.launch_backward(do, q, k, v, o, lse, False, 0.2)):
        torch.testing.assert_close(a, b)


def test_attention_backward_reads_a_models_packed_qkv_where_it_lies():
    # a model's q, k, v: views of one (B, T, H + 2 KV, D) projection, heads transposed; dO and O in
    # the (B, T, H, D) layout of what reads O. The kernels follow every stride (nothing is copied
    # to contiguous first): the same gradients, bit for bit, as from contiguous copies
    B, T, H, KV, D = 2, 40, 4, 2, 16
    qkv = torch.randn(B, T, H + 2 * KV, D, device=DEVICE)
    q, k, v = (t.transpose(1, 2) for t in qkv.split([H, KV, KV], dim=2))
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    do = torch.randn(B, T, H, D, device=DEVICE).transpose(1, 2)
    o, lse = launch(attention_kernel_tuned, q, k, v, True, 0.25)
    o = o.transpose(1, 2).contiguous().transpose(1, 2)
    y = attention(q, k, v, causal=True)  # O in (B, T, H, D) memory: the heads side by side are a view
    assert y.transpose(1, 2).reshape(B, T, H * D).data_ptr() == y.data_ptr() and y.transpose(1, 2).is_contiguous()
    packed = backward.launch_backward(do, q, k, v, o, lse, True, 0.25)
    dense = backward.launch_backward(*(t.contiguous() for t in (do, q, k, v, o)), lse, True, 0.25)
    for a, b in zip(packed, dense):
        assert torch.equal(a, b)


def sdpa_on_packed(qkv, heads, causal=True):
    kv = (qkv.shape[2] - heads) // 2
    q, k, v = (t.transpose(1, 2) for t in qkv.split([heads, kv, kv], dim=2))
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_on_a_packed_projection_matches_sdpa_and_writes_one_gradient(dtype):
    # attention_qkv: q, k, v the heads of one (B, T, H + 2 KV, D) tensor; O and d(qkv) as SDPA's on
    # the three views, within the dtype's rounding (grad_errors' yardstick); the same bits as
    # attention() on the views; and the gradient one tensor, no cat
    from lesson05_flash_attention.attention import attention_qkv

    qkv = torch.randn(2, 33, 4 + 2 * 2, 16, device=DEVICE)
    errors = grad_errors(lambda t: attention_qkv(t, 4, causal=True), lambda t: sdpa_on_packed(t, 4), [qkv.to(dtype)])
    assert all(grad_ok(ours, theirs) for ours, theirs in errors), errors
    leaf = qkv.clone().requires_grad_()
    out = attention_qkv(leaf, 4, causal=True)
    assert type(out.grad_fn).__name__ == "AttentionQKVBackward"
    views = (t.transpose(1, 2) for t in leaf.split([4, 2, 2], dim=2))
    assert torch.equal(out, attention(*views, causal=True))


@pytest.mark.skipif(INTERPRET, reason="torch.compile generates GPU code; the interpreter's kernels cannot be compiled")
def test_attention_on_a_packed_projection_under_inductor_at_a_models_size():
    # Lesson 6's attention at GPT-2 small's size (16 x 1024 tokens, 12 query heads on 4 key heads,
    # head dim 64, bfloat16), compiled by inductor, forward and backward, against the op eager: the
    # two differ by the order of their float32 sums, under bfloat16's rounding step (2^-8) for the
    # whole of each result. Where the compiled backward's kernels wrote into strided views of
    # d(qkv), inductor's copy of such a view read past the end of its buffer: an illegal memory
    # access at this size (none at small ones)
    from lesson05_flash_attention.attention import attention_qkv

    torch._dynamo.reset()
    qkv = torch.randn(16, 1024, 12 + 2 * 4, 64, device=DEVICE, dtype=torch.bfloat16)
    do = torch.randn(16, 12, 1024, 64, device=DEVICE, dtype=torch.bfloat16)
    results = []
    for fn in (attention_qkv, torch.compile(attention_qkv, fullgraph=True)):
        leaf = qkv.clone().requires_grad_()
        out = fn(leaf, 12, causal=True)
        out.backward(do)
        results.append((out.detach(), leaf.grad))
    for eager, compiled in zip(*results):
        assert rel_error(compiled, eager) < 2 ** -8


@pytest.mark.skipif(INTERPRET, reason="torch.compile generates GPU code; the interpreter's kernels cannot be compiled")
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_matmul_under_inductor_runs_the_kernels_eager_runs_at_a_models_size(activation):
    # Lesson 6's linear layers at GPT-2 small's size (16384 tokens, 768 -> 768 and 768 -> 3072 with
    # GELU, bfloat16), compiled by inductor (fullgraph), forward and backward: the same kernels as
    # the eager call (on an H100 or H200 the TMA kernel, its descriptors built on the device, and
    # split K for dW; elsewhere the pointer kernel), so on Hopper the same bits
    from common.profile import kernels_launched
    from lesson04_matmul.hopper import HOPPER

    torch._dynamo.reset()
    N = 3072 if activation else 768
    x = torch.randn(16384, 768, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(N, 768, device=DEVICE, dtype=torch.bfloat16) / 768 ** 0.5
    dy = torch.randn(16384, N, device=DEVICE, dtype=torch.bfloat16)

    def layer(x, w):
        return matmul(x, w.t(), activation=activation)

    results, names = [], []
    for fn in (layer, torch.compile(layer, fullgraph=True)):
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()

        def step():
            out = fn(xl, wl)
            out.backward(dy)
            return out
        out = step()
        results.append((out.detach().clone(), xl.grad.clone(), wl.grad.clone()))  # (later steps add to .grad)
        names.append({name for name, _, _ in kernels_launched(step)})
    for eager, compiled in zip(*results):  # elsewhere the compiled pointer kernel takes one configuration of
        # the autotuner's list, maybe not the eager call's: sums in another order, within bfloat16's step
        assert torch.equal(compiled, eager) if HOPPER else rel_error(compiled, eager) < 2 ** -8
    kernel = "matmul_kernel_tma" if HOPPER else "matmul_kernel"
    assert kernel in names[0] and kernel in names[1], names


def test_attention_on_a_packed_projection_refuses_what_splits_no_heads():
    from lesson05_flash_attention.attention import attention_qkv

    qkv = torch.randn(1, 8, 6, 16, device=DEVICE)
    for heads in (0, 6, 3, 2.0, True):  # none; all; 3 leaves 3 (odd); not a whole number
        with pytest.raises(ValueError, match="heads must be a whole number"):
            attention_qkv(qkv, heads)
    with pytest.raises(ValueError, match="must be a multiple"):
        attention_qkv(torch.randn(1, 8, 3 + 2 * 2, 16, device=DEVICE), 3)  # 3 query heads on 2 key heads
    with pytest.raises(ValueError, match="4-D"):
        attention_qkv(qkv[0], 2)
    out = attention_qkv(qkv, 2, sm_scale=-0.5)  # a negative scale: attention() on the views, as SDPA's
    torch.testing.assert_close(out, F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in qkv.split(
        [2, 2, 2], dim=2)), scale=-0.5))
    empty = torch.randn(0, 8, 6, 16, device=DEVICE, requires_grad=True)
    attention_qkv(empty, 2).sum().backward()
    assert empty.grad.shape == empty.shape


def test_lse_is_kept_for_the_backward_not_returned():
    # attention's autograd function returns O alone; lse (a float per query row) is saved beside q,
    # k, v and O for the backward, and no gradient flows through it
    q, k, v = (torch.randn(1, 1, 8, 16, device=DEVICE, requires_grad=True) for _ in range(3))
    o = attention(q, k, v)
    *_, o_saved, lse = o.grad_fn.saved_tensors
    assert o.requires_grad and torch.equal(o_saved, o) and lse.shape == (1, 1, 8) and not lse.requires_grad


# What torch.compile's analysis says each kernel writes. Where it takes a kernel to write a tensor
# that is an input of the op (q, a view of x), AOTAutograd sees a leaf changed in place and fails
# ("a leaf Variable that requires grad is being used in an in-place operation"): an earlier dQ
# kernel did, on the H200, when its store went through a helper's result. That test needs a GPU;
# the analysis itself only needs Triton's compiler, so this one runs it on the CPU too, in a child
# process (Triton compiles there, for an H200, as common.ptx does), on the launches recorded here.


def recorded_launches(monkeypatch, fn, leaves) -> list:
    """(module, the kernel's name there, {argument: value}) for each `kernel[grid](...)` that fn(*leaves)
    and its backward make, the arguments as the launch passes them (torch.compile records them so: a
    default left out is missing for its analysis, which then takes the kernel to write every input);
    a tensor as its dtype, shape and whether it is memory of one of the leaves."""
    import sys

    from triton.runtime import Autotuner
    from triton.runtime.jit import KernelInterface

    inputs = {leaf.untyped_storage().data_ptr() for leaf in leaves}
    launches = []
    getitem = KernelInterface.__getitem__

    def record(self, grid):
        launch = getitem(self, grid)

        def run(*args, **kwargs):
            jit = self.fn if isinstance(self, Autotuner) else self  # @triton.autotune wraps a @triton.jit
            named = dict(zip(jit.arg_names, args), **kwargs)
            module = sys.modules[jit.fn.__module__]
            name = next(n for n, value in vars(module).items() if value is self)
            args_json = {}
            for arg, value in named.items():
                if isinstance(value, torch.Tensor):
                    args_json[arg] = {"tensor": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                                      "input": value.untyped_storage().data_ptr() in inputs}
                elif hasattr(value, "primitive_bitwidth"):  # a tl.dtype (INDEX_TYPE)
                    args_json[arg] = {"dtype": str(value)}
                elif arg not in ("num_warps", "num_stages", "maxnreg"):  # launch options, not the kernel's
                    args_json[arg] = value
            launches.append((module.__name__, name, args_json))
            return launch(*args, **kwargs)
        return run

    monkeypatch.setattr(KernelInterface, "__getitem__", record)
    out = fn(*leaves)
    out.backward(torch.randn_like(out))
    return launches


def test_torch_compiles_analysis_sees_no_kernel_write_an_input(monkeypatch):
    # every op of OPS, forward and backward, analysed in one child process (each costs seconds to start)
    launches = []
    for op in OPS:
        leaves = [torch.randn(64, 96, device=DEVICE, requires_grad=True),
                  torch.randn(96, 128, device=DEVICE, requires_grad=True)]
        recorded = recorded_launches(monkeypatch, OPS[op], leaves)
        assert recorded, op
        launches += recorded
        monkeypatch.undo()
    try:  # the analysis compiles each kernel for an H200: in a compiled-mode process (tests/analysis.py)
        _, (writes, warned) = child.run("analysis:kernel_writes", dict(launches=launches), interpret=False,
                                        path=(TESTS,))
    except RuntimeError as error:
        if "has no attribute 'identify_mutated_tensors'" in str(error):
            pytest.skip("this torch has neither analysis function")
        raise
    assert "Encountered an exception" not in warned, warned  # its fallback: every input written
    written = {f"{module}.{name}": inputs for (module, name, args), writes in zip(launches, writes)
               if (inputs := [arg for arg in writes if isinstance(args[arg], dict) and args[arg].get("input")])}
    assert not written, f"torch.compile would take these kernels to write inputs of their op: {written}"
