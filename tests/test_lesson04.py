"""Lesson 4: matmul against float64 on awkward shapes, views, dtypes and activations; the trace;
the grouped order; the interpreter's bf16 trap; bad input."""
import pytest
import torch

from conftest import DEVICE, INTERPRET, run_trace
from lesson04_matmul.hopper import HOPPER, copy_instructions, matmul_tma
from common.checks import rel_error
from lesson04_matmul.main import (A4, B4, TOLERANCE as TOL, check, main, matmul, matmul_plan, reference,
                                  order_demo, tile_order, tiles_loaded, TINY, launch, matmul_kernel)
SHAPES = [(1, 1, 1), (70, 50, 45), (127, 33, 255), (300, 8, 16), (16, 24, 700), (33, 65, 17)]  # M, N, K


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_matmul_matches_float64(shape, dtype, activation):
    M, N, K = shape
    a = torch.randn(M, K, device=DEVICE, dtype=dtype)
    b = torch.randn(K, N, device=DEVICE, dtype=dtype)
    out = matmul(a, b, activation)
    assert out.shape == (M, N) and out.dtype == dtype
    assert rel_error(out, reference(a.double(), b.double(), activation)) < TOL[dtype]


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
        assert rel_error(matmul(a, b), a.double() @ b.double()) < TOL[torch.float32]


def test_empty_and_k_zero():
    a, b = torch.randn(5, 0, device=DEVICE), torch.randn(0, 7, device=DEVICE)
    assert torch.equal(matmul(a, b, "gelu"), torch.zeros(5, 7, device=DEVICE))
    assert matmul(torch.randn(0, 3, device=DEVICE), torch.randn(3, 4, device=DEVICE)).shape == (0, 4)


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


def test_plan_is_the_algorithm():
    A, B = torch.tensor(A4), torch.tensor(B4)
    assert torch.equal(matmul_plan(A, B), A @ B)
    a, b = torch.randint(-3, 4, (6, 8)).float(), torch.randint(-3, 4, (8, 4)).float()
    assert torch.equal(matmul_plan(a, b, 2, 2, 4), a @ b)


def test_grouped_order_reads_fewer_tiles():
    assert tiles_loaded(tile_order(9, 9, 1), 9, 9) == 90   # the source documents' numbers
    assert tiles_loaded(tile_order(9, 9, 3), 9, 9) == 54
    for m, n, g in ((9, 9, 3), (7, 5, 3), (4, 10, 8)):      # every tile exactly once, any shape
        assert sorted(tile_order(m, n, g)) == [(i, j) for i in range(m) for j in range(n)]


def test_relu_keeps_nan_like_torch():
    a = torch.tensor([[float("nan"), 1.0], [1.0, -1.0]], device=DEVICE)
    b = torch.eye(2, device=DEVICE)
    out = matmul(a, b, "relu")
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


def test_check_passes():
    assert all(check().column("ok"))


def test_script_sections(capsys):
    main(["--sections", "tiles", "bench", "--sizes", "32"])
    out = capsys.readouterr().out
    assert "16 x 16 tiles" in out and "TFLOP/s" in out


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
        out = matmul_tma(a, b, act, programs=3)
        assert rel_error(out, reference(a.double(), b.double(), act)) < TOL[dtype]
    assert rel_error(matmul(a, b, tma=True), a.double() @ b.double()) < TOL[dtype]


def test_tma_refuses_what_it_cannot_address():
    a = torch.randn(64, 40, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="16-byte aligned"):
        matmul(a.t(), a, tma=True)          # a.t() has column stride 40, not 1
    with pytest.raises(ValueError, match="16-byte aligned"):
        matmul(a[:, :36].contiguous(), a.t()[:36].contiguous(), tma=True)  # rows of 36 halves: 72 bytes
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        matmul(a.float(), a.float().t(), tma=True)


def test_ptx_pointer_loads_become_cp_async_and_descriptors_become_tma():
    # hopper.py's claim, checked in the compiled code for sm_90: Triton pipelines the pointer loads
    # with per-thread asynchronous copies; the descriptor loads become TMA bulk copies.
    pointers, descriptors = copy_instructions().values()
    assert pointers["cp.async"] > 0 and pointers["cp.async.bulk.tensor"] == 0
    assert descriptors["cp.async.bulk.tensor"] > 0 and descriptors["cp.async"] == 0
    assert pointers["wgmma.mma_async"] > 0 and descriptors["wgmma.mma_async"] > 0


@pytest.mark.skipif(INTERPRET or not HOPPER, reason="matmul() picks the TMA kernel on Hopper GPUs only")
def test_matmul_picks_tma_where_it_can():
    from common.profile import kernels_launched

    a = torch.randn(4096, 4096, device=DEVICE, dtype=torch.float16)  # TMA_FROM: 4096^3
    names = lambda fn: [name for name, _, _ in kernels_launched(fn)]
    assert names(lambda: matmul(a, a)) == ["matmul_kernel_tma"]
    assert names(lambda: matmul(a.t(), a)) == ["matmul_kernel"]  # a column-major A: pointer loads
    assert names(lambda: matmul(a[:2048], a[:, :2048])) == ["matmul_kernel"]  # smaller: pointer loads
    assert rel_error(matmul(a, a), reference(a.double(), a.double())) < TOL[torch.float16]


@pytest.mark.skipif(INTERPRET or not HOPPER, reason="the TMA kernel's scratch memory: Hopper GPUs only")
def test_the_tma_path_runs_on_any_thread():
    # Triton keeps the allocator of the descriptors' scratch memory per thread; a call from a thread
    # that did not import hopper.py (a worker pool, autograd's own threads) must find it too
    from concurrent.futures import ThreadPoolExecutor

    a = torch.randn(256, 256, device=DEVICE, dtype=torch.float16)
    with ThreadPoolExecutor(1) as pool:
        c = pool.submit(matmul, a, a, tma=True).result()  # an error in the thread is raised here
    assert rel_error(c, reference(a.double(), a.double())) < TOL[torch.float16]


def test_the_documents_tile_arithmetic():
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


def test_library_kernels_by_shape(capsys):
    from lesson04_matmul import hopper, library
    from lesson04_matmul import main as l4

    table = library.kernels_by_shape(l4.matmul, l4, hopper, sizes=(127, 128))
    if INTERPRET:  # the profiler sees no kernels on the CPU: the H200's table instead
        assert table is None and "Which kernel runs" in capsys.readouterr().out
        return
    mine = [row for row in table.rows if row[1] == "matmul()"]
    assert [row[2] for row in mine] == ["matmul_kernel", "matmul_kernel"] and all("warps" in row[3] for row in mine)
    assert any(row[1] == "torch.matmul" for row in table.rows)
