"""Lesson 5: flash attention against float64 standard attention; the online-softmax trace; bad input."""
import math

import pytest
import torch

from conftest import DEVICE, INTERPRET, run_trace
from common.checks import rel_error
from lesson05_flash_attention.main import TOLERANCE as TOL, attention, attention_standard, check, main
from lesson05_flash_attention.tuning import memory_table

SHAPES = [(1, 1, 1, 16), (2, 3, 50, 32), (1, 2, 129, 64), (2, 1, 100, 128), (1, 1, 17, 64)]  # B, H, seq, D


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_attention_matches_float64(shape, dtype, causal):
    q, k, v = (torch.randn(*shape, device=DEVICE, dtype=dtype) for _ in range(3))
    out = attention(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == dtype
    assert rel_error(out, attention_standard(q.double(), k.double(), v.double(), causal)) < TOL[dtype]


def test_custom_scale_and_large_magnitudes():
    q, k, v = (torch.randn(1, 2, 70, 64, device=DEVICE) for _ in range(3))
    for scale in (0.01, 1.0, 3.0, 0.0, -0.5):  # a negative scale is folded into q by the launcher
        ref = attention_standard(q.double(), k.double(), v.double(), sm_scale=scale)
        assert rel_error(attention(q, k, v, sm_scale=scale), ref) < TOL[torch.float32]
    big = 100 * q  # scores around 1e4 * 1/8: exp would overflow without the running max
    for scale in (None, -0.125):  # negative too: the max must be of the scaled scores
        out = attention(big, k * 100, v, causal=True, sm_scale=scale)
        assert torch.isfinite(out).all()
        ref = attention_standard(big.double(), (k * 100).double(), v.double(), causal=True, sm_scale=scale)
        assert rel_error(out, ref) < 1e-2  # near-one-hot rows: tiny score differences decide


def test_strided_inputs():
    q, k, v = (torch.randn(2, 40, 3, 32, device=DEVICE).transpose(1, 2) for _ in range(3))  # (B, H, seq, D) views
    assert not q.is_contiguous()
    ref = attention_standard(q.double(), k.double(), v.double())
    assert rel_error(attention(q, k, v), ref) < TOL[torch.float32]


@pytest.mark.parametrize(
    "shapes, dtypes, error, message",
    [
        (((1, 2, 8, 64), (1, 2, 9, 64), (1, 2, 9, 64)), None, ValueError, "q, k, v have different shapes"),
        (((1, 2, 8, 48),) * 3, None, ValueError, "head_dim must be one of"),
        (((2, 8, 64),) * 3, None, ValueError, "must be 4-D"),
        (((1, 2, 8, 64),) * 3, (torch.float32, torch.float16, torch.float32), TypeError, "different dtypes"),
        (((1, 2, 8, 64),) * 3, (torch.int32,) * 3, TypeError, "dtype int32"),
    ],
)
def test_bad_input(shapes, dtypes, error, message):
    dtypes = dtypes or (torch.float32,) * 3
    q, k, v = (torch.ones(s, device=DEVICE, dtype=d) for s, d in zip(shapes, dtypes))
    with pytest.raises(error, match=message):
        attention(q, k, v)


def test_mixed_devices():
    q = torch.ones(1, 1, 8, 16, device=DEVICE)
    with pytest.raises(ValueError, match="v is on meta"):
        attention(q, q, torch.ones(1, 1, 8, 16, device="meta"))


@pytest.mark.parametrize("causal", ["False", None, 2])
def test_causal_must_be_a_bool(causal):
    q = torch.ones(1, 1, 8, 16, device=DEVICE)
    with pytest.raises(TypeError, match="causal must be True or False"):
        attention(q, q, q, causal)


@pytest.mark.skipif(INTERPRET, reason="measures GPU memory")
def test_flash_memory_stays_linear():
    table = memory_table([1024, 4096], B=1, H=8)
    standard = [float(v) for v in table.column("standard: peak extra GiB")]
    flash = [float(v) for v in table.column("flash: peak extra GiB")]
    assert standard[1] > 10 * standard[0]           # the scores: 16x the memory for 4x the sequence
    assert flash[1] <= 4.5 * flash[0] + 0.01        # q, k, v, o: 4x
    assert flash[1] < standard[1] / 10


@pytest.fixture(scope="module")
def traced():
    return run_trace("lesson05_flash_attention.main")


def test_trace_online_softmax_and_kernel(traced):
    log = traced
    # the kernel's first program, row 0, after key blocks 0 and 1: the online-softmax demo's numbers
    assert log["l"][0][0] == pytest.approx(1.5530, abs=1e-4) and log["l"][1][0] == pytest.approx(1.6031, abs=1e-4)
    assert log["alpha"][1][0] == pytest.approx(math.exp(3 - 5), abs=1e-4)
    scores = torch.tensor([1.0, 3.0, 0.0, 2.0, 5.0, 1.0, 4.0, 0.0])
    values = torch.tensor([[1.0, 0], [0, 1], [1, 1], [2, 0], [0, 2], [1, 0], [0, 1], [1, 1]])
    row0 = torch.softmax(scores, dim=0) @ values
    assert log["output"][0][0] == pytest.approx(row0.tolist(), abs=1e-5)
    # two programs non-causal, each over key blocks 0 and 1; then causal, where query block 0 stops
    # after key block 0 (block 1 lies above the diagonal) and query block 1 takes both
    assert log["program (query block, batch x head)"] == [[0, 0], [1, 0], [0, 0], [1, 0]]
    assert log["key block"] == [0, 1, 0, 1, 0, 0, 1]
    assert log["scores (natural units)"][-1][0][1] == float("-inf")  # key 5 is after query 4: masked
    # the backward, causal: key block 0 takes query block 0 (its diagonal) then 1; key block 1 only 1
    assert log["dK, dV program (key block, batch x head)"] == [[0, 0], [1, 0]]
    assert log["query block"] == [0, 1, 1]
    assert log["dQ program (query block, batch x head)"] == [[0, 0], [1, 0]]
    assert all(log[f"max |{name} - autograd's|"][0] < 1e-5 for name in ("dQ", "dK", "dV"))


def test_check_passes():
    assert all(check().column("ok"))


def test_script_sections(capsys):
    main(["--sections", "bench", "--seqs", "32"])
    out = capsys.readouterr().out
    assert "Triton flash" in out and "TFLOP/s" in out


def test_bench_configs_ranks_every_candidate():
    from lesson05_flash_attention.tuning import bench_configs

    table = bench_configs(32, configs=[(16, 16, 4, 3), (32, 16, 4, 3)], shapes=((1, 1, 16),), dtype=torch.float32)
    assert len(table.rows) == 4  # 2 configurations x (causal, not causal)
    best = table.column("% of best")
    assert max(best[:2]) == pytest.approx(100.0) and max(best[2:]) == pytest.approx(100.0) and min(best) > 0
