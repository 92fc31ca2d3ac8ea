"""Lesson 1: add and gelu against PyTorch, the trace's numbers, the PTX facts, bad input, the chapter's runs."""
import os

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, INTERPRET, assert_matches, run_as_notebook, run_script, parse_command_line, run_trace
from lesson01_vector_add.elementwise import add, gelu
from lesson01_vector_add.main import check, look_at_ptx

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SIZES = [1, 7, 256, 1000, 1025, 65536 + 3]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_add_matches_torch(n, dtype):
    x = torch.randn(n, device=DEVICE, dtype=dtype)
    y = torch.randn(n, device=DEVICE, dtype=dtype)
    out = add(x, y)
    if dtype == torch.bfloat16 and INTERPRET:
        assert_matches(out, x + y)
    else:  # one rounding of the exact sum, as torch does: bit for bit
        assert torch.equal(out, x + y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_gelu_matches_torch(n, dtype):
    x = 3 * torch.randn(n, device=DEVICE, dtype=dtype)
    assert_matches(gelu(x), F.gelu(x, approximate="tanh"))


def test_gelu_extreme_values_stay_finite():
    x = torch.tensor([-1e30, -1e4, -30.0, -3.0, -0.0, 0.0, 1e-30, 3.0, 30.0, 1e4, 1e30], device=DEVICE)
    out = gelu(x)
    assert torch.isfinite(out).all()
    assert_matches(out, F.gelu(x.double(), approximate="tanh").float())


def test_bfloat16_arithmetic_is_not_garbage():
    # Regression: the interpreter stores bf16 as raw 16-bit integers; adding those gives ~1e-38.
    a = torch.tensor([1.0, 2, 3, 4], device=DEVICE, dtype=torch.bfloat16)
    b = torch.tensor([5.0, 6, 7, 8], device=DEVICE, dtype=torch.bfloat16)
    assert add(a, b).tolist() == [6.0, 8.0, 10.0, 12.0]


def test_strided_and_2d_inputs():
    base = torch.randn(64, 48, device=DEVICE)
    for x in (base[::2], base.t(), base[:, 5:17]):
        assert not x.is_contiguous()
        assert torch.equal(add(x, x), x + x)
        assert add(x, x).shape == x.shape
        assert_matches(gelu(x), F.gelu(x, approximate="tanh"))


def test_empty_input():
    x = torch.empty(0, device=DEVICE)
    assert add(x, x).numel() == 0 and gelu(x).numel() == 0


@pytest.mark.parametrize(
    "x, y, error, message",
    [
        (torch.ones(3), torch.ones(4), ValueError, r"x, y have different shapes: \(3,\), \(4,\)"),
        (torch.ones(3), torch.ones(3, dtype=torch.float16), TypeError, "different dtypes"),
        (torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.int32), TypeError, "dtype int32"),
        (torch.ones(3, device="meta"), torch.ones(3, device="meta"), ValueError, "is on meta"),
        ([1.0, 2.0], [3.0, 4.0], TypeError, "must be a torch.Tensor"),
    ],
)
def test_bad_input_names_the_problem(x, y, error, message):
    if isinstance(x, torch.Tensor) and x.device.type == "cpu":
        x, y = x.to(DEVICE), y.to(DEVICE)
    with pytest.raises(error, match=message):
        add(x, y)


def test_block_sizes_and_warps_at_their_upper_bounds_are_taken():
    # the largest block tl.arange takes (2^16) and the most warps a program has (32) run; one past
    # either is refused, naming it
    x, y = torch.randn(70000, device=DEVICE), torch.randn(70000, device=DEVICE)
    assert torch.equal(add(x, y, BLOCK_SIZE=65536, num_warps=32), x + y)
    assert_matches(gelu(x, BLOCK_SIZE=65536, num_warps=32), gelu(x))
    with pytest.raises(ValueError, match="BLOCK_SIZE must be a power of two from 1 to 65536"):
        add(x, y, BLOCK_SIZE=131072)
    with pytest.raises(ValueError, match="num_warps must be a power of two from 1 to 32"):
        add(x, y, num_warps=64)


def test_tensors_on_different_devices():
    with pytest.raises(ValueError, match="y is on meta"):
        add(torch.ones(3, device=DEVICE), torch.ones(3, device="meta"))


def test_gelu_rejects_integers():
    with pytest.raises(TypeError, match="dtype int64"):
        gelu(torch.arange(4, device=DEVICE))


@pytest.fixture(scope="module")
def traced():
    return run_trace("lesson01_vector_add.main")


def test_trace_reproduces_the_worked_example(traced):
    log = traced
    assert log["pid"] == [0, 1, 2, 3, 0]  # cdiv(1000, 256) = 4 programs, then the tiny example's one
    assert log["lanes the mask keeps"][:4] == [256, 256, 256, 232]
    assert log["lanes masked off"][:4] == [0, 0, 0, 24]
    program3 = log["offsets"][3]
    assert (program3[0], program3[-1], len(program3)) == (768, 1023, 256)
    assert log["output"] == [[6.0, 8.0, 10.0, 12.0]]  # printed inside the kernel
    assert log["C"] == [[6.0, 8.0, 10.0, 12.0]]       # and stored


def test_check_passes():
    assert all(check().column("ok"))


def test_ptx_vectorises_when_n_is_a_multiple_of_16():
    found = look_at_ptx()
    aligned, unaligned = found["N a multiple of 16"], found["N not a multiple of 16"]
    # 1024 elements / 128 threads = 8 floats per thread per input: 2 x 128-bit vs 8 x 32-bit loads
    assert aligned["ld.global.v4.b32"] == 4 and aligned["st.global.v4.b32"] == 2
    assert unaligned["ld.global.b32"] == 16 and unaligned["st.global.b32"] == 8


def test_runs_as_a_notebook_each_sections_output_under_its_cell():
    cells = run_as_notebook("lesson01_vector_add")
    text = "".join(cells)
    trace_cell = next(c for c in cells if "=== 2. The trace" in c)
    assert "lanes masked off = 24" in trace_cell and "C = [ 6.,  8., 10., 12.]" in trace_cell
    assert "max |err|" in next(c for c in cells if "=== 4. Correctness" in c)
    headings = [line for line in text.splitlines() if line.startswith("=== ")]
    numbers = [int(h.split()[1].rstrip(".")) for h in headings]
    assert numbers == sorted(numbers) and len(headings) == 13  # every section, numbered as in the code
    assert "ipykernel" not in text and "usage:" not in text  # the kernel's own arguments were ignored
    if INTERPRET:  # the sections that need a GPU print the page's record, its GPU's stamp once
        assert text.count("This section needs a GPU") == 7
        assert text.count("| GPU | driver |") <= 1 and "interpreter µs" not in text


def test_the_debugging_section_shows_each_tool_and_error():
    done = run_script("lesson01_vector_add", "--sections", "debug")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "(1, 0, 0)  mask:" in out and "compiling debug_kernel, BLOCK_SIZE = 8" in out  # device_print, static_print
    assert "debug_kernel wants BLOCK_SIZE >= 8" in out  # static_assert
    for meaning in ("needs end - start to be a power of two", "BLOCK_SIZE: tl.constexpr", "make a column with"):
        assert meaning in out


def test_script_and_its_command_line():
    done = run_script("lesson01_vector_add", "--sections", "trace")
    assert done.returncode == 0, done.stderr
    assert "lanes masked off = 24" in done.stdout and "=== 4." not in done.stdout
    assert "Sections: trace: 2. The trace" in parse_command_line("lesson01_vector_add", "--help")[1]
    code, _, err = parse_command_line("lesson01_vector_add", "--sections", "bench", "--sizes", "-5")
    assert code == 2 and "must be at least 1" in err



@pytest.mark.skipif(INTERPRET, reason="the machine's own figures need a GPU")
def test_machine_table_has_this_gpus_figures():
    from lesson01_vector_add.main import machine

    rows = {row[0]: row for row in machine().rows}
    ours = next(row for name, row in rows.items() if "this GPU" in name)
    assert ours[1] == torch.cuda.get_device_properties(0).multi_processor_count


def test_crossover_interpolates_on_log2_n():
    from lesson01_vector_add.timing import crossover

    # kernel - host: -5 at N = 2, +10 at N = 4: a third of the way, on log2 N
    assert crossover([1, 2, 4, 8], 10, [1, 5, 20, 40]) == pytest.approx(2 ** (4 / 3))
    assert crossover([1, 2, 4], 10, [1, 2, 3]) is None  # the launch always dominates
    assert crossover([1, 2], 10, [10, 20]) is None  # never below: no crossing inside the range


def test_triton_cache_points_triton_elsewhere_and_restores_it(monkeypatch, tmp_path):
    from lesson01_vector_add.timing import triton_cache

    for before in (None, str(tmp_path / "mine")):  # unset, then set: each as it was, even after an error
        if before is None:
            monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
        else:
            monkeypatch.setenv("TRITON_CACHE_DIR", before)
        with pytest.raises(ZeroDivisionError), triton_cache(str(tmp_path / "empty")):
            assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "empty")
            1 / 0
        assert os.environ.get("TRITON_CACHE_DIR") == before


@pytest.mark.skipif(INTERPRET, reason="pitfalls() runs add on CUDA tensors")
def test_timing_pitfalls_table_with_fake_clocks(monkeypatch):
    # Nothing timed: each clock returns its own number, so each row must show its own clock's
    # reading; the first call compiles with TRITON_CACHE_DIR on an empty folder, then as it was
    from common import bench
    from lesson01_vector_add import timing

    seen = []

    def clock(value):
        def fake(fn, *args, **kwargs):
            fn()
            seen.append((value, os.environ.get("TRITON_CACHE_DIR"), kwargs.get("synchronize")))
            return value
        return fake

    readings = iter([1.0, 2.0, 3.0, 4.0])
    monkeypatch.setattr(timing, "host_clock_ms", lambda fn, **kw: clock(next(readings))(fn, **kw))
    for name, value in (("time_ms", 5.0), ("kernel_time_ms", 6.0), ("call_time_ms", 7.0)):
        monkeypatch.setattr(bench, name, clock(value))
    before = os.environ.get("TRITON_CACHE_DIR")
    table = timing.pitfalls(n=1 << 12)
    assert os.environ.get("TRITON_CACHE_DIR") == before
    assert table.column("µs") == [1000.0 * k for k in range(1, 8)]
    assert [how.split(",")[0] for how in table.column("how add(x, y) was timed")][:4] == [
        "first call", "first call", "host clock", "host clock"]
    assert [sync for _, _, sync in seen[:4]] == [True, True, False, True]
    empty = seen[0][1]
    assert empty != before and not os.path.exists(empty)  # a temporary folder, gone after
    assert all(cache == before for _, cache, _ in seen[1:])


@pytest.mark.skipif(INTERPRET, reason="the CUDA C++ kernel needs a GPU")
def test_cuda_cpp_gelu_where_it_can_be_built():
    from lesson01_vector_add import cuda_cpp

    reason = cuda_cpp.unavailable()
    if reason:
        pytest.skip(reason)
    gelu_cuda = cuda_cpp.build().gelu
    for n in (1, 1000, 1025, 65536 + 3):
        x = torch.randn(n, device=DEVICE)
        torch.testing.assert_close(gelu_cuda(x), F.gelu(x, approximate="tanh"), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="must be float32"):
        gelu_cuda(torch.randn(8, device=DEVICE, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="must be contiguous"):
        gelu_cuda(torch.randn(16, device=DEVICE)[::2])


@pytest.mark.skipif(INTERPRET, reason="CUDA graphs need a GPU")
def test_a_cuda_graph_replays_triton_launches():
    from lesson01_vector_add.timing import capture

    x, y = torch.randn(4096, device=DEVICE), torch.randn(4096, device=DEVICE)
    graph, out = capture(lambda: add(add(x, y), y))
    x.copy_(torch.ones_like(x))  # a replay reads the captured tensors as they are now
    graph.replay()
    torch.testing.assert_close(out, 1 + 2 * y)
