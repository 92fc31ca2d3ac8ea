"""Lesson 5: flash attention against float64 standard attention; the online-softmax trace; bad input."""
import math

import pytest
import torch

from conftest import DEVICE, run_trace
from lesson05_flash_attention.main import (attention, attention_standard, bench_configs, main, memory_table,
                                           score_bytes)

TOL = {torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}  # float32: full-precision dots
SHAPES = [(1, 1, 1, 16), (2, 3, 50, 32), (1, 2, 129, 64), (2, 1, 100, 128), (1, 1, 17, 64)]  # B, H, seq, D


def rel_error(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


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
        (((1, 2, 8, 64), (1, 2, 9, 64), (1, 2, 9, 64)), None, ValueError, "one shape"),
        (((1, 2, 8, 48),) * 3, None, ValueError, "head_dim must be one of"),
        (((2, 8, 64),) * 3, None, ValueError, "must be 4-D"),
        (((1, 2, 8, 64),) * 3, (torch.float32, torch.float16, torch.float32), TypeError, "share a dtype"),
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
    with pytest.raises(ValueError, match="is on meta"):
        attention(q, q, torch.ones(1, 1, 8, 16, device="meta"))


def test_memory_arithmetic():
    assert score_bytes(4, 32, 16384) == 4 * 32 * 16384 * 16384 * 2  # 64 GiB of fp16 scores
    table = memory_table([1024, 2048])
    scores = table.column("scores s and p (GiB)")
    assert scores[1] == pytest.approx(4 * scores[0])  # quadratic
    linear = table.column("q, k, v, o (GiB)")
    assert linear[1] == pytest.approx(2 * linear[0])


@pytest.fixture(scope="module")
def traced():
    return run_trace("lesson05_flash_attention.main")


def test_trace_online_softmax_and_kernel(traced):
    result, log = traced
    demo = result["demo"]
    assert demo["out"] == pytest.approx(demo["ref"], abs=1e-12)
    assert demo["m"] == 5.0 and demo["l"] == pytest.approx(demo["l_ref"])
    # the kernel's first program, row 0, after key blocks 0 and 1: the demo's numbers
    assert log["l"][0][0] == pytest.approx(1.5530, abs=1e-4) and log["l"][1][0] == pytest.approx(1.6031, abs=1e-4)
    assert log["alpha"][1][0] == pytest.approx(math.exp(3 - 5), abs=1e-4)
    assert torch.allclose(torch.tensor(result["out"]), torch.tensor(result["ref"]), atol=1e-5)
    assert result["causal_err"] < 1e-5
    # causal: query block 0 visits key block 0 only; query block 1 visits blocks 0 and 1
    assert result["visits"] == [[0, 0], 0, [1, 0], 0, 1]


def test_script_sections(capsys):
    main(["--sections", "bench", "--seqs", "32"])
    out = capsys.readouterr().out
    assert "Triton flash" in out and "TFLOP/s" in out


def test_bench_configs_ranks_every_candidate():
    table = bench_configs(32, configs=[(16, 16, 4, 3), (32, 16, 4, 3, True)], shapes=((1, 1, 16),),
                          dtype=torch.float32)
    assert len(table.rows) == 4  # 2 configurations x (causal, not causal)
    assert table.column("warp_specialize") == ["no", "yes", "no", "yes"]
    best = table.column("% of best")
    assert max(best[:2]) == 100.0 and max(best[2:]) == 100.0 and min(best) > 0
