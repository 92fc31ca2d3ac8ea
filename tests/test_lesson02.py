"""Lesson 2: softmax against torch on awkward shapes and values, both kernels, the trace, bad input,
the chapter's runs."""
import pathlib
import os

import pytest
import torch
import triton.language as tl

from conftest import DEVICE, INTERPRET, ROOT, assert_matches, run_as_notebook, run_script, parse_command_line, run_trace
from common import accesses, bench
from lesson02_softmax.main import check, grad_check, memory_traffic, softmax_naive, traffic
from lesson02_softmax.softmax import MAX_ONE_PASS_N, launch, softmax, softmax_kernel

SHAPES = [(1, 1), (1, 7), (3, 5), (17, 1000), (4, 4097), (2, 40000)]


@pytest.mark.parametrize("long_rows", [False, True], ids=["one_pass", "online"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_matches_torch(shape, dtype, long_rows):
    x = 4 * torch.randn(*shape, device=DEVICE, dtype=dtype)
    out = softmax(x, long_rows=long_rows)
    assert_matches(out, torch.softmax(x.float(), dim=1).to(dtype))


def test_long_rows_pick_the_online_kernel_and_agree():
    x = torch.randn(2, MAX_ONE_PASS_N + 5, device=DEVICE)
    assert_matches(softmax(x), torch.softmax(x, dim=1))


@pytest.mark.parametrize("long_rows", [False, True], ids=["one_pass", "online"])
def test_extreme_values(long_rows):
    x = torch.full((4, 300), float("-inf"), device=DEVICE)
    x[0, 0] = 1.0            # -inf everywhere but the first element
    x[1, 299] = -5.0         # ... but the last (the online kernel sees -inf tiles first)
    x[2] = 1e4 * torch.randn(300, device=DEVICE)  # large magnitudes
    x[3] = 80.0 + torch.arange(300, device=DEVICE)  # exp would overflow without the max
    out = softmax(x, long_rows=long_rows)
    assert torch.isfinite(out).all()
    assert out[0, 0] == 1.0 and out[1, 299] == 1.0
    assert_matches(out, torch.softmax(x, dim=1))


def test_online_softmax_rows_whose_first_tiles_are_all_minus_inf():
    # The online kernel walks tiles of 8192 columns: here the first two tiles of each row are all
    # -inf, so its running max stays -inf until the third, where exp(-inf - -inf) would be NaN
    # without the guard (m_safe). 300 columns would be one tile and never reach the guard.
    x = torch.full((3, 8192 * 2 + 500), float("-inf"), device=DEVICE)
    x[0, -1] = 3.0                                        # one finite value, in the last tile
    x[1, 8192 * 2:] = torch.randn(500, device=DEVICE)     # a finite third tile
    x[2, 8192 * 2 + 7] = -1e4                             # very negative, still finite
    out = softmax(x, long_rows=True)
    assert torch.isfinite(out).all()
    assert out[0, -1] == 1.0 and out[2, 8192 * 2 + 7] == 1.0
    assert_matches(out, torch.softmax(x, dim=1))


def test_all_minus_inf_row_is_nan_like_torch():
    x = torch.full((1, 10), float("-inf"), device=DEVICE)
    assert torch.isnan(softmax(x)).all() and torch.isnan(torch.softmax(x, dim=1)).all()


def test_the_gradient_over_dim_0_with_a_contiguous_upstream_gradient():
    # softmax(x, dim=0) runs the kernels on x.t(): the autograd function's output is seen transposed, so the
    # gradient it gets back is a transposed view of the contiguous one a caller hands in
    x = torch.randn(37, 50, device=DEVICE, requires_grad=True)
    g = torch.randn(37, 50, device=DEVICE)
    (dx,) = torch.autograd.grad(softmax(x, dim=0), x, g)
    x64 = x.detach().double().requires_grad_()
    (exact,) = torch.autograd.grad(torch.softmax(x64, dim=0), x64, g.double())
    torch.testing.assert_close(dx.double(), exact, atol=1e-6, rtol=1e-5)


def test_strided_views():
    base = torch.randn(64, 96, device=DEVICE)
    for x in (base.t(), base[::2], base[:, 10:50]):
        assert not x.is_contiguous()
        for long_rows in (False, True):
            assert_matches(softmax(x, long_rows=long_rows), torch.softmax(x, dim=1))


def test_naive_reference():
    x = torch.randn(8, 33, device=DEVICE)
    assert_matches(softmax_naive(x), torch.softmax(x, dim=1))


def elements_torch_moves(fn, x) -> int:
    """Elements the operators of fn(x) read and write: every tensor argument and result of each aten call."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Count(TorchDispatchMode):
        moved = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.moved += sum(t.numel() for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor))
            return out

    with Count() as count:
        fn(x)
    return count.moved


def elements_kernel_moves(x, long_rows) -> int:
    """Elements of x the launched kernel loads plus elements it stores, as the interpreter runs them."""
    y = accesses.Region("y", 0, 2**62, 4, 0, False)  # every address not x's: wherever launch() puts y
    log = accesses.Log([accesses.region("x", x, True), y])
    with accesses.recording(log):
        launch(x, long_rows)
    assert log.count("store", "x") == 0 and log.count("load", "y") == 0
    return log.count("load", "x") + log.count("store", "y")


@pytest.mark.skipif(not INTERPRET or not accesses.available(), reason="loads and stores are counted by the interpreter")
def test_traffic_is_what_the_code_moves():
    # traffic() is section 1's arithmetic, not a measurement: here it meets the elements the five
    # torch operators (counted on meta tensors) and the two kernels (counted load by load) move
    M, N = 4, 300
    claimed = traffic(M, N)
    naive = elements_torch_moves(softmax_naive, torch.empty(M, N, device="meta"))
    assert naive == claimed["naive (5 steps)"]
    x = torch.randn(M, N, device=DEVICE)
    assert elements_kernel_moves(x, long_rows=False) == claimed["fused, one pass"]
    assert elements_kernel_moves(x, long_rows=True) == claimed["online, tiled (two reads)"]
    table = memory_traffic(M, N)  # section 1's table prints those counts per MN
    assert table.title == f"Memory traffic, M = {M}, N = {N}"
    assert table.column("elements moved / MN") == [v / (M * N) for v in claimed.values()]


@pytest.mark.parametrize("long_rows", [False, True], ids=["one_pass", "online"])
def test_64_bit_offsets_give_the_same_result(long_rows):
    # what section 11 times: the launcher handed the index type instead of asking common.checks.index_type
    x = torch.randn(5, 3000, device=DEVICE)
    narrow = launch(x, long_rows, index_type=tl.int32)
    assert torch.equal(launch(x, long_rows, index_type=tl.int64), narrow)
    assert torch.equal(softmax(x, long_rows=long_rows), narrow)


def test_long_rows_is_keyword_only():
    with pytest.raises(TypeError):
        softmax(torch.randn(2, 3, device=DEVICE), True)


@pytest.mark.parametrize(
    "x, error, message",
    [
        (torch.ones(3), ValueError, "must be 2-D, got shape \\(3,\\)"),
        (torch.ones(2, 3, 4), ValueError, "must be 2-D"),
        (torch.ones(2, 3, dtype=torch.int64), TypeError, "dtype int64"),
        (torch.ones(2, 3, device="meta"), ValueError, "is on meta"),
    ],
)
def test_bad_input(x, error, message):
    if x.device.type == "cpu":
        x = x.to(DEVICE)
    with pytest.raises(error, match=message):
        softmax(x)


@pytest.fixture(scope="module")
def traced():
    return run_trace("lesson02_softmax.main")


def test_trace_numbers(traced):
    log = traced
    assert log["loaded row"][0] == [[1.0, 2.0, 3.0, 4.0, 5.0] + [float("-inf")] * 3]
    # the kernel's results, in the trace's order: [1..5], unstable, stable, padded with 0, with -inf
    row, unstable, stable, pad_zero, pad_inf = (r[0] for r in log["result"])
    assert stable[:3] == pytest.approx([0.0900, 0.2447, 0.6652], abs=1e-4)
    assert all(v != v for v in unstable[:3])  # NaN without subtracting the max
    assert sum(pad_zero[:5]) == pytest.approx(0.1616, abs=1e-4)  # 0-padding: wrong
    assert pad_inf[:5] == pytest.approx([0.0861, 0.2341, 0.0117, 0.6364, 0.0317], abs=1e-4)
    assert log["m"] == [8.0, 8.0, 9.0]  # running max after each tile of the online walk
    assert log["alpha"][0] == 0.0 and log["alpha"][2] == pytest.approx(0.3679, abs=1e-4)
    online = [v for tile in log["output tile"] for v in tile][:10]
    x = torch.tensor([1.0, 5, 2, 8, 3, 7, 4, 6, 0, 9])
    assert online == pytest.approx(torch.softmax(x, dim=0).tolist(), abs=1e-6)


def test_check_passes():
    assert all(check().column("ok"))


def test_grad_check_passes():
    assert all(grad_check().column("ok"))


def test_reduction_tree_rounds_and_the_shuffles_in_the_ptx():
    from lesson02_softmax.main import tree, tree_rounds

    assert tree_rounds(range(1, 9)) == [[1, 2, 3, 4, 5, 6, 7, 8], [3, 7, 11, 15], [10, 26], [36]]  # the worked example
    assert len(tree_rounds([0] * 1024)) - 1 == 10
    counts = tree(4096)  # 4 warps: 5 shuffle rounds in a warp, 2 across the warps, for the max and for the sum
    assert counts["shfl.sync"] == 2 * (5 + 2) and counts["bar.sync"] >= 1 and counts["st.shared"] >= 1


def test_float16_exp_limit_and_the_kernel_computing_past_it(traced):
    # The limit the trace prints is the host's log(65504), not the kernel's: checked against torch's
    # float16 exp. What the kernel adds: without the max (STABLE=False), exp(12) overflows float16
    # but not the float32 the kernel computes in.
    (limit,) = traced["exp in float16 (the kernel computes in fp32) overflows past x = log(65504), its largest number,"]
    exp16 = torch.exp(torch.tensor([limit - 0.01, limit + 0.01], dtype=torch.float16))
    assert torch.isfinite(exp16[0]) and torch.isinf(exp16[1])
    x = torch.tensor([[12.0, 11.0, 10.0]], device=DEVICE, dtype=torch.float16)
    y = torch.empty_like(x)
    softmax_kernel[(1,)](x, y, 1, 3, x.stride(0), x.stride(1), y.stride(0), BLOCK_M=1, BLOCK_N=4, STABLE=False)
    assert_matches(y, torch.softmax(x.float(), dim=1).half())


def test_runs_as_a_notebook_each_sections_output_under_its_cell():
    cells = run_as_notebook("lesson02_softmax")
    text = "".join(cells)
    trace_cell = next(c for c in cells if "=== 5. The trace" in c)
    assert "result = [[0.09  , 0.2447, 0.6652" in trace_cell and "(sums to 0.1616: wrong)" in trace_cell
    assert "alpha = 0.3679" in trace_cell and "index_type(x) for that x = int64" in trace_cell
    assert "Memory traffic, M = 4096, N = 4096" in next(c for c in cells if "=== 1. Softmax" in c)
    assert "shfl.sync         |      14" in next(c for c in cells if "=== 6. What tl.max" in c)
    assert "max |err|" in next(c for c in cells if "=== 7. Correctness" in c)
    headings = [line for line in text.splitlines() if line.startswith("=== ")]
    numbers = [int(h.split()[1].rstrip(".")) for h in headings]
    assert numbers == sorted(numbers) and len(headings) == 9  # every section, numbered as in the code
    assert "ipykernel" not in text and "usage:" not in text  # the kernel's own arguments were ignored
    if INTERPRET:  # the sections that need a GPU print the page's record, its GPU's stamp once
        assert text.count("This section needs a GPU") == 4
        assert text.count("| GPU | driver |") <= 1 and "interpreter µs" not in text


def test_script_and_its_command_line():
    done = run_script("lesson02_softmax", "--sections", "trace")
    assert done.returncode == 0, done.stderr
    assert "(sums to 0.1616: wrong)" in done.stdout and "=== 7." not in done.stdout
    assert "Sections: traffic: 1. Softmax" in parse_command_line("lesson02_softmax", "--help")[1]
    for bad in (["--rows", "0"], ["--sizes", "-1"]):
        code, _, err = parse_command_line("lesson02_softmax", "--sections", "bench", *bad)
        assert code == 2 and "must be at least 1" in err



def test_the_op_files_import_no_chapter():
    for name in ("softmax.py", "cross_entropy.py"):
        source = pathlib.Path(os.path.join(ROOT, "lesson02_softmax", name)).read_text()
        assert "lesson02_softmax.main" not in source and "import main" not in source


def test_timing_table_with_a_fake_clock(monkeypatch):
    # Nothing timed: call k of the fake clock takes k ms. Each case still runs once, and must be a softmax.
    from lesson02_softmax.main import bench_all

    results = []

    def fake_kernel_time_ms(fn, repeat=20):
        results.append(fn())
        return float(len(results))

    monkeypatch.setattr(bench, "kernel_time_ms", fake_kernel_time_ms)
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: 1000.0)
    M = 8
    table = bench_all(M, [256, 4096], use_compile=False)
    assert table.title == "Timing, float32, M = 8"
    expected = [(256, "naive (5 steps)"), (256, "torch.softmax"), (256, "Triton one pass"),
                (4096, "naive (5 steps)"), (4096, "torch.softmax"), (4096, "Triton one pass"), (4096, "Triton online")]
    assert [tuple(row[:2]) for row in table.rows] == expected
    torch_ms = {256: 2.0, 4096: 5.0}  # the clock's reading for torch.softmax at each N
    for ms, (N, _, us, gbps, copy, speedup) in enumerate(table.rows, start=1):
        assert us == 1e3 * ms and gbps == pytest.approx(2 * M * N * 4 / (ms * 1e-3) / 1e9)  # one read, one write
        assert copy == pytest.approx(gbps / 10) and speedup == pytest.approx(torch_ms[N] / ms)
    for y in results:
        torch.testing.assert_close(y.sum(dim=1), torch.ones(M, device=DEVICE))


@pytest.mark.skipif(INTERPRET, reason="the profiler's CUDA kernels need a GPU")
def test_fusion_one_kernel_for_the_fused_softmax():
    from lesson02_softmax.main import fusion

    tables = {t.title: t for t in fusion(256, 1024, use_compile=False)}
    assert len(tables["Kernels launched: naive (5 steps), M = 256, N = 1024"].rows) >= 4
    assert tables["Kernels launched: Triton softmax, M = 256, N = 1024"].column("CUDA kernel") == ["softmax_kernel"]


# ----- cross_entropy.py (lesson 6's loss): F.cross_entropy's contract, rows -inf so far, strided targets

import torch.nn.functional as F  # noqa: E402

from common.checks import rel_error  # noqa: E402
from lesson02_softmax.cross_entropy import cross_entropy  # noqa: E402


def assert_as_torchs(logits, targets, tolerance=1e-5, **kwargs):
    """cross_entropy's loss and gradient against F.cross_entropy's in float64 from the same logits
    (the same NaNs; an exact zero where torch's is one: ignored rows, sums over none)."""
    x = logits.detach().requires_grad_()
    x64 = logits.detach().double().requires_grad_()
    ours, exact = cross_entropy(x, targets, **kwargs), F.cross_entropy(x64, targets.long(), **kwargs)
    assert ours.dtype == torch.float32 and ours.shape == exact.shape
    assert torch.equal(ours.isnan(), exact.isnan()) and torch.equal(ours == 0, exact == 0), (ours, exact)
    assert rel_error(ours.nan_to_num(), exact.nan_to_num()) < tolerance
    g = torch.randn(exact.shape, dtype=torch.float64, device=DEVICE)
    (dx,), (dx64,) = torch.autograd.grad(ours, x, g.float()), torch.autograd.grad(exact, x64, g)
    assert torch.equal(dx == 0, dx64 == 0) and rel_error(dx, dx64) < tolerance


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_ignore_index_and_reductions_as_torch(reduction):
    # padding rows (-100, torch's default ignore_index) add nothing and the mean is over the others;
    # an ignore_index inside the vocabulary (a padding token 3) masks those rows, not the column
    logits = 3 * torch.randn(9, 50, device=DEVICE)
    targets = torch.randint(0, 50, (9,), device=DEVICE)
    targets[[1, 4, 5]] = -100
    assert_as_torchs(logits, targets, reduction=reduction)
    targets[[1, 4, 5]] = torch.tensor([7, 3, 49], device=DEVICE)
    targets[[0, 8]] = 3
    assert_as_torchs(logits, targets, ignore_index=3, reduction=reduction)
    assert_as_torchs(logits, torch.full((9,), -100, device=DEVICE), reduction=reduction)  # mean: NaN, as 0 / 0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_of_an_empty_batch_as_torch(reduction):
    # no rows: NaN for the mean, 0 for the sum, nothing per row, each with a graph whose backward runs
    logits = torch.randn(0, 10, device=DEVICE, requires_grad=True)
    targets = torch.zeros(0, dtype=torch.long, device=DEVICE)
    ours, theirs = cross_entropy(logits, targets, reduction=reduction), F.cross_entropy(logits, targets, reduction=reduction)
    assert ours.shape == theirs.shape and torch.equal(ours.isnan(), theirs.isnan()) and ours.grad_fn is not None
    ours.sum().backward()
    assert logits.grad.shape == (0, 10)


def test_cross_entropy_reads_strided_targets():
    # every other id of a longer tensor, and one id expanded to every row (stride 0): no copy, read by stride
    logits = torch.randn(6, 40, device=DEVICE)
    ids = torch.randint(0, 40, (12,), device=DEVICE)
    for targets in (ids[::2], ids[5:6].expand(6), ids.view(6, 2)[:, 1]):
        assert not targets.is_contiguous()
        for reduction in ("mean", "none"):
            assert_as_torchs(logits, targets, reduction=reduction)


def test_cross_entropy_rows_whose_first_tiles_are_all_minus_inf():
    # rows of 2 x 8192 + 500 logits walked in tiles of 8192: the first two tiles all -inf (a vocabulary
    # masked but for its last part), so the running max stays -inf until the third, where exp(-inf -
    # -inf) would be NaN without the guard (m_safe); 300 columns would be one tile and never reach it
    V = 8192 * 2 + 500
    logits = torch.full((3, V), float("-inf"), device=DEVICE)
    logits[0, -1] = 3.0
    logits[1, 8192 * 2:] = torch.randn(500, device=DEVICE)
    logits[2, 8192 * 2 + 7] = -1e4
    targets = torch.tensor([V - 1, V - 3, 8192 * 2 + 7], device=DEVICE)
    losses = cross_entropy(logits, targets, reduction="none")
    assert torch.isfinite(losses).all() and losses[0] == 0 and losses[2] == 0
    torch.testing.assert_close(losses, F.cross_entropy(logits, targets, reduction="none"))


def test_cross_entropy_targets_out_of_range_give_nan_even_past_2_32():
    # a target outside [0, V) that is not ignore_index: NaN (F.cross_entropy stops instead); an int64 id
    # of 2^32 + 3 compared as it is, not cut to 32 bits (where it would read as 3)
    logits = torch.randn(4, 10, device=DEVICE)
    targets = torch.tensor([0, 10, 2**32 + 3, -1], device=DEVICE)
    assert cross_entropy(logits, targets, reduction="none").isnan().tolist() == [False, True, True, True]


def test_cross_entropy_knobs_are_checked():
    logits, targets = torch.randn(4, 10, device=DEVICE), torch.zeros(4, dtype=torch.long, device=DEVICE)
    for kwargs, error, message in [({"reduction": "max"}, ValueError, "reduction must be one of"),
                                   ({"ignore_index": -1.0}, TypeError, "ignore_index must be a whole number"),
                                   ({"ignore_index": "pad"}, TypeError, "ignore_index must be a whole number")]:
        with pytest.raises(error, match=message):
            cross_entropy(logits, targets, **kwargs)
    with pytest.raises(TypeError):
        cross_entropy(logits, targets, -100)  # keyword-only, as the rest of the course's knobs
