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
    text = bench.print_table([("a", 1.234)], ["name", "value"], title="T")
    assert text.splitlines()[0] == "T" and "1.2" in text and "name" in text
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
