"""The shared helpers: input checks, the command line, PTX parsing, the profiler table, trace
formatting, the results pages."""
import argparse

import pytest
import torch

from conftest import DEVICE, INTERPRET
from common import bench, profile, ptx
from common.checks import check_tensors, dtype_name
from common.cli import lesson_parser, positive_int, start_lesson
from common.trace import fmt, value_of


def test_check_tensors_names_the_problem():
    x = torch.ones(2, 3, device=DEVICE)
    check_tensors({"x": x, "y": x.t().t()}, (torch.float32,), ndim=2, same_shape=True)
    cases = [
        (({"x": x}, (torch.float32,), 3), ValueError, r"x must be 3-D, got shape \(2, 3\)"),
        (({"x": x}, (torch.float16, torch.bfloat16)), TypeError, "x has dtype float32; supported: float16, bfloat16"),
        (({"x": [1.0]}, (torch.float32,)), TypeError, "x must be a torch.Tensor, got list"),
        (({"x": torch.ones(2, device="meta")}, (torch.float32,)), ValueError, "is on meta: a meta tensor has"),
        (({"x": x.to_sparse()}, (torch.float32,)), ValueError, "sparse_coo tensor; .* use x.to_dense()"),
        (({"a": x, "b": x.half()}, (torch.float32, torch.float16)), TypeError,
         r"a, b have different dtypes \(float32, float16\): cast one"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            check_tensors(*args)
    with pytest.raises(ValueError, match=r"x, y have different shapes: \(2, 3\), \(3, 2\)"):
        check_tensors({"x": x, "y": x.t()}, (torch.float32,), same_shape=True)
    assert dtype_name(torch.bfloat16) == "bfloat16"


@pytest.mark.skipif(not INTERPRET, reason="on a GPU machine, CPU tensors are the wrong device")
def test_check_tensors_never_suggests_moving_a_meta_tensor():
    with pytest.raises(ValueError) as error:
        check_tensors({"x": torch.ones(2, device="meta")}, (torch.float32,))
    assert ".to(" not in str(error.value)


def test_command_line_sizes_and_sections(capsys):
    assert positive_int("12") == 12
    for bad in ("0", "-3", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)
    parser = lesson_parser("Lesson 9: a test.\nMore.", ["trace", "check", "bench"])
    args = start_lesson(parser, ["--skip", "trace", "bench"])
    assert args.sections == ["check"] and not args.full
    assert capsys.readouterr().out.startswith("Mode: ")
    with pytest.raises(SystemExit):
        start_lesson(parser, ["--sections", "plot"])


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


def test_print_table_records_titled_tables(capsys):
    before = len(bench.TABLES)
    table = bench.print_table([("a", 1.234)], ["name", "value"], title="T", note="A note.")
    bench.print_table([("b", 2.0)], ["name", "value"])  # no title: printed, not recorded
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "T" and "1.2" in out and out.splitlines()[4] == "A note."
    assert bench.TABLES[before:] == [table]
    assert table.column("value") == [1.234] and "| a " in table.markdown()
    assert "torch" in bench.stamp() and "triton" in bench.stamp()


def test_trace_formatting():
    assert fmt(torch.tensor([1.0, 2.5])) == "[1. , 2.5]"
    assert fmt(0.123456789) == "0.1235"
    assert value_of(torch.tensor(3)) == 3


@pytest.mark.skipif(INTERPRET, reason="needs a GPU: the interpreter launches no CUDA kernels")
def test_gpu_kernel_names_in_profile():
    from lesson01_vector_add.main import gelu
    x = torch.randn(1 << 16, device=DEVICE)
    rows = profile.kernels_launched(lambda: gelu(x))
    assert [name for name, _, _ in rows] == ["gelu_kernel"]


def test_results_page_written_and_read_back(tmp_path, capsys):
    from common import results

    table = bench.Table(["N", "implementation", "GB/s"], [[256, "torch", 1000.0], [256, "Triton", 1500.25],
                                                           [1024, "torch", 2000.0], [1024, "Triton", 3000.5]],
                        title="Timing, float32", note="GB/s counts one read and one write.",
                        plot=dict(x="N", y="GB/s", series=["implementation"], ceiling=4228.0, ceiling_label="copy"))
    other = bench.Table(["a"], [[1]], title="Another table")
    stamp = {"GPU": "NVIDIA H200", "driver": "580.159.04", "CUDA": "13.0", "torch": "2.11.0",
             "triton": "3.6.0", "date": "2026-11-29", "copy bandwidth (measured)": "4228 GB/s"}
    text = results.write_results(str(tmp_path), "Lesson 9: results", stamp, [table, other])
    assert (tmp_path / "RESULTS.md").read_text() == text
    lines = text.splitlines()
    assert lines[0] == "# Lesson 9: results"
    assert "| GPU | driver | CUDA | torch | triton | date | copy bandwidth (measured) |" in lines
    assert "| NVIDIA H200 | 580.159.04 | 13.0 | 2.11.0 | 3.6.0 | 2026-11-29 | 4228 GB/s |" in lines
    assert lines[lines.index("## Timing, float32") + 2] == "GB/s counts one read and one write."
    assert "| 1024 | Triton           | 3000.5 |" in lines and "## Another table" in lines
    try:
        import matplotlib  # noqa: F401
        assert (tmp_path / "results_1.png").exists() and "![Timing, float32](results_1.png)" in lines
    except ImportError:  # no plot without matplotlib; the tables are still written
        assert not (tmp_path / "results_1.png").exists() and "results_1.png" not in text
    # and read back beside the interpreter's numbers: the stamp, then the rows asked for
    results.print_recorded(str(tmp_path / "main.py"), "Timing", keep=lambda row: row["N"] == "1024")
    out = capsys.readouterr().out
    assert "| NVIDIA H200 | 580.159.04 |" in out and "3000.5" in out and "1500.25" not in out
    results.print_recorded(str(tmp_path / "main.py"), "No such table")
    assert "no table 'No such table'" in capsys.readouterr().out


def test_results_page_updated_section_by_section(tmp_path):
    from common import results

    stamp = {"GPU": "NVIDIA H200", "driver": "580.159.04", "CUDA": "13.0", "torch": "2.11.0", "triton": "3.6.0",
             "date": "2026-11-29"}
    tables = [bench.Table(["a"], [[1]], title="First", note="old note"), bench.Table(["b"], [[2]], title="Second"),
              bench.Table(["c"], [[3]], title="Third")]
    results.write_results(str(tmp_path), "Lesson 9: results", stamp, tables)
    results.update_results(str(tmp_path), stamp, [bench.Table(["a"], [[10]], title="First", note="new note"),
                                                  bench.Table(["c"], [[30]], title="Third")])
    lines = (tmp_path / "RESULTS.md").read_text().splitlines()
    assert ("new note Refreshed apart from the rest of this page: NVIDIA H200, torch 2.11.0, triton 3.6.0, "
            "2026-11-29 (common.results --sections).") in lines
    assert "old note" not in lines and "|  10 |" in lines and "|  30 |" in lines
    assert "|   2 |" in lines and [line for line in lines if line.startswith("## ")] == ["## First", "## Second", "## Third"]
    with pytest.raises(SystemExit, match="measured with triton 3.6.0, this machine has 3.9.0"):
        results.update_results(str(tmp_path), {**stamp, "triton": "3.9.0"}, tables[:1])
    with pytest.raises(SystemExit, match="no table 'Fourth'"):
        results.update_results(str(tmp_path), stamp, [bench.Table(["d"], [[4]], title="Fourth")])
    with pytest.raises(SystemExit, match="print no table"):
        results.update_results(str(tmp_path), stamp, [])


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
    monkeypatch.setattr(bench, "kernel_time_ms", fake_kernel_time_ms)
    times = bench.side_by_side({"a": lambda: "a", "b": lambda: "b"}, rounds=3)
    assert calls == ["a", "b"] * 3
    assert times == {"a": 1.1, "b": 2.1}


def test_roofline_arithmetic():
    from common.roofline import attainable, intensity

    assert intensity(1, 12) == 1 / 12                       # vector add, float32: 1 FLOP per 12 bytes
    assert attainable(1 / 12, 989, 3350) == pytest.approx(3350 / 12 / 1e3)  # memory-bound: beta x AI
    assert attainable(1000, 989, 3350) == 989               # compute-bound: pi
    ridge = 989 / 3350 * 1e3                                # FLOP/byte where the two meet
    assert attainable(ridge, 989, 3350) == pytest.approx(989)


@pytest.mark.skipif(not INTERPRET, reason="on a GPU the points are timed: the results pages show them")
def test_roofline_points_print_the_intensity_without_a_gpu(capsys):
    from common import roofline

    table = roofline.points({("add", "n"): (lambda: None, 10, 120), ("matmul", "n"): (lambda: None, 2e9, 6e6)},
                            "lesson01_vector_add/main.py")
    assert [row[4] for row in table.rows] == [10 / 120, 2e9 / 6e6]
    assert "FLOP/byte" in capsys.readouterr().out


def test_launch_helpers_match_triton():
    import triton

    from common.launch import cdiv, next_power_of_2

    for n in (1, 2, 3, 1000, 1024, 1025, 2**31 + 5):
        assert next_power_of_2(n) == triton.next_power_of_2(n)
        for b in (1, 3, 16, 1024):
            assert cdiv(n, b) == triton.cdiv(n, b)


def test_a_remembered_autotuner_choice_skips_the_autotuner(monkeypatch):
    from common import launch
    from lesson04_matmul import main as l4

    a, b = torch.randn(40, 24, device=DEVICE), torch.randn(24, 8, device=DEVICE)
    expected = l4.matmul(a, b, tma=False)  # the first call with this key: through the autotuner
    key = (l4.matmul_kernel_tuned, (40, 8, 24, torch.float32))
    assert key in launch.CHOSEN and launch.CHOSEN[key][1]["BLOCK_M"] > 0

    def autotuner_called(*args, **kwargs):
        raise AssertionError("the autotuner ran again")
    monkeypatch.setattr(l4.matmul_kernel_tuned, "run", autotuner_called)
    torch.testing.assert_close(l4.matmul(a, b, tma=False), expected)


def test_the_launch_key_tells_apart_what_triton_compiles_apart():
    from common.launch import specialization

    scalars = [tuple(specialization([v])) for v in (1, 1.0, True, 16, 17, 2**31)]
    assert len(set(scalars)) == len(scalars)  # 1 == 1.0 == True in Python, not to Triton
    x = torch.zeros(64, device=DEVICE)
    aligned, off_by_4, half, off_by_16 = (tuple(specialization([t])) for t in (x, x[1:], x.half(), x[4:]))
    assert aligned != off_by_4 and aligned != half and aligned == off_by_16


def test_launch_keeps_the_compiled_kernel_and_fills_in_the_rest(monkeypatch):
    # common.launch's direct path, with a stand-in for a Triton kernel (so it runs without a GPU)
    from common import launch

    monkeypatch.setattr(launch, "INTERPRET", False)
    monkeypatch.setattr(launch, "current_stream", lambda: 7)
    calls = []

    def body(x_ptr, n, BLOCK: int = 0, TRACE: bool = False):
        """The kernel's parameters: all launch() reads of its Python function."""

    class Compiled:  # what kernel[grid](...) returns: its launcher, and Triton's handle (with hooks)
        function, packed_metadata = "the CUfunction", "num_warps and the like"

        def run(self, g0, g1, g2, stream, function, metadata, launch_metadata, enter_hook, exit_hook, *args):
            assert (stream, function, launch_metadata, enter_hook) == (7, "the CUfunction", None, None)
            calls.append(("direct", (g0, g1, g2), args))

        def __getitem__(self, grid):
            return lambda *args: calls.append(("hooked", grid, args))

    class Kernel:
        fn = staticmethod(body)  # as a JITFunction holds its Python function

        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append(("triton", grid, args, kwargs)) or Compiled()

    kernel, x = Kernel(), torch.zeros(64)
    for t in (x, x, x[1:], x[4:], x[4:]):  # x[1:]: 4 bytes off 16, compiled apart; x[4:]: 16 bytes on
        launch.launch(kernel, lambda meta: (64 // meta["BLOCK"],), None, t, 64, BLOCK=16)
    assert [c[0] for c in calls] == ["triton", "direct", "triton", "direct", "direct"]
    _, grid, args = calls[1]
    assert grid == (4, 1, 1) and args[0] is x and args[1:] == (64, 16, False)  # BLOCK, then TRACE's default
    launch.launch(kernel, (4,), None, x, 64, BLOCK=32)  # another constexpr: Triton's path
    assert calls[-1][0] == "triton"
    monkeypatch.setattr(launch, "launch_hooks", lambda: True)  # a profiler listens: Triton's handle, which calls it
    launch.launch(kernel, (4,), None, x, 64, BLOCK=32)
    assert calls[-1][:2] == ("hooked", (4, 1, 1))


@pytest.mark.skipif(INTERPRET, reason="the interpreter has no compiled kernels to keep")
def test_a_kept_compiled_kernel_skips_tritons_launch_path(monkeypatch):
    from lesson02_softmax import main as l2

    x = torch.randn(8, 100, device=DEVICE)
    expected = l2.softmax(x, long_rows=False)
    l2.softmax(x, long_rows=False)  # kept by now

    def tritons_path(*args, **kwargs):
        raise AssertionError("Triton's launch path ran")
    monkeypatch.setattr(l2.softmax_kernel, "run", tritons_path)
    torch.testing.assert_close(l2.softmax(x, long_rows=False), expected)
    with pytest.raises(AssertionError, match="launch path ran"):  # 4 bytes off 16: compiled apart
        l2.softmax(torch.randn(8, 101, device=DEVICE)[:, 1:], long_rows=False)


@pytest.mark.skipif(INTERPRET, reason="the interpreter has no compiled kernels to keep")
def test_a_launch_hook_hears_kept_kernels_too():
    from triton import knobs
    from lesson02_softmax import main as l2

    x = torch.randn(8, 100, device=DEVICE)
    l2.softmax(x, long_rows=False)  # kept by now
    heard = []
    hook = heard.append  # called with each launch's metadata
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        l2.softmax(x, long_rows=False)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(heard) == 1
    l2.softmax(x, long_rows=False)
    assert len(heard) == 1


def test_timing_cells_fit_the_headers():
    from common import bench

    cells = bench.timing_cells((0.002, 0.010), nbytes=4e6, ceiling=4000.0)
    assert len(cells) == len(bench.TIMING_HEADERS)
    if INTERPRET:  # only the interpreter's time: no GB/s of numpy
        assert cells == [2.0]
    else:
        assert cells == pytest.approx([2.0, 10.0, 2000.0, 50.0])


def test_plot_draws_several_columns(tmp_path):
    pytest.importorskip("matplotlib")
    from common.bench import Table
    from common.results import plot

    table = Table(["N", "host µs", "kernel µs"], [[1024, 10.0, 1.0], [4096, 10.0, 3.0]], title="t")
    assert plot(table, str(tmp_path / "p.png"), x="N", y=["host µs", "kernel µs"], series=[], ceiling=None, logy=True)
    assert (tmp_path / "p.png").stat().st_size > 0
