"""Lesson 3: row_sum against a float64 sum, split and not, the traces, the split rule, 64-bit offsets,
bad input, the machine's arithmetic (waves, occupancy, coalescing), the chapter's runs."""
import math
import re

import pytest
import torch
import triton.language as tl

from conftest import DEVICE, INTERPRET, run_as_notebook, run_script, parse_command_line, run_trace
from common import bench
from common.device import sm_count
from lesson03_rowsum.main import check, choose_splits, columns_per_program, launch, row_sum, tile_config

SHAPES = [(1, 1), (3, 7), (64, 1000), (5, 12345), (3, 70000), (1000, 33)]


def sum_tolerance(x: torch.Tensor) -> torch.Tensor:
    """What a correct row sum may be off by, per row: one rounding of the result to x's dtype, plus
    float32 accumulation over the sum's depth (a tree of log2(BLOCK_N) levels inside a tile, a chain
    of cdiv(N, BLOCK_N) tiles, and a split row's second reduction), each step within float32's eps
    times the row's sum of magnitudes."""
    N = x.shape[1]
    depth = math.log2(tile_config(N)[1]) + math.ceil(N / tile_config(N)[1]) + math.log2(N) + 2
    exact = x.double().sum(dim=1)
    return torch.finfo(x.dtype).eps * exact.abs() + depth * torch.finfo(torch.float32).eps * x.double().abs().sum(dim=1)


def assert_sum_close(out, x):
    assert out.shape == (x.shape[0],) and out.dtype == x.dtype
    assert ((out.double() - x.double().sum(dim=1)).abs() <= sum_tolerance(x)).all()


@pytest.mark.parametrize("splits", [1, 3, None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_row_sum_matches_float64(shape, dtype, splits):
    x = torch.randn(*shape, device=DEVICE, dtype=dtype)
    assert_sum_close(row_sum(x, splits=splits), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(64, 1000), (5, 12345), (3, 70000)])
def test_the_tolerance_fails_the_wrong_sums(shape, dtype):
    # An all-zero output, a sum missing its last 100 columns and a doubled sum must each fail the
    # tolerance of assert_sum_close in every dtype; the right sum (rounded once) must pass it.
    x = torch.randn(*shape, device=DEVICE, dtype=dtype)
    exact = x.double().sum(dim=1)
    assert_sum_close(exact.to(dtype), x)
    for wrong in (torch.zeros_like(exact), x.double()[:, :-100].sum(dim=1), 2 * exact):
        with pytest.raises(AssertionError):
            assert_sum_close(wrong.to(dtype), x)


def test_split_rows_are_exact_on_integers():
    x = torch.randint(-8, 8, (4, 100_000), device=DEVICE).float()
    for splits in (1, 2, 7, 64):
        assert torch.equal(row_sum(x, splits=splits), x.sum(dim=1))


def test_split_partial_sums_are_float32():
    # a float16 row whose halves sum to +-65,536 (past float16's 65,504) and whole to 0: split in two,
    # each program's partial sum must be kept in float32, or the halves become +-inf and the total NaN
    x = torch.cat([torch.full((1, 16384), 4.0), torch.full((1, 16384), -4.0)], dim=1).to(DEVICE, torch.float16)
    assert columns_per_program(32768, 2) == 16384  # one program a half
    for splits in (1, 2):
        assert row_sum(x, splits=splits).item() == 0.0


def test_strided_views_and_empty():
    base = torch.randn(70, 130, device=DEVICE)
    for x in (base.t(), base[::3], base[:, 1:129:2]):
        assert not x.is_contiguous()
        assert_sum_close(row_sum(x), x)
        assert_sum_close(row_sum(x, splits=2), x)
    assert row_sum(torch.empty(0, 5, device=DEVICE)).shape == (0,)
    assert torch.equal(row_sum(torch.empty(3, 0, device=DEVICE)), torch.zeros(3, device=DEVICE))


def test_splits_is_keyword_only():
    with pytest.raises(TypeError):
        row_sum(torch.ones(2, 3, device=DEVICE), 2)


def test_split_rule_fills_the_gpu():
    assert choose_splits(4096, 16384) == 1          # 4096 programs already
    M, N = 4, 1 << 24                                # 4 rows: split, to >= 4 programs per SM
    programs_per_row = -(-N // columns_per_program(N, choose_splits(M, N)))
    assert M * programs_per_row >= 4 * sm_count()
    assert columns_per_program(N, choose_splits(M, N)) % tile_config(N)[1] == 0  # whole tiles


@pytest.mark.parametrize("index_type", [tl.int32, tl.int64])
@pytest.mark.parametrize("splits", [1, 4])
def test_the_launcher_takes_the_offsets_type(index_type, splits):
    x = torch.randint(-8, 8, (5, 20_000), device=DEVICE).float()  # integers: exact in any order
    assert torch.equal(launch(x, splits, index_type=index_type), x.sum(dim=1))


@pytest.mark.parametrize(
    "x, error, message",
    [
        (torch.ones(5), ValueError, "must be 2-D"),
        (torch.ones(2, 3, dtype=torch.int32), TypeError, "dtype int32"),
        (torch.ones(2, 3, device="meta"), ValueError, "is on meta"),
    ],
)
def test_bad_input(x, error, message):
    if x.device.type == "cpu":
        x = x.to(DEVICE)
    with pytest.raises(error, match=message):
        row_sum(x)


@pytest.mark.parametrize("splits, error", [(0, ValueError), (-2, ValueError), ("4", TypeError), (2.5, TypeError),
                                           (True, TypeError)])  # a count too small; not a count at all
def test_bad_split_count(splits, error):
    with pytest.raises(error, match="splits must be a whole number >= 1"):
        row_sum(torch.ones(2, 3, device=DEVICE), splits=splits)


@pytest.fixture(scope="module")
def traced():
    return run_trace("lesson03_rowsum.main")


@pytest.fixture(scope="module")
def traced_split():
    return run_trace("lesson03_rowsum.main", "split_trace")


def test_trace_reproduces_the_worked_example(traced):
    log = traced
    assert log["program"] == [0]  # one program: the tiled kernel, no split
    assert log["columns"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert log["acc"] == [[[3.0, 1.0, 4.0, 1.0]], [[8.0, 10.0, 6.0, 7.0]], [[13.0, 13.0, 11.0, 15.0]]]
    assert log["tl.sum(acc)"] == [[52.0]]


def test_split_trace_reproduces_the_worked_example(traced_split):
    log = traced_split
    assert log["program (pid_m, pid_n)"] == [[0, 0], [0, 1], [0, 2]]
    assert log["partial sum"] == [[9.0], [22.0], [21.0]]
    assert log["partial sums"] == [[9.0, 22.0, 21.0]]
    assert log["program"] == [0]  # the second launch: the tiled kernel again, on the partial sums
    assert log["acc"][-1] == [[9.0, 22.0, 21.0, 0.0]]  # its fourth lane masked off: 0
    assert log["tl.sum(acc)"] == [[52.0]] and log["row_sum"] == [52.0]


def test_check_passes():
    assert all(check().column("ok"))


def test_waves_and_the_tail_effect():
    from lesson03_rowsum.main import waves

    assert waves(160, 148) == (1, 12, 136)  # the worked example's B200: a second wave of 12, 136 SMs idle
    assert waves(110, 108) == (1, 2, 106)   # and A100: 2 programs in the second wave
    assert waves(264, 132) == (2, 0, 0) and waves(300, 132, per_sm=2) == (1, 36, 114)


def test_waves_and_split_tables():
    from lesson03_rowsum.main import split_table, waves_table

    one = {row[0]: row[2] for row in waves_table().rows}
    split = {row[0]: row[4] for row in split_table().rows}
    assert one["4 x 16777216"] == 4 and split["4 x 16777216"] >= 4 * sm_count()
    assert one["4096 x 16384"] == split["4096 x 16384"] == 4096  # enough rows: not split


def test_occupancy_arithmetic():
    from lesson03_rowsum.main import occupancy

    seed = occupancy(warps=4, registers=160)  # the worked example: 20,480 registers per program
    assert seed["registers"] == 3 and seed["programs"] == 3 and seed["occupancy"] == 0.1875
    assert seed["limited_by"] == "registers"
    assert occupancy(4, 93)["registers"] == 5   # 93 registers are allocated as 96: 65536 // (96 * 128)
    assert occupancy(16, 16)["programs"] == 4 and occupancy(16, 16)["limited_by"] == "warps"
    assert occupancy(1, 16, shared=100 << 10)["programs"] == 2  # 228 KB of shared memory: two of 100 KB


def test_occupancy_table_reads_registers_from_ptxas():
    from lesson03_rowsum.main import occupancy_table

    rows = occupancy_table(configs=((1, 4096, 4), (1, 4096, 16))).rows
    assert all(row[2] > 0 for row in rows)
    assert rows[0][2] > rows[1][2]  # the same tile over 4x the threads: fewer registers per thread ...
    assert rows[0][5] < rows[1][5] or rows[0][4] != "registers"  # ... and, registers permitting, more occupancy


def test_coalescing_lines_and_sectors_per_warp():
    from lesson03_rowsum.coalescing import lines_per_warp, lines_table, sectors_per_warp

    assert lines_per_warp(1) == 1 and lines_per_warp(4096) == 32  # side by side: one 128-byte line; a row apart: 32
    assert lines_per_warp(1, itemsize=2) == 1 and lines_per_warp(2) == 2
    assert sectors_per_warp(1) == 4 and sectors_per_warp(4096) == 32 and sectors_per_warp(1, itemsize=2) == 2
    assert lines_table().column("% of fetched bytes used") == [100.0, 100.0, 50.0, 12.5]


def test_runs_as_a_notebook_each_sections_output_under_its_cell():
    from lesson03_rowsum.main import SECTIONS

    cells = run_as_notebook("lesson03_rowsum")
    text = "".join(cells)
    trace_cell = next(c for c in cells if "=== 2. The trace" in c)
    assert "acc = [[13., 13., 11., 15.]]" in trace_cell and "tl.sum(acc) = [52.]" in trace_cell
    split_cell = next(c for c in cells if "=== 6. The trace of a split row" in c)
    assert "partial sums = [ 9., 22., 21.]" in split_cell and "row_sum = 52." in split_cell
    assert "max error / sum |x|" in next(c for c in cells if "=== 8. Correctness" in c)
    headings = [line for line in text.splitlines() if line.startswith("=== ")]
    assert [h.removeprefix("=== ").removesuffix(" ===") for h in headings] == list(SECTIONS.values())
    assert "ipykernel" not in text and "usage:" not in text  # the kernel's own arguments were ignored
    if INTERPRET:  # the sections that need a GPU print the page's record, its GPU's stamp once
        # staircase, occupancy_timed, bench, offsets, host, coalescing
        assert text.count("This section needs a GPU") == 6
        assert text.count("| GPU | driver |") <= 1 and "interpreter µs" not in text


def test_script_and_its_command_line():
    done = run_script("lesson03_rowsum", "--sections", "trace")
    assert done.returncode == 0, done.stderr
    assert "acc = [[13., 13., 11., 15.]]" in done.stdout and "=== 3." not in done.stdout
    assert "Sections: trace: 2. The trace" in parse_command_line("lesson03_rowsum", "--help")[1]
    for bad, message in (("4x", "must be at least 1|not a whole number"), ("4x5x6", "is not a shape"),
                         ("0x100", "must be at least 1")):
        code, _, err = parse_command_line("lesson03_rowsum", "--sections", "bench", "--shapes", bad)
        assert code == 2 and re.search(message, err) and "--shapes" in err



def fake_clock(monkeypatch, results=None):
    """bench.side_by_side with a clock on which case k of a call takes k ms: nothing is timed. Where
    `results` is a list, each case runs once and its result goes there."""
    def side_by_side(cases, rounds=3):
        if results is not None:
            results.append([fn() for fn in cases.values()])
        return {name: float(k) for k, name in enumerate(cases, start=1)}

    monkeypatch.setattr(bench, "side_by_side", side_by_side)
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: 1000.0)


def assert_timing_cells(cells, ms, nbytes):
    """kernel µs, GB/s and % of copy (1000 GB/s) from the fake clock's ms and the bytes the row counts."""
    us, gbps, copy = cells
    assert us == 1e3 * ms and gbps == pytest.approx(nbytes / (ms * 1e-3) / 1e9) and copy == pytest.approx(gbps / 10)


def test_timing_tables_with_a_fake_clock(monkeypatch):
    from lesson03_rowsum.main import OCCUPANCY_CONFIGS, bench_all, occupancy_timed, staircase

    results = []
    fake_clock(monkeypatch, results)
    shapes = [(8, 64), (4, 1 << 16)]  # 4 rows: split
    rows = bench_all(shapes).rows
    names = ["torch.sum(dim=1)", "Triton row_sum, rows not split", "Triton row_sum, rows split (auto)"]
    assert [tuple(row[:2]) for row in rows] == [("8 x 64", n) for n in names[:2]] + [("4 x 65536", n) for n in names]
    ms = [1, 2, 1, 2, 3]  # the clock restarts for each shape
    for row, t, (M, N) in zip(rows, ms, [shapes[0]] * 2 + [shapes[1]] * 3):
        assert_timing_cells(row[2:5], t, 4 * (M * N + M))  # x read once, y written once
        assert row[5] == pytest.approx(1 / t)  # torch.sum's time over this one's
    for sums in results:  # every implementation timed computes torch.sum's row sums
        for other in sums[1:]:
            torch.testing.assert_close(other, sums[0])
    M, N = 8, 16384
    rows = occupancy_timed(M=M, N=N).rows  # the launcher's tile for rows of N (1 x 4096), at each num_warps
    assert [tuple(row[:2]) for row in rows] == [("1 x 4096", w) for *tile, w in OCCUPANCY_CONFIGS if tile == [1, 4096]]
    for t, row in enumerate(rows, start=1):
        assert_timing_cells(row[2:], t, 4 * (M * N + M))
    fake_clock(monkeypatch)  # the staircase's spin kernels would take minutes under the interpreter: not run
    sms = sm_count()
    rows = staircase(iters=1).rows
    assert [row[0] for row in rows] == [1, sms // 2] + [n for k in range(1, 5) for n in (k * sms, k * sms + 1)]
    assert [row[1] for row in rows] == [row[0] / sms for row in rows]
    assert [row[3] for row in rows] == [float(k) for k in range(1, 11)]  # against one program's time, 1 ms


def test_coalescing_timing_with_a_fake_clock(monkeypatch):
    from lesson03_rowsum import coalescing

    results = []
    fake_clock(monkeypatch, results)
    M, N = 8, 64
    rows = coalescing.timing(row_sum, M=M, N=N).rows
    assert [tuple(row[:2]) for row in rows] == [(layout, name) for layout in ("rows contiguous (x)",
                                                "columns contiguous (x.t() of an N x M tensor)")
                                                for name in ("Triton row_sum", "torch.sum(dim=1)")]
    for t, row in enumerate(rows, start=1):
        assert_timing_cells(row[2:], t, 4 * (M * N + M))
    ours_x, torch_x, ours_xt, torch_xt = results[0]
    torch.testing.assert_close(ours_x, torch_x)
    torch.testing.assert_close(ours_xt, torch_xt)
    assert not torch.allclose(ours_x, ours_xt)  # two tensors, one per layout


# ----- rmsnorm.py (lesson 6's norm): torch's contract, every input's gradient, float32 inside

import torch.nn.functional as F  # noqa: E402

from common.checks import errors_against_autograd, gradients, grad_ok, rel_error  # noqa: E402
from lesson03_rowsum.rmsnorm import rms_norm  # noqa: E402


def rms_norm_errors(ours, theirs, inputs, outputs):
    """For every input's gradient: (ours, torch's in the inputs' dtype), each relative to float64
    autograd from the same inputs, where the outputs `outputs` picks (indices) each get a random
    cotangent and the others none (common.checks' yardstick, for functions of several outputs)."""
    def grads(fn, dtype, cotangents=None):
        xs = [x.detach().to(dtype).requires_grad_() for x in inputs]
        out = fn(*xs)
        outs = [out[i] for i in outputs]
        if cotangents is None:
            cotangents = [torch.randn(o.shape, dtype=torch.float64, device=DEVICE) for o in outs]
        return torch.autograd.grad(outs, xs, [c.to(o.dtype) for c, o in zip(cotangents, outs)]), cotangents

    exact, cotangents = grads(theirs, torch.float64)
    mine, torch_s = (grads(fn, inputs[0].dtype, cotangents)[0] for fn in (ours, theirs))
    return [(rel_error(a, e), rel_error(b, e)) for a, b, e in zip(mine, torch_s, exact)]


def fused(x, w, r):
    return rms_norm(x, w, 1e-6, residual=r)


def fused_reference(x, w, r):
    return x + r, F.rms_norm(x + r, (x.shape[-1],), w, 1e-6)


@pytest.mark.parametrize("outputs", [(0,), (1,), (0, 1)], ids=["h only", "y only", "h and y"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_residual_gives_every_input_its_gradient(outputs, dtype):
    # x, the residual and w, when a model uses the sum h alone (a block whose norm is unused), the
    # normalised rows alone (the last block), or both: each input's gradient against float64 autograd
    x, r = torch.randn(2, 37, 200, device=DEVICE), torch.randn(2, 37, 200, device=DEVICE)
    w = torch.rand(200, device=DEVICE) + 0.5
    inputs = [t.to(dtype) for t in (x, w, r)]
    if outputs == (0,):  # w has no gradient where y is unused: autograd gives x's and r's alone
        grads = torch.autograd.grad(fused(*[t.requires_grad_() for t in inputs])[0].sum(), [inputs[0], inputs[2]])
        assert all(torch.equal(g, torch.ones_like(g)) for g in grads)
        return
    for i, (ours, theirs) in enumerate(rms_norm_errors(fused, fused_reference, inputs, outputs)):
        assert grad_ok(ours, theirs), f"d{'xwr'[i]}: {ours:.2e} against torch's {theirs:.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_reads_a_weight_of_any_stride(dtype):
    # w[::2], a column of a matrix, one value expanded (stride 0): read as torch reads them, their
    # gradients sent back through the view (once read as contiguous: outputs off by up to 1.38)
    N = 96
    x = torch.randn(5, N, device=DEVICE, dtype=dtype)
    views = {"w[::2]": lambda base: base[::2], "a column": lambda base: base.view(N, 2)[:, 1],
             "expanded": lambda base: base[:1].expand(N)}
    for name, view in views.items():
        base = (torch.rand(2 * N, device=DEVICE) + 0.5).to(dtype)
        errors = errors_against_autograd(
            gradients(lambda x, b: rms_norm(x, view(b), 1e-6), [x, base], g := torch.randn(5, N, device=DEVICE,
                                                                                              dtype=torch.float64),
                      dtype), lambda x, b: F.rms_norm(x, (N,), view(b), 1e-6), [x, base], g)
        y = rms_norm(x, view(base), 1e-6)
        assert rel_error(y, F.rms_norm(x.double(), (N,), view(base).double(), 1e-6)) < 2 * torch.finfo(dtype).eps, name
        assert all(grad_ok(ours, theirs) for ours, theirs in errors), (name, errors)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_rms_norm_takes_a_weight_of_another_dtype_and_autocast_as_torch_does():
    # F.rms_norm takes a weight of another dtype (y in x's); under torch.autocast it runs as it is
    # (torch 2.11 on an H100): the same dtype and values as torch's
    x = torch.randn(6, 64, device=DEVICE)
    w = torch.rand(64, device=DEVICE) + 0.5
    for xd, wd in ((torch.bfloat16, torch.float32), (torch.float32, torch.float16), (torch.float16, torch.bfloat16)):
        xs, ws = x.to(xd).detach().requires_grad_(), w.to(wd).detach().requires_grad_()
        y, ref = rms_norm(xs, ws, 1e-6), F.rms_norm(xs.detach(), (64,), ws.detach(), 1e-6)
        assert y.dtype == ref.dtype == xd and rel_error(y, ref) < 2 * torch.finfo(xd).eps
        y.sum().backward()
        assert xs.grad.dtype == xd and ws.grad.dtype == wd
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        for xd in (torch.float32, torch.bfloat16):
            xs, r = x.to(xd), torch.randn(6, 64, device=DEVICE, dtype=xd)
            y, ref = rms_norm(xs, w, 1e-6), F.rms_norm(xs, (64,), w, 1e-6)
            h, y_fused = rms_norm(xs, w, 1e-6, residual=r)
            ref_h = xs + r
            assert y.dtype == y_fused.dtype == ref.dtype and h.dtype == ref_h.dtype, (xd, y.dtype, ref.dtype)
            assert rel_error(y, ref) < 2 * torch.finfo(ref.dtype).eps
            assert rel_error(y_fused, F.rms_norm(ref_h, (64,), w, 1e-6)) < 2 * torch.finfo(ref.dtype).eps
            small = 1e-3 * xs  # mean(x^2) near 1e-6: the default eps shows
            assert rel_error(rms_norm(small, w), F.rms_norm(small, (64,), w)) < 2 * torch.finfo(ref.dtype).eps


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rms_norm_default_eps_is_torchs(dtype):
    # eps=None, F.rms_norm's default, which rows of small values feel (mean(x^2) near 1e-6): the
    # epsilon of the dtype computed in, float32's (torch's docs say x's dtype's, 1e-3 for float16 and
    # 8e-3 for bfloat16, which would shrink these rows tenfold or more), where 1e-6 is not it
    x = (1e-3 * torch.randn(4, 256, device=DEVICE)).to(dtype)
    w = torch.rand(256, device=DEVICE).to(dtype) + 0.5
    ref = F.rms_norm(x, (256,), w)
    assert rel_error(rms_norm(x, w), ref) < 2 * torch.finfo(dtype).eps
    assert rel_error(rms_norm(x, w, 1e-6), ref) > 0.1


def test_rms_norm_empty_inputs_as_torch():
    for shape in [(0, 5), (3, 0), (2, 0, 4), (0,)]:
        N = shape[-1]
        x = torch.randn(shape, device=DEVICE, requires_grad=True)
        w = torch.randn(N, device=DEVICE, requires_grad=True)
        y = rms_norm(x, w)
        assert y.shape == F.rms_norm(x, (N,), w).shape == shape
        y.sum().backward()
        assert x.grad.shape == shape and torch.equal(w.grad, torch.zeros(N, device=DEVICE))


def test_rms_norm_sums_squares_and_keeps_rstd_in_float32():
    # float16 rows of values near 100: their squares add up past float16's largest number (65504) in
    # any row; a float16 sum of squares gives inf, rstd 0 and y = 0
    x = (100 * torch.randn(4, 1000, device=DEVICE)).half()
    w = torch.ones(1000, device=DEVICE, dtype=torch.float16)
    assert rel_error(rms_norm(x, w, 1e-6), F.rms_norm(x.double(), (1000,), w.double(), 1e-6)) < 2e-3
    # bfloat16 rows and an upstream gradient nearly parallel to them: dx = rstd (g - xh mean(g xh)) is
    # the small part of g across x, left after a cancellation that an rstd rounded to bfloat16 (8 bits)
    # spoils by ~2^-8 of g, against torch's float32 rstd
    x = torch.randn(8, 512, device=DEVICE).bfloat16()
    g = (x + 1e-2 * torch.randn(8, 512, device=DEVICE)).bfloat16().double()  # (exact in bfloat16: its small part kept)
    w = torch.ones(512, device=DEVICE, dtype=torch.bfloat16)
    errors = errors_against_autograd(gradients(lambda x, w: rms_norm(x, w, 1e-6), [x, w], g, torch.bfloat16),
                                     lambda x, w: F.rms_norm(x, (512,), w, 1e-6), [x, w], g)
    assert grad_ok(*errors[0]), errors
