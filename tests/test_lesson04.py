"""Lesson 4: matmul against float64 on awkward shapes, views, dtypes and activations; the trace;
the grouped order (and tl.swizzle2d, hopper.py's copy of it); the interpreter's bf16 trap; the TMA
kernel; the route between the two kernels, row by row; bad input; the chapter's runs."""
import re

import pytest
import torch
import triton
import triton.language as tl

from conftest import (DEVICE, INTERPRET, LESSON6_PRODUCTS, as_on_an_h100, run_as_notebook, run_script,
                      parse_command_line, run_trace)
from common.checks import dtype_name, grad_errors, grad_ok, rel_error
from lesson04_matmul import hopper, main as chapter
from lesson04_matmul.hopper import HOPPER, TMA_FROM, launch_tma, matmul_kernel_tma_tuned
from lesson04_matmul.main import (A4, B4, TINY, TOLERANCE, check, grad_check, matmul_plan, order_demo, reference,
                                  route_table, tile_order, tiles_loaded)
from lesson04_matmul.matmul import (DTYPES, choose_kernel, grouped_pid, launch, matmul, matmul_kernel,
                                    matmul_kernel_tuned)

SHAPES = [(1, 1, 1), (70, 50, 45), (127, 33, 255), (300, 8, 16), (16, 24, 700), (33, 65, 17)]  # M, N, K


def tolerance(dtype):
    """The chapter's tolerance; float32 tighter under the interpreter, which multiplies it in full precision."""
    return 1e-6 if INTERPRET and dtype == torch.float32 else TOLERANCE[dtype]


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_matmul_matches_float64(shape, dtype, activation):
    M, N, K = shape
    a = torch.randn(M, K, device=DEVICE, dtype=dtype)
    b = torch.randn(K, N, device=DEVICE, dtype=dtype)
    out = matmul(a, b, activation=activation)
    assert out.shape == (M, N) and out.dtype == dtype
    assert rel_error(out, reference(a.double(), b.double(), activation)) < tolerance(dtype)


def gelu_backward_reference(a, b, g):
    """g * gelu'(a @ b) in float64, by autograd through torch's GELU: what the backward's epilogue computes."""
    z = (a.double() @ b.double()).requires_grad_()
    return torch.autograd.grad(torch.nn.functional.gelu(z, approximate="tanh"), z, g.double())[0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", SHAPES + [(20, 30, 0)])
def test_the_backward_epilogue_multiplies_by_gelu_prime(shape, dtype):
    # Matmul's backward for activation="gelu": Z = A @ B recomputed, dL/dZ = dL/dC * gelu'(Z) in the
    # same kernel's epilogue (K = 0: Z = 0 and gelu'(0) = 1/2)
    M, N, K = shape
    a, b = torch.randn(M, K, device=DEVICE, dtype=dtype), torch.randn(K, N, device=DEVICE, dtype=dtype)
    g = torch.randn(M, N, device=DEVICE, dtype=dtype)
    out = launch(matmul_kernel_tuned, a, b, "gelu_backward", grad=g)
    assert out.dtype == dtype
    assert rel_error(out, gelu_backward_reference(a, b, g)) < tolerance(dtype)


@pytest.mark.parametrize("tma", [False, None])
def test_gradients_come_out_laid_out_as_their_inputs(tma):
    # A linear layer's product x @ W^T, here with x a transposed view too: each gradient is computed
    # transposed and returned as a view, so W.grad and X.grad lie as W and X do (autograd then adds
    # them with no copy), and they are right
    X = torch.randn(24, 40, device=DEVICE, dtype=torch.float16, requires_grad=True)
    W = torch.randn(56, 24, device=DEVICE, dtype=torch.float16, requires_grad=True)
    out = matmul(X.t(), W.t(), tma=tma)
    g = torch.randn_like(out)
    dX, dW = torch.autograd.grad(out, (X, W), g)
    assert dX.is_contiguous() and dW.is_contiguous()
    X64, W64 = X.detach().double().requires_grad_(), W.detach().double().requires_grad_()
    ref = torch.autograd.grad(X64.t() @ W64.t(), (X64, W64), g.double())
    assert rel_error(dX, ref[0]) < TOLERANCE[torch.float16] and rel_error(dW, ref[1]) < TOLERANCE[torch.float16]


@pytest.mark.parametrize("tma", [False, None, True])
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_a_float32_weight_is_cast_for_the_product_and_its_gradient_comes_back_in_float32(activation, tma):
    # mixed precision's linear layer: x in bfloat16, W in float32. The product is the one of W cast to
    # bfloat16, bit for bit; W's gradient is float32 (from the kernel's accumulator, no cast), laid out as W
    x = torch.randn(64, 48, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    W = torch.randn(40, 48, device=DEVICE, requires_grad=True)
    out = matmul(x, W.t(), activation=activation, tma=tma)
    W16 = W.detach().to(torch.bfloat16).requires_grad_()
    expected = matmul(x, W16.t(), activation=activation, tma=tma)
    assert out.dtype == torch.bfloat16 and torch.equal(out, expected)
    g = torch.randn_like(out)
    dx, dW = torch.autograd.grad(out, (x, W), g)
    dx16, dW16 = torch.autograd.grad(expected, (x, W16), g)
    assert dW.dtype == torch.float32 and dW.is_contiguous() and torch.equal(dx, dx16)
    assert rel_error(dW, dW16) < TOLERANCE[torch.bfloat16]
    if activation is None:  # (with the GELU, dL/dZ is rounded to bfloat16 before the sum: both carry it)
        ref = x.detach().double().t() @ g.double()  # dW^T = x^T @ g, exactly, from the same bfloat16 numbers
        assert rel_error(dW.t(), ref) < rel_error(dW16.t(), ref) / 10  # float32's sum, not one rounded to bfloat16


def test_other_mixed_dtypes_are_refused():
    a, b = torch.randn(4, 4, device=DEVICE), torch.randn(4, 4, device=DEVICE, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"a, b have different dtypes \(float32, bfloat16\)"):
        matmul(a, b)  # (a float32 activation with a 16-bit weight: no)
    with pytest.raises(TypeError, match=r"different dtypes \(float16, bfloat16\)"):
        matmul(a.half(), b)


def test_bfloat16_dot_is_not_garbage():
    # Regression for the interpreter's tl.dot on raw bf16 bits (about 1e10 on unit normals).
    a = torch.randn(16, 16, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(16, 16, device=DEVICE, dtype=torch.bfloat16)
    for out in (matmul(a, b), launch(matmul_kernel, a, b, **TINY)):
        assert out.float().abs().max() < 100
        assert rel_error(out, a.double() @ b.double()) < 1e-2


def test_transposed_and_strided_views():
    x, y = torch.randn(40, 72, device=DEVICE), torch.randn(56, 40, device=DEVICE)
    for a, b in ((x.t(), y.t()), (x[:, ::2].t()[:, :20], y[::2][:18, :20].t())):
        assert not a.is_contiguous()
        assert rel_error(matmul(a, b), a.double() @ b.double()) < tolerance(torch.float32)


def test_empty_and_k_zero():
    a, b = torch.randn(5, 0, device=DEVICE), torch.randn(0, 7, device=DEVICE)
    assert torch.equal(matmul(a, b, activation="gelu"), torch.zeros(5, 7, device=DEVICE))
    assert matmul(torch.randn(0, 3, device=DEVICE), torch.randn(3, 4, device=DEVICE)).shape == (0, 4)
    leaf = a.clone().requires_grad_()  # through autograd too: K = 0 still has a gradient (of zeros)
    out = matmul(leaf, b, activation="relu")
    assert out.grad_fn is not None and torch.equal(out, torch.zeros(5, 7, device=DEVICE))


def test_the_offsets_can_be_64_bit_on_request():
    # section 16 times this: the launcher takes the index type as an argument; the answer is the same
    a, b = torch.randn(70, 45, device=DEVICE), torch.randn(45, 50, device=DEVICE)
    ref = launch(matmul_kernel, a, b, index_type=tl.int32, **TINY)
    assert torch.equal(launch(matmul_kernel, a, b, index_type=tl.int64, **TINY), ref)
    assert torch.equal(launch(matmul_kernel_tuned, a, b, index_type=tl.int64), launch(matmul_kernel_tuned, a, b))


@pytest.mark.parametrize(
    "a, b, kwargs, error, message",
    [
        (torch.ones(3, 4), torch.ones(5, 2), {}, ValueError, "inner dimensions differ"),
        (torch.ones(3), torch.ones(3, 2), {}, ValueError, "must be 2-D"),
        (torch.ones(3, 4), torch.ones(4, 2, dtype=torch.float16), {}, TypeError, "cast one"),
        (torch.ones(3, 4), torch.ones(4, 2), {"tma": "yes"}, TypeError, "tma must be None, True or False"),
        (torch.ones(3, 4, dtype=torch.int32), torch.ones(4, 2, dtype=torch.int32), {}, TypeError, "dtype int32"),
        (torch.ones(3, 4, device="meta"), torch.ones(4, 2, device="meta"), {}, ValueError, "is on meta"),
        (torch.ones(3, 4), torch.ones(4, 2), {"activation": "tanh"}, ValueError, "activation must be"),
        (torch.ones(3, 4), torch.ones(4, 2), {"precision": "fp8"}, ValueError, "precision must be"),
    ],
)
def test_bad_input(a, b, kwargs, error, message):
    if a.device.type == "cpu":
        a, b = a.to(DEVICE), b.to(DEVICE)
    with pytest.raises(error, match=message):
        matmul(a, b, **kwargs)


def test_the_knobs_are_keyword_only():
    a = torch.ones(3, 4, device=DEVICE)
    with pytest.raises(TypeError):
        matmul(a, a.t(), "relu")


def test_plan_is_the_algorithm():
    A, B = torch.tensor(A4), torch.tensor(B4)
    assert torch.equal(matmul_plan(A, B), A @ B)
    a, b = torch.randint(-3, 4, (6, 8)).float(), torch.randint(-3, 4, (8, 4)).float()
    assert torch.equal(matmul_plan(a, b, 2, 2, 4), a @ b)


def test_grouped_order_reads_fewer_tiles():
    assert tiles_loaded(tile_order(9, 9, 1), 9, 9) == 90   # the worked example's numbers
    assert tiles_loaded(tile_order(9, 9, 3), 9, 9) == 54
    for m, n, g in ((9, 9, 3), (7, 5, 3), (4, 10, 8)):      # every tile exactly once, any shape
        assert sorted(tile_order(m, n, g)) == [(i, j) for i in range(m) for j in range(n)]


@triton.jit
def both_orders_kernel(out_ptr, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    # each program stores its tile by main.py's grouped_pid and by tl.swizzle2d (hopper.py's kernel)
    pid = tl.program_id(axis=0)
    pid_m, pid_n = grouped_pid(pid, num_pid_m, num_pid_n, GROUP_M)
    swizzled_m, swizzled_n = tl.swizzle2d(pid // num_pid_n, pid % num_pid_n, num_pid_m, num_pid_n, GROUP_M)
    tl.store(out_ptr + 4 * pid, pid_m)
    tl.store(out_ptr + 4 * pid + 1, pid_n)
    tl.store(out_ptr + 4 * pid + 2, swizzled_m)
    tl.store(out_ptr + 4 * pid + 3, swizzled_n)


@pytest.mark.parametrize("m, n, group", [(9, 9, 3), (7, 5, 3), (4, 10, 8), (5, 3, 1), (1, 1, 8), (10, 3, 4)])
def test_swizzle2d_is_grouped_pid(m, n, group):
    out = torch.full((m * n, 4), -1, dtype=torch.int32, device=DEVICE)
    both_orders_kernel[(m * n,)](out, m, n, GROUP_M=group)
    tiles = out.cpu().tolist()
    assert [(pm, pn) for pm, pn, _, _ in tiles] == [(sm, sn) for _, _, sm, sn in tiles]
    assert [(pm, pn) for pm, pn, _, _ in tiles] == tile_order(m, n, group)  # and what the chapter prints


def test_relu_keeps_nan_like_torch():
    a = torch.tensor([[float("nan"), 1.0], [1.0, -1.0]], device=DEVICE)
    b = torch.eye(2, device=DEVICE)
    out = matmul(a, b, activation="relu")
    assert torch.isnan(out[0, 0]) and torch.isnan(torch.relu(a @ b)[0, 0])
    assert out[1].tolist() == [1.0, 0.0]


@pytest.fixture(scope="module")
def traced():
    return run_trace("lesson04_matmul.main")


def test_trace_reproduces_the_worked_example(traced):
    log = traced
    assert log["C"][0] == [[7, 10, 4, 6], [19, 22, 12, 14], [31, 34, 20, 22], [43, 46, 28, 30]]
    programs = log["program (pid_m, pid_n)"]
    assert programs[:4] == [[0, 0], [0, 1], [1, 0], [1, 1]]  # GROUP_M = 1: row-major
    accs = log["acc"]  # two rounds per program of the 4 x 4
    assert accs[0] == [[1, 2], [5, 6]] and accs[1] == [[7, 10], [19, 22]]
    assert log["a offsets"][2 * 2] == [[8, 9], [12, 13]]   # program (1, 0), round 1
    # the 70 x 45 @ 45 x 50 with 32-blocks: 3 x 2 programs, masks on every edge
    assert sorted(map(tuple, programs[4:])) == [(m, n) for m in range(3) for n in range(2)]
    assert sorted(log["rows kept"][4:]) == [6, 6, 32, 32, 32, 32]
    assert sorted(log["cols kept"][4:]) == [18, 18, 18, 32, 32, 32]
    assert log["ks kept"] == [2, 2] * 4 + [32, 13] * 6


def test_order_demo_prints_the_tile_counts():
    from common import trace

    before = len(trace.LOG)
    order_demo()  # the first wave of 9 programs reads 90 input tiles row-major, 54 grouped
    assert [v for label, v in trace.LOG[before:] if label == "input tiles read by the first wave"] == [90, 54]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_check_passes(monkeypatch, dtype):
    # section 8's check, a dtype at a time, with its float32 rows (views, TF32 and full precision)
    monkeypatch.setitem(chapter.SIZES["quick"], "checked", [dtype])
    table = check()
    assert all(table.column("ok")) and set(table.column("dtype")) == {dtype_name(dtype), "float32"}
    assert len(table.rows) == 4 * 3 + 3 + 2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_grad_check_passes(monkeypatch, dtype):
    # section 9's check, a dtype at a time (on a GPU each compiles its own kernels: side by side on workers)
    monkeypatch.setitem(chapter.SIZES["quick"], "checked", [dtype])
    table = grad_check()
    assert all(table.column("ok")) and set(table.column("dtype")) == {dtype_name(dtype)}
    assert len(table.rows) == 6  # 2 shapes x 3 activations


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(100, 72, 40), (64, 96, 200), (8, 8, 8)])  # ragged tiles: TMA pads and clips
def test_tma_kernel(shape, dtype):
    # 3 persistent programs loop over all the tiles (12 of them for 100 x 72 in 32 x 32 tiles).
    if not INTERPRET and not HOPPER:
        pytest.skip("TMA needs a Hopper GPU (sm_90) or newer")
    M, N, K = shape
    a = torch.randn(M, K, device=DEVICE, dtype=dtype)
    b = torch.randn(K, N, device=DEVICE, dtype=dtype)
    for act in (None, "gelu"):
        out = launch_tma(matmul_kernel_tma_tuned, a, b, act, programs=3)
        assert rel_error(out, reference(a.double(), b.double(), act)) < TOLERANCE[dtype]
    g = torch.randn(M, N, device=DEVICE, dtype=dtype)  # the backward's epilogue: g * gelu'(a @ b)
    out = launch_tma(matmul_kernel_tma_tuned, a, b, "gelu_backward", programs=3, grad=g)
    assert rel_error(out, gelu_backward_reference(a, b, g)) < TOLERANCE[dtype]
    assert rel_error(matmul(a, b, tma=True), a.double() @ b.double()) < TOLERANCE[dtype]


@pytest.mark.parametrize("a_t, b_t", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("split, programs", [(1, 5), (3, 5), (3, 16)])
def test_tma_kernel_reads_transposed_operands_and_splits_k(a_t, b_t, split, programs):
    # a linear layer's products: x @ W^T (B transposed), dW = dY^T @ X (A transposed), read as they
    # lie; SPLIT_K parts of K added up by split_k_sum_kernel, the activation applied after the sum:
    # on 5 programs the 12 tiles' first 10 whole and the last 2 split, on 16 every tile split
    if not INTERPRET and not HOPPER:
        pytest.skip("TMA needs a Hopper GPU (sm_90) or newer")
    M, N, K = 104, 72, 200  # ragged 32-tiles; K in 7 steps of 32: parts of 3, 3 and 1
    a = torch.randn(K, M, device=DEVICE).t() if a_t else torch.randn(M, K, device=DEVICE)
    b = torch.randn(N, K, device=DEVICE).t() if b_t else torch.randn(K, N, device=DEVICE)
    a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    tiles = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, FLATTEN=True)
    for act in (None, "gelu"):
        out = launch_tma(hopper.matmul_kernel_tma, a, b, act, programs=programs, SPLIT_K=split, **tiles)
        assert rel_error(out, reference(a.double(), b.double(), act)) < TOLERANCE[torch.bfloat16], (act, split)
    g = torch.randn(M, N, device=DEVICE, dtype=torch.bfloat16)  # the backward's epilogue, after the parts' sum
    out = launch_tma(hopper.matmul_kernel_tma, a, b, "gelu_backward", programs=programs, grad=g, SPLIT_K=split,
                     **tiles)
    assert rel_error(out, gelu_backward_reference(a, b, g)) < TOLERANCE[torch.bfloat16], split


@pytest.mark.parametrize("programs", [5, 16])
def test_split_k_parts_added_by_atomics(programs):
    # SPLIT_ATOMIC: a weight's gradient (dY^T @ X, A transposed), each split tile's parts added by
    # atomics: into a float32 C itself (no parts buffer, no second kernel), or into one float32
    # block per tile that split_k_sum_kernel casts, its activation applied after the sum. On 5
    # programs the last wave of the 12 tiles splits (the whole tiles stored over C's zeros), on 16
    # every tile. The product of two bfloat16 numbers is exact in float32, so only float32 sums
    # part a float32 C from float64's
    if not INTERPRET and not HOPPER:
        pytest.skip("TMA needs a Hopper GPU (sm_90) or newer")
    M, N, K = 104, 72, 200
    a = torch.randn(K, M, device=DEVICE).t().to(torch.bfloat16)
    b = torch.randn(K, N, device=DEVICE, dtype=torch.bfloat16)
    tiles = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, FLATTEN=True, SPLIT_K=3, SPLIT_ATOMIC=True)
    out = launch_tma(hopper.matmul_kernel_tma, a, b, programs=programs, out_dtype=torch.float32, **tiles)
    assert out.dtype == torch.float32 and rel_error(out, a.double() @ b.double()) < 1e-5
    for act in (None, "gelu"):
        out = launch_tma(hopper.matmul_kernel_tma, a, b, act, programs=programs, **tiles)
        assert out.dtype == torch.bfloat16
        assert rel_error(out, reference(a.double(), b.double(), act)) < TOLERANCE[torch.bfloat16], act
    g = torch.randn(M, N, device=DEVICE, dtype=torch.bfloat16)
    out = launch_tma(hopper.matmul_kernel_tma, a, b, "gelu_backward", programs=programs, grad=g, **tiles)
    assert rel_error(out, gelu_backward_reference(a, b, g)) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("pieces", [2, 4])
@pytest.mark.parametrize("split", [1, 3])
def test_tma_kernel_stores_its_tiles_in_pieces(pieces, split):
    # EPILOGUE_SPLIT: C's tile (a part's, where K is split) stored as pieces side by side, in bfloat16
    # and in float32 (a weight's gradient); N = 72 in 32-wide tiles: the last tile's pieces cross
    # C's edge or lie past it, and TMA clips them
    if not INTERPRET and not HOPPER:
        pytest.skip("TMA needs a Hopper GPU (sm_90) or newer")
    M, N, K = 104, 72, 200
    a = torch.randn(K, M, device=DEVICE).t().to(torch.bfloat16)  # dW = dY^T @ X's layout: A transposed
    b = torch.randn(K, N, device=DEVICE, dtype=torch.bfloat16)
    tiles = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, FLATTEN=True, SPLIT_K=split, EPILOGUE_SPLIT=pieces)
    for act, out_dtype in ((None, None), ("gelu", None), (None, torch.float32)):
        out = launch_tma(hopper.matmul_kernel_tma, a, b, act, programs=5, out_dtype=out_dtype, **tiles)
        assert out.dtype == (out_dtype or torch.bfloat16)
        assert rel_error(out, reference(a.double(), b.double(), act)) < TOLERANCE[torch.bfloat16], (act, out_dtype)
    g = torch.randn(M, N, device=DEVICE, dtype=torch.bfloat16)
    out = launch_tma(hopper.matmul_kernel_tma, a, b, "gelu_backward", programs=5, grad=g, **tiles)
    assert rel_error(out, gelu_backward_reference(a, b, g)) < TOLERANCE[torch.bfloat16]


def test_the_tma_path_through_the_autograd_function_and_its_backward():
    # Matmul's forward decides tma on the tensors the kernel reads; the gelu backward
    # recomputes Z with the forward's choice; with tma=True dA and dB take the TMA kernel too, on
    # the transposed views B^T and A^T as they lie
    if not INTERPRET and not HOPPER:
        pytest.skip("TMA needs a Hopper GPU (sm_90) or newer")
    a = torch.randn(64, 32, device=DEVICE, dtype=torch.float16)
    b = torch.randn(32, 48, device=DEVICE, dtype=torch.float16)
    errs = grad_errors(lambda a, b: matmul(a, b, activation="gelu", tma=True), lambda a, b: reference(a, b, "gelu"),
                       [a, b])
    assert all(grad_ok(ours, theirs) for ours, theirs in errs), errs


def test_tma_refuses_what_it_cannot_address():
    a = torch.randn(64, 40, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="16-byte aligned"):
        matmul(a[:, ::2].t(), a, tma=True)  # neither its rows nor its columns contiguous
    with pytest.raises(ValueError, match="16-byte aligned"):
        matmul(torch.randn(64, 36, device=DEVICE, dtype=torch.float16).t(), a, tma=True)  # A^T rows of 36 halves: 72 bytes
    with pytest.raises(ValueError, match="16-byte aligned"):
        matmul(a[:, :36].contiguous(), a.t()[:36].contiguous(), tma=True)  # rows of 36 halves: 72 bytes
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        matmul(a.float(), a.float().t(), tma=True)


def meta(M, N, K, dtype=torch.float16, transposed=False):
    """a (M, K) and b (K, N) as the route sees them: shapes, strides and a dtype, no memory (an
    address of 0, which is 16-byte aligned); a transposed: column-major."""
    a = torch.empty((K, M) if transposed else (M, K), device="meta", dtype=dtype)
    return (a.t() if transposed else a), torch.empty(K, N, device="meta", dtype=dtype)


def test_the_route_table_takes_one_row_per_condition():
    # the chapter's table (section 7), row by row: the kernel each example takes, on a GPU with TMA
    # unless the row says not
    table = route_table()
    assert table.column("kernel") == ["matmul_kernel (matmul.py)"] + ["matmul_kernel_tma (hopper.py)"] * 3 + [
        "matmul_kernel (matmul.py)"] * 4
    assert table.column("condition (asked in this order)")[:2] == ["tma=False", "tma=True (raises where the TMA "
                                                                   "kernel cannot run)"]


@pytest.mark.parametrize("shape, dtype, transposed, kwargs, kernel", [
    ((4096, 4096, 4096), torch.float16, False, dict(tma=False), "pointer"),          # 1. told not to
    ((64, 48, 32), torch.float16, False, dict(tma=True), "tma"),                     # 2. told to, and it can
    ((4096, 4096, 4096), torch.float16, False, {}, "tma"),                           # 3. where it pays
    ((4096, 4096, 4096), torch.bfloat16, False, {}, "tma"),
    ((4096, 4096, 4096), torch.float32, False, {}, "pointer"),                       # 4. else: float32,
    ((16376, 768, 768), torch.float16, False, {}, "pointer"),                        # below TMA_FROM (by 8 rows),
    ((4096, 4096, 4096), torch.float16, True, {}, "tma"),                            # (column-major A: as it lies)
    ((4104, 4096, 4096), torch.float16, True, {}, "tma"),
    ((4100, 4096, 4096), torch.float16, True, {}, "pointer"),                        # A^T's rows 8200 bytes,
    ((4096, 4096, 4100), torch.float16, False, {}, "pointer"),                       # rows of 8200 bytes,
    ((4096, 4096, 4096), torch.float16, False, dict(gpu_has_tma=False), "pointer"),  # no TMA on the GPU
])
def test_the_route_decides_each_condition(shape, dtype, transposed, kwargs, kernel):
    a, b = meta(*shape, dtype=dtype, transposed=transposed)
    assert choose_kernel(a, b, **{"gpu_has_tma": True, **kwargs}) == kernel
    assert TMA_FROM == 16384 * 768 * 768


def test_torch_compile_traces_matmul_on_the_route_the_eager_call_takes():
    # Under torch.compile, on an H100 or H200, the forward and both products of the backward take
    # the TMA kernel as an eager call does: the route reads the operands' alignment from their
    # storage offsets (a traced tensor has no address). dB = A^T @ dC, 768 x 768, has 36 tiles for
    # 132 SMs: split K, its parts added by split_k_sum_kernel. On a GPU without TMA, the pointer
    # kernel; and so do the products that read an operand off a 16-byte boundary (a view 2 elements in).
    # Lesson 6's linear (a float32 W, cast inside Matmul) traces whole and takes the same kernels.
    # Without a GPU: tests/compile_trace.py, Dynamo (fullgraph) and AOTAutograd in a compiled-mode child
    from common import child
    from conftest import TESTS

    op = "lesson04_matmul.matmul:matmul"
    shapes = [(16384, 768), (768, 768)]
    cases = [dict(op=op, shapes=shapes, dtype="bfloat16", hopper=True),
             dict(op=op, shapes=shapes, dtype="bfloat16", hopper=True, kwargs=dict(tma=True)),
             dict(op=op, shapes=shapes, dtype="bfloat16", hopper=False),
             dict(op=op, shapes=shapes, dtype="bfloat16", hopper=True, offset=2),
             # lesson 6's linear: a float32 W beside bfloat16 x, cast inside Matmul, dW in float32
             dict(op="compile_trace:linear", shapes=shapes, dtypes=["bfloat16", "float32"], hopper=True)]
    _, results = child.run("compile_trace:joint_graphs", dict(cases=cases), interpret=False, path=(TESTS,))
    for error, kernels, warned in results:
        assert error is None, error
        assert "Encountered an exception" not in warned, warned[-2000:]
    def tma(out_dtype=None):  # dB's parts summed by split_k_sum_kernel, unless config() (a recorded pick) adds
        meta = hopper.config(768, 768, 16384, out_dtype=out_dtype)  # them by atomics or splits nothing
        return ["matmul_kernel_tma"] * 3 + (["split_k_sum_kernel"] if meta["SPLIT_K"] > 1 and
                                            not meta.get("SPLIT_ATOMIC") else [])
    # offset 2: A's products take the pointer kernel, dA = dC @ B^T (A not read) the TMA kernel
    assert [kernels for _, kernels, _ in results] == [tma(), tma(), ["matmul_kernel"] * 3,
                                                      ["matmul_kernel", "matmul_kernel_tma", "matmul_kernel"],
                                                      tma(torch.float32)]


def test_the_backward_asks_the_route_for_each_product():
    # dA = dC @ B^T and dB = A^T @ dC, transposed views: tma=False never the TMA kernel, tma=True
    # wherever it can address them (the interpreter imitates TMA), None as choose_kernel says
    from lesson04_matmul.matmul import backward_takes_tma

    dc, b = torch.empty(64, 48, device=DEVICE, dtype=torch.float16), torch.empty(32, 48, device=DEVICE,
                                                                               dtype=torch.float16)
    assert backward_takes_tma(True, dc, b.t()[:48]) is (INTERPRET or HOPPER)
    assert backward_takes_tma(False, dc, b.t()) is False
    assert backward_takes_tma(None, dc, b.t()) is (choose_kernel(dc, b.t()) == "tma")
    assert backward_takes_tma(True, dc.float(), b.t().float()) is False  # float32: the pointer kernel
    odd = torch.empty(36, 48, device=DEVICE, dtype=torch.float16)  # dA of 36 columns: rows of 72 bytes
    assert backward_takes_tma(True, dc, odd.t()) is False


def test_the_route_refuses_tma_true_where_the_kernel_cannot_run():
    a, b = meta(64, 48, 32)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        choose_kernel(*meta(64, 48, 32, torch.float32), True, gpu_has_tma=True)
    with pytest.raises(ValueError, match="16-byte aligned"):
        choose_kernel(*meta(36, 48, 32, transposed=True), True, gpu_has_tma=True)
    if not INTERPRET:  # (the interpreter imitates TMA on any machine)
        with pytest.raises(ValueError, match="compute capability 9.0 or newer"):
            choose_kernel(a, b, True, gpu_has_tma=False)


def test_the_route_asks_this_machine_by_default():
    a, b = meta(4096, 4096, 4096)
    assert choose_kernel(a, b) == ("tma" if HOPPER else "pointer")


@pytest.mark.skipif(INTERPRET or not HOPPER, reason="matmul() picks the TMA kernel on Hopper GPUs only")
def test_matmul_picks_tma_where_it_can(monkeypatch):
    from common.profile import kernels_launched

    monkeypatch.setattr(hopper, "PICKS", {})  # config()'s rule, whatever this GPU's recorded picks

    a = torch.randn(4096, 4096, device=DEVICE, dtype=torch.float16)
    names = lambda fn: [name for name, _, _ in kernels_launched(fn)]
    assert names(lambda: matmul(a, a)) == ["matmul_kernel_tma"]
    assert names(lambda: matmul(a.t(), a)) == ["matmul_kernel_tma"]  # a column-major A: read as it lies
    assert names(lambda: matmul(a[:2048, :2048], a[:2048, :2048])) == ["matmul_kernel"]  # below TMA_FROM
    assert rel_error(matmul(a, a), reference(a.double(), a.double())) < TOLERANCE[torch.float16]
    # a weight's gradient, 768 x 768 over 16384 rows: 36 tiles, K split into parts, then their sum
    x, dy = (torch.randn(16384, 768, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    assert names(lambda: matmul(x.t(), dy)) == ["matmul_kernel_tma", "split_k_sum_kernel"]
    assert rel_error(matmul(x.t(), dy), reference(x.t().double(), dy.double())) < TOLERANCE[torch.bfloat16]
    # an MLP weight's gradient, 768 x 3072: 144 tiles, a wave whole on 132 SMs, the last wave's split
    dy = torch.randn(16384, 3072, device=DEVICE, dtype=torch.bfloat16)
    assert names(lambda: matmul(x.t(), dy)) == ["matmul_kernel_tma", "split_k_sum_kernel"]
    assert rel_error(matmul(x.t(), dy), reference(x.t().double(), dy.double())) < TOLERANCE[torch.bfloat16]


@pytest.mark.skipif(INTERPRET or not HOPPER, reason="the TMA kernel's scratch memory: Hopper GPUs only")
def test_the_tma_path_runs_on_any_thread():
    # Triton keeps the allocator of the descriptors' scratch memory per thread; a call from a thread
    # that did not import hopper.py (a worker pool, autograd's own threads) must find it too
    from concurrent.futures import ThreadPoolExecutor

    a = torch.randn(256, 256, device=DEVICE, dtype=torch.float16)
    with ThreadPoolExecutor(1) as pool:
        c = pool.submit(matmul, a, a, tma=True).result()  # an error in the thread is raised here
    assert rel_error(c, reference(a.double(), a.double())) < TOLERANCE[torch.float16]


def test_the_worked_examples_tile_arithmetic():
    from lesson04_matmul.main import tile_counts

    t = tile_counts(8, 8, 6, 2, 2, 2)  # A[8, 6] @ B[6, 8] in 2-blocks
    assert (t["programs"], t["rounds"], t["tile_products"]) == (16, 3, 48)
    t = tile_counts(96, 80, 64, 32, 32, 32)  # C[96, 80] in 32 x 32 tiles
    assert t["grid"] == (3, 3) and t["programs"] == 9 and t["last_cols"] == (64, 79, 16)
    assert tile_counts(3, 2, 4, 1, 1, 4)["programs"] == 6  # A[3, 4] @ B[4, 2]: 6 outputs


def test_the_plan_adds_one_tile_product_per_round(capsys):
    C = matmul_plan(torch.tensor(A4), torch.tensor(B4), verbose=True)
    assert C[:2, :2].tolist() == [[7, 10], [19, 22]]  # [[1, 2], [5, 6]] + [[6, 8], [14, 16]]
    out = capsys.readouterr().out
    assert "a @ b = [[1.0, 2.0], [5.0, 6.0]]" in out and "a @ b = [[6.0, 8.0], [14.0, 16.0]]" in out


def test_the_autotuners_choice_is_read_from_its_public_attribute():
    # library.py names the configuration each call ran: the autotuner's best_config after the call
    from lesson04_matmul.library import described

    a, b = torch.randn(40, 24, device=DEVICE), torch.randn(24, 8, device=DEVICE)
    matmul(a, b, tma=False)
    text = described(matmul_kernel_tuned.best_config)
    assert re.fullmatch(r"\d+ x \d+ x \d+, \d+ warps, \d+ stages", text), text
    if INTERPRET:  # the interpreter's one configuration
        assert text.startswith("64 x 64 x 64")


@pytest.mark.skipif(INTERPRET, reason="the profiler sees kernels on a GPU only")
def test_library_kernels_by_shape():
    from lesson04_matmul import hopper, library

    big = (4096,) if hopper.HOPPER else ()  # (where matmul() takes the TMA kernel: launched with config()'s rule)
    table = library.kernels_by_shape(sizes=(127, 128, *big))
    mine = [row for row in table.rows if row[1] == "matmul()"]
    assert [row[2] for row in mine] == ["matmul_kernel", "matmul_kernel", *(["matmul_kernel_tma"] if big else [])]
    assert all("warps" in row[3] for row in mine)
    assert any(row[1] == "torch.matmul" for row in table.rows)


def test_runs_as_a_notebook_each_sections_output_under_its_cell():
    cells = run_as_notebook("lesson04_matmul")
    text = "".join(cells)
    trace_cell = next(c for c in cells if "=== 5. The trace" in c)
    assert "C = [[ 7., 10.,  4.,  6.]," in trace_cell and "ks kept = 13" in trace_cell
    assert "input tiles read by the first wave = 54" in next(c for c in cells if "=== 3. Grouped order" in c)
    assert "relative error" in next(c for c in cells if "=== 8. Correctness" in c)
    assert "=== 16. 64-bit offsets" in text
    headings = [line for line in text.splitlines() if line.startswith("=== ")]
    numbers = [int(h.split()[1].rstrip(".")) for h in headings]
    assert numbers == sorted(numbers) and len(headings) == 14  # every section, numbered as in the code
    assert "ipykernel" not in text and "usage:" not in text  # the kernel's own arguments were ignored
    if INTERPRET:  # the sections that need a GPU print the page's record, its GPU's stamp once
        assert text.count("This section needs a GPU") == 8
        assert text.count("| GPU | driver |") <= 1 and "interpreter µs" not in text


def test_script_and_its_command_line():
    done = run_script("lesson04_matmul", "--sections", "trace")
    assert done.returncode == 0, done.stderr
    assert "ks kept = 13" in done.stdout and "=== 8." not in done.stdout
    assert "Sections: tiles: 2. Why tiles" in parse_command_line("lesson04_matmul", "--help")[1]
    code, _, err = parse_command_line("lesson04_matmul", "--sections", "bench", "--sizes", "-5")
    assert code == 2 and "must be at least 1" in err


@pytest.mark.parametrize("M, N, K, activation, block_n, split", [
    (16384, 1280, 768, None, 256, 1),    # a forward, x @ W^T: 640 tiles of 128 x 256, waves to spare
    (768, 768, 16384, None, 128, 3),     # a weight's gradient: 36 tiles for 132 SMs, every tile's K in 3 parts
    (768, 3072, 16384, None, 128, 11),   # an MLP weight's: 144 tiles, a wave whole, the last 12 tiles' K in 11 parts
    (768, 3072, 512, None, 128, 2),      # ... with a short K: no part under 4 steps of 64
    # the backward's GELU epilogue: 128 x 128 tiles always; an MLP's Z, 3072 tiles in 24 waves, whole
    (16384, 3072, 768, "gelu_backward", 128, 1),
    (768, 768, 16384, "gelu_backward", 128, 3),  # ... and where its tiles would leave SMs idle, split
])
def test_the_tma_configuration_splits_k_where_sms_would_wait(monkeypatch, M, N, K, activation, block_n, split):
    # config()'s rules on a GPU of 132 SMs (H100, H200), asked on any machine
    monkeypatch.setattr(hopper, "INTERPRET", False)
    monkeypatch.setattr(hopper, "sm_count", lambda: 132)
    config = hopper.rule(M, N, K, activation=activation)
    assert (config["BLOCK_N"], config["SPLIT_K"]) == (block_n, split)
    # 128 x 256 tiles never split: their float32 parts beside the stages would not fit shared memory
    assert config["BLOCK_N"] == 128 or config["SPLIT_K"] == 1


def test_the_candidates_start_with_the_rule_and_make_room_by_pieces(monkeypatch):
    as_on_an_h100(monkeypatch, hopper)
    for M, N, K, activation, out_dtype, _, _ in LESSON6_PRODUCTS:
        found = hopper.candidates(M, N, K, activation=activation, out_dtype=out_dtype)
        assert found[0] == hopper.rule(M, N, K, activation=activation, out_dtype=out_dtype)
        assert len({tuple(sorted(meta.items())) for meta in found}) == len(found) >= 3  # no repeats
        c_itemsize = 4 if out_dtype == torch.float32 else 2
        for meta in found:
            assert hopper.shared_bytes(meta, c_itemsize=c_itemsize, activation=activation) + 1024 <= 227 << 10
            split = (hopper.fill_split if meta.get("SPLIT_ATOMIC") else hopper.split_for)(M, N, K, meta["BLOCK_M"],
                                                                                           meta["BLOCK_N"])
            assert meta["SPLIT_K"] == split
        # the products the rule keeps to 128 x 128 get 128 x 256 tiles to try, C in pieces
        if activation == "gelu_backward" or out_dtype == torch.float32:
            assert any(meta["BLOCK_N"] == 256 and meta["EPILOGUE_SPLIT"] > 1 for meta in found)
        # a weight's gradient (a wave to split) also tries its parts added by atomics, and only it
        atomics = [meta for meta in found if meta.get("SPLIT_ATOMIC")]
        assert bool(atomics) == (M < 16384), (M, N, K, out_dtype)
        if (M, N, out_dtype) == (768, 768, torch.float32):  # 36 tiles of 128 x 128: in 3 parts (the rule's)
            # 108 of 132 SMs work; with atomics in 11, all of them, in 3 waves
            assert found[0]["SPLIT_K"] == 3 and [meta["SPLIT_K"] for meta in atomics if meta["BLOCK_M"] == 128 and
                                                 meta["BLOCK_N"] == 128] == [11]


def test_a_pick_that_adds_by_atomics_gives_way_to_the_rule_in_deterministic_mode(monkeypatch):
    as_on_an_h100(monkeypatch, hopper)
    atomic = next(meta for meta in hopper.candidates(768, 768, 16384, out_dtype=torch.float32)
                  if meta.get("SPLIT_ATOMIC"))
    monkeypatch.setattr(hopper, "PICKS", {hopper.pick_key(768, 768, 16384, None, torch.float32): atomic})
    assert hopper.config(768, 768, 16384, out_dtype=torch.float32) == atomic
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    assert hopper.config(768, 768, 16384, out_dtype=torch.float32) == hopper.rule(768, 768, 16384,
                                                                                   out_dtype=torch.float32)


@pytest.mark.skipif(not (INTERPRET or HOPPER), reason="the TMA kernel needs Hopper (or the interpreter)")
def test_tune_times_every_candidate_and_config_takes_the_fastest(monkeypatch):
    monkeypatch.setattr(hopper, "PICKS", {})
    a = torch.randn(96, 256, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(256, 80, device=DEVICE, dtype=torch.bfloat16)
    timed_names = []

    def timer(runs):  # the last candidate "fastest", whatever the clock says
        timed_names.extend(runs)
        return {name: 1.0 if name != len(runs) - 1 else 0.5 for name in runs}

    timed = hopper.tune(a, b, timer=timer)
    configs = hopper.candidates(96, 80, 256)
    assert [meta for meta, _ in timed] == configs and timed_names == list(range(len(configs)))
    assert hopper.config(96, 80, 256) == configs[-1] != hopper.rule(96, 80, 256)
    assert hopper.config(96, 80, 256, out_dtype=torch.float32) == hopper.rule(96, 80, 256, out_dtype=torch.float32)
    c = launch_tma(hopper.matmul_kernel_tma, a, b, **hopper.config(96, 80, 256))
    assert rel_error(c, a.double() @ b.double()) < TOLERANCE[torch.bfloat16]


@pytest.mark.skipif(INTERPRET or not HOPPER, reason="the candidates' tiles: compiled and run on a Hopper GPU")
@pytest.mark.parametrize("M, N, K, activation, out_dtype", [
    (256, 384, 4096, None, None), (256, 384, 4096, None, torch.float32),  # 6 tiles of 128 x 128: K in 16 parts
    # 96 tiles of 128 x 128 (whole), 48 of 128 x 256 (K in 2 parts), with the epilogues
    (2048, 768, 512, "gelu_backward", None), (2048, 768, 512, "gelu", None)])
def test_every_candidate_computes_c_on_this_gpu(monkeypatch, M, N, K, activation, out_dtype):
    # tune() checks each candidate's C against C in float32 before it times any: here, with a
    # stand-in clock, every one of hopper.candidates for these products compiled and run on this GPU
    # (lesson 4's section 17 tunes lesson 6's products with the same tiles, stages, pieces and splits)
    monkeypatch.setattr(hopper, "PICKS", {})
    a = torch.randn(K, M, device=DEVICE, dtype=torch.bfloat16).t()  # dY^T's layout, as a weight's gradient
    b = torch.randn(K, N, device=DEVICE, dtype=torch.bfloat16)
    grad = torch.randn(M, N, device=DEVICE, dtype=torch.bfloat16) if activation == "gelu_backward" else None
    timed = hopper.tune(a, b, activation, grad, out_dtype, timer=lambda runs: dict.fromkeys(runs, 1.0))
    configs = hopper.candidates(M, N, K, activation=activation, out_dtype=out_dtype)
    assert [meta for meta, _ in timed] == configs and len(configs) >= 4
    assert any(meta.get("SPLIT_ATOMIC") for meta in configs) and any(meta["SPLIT_K"] == 1 for meta in configs) == (
        M == 2048)


@pytest.mark.skipif(not (INTERPRET or HOPPER), reason="the TMA kernel needs Hopper (or the interpreter)")
def test_tune_refuses_a_candidate_whose_c_is_off_the_rules(monkeypatch):
    monkeypatch.setattr(hopper, "PICKS", {})
    launch, first = hopper.launch_tma, hopper.candidates(96, 80, 256)[0]

    def planted(kernel, a, b, activation=None, **meta):  # every candidate but the rule's loses C's first row
        c = launch(kernel, a, b, activation, **meta)
        if any(meta.get(key) != value for key, value in first.items()):
            c[0] = 0
        return c

    monkeypatch.setattr(hopper, "launch_tma", planted)
    a = torch.randn(96, 256, device=DEVICE, dtype=torch.float16)
    b = torch.randn(256, 80, device=DEVICE, dtype=torch.float16)
    with pytest.raises(AssertionError, match="candidate .* for 96 x 80 x 256 is off C by .* more than the .* the "
                                             "rule's configuration allows"):
        hopper.tune(a, b, timer=lambda runs: dict.fromkeys(runs, 1.0))
    assert not hopper.PICKS  # nothing picked


@pytest.mark.skipif(not (INTERPRET or HOPPER), reason="the TMA kernel needs Hopper (or the interpreter)")
def test_matmul_and_its_backward_launch_the_pick_for_each_products_key(monkeypatch):
    # a GELU forward asks config() with its epilogue, a float32 weight's gradient with C's dtype:
    # the keys tune() picked them under (a pick under another key would never be run)
    x = torch.randn(64, 96, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(80, 96, device=DEVICE, dtype=torch.float32, requires_grad=True)  # a linear layer's, float32
    halves = dict(hopper.rule(64, 80, 96), BLOCK_N=64, SPLIT_K=1, EPILOGUE_SPLIT=2)  # unlike the rule's
    # (W's gradient lies as W does: dY^T @ X, 80 x 96 over the 64 rows)
    monkeypatch.setattr(hopper, "PICKS", {hopper.pick_key(64, 80, 96, "gelu", None): halves,
                                          hopper.pick_key(80, 96, 64, None, torch.float32): dict(halves, BLOCK_M=64)})
    launched, launch = [], hopper.launch_tma
    monkeypatch.setattr(hopper, "launch_tma", lambda *args, **meta: launched.append(meta) or launch(*args, **meta))
    matmul(x, w.t(), activation="gelu", tma=True).sum().backward()
    forward, recomputed, dx, dw = ({k: v for k, v in meta.items() if k in halves} for meta in launched)
    assert forward == halves and dw == dict(halves, BLOCK_M=64)  # the picks
    assert recomputed == hopper.rule(64, 80, 96, activation="gelu_backward") and dx == hopper.rule(64, 96, 80)
    # a bfloat16 weight's gradient, C in the inputs' dtype: the key of C's dtype None, as tune() keys it
    monkeypatch.setattr(hopper, "PICKS", {hopper.pick_key(80, 96, 64, None, None): halves})
    launched.clear()
    matmul(x, w.detach().to(torch.bfloat16).requires_grad_().t(), tma=True).backward(  # (a dL/dC TMA can read)
        torch.randn(64, 80, device=DEVICE, dtype=torch.bfloat16))
    assert {k: v for k, v in launched[-1].items() if k in halves} == halves


def test_an_empty_sum_through_the_gelu_backward_epilogue_keeps_cs_dtype():
    # K = 0: Z = 0 and gelu'(0) = 1/2, with no kernel; C in out_dtype as any launch writes it
    a, b = torch.empty(4, 0, device=DEVICE, dtype=torch.bfloat16), torch.empty(0, 8, device=DEVICE, dtype=torch.bfloat16)
    g = torch.randn(4, 8, device=DEVICE, dtype=torch.bfloat16)
    out = launch_tma(hopper.matmul_kernel_tma, a, b, "gelu_backward", grad=g, out_dtype=torch.float32)
    assert out.dtype == torch.float32 and torch.equal(out, g.float() * 0.5)


@pytest.mark.skipif(not INTERPRET, reason="on a GPU the section itself runs (python -m common.results)")
def test_the_layers_section_tunes_each_product_then_times_it_beside_torch(monkeypatch):
    # section 17 needs a GPU; here its code runs on small layers under the interpreter, with the
    # route answering "tma" (as on Hopper) and a stand-in clock: the candidates of each product are
    # timed and the fastest becomes config()'s pick, and the products' table names that pick
    from common import bench

    monkeypatch.setattr(chapter, "LAYERS", [("QKV", 64, 96), ("attention out", 64, 64), ("MLP up", 64, 192),
                                            ("MLP down", 192, 64)])
    monkeypatch.setattr(chapter, "choose_kernel", lambda a, b: "tma")
    monkeypatch.setattr(hopper, "HOPPER", True)
    monkeypatch.setattr(hopper, "PICKS", {})
    ran = []

    def clock(runs):  # each of ours run once; the last candidate "fastest"
        ran.extend(name for name, fn in runs.items() if name != "torch" and fn() is not None)
        return {name: 1.0 if name != len(runs) - 1 else 0.5 for name in runs}

    monkeypatch.setattr(bench, "side_by_side", clock)
    candidates, products = chapter.bench_layers(tokens=256)
    assert [(row[0], row[1]) for row in products.rows] == [
        (layer, product) for layer in ("QKV", "attention out", "MLP up", "MLP down")
        for product in ("forward: x @ W^T", "dX = dY @ W", "dW = dY^T @ X",
                        *(("forward + GELU", "dY * gelu'(x @ W^T)") if layer == "MLP up" else ()), "dW in float32")]
    # 15 picks: products of the same sizes (attention out's forward and dX; MLP up's forward and MLP
    # down's dX, and the other way round) are tuned once
    picks = {(row[0], row[1]): row[2] for row in candidates.rows if row[-1] == "pick"}
    assert len(picks) == len(hopper.PICKS) == 15
    runs = {(row[0], row[1]): row[3] for row in products.rows}
    for (layer, product), configuration in picks.items():
        assert runs[layer, product] == "matmul_kernel_tma " + configuration  # the products run their picks
    assert runs["attention out", "dX = dY @ W"] == runs["attention out", "forward: x @ W^T"]
    assert ran.count("course") == 18 and len(ran) == len(candidates.rows) + 18


def test_a_configuration_launch_tma_cannot_run_is_refused_by_name():
    # split K without its tiles (the autotuned kernel has none); C in pieces other than 1, 2 or 4, or
    # narrower than TMA's 16 bytes (16 columns of float16 in 4 pieces: 8 bytes each)
    a = torch.randn(64, 64, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="SPLIT_K > 1 needs the whole configuration"):
        launch_tma(matmul_kernel_tma_tuned, a, a, SPLIT_K=2)
    with pytest.raises(ValueError, match="EPILOGUE_SPLIT must be 1, 2 or 4"):
        launch_tma(matmul_kernel_tma_tuned, a, a, EPILOGUE_SPLIT=3)
    tiles = dict(BLOCK_M=32, BLOCK_K=32, GROUP_M=4, FLATTEN=True)
    with pytest.raises(ValueError, match="at least 16 bytes wide.*BLOCK_N 16 in 4 pieces of float16"):
        launch_tma(hopper.matmul_kernel_tma, a, a, BLOCK_N=16, EPILOGUE_SPLIT=4, **tiles)
    if INTERPRET or HOPPER:  # 32 columns in 2 pieces: 32 bytes each, as TMA allows
        assert rel_error(launch_tma(hopper.matmul_kernel_tma, a, a, BLOCK_N=32, EPILOGUE_SPLIT=2, **tiles),
                         a.double() @ a.double()) < TOLERANCE[torch.float16]
