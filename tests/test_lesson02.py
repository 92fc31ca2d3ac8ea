"""Lesson 2: softmax against torch on awkward shapes and values, both kernels, the trace, bad input."""
import pytest
import torch

from conftest import DEVICE, assert_matches, run_trace
from lesson02_softmax.main import MAX_ONE_PASS_N, check, main, softmax, softmax_naive, traffic

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


def test_all_minus_inf_row_is_nan_like_torch():
    x = torch.full((1, 10), float("-inf"), device=DEVICE)
    assert torch.isnan(softmax(x)).all() and torch.isnan(torch.softmax(x, dim=1)).all()


def test_strided_views():
    base = torch.randn(64, 96, device=DEVICE)
    for x in (base.t(), base[::2], base[:, 10:50]):
        assert not x.is_contiguous()
        for long_rows in (False, True):
            assert_matches(softmax(x, long_rows=long_rows), torch.softmax(x, dim=1))


def test_naive_reference_and_traffic_counts():
    x = torch.randn(8, 33, device=DEVICE)
    assert_matches(softmax_naive(x), torch.softmax(x, dim=1))
    moved = traffic(4096, 1024)
    assert moved["naive (5 steps)"] / moved["fused, one pass"] == pytest.approx(4.0, rel=1e-3)


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


def test_script_sections(capsys):
    main(["--sections", "bench", "--rows", "4", "--sizes", "64", "--no-compile"])
    out = capsys.readouterr().out
    assert "Triton one pass" in out and "x torch.softmax" in out
    with pytest.raises(SystemExit):
        main(["--sections", "bench", "--rows", "0"])
    assert "must be at least 1" in capsys.readouterr().err


def test_reduction_tree_rounds_and_the_shuffles_in_the_ptx():
    from lesson02_softmax.main import tree, tree_rounds

    assert tree_rounds(range(1, 9)) == [[1, 2, 3, 4, 5, 6, 7, 8], [3, 7, 11, 15], [10, 26], [36]]  # the documents'
    assert len(tree_rounds([0] * 1024)) - 1 == 10
    counts = tree(4096)  # 4 warps: 5 shuffle rounds in a warp, 2 across the warps, for the max and for the sum
    assert counts["shfl.sync"] == 2 * (5 + 2) and counts["bar.sync"] >= 1 and counts["st.shared"] >= 1


def test_float16_exp_limit(traced):
    assert traced["exp in float16 (max 65504; the kernel computes in fp32) overflows past x"] == [11.09]
