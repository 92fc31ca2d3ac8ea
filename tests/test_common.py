"""The shared helpers: arithmetic, PTX parsing, profiler table, trace formatting, input checks."""
import pytest
import torch

from conftest import DEVICE, INTERPRET
from common import bench, profile, ptx
from common.device import check_same, check_tensor, stamp
from common.trace import fmt, value_of


def test_bandwidth_and_rate_arithmetic():
    assert bench.gbps(3e9, 1.0) == pytest.approx(3000.0)  # 3 GB in 1 ms = 3 TB/s
    assert bench.gbps(4 * 2**26 * 3, 0.2) == pytest.approx(4026.5318, rel=1e-6)
    assert bench.tflops(2 * 4096**3, 1.0) == pytest.approx(137.438953472)
    assert bench.percent(2150.0, 4300.0) == pytest.approx(50.0)


def test_ptx_parsing():
    text = """
        ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
        @%p1 ld.global.L1::evict_last.b32 { %r5 }, [ %rd2 + 0 ];
        st.global.v2.b16 [ %rd3 + 0 ], { %rs1, %rs2 };
        ld.global.v4.b32 { %r6, %r7, %r8, %r9 }, [ %rd4 + 0 ];
    """
    ops = ptx.memory_ops(text)
    assert ops == {"ld.global.v4.b32": 2, "ld.global.b32": 1, "st.global.v2.b16": 1}
    assert [ptx.access_bits(op) for op in ("ld.global.v4.b32", "ld.global.b32", "st.global.v2.b16")] == [128, 32, 32]


def test_profiler_counts_the_kernels_of_each_implementation():
    x = torch.randn(1024, device=DEVICE)
    one = profile.kernels_launched(lambda: x + x)
    assert sum(calls for _, calls, _ in one) == 1
    assert "add" in one[0][0].lower()
    many = profile.kernels_launched(lambda: (x * 2 + 1).tanh() * x)
    assert sum(calls for _, calls, _ in many) == 4


def test_print_table_and_stamp(capsys):
    table = bench.print_table([("a", 1.234)], ["name", "value"], title="T")
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "T" and "1.2" in out and "name" in out
    assert table.column("value") == [1.234] and "| a " in table.markdown()
    assert "torch" in stamp() and "triton" in stamp()


def test_trace_formatting():
    assert fmt(torch.tensor([1.0, 2.5])) == "[1. , 2.5]"
    assert fmt(0.123456789) == "0.1235"
    assert value_of(torch.tensor(3)) == 3


def test_check_tensor_messages():
    x = torch.ones(2, 3, device=DEVICE)
    check_tensor(x, "x", (torch.float32,), ndim=2)
    with pytest.raises(ValueError, match="must be 3-D, got shape \\(2, 3\\)"):
        check_tensor(x, "x", (torch.float32,), ndim=3)
    with pytest.raises(TypeError, match="x has dtype float32; supported: float16"):
        check_tensor(x, "x", (torch.float16,))
    with pytest.raises(ValueError, match="different shapes"):
        check_same(x, x.t(), "f(a, b)")


@pytest.mark.skipif(INTERPRET, reason="needs a GPU: the interpreter launches no CUDA kernels")
def test_gpu_kernel_names_in_profile():
    from lesson01_vector_add.main import gelu
    x = torch.randn(1 << 16, device=DEVICE)
    rows = profile.kernels_launched(lambda: gelu(x))
    assert [name for name, _, _ in rows] == ["gelu_kernel"]


def test_results_writer(tmp_path):
    from common import results

    table = bench.Table(["N", "implementation", "GB/s"], [[256, "torch", 1000.0], [256, "Triton", 1500.25],
                                                           [1024, "torch", 2000.0], [1024, "Triton", 3000.5]],
                        title="Timing, float32\nGB/s counts one read and one write.")
    stamp = {"GPU": "NVIDIA H200", "driver": "580.159.04", "CUDA": "13.0", "torch": "2.11.0",
             "triton": "3.6.0", "date": "2026-11-29", "copy bandwidth (measured)": "4228 GB/s"}
    plot = dict(x="N", y="GB/s", series=["implementation"], ceiling=4228.0, ceiling_label="copy")
    text = results.write_results(str(tmp_path), "Lesson 9: results", stamp, [(table, plot)])
    assert (tmp_path / "RESULTS.md").read_text() == text
    lines = text.splitlines()
    assert lines[0] == "# Lesson 9: results"
    assert "| GPU | driver | CUDA | torch | triton | date | copy bandwidth (measured) |" in lines
    assert "| NVIDIA H200 | 580.159.04 | 13.0 | 2.11.0 | 3.6.0 | 2026-11-29 | 4228 GB/s |" in lines
    assert "## Timing, float32" in lines and "GB/s counts one read and one write." in lines
    assert "| 1024 | Triton           | 3000.5 |" in lines and "| 256 | torch " not in text
    try:
        import matplotlib  # noqa: F401
        assert (tmp_path / "results_1.png").exists() and "![Timing, float32](results_1.png)" in lines
    except ImportError:  # no plot without matplotlib; the tables are still written
        assert not (tmp_path / "results_1.png").exists() and "results_1.png" not in text


@pytest.mark.skipif(not INTERPRET, reason="on a GPU the command would run every benchmark")
def test_results_refuse_the_interpreter(capsys):
    from common import results

    assert results.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_side_by_side_takes_turns_and_keeps_the_median(monkeypatch):
    # The GPU path, with a fake clock that drifts: every case must see each phase of the drift.
    calls = []
    drift = iter([1.0, 2.0, 1.1, 2.1, 5.0, 9.0])  # round 3 runs slow for both cases

    def fake_kernel_time_ms(fn, repeat):
        calls.append(fn())
        return next(drift)

    monkeypatch.setattr(bench, "INTERPRET", False)
    monkeypatch.setattr(profile, "kernel_time_ms", fake_kernel_time_ms)
    times = bench.side_by_side({"a": lambda: "a", "b": lambda: "b"}, rounds=3)
    assert calls == ["a", "b"] * 3
    assert times == {"a": 1.1, "b": 2.1}
