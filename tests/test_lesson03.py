"""Lesson 3: row_sum against a float64 sum, split and not, the trace, the split rule, bad input."""
import pytest
import torch

from conftest import DEVICE, run_trace
from common.device import sm_count
from lesson03_rowsum.main import check, choose_splits, columns_per_program, main, row_sum, tile_config

SHAPES = [(1, 1), (3, 7), (64, 1000), (5, 12345), (3, 70000), (1000, 33)]


def assert_sum_close(out, x):
    ref = x.double().sum(dim=1)
    assert out.shape == (x.shape[0],) and out.dtype == x.dtype
    tol = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[x.dtype]
    scale = x.double().abs().sum(dim=1).clamp_min(1.0)
    assert ((out.double() - ref).abs() <= tol * scale).all()


@pytest.mark.parametrize("splits", [1, 3, None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_row_sum_matches_float64(shape, dtype, splits):
    x = torch.randn(*shape, device=DEVICE, dtype=dtype)
    assert_sum_close(row_sum(x, splits=splits), x)


def test_split_rows_are_exact_on_integers():
    x = torch.randint(-8, 8, (4, 100_000), device=DEVICE).float()
    for splits in (1, 2, 7, 64):
        assert torch.equal(row_sum(x, splits=splits), x.sum(dim=1))


def test_strided_views_and_empty():
    base = torch.randn(70, 130, device=DEVICE)
    for x in (base.t(), base[::3], base[:, 1:129:2]):
        assert not x.is_contiguous()
        assert_sum_close(row_sum(x), x)
    assert row_sum(torch.empty(0, 5, device=DEVICE)).shape == (0,)
    assert torch.equal(row_sum(torch.empty(3, 0, device=DEVICE)), torch.zeros(3, device=DEVICE))


def test_split_rule_fills_the_gpu():
    assert choose_splits(4096, 16384) == 1          # 4096 programs already
    M, N = 4, 1 << 24                                # 4 rows: split, to >= 4 programs per SM
    programs_per_row = -(-N // columns_per_program(N, choose_splits(M, N)))
    assert M * programs_per_row >= 4 * sm_count()
    assert columns_per_program(N, choose_splits(M, N)) % tile_config(N)[1] == 0  # whole tiles


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


@pytest.mark.parametrize("splits", [0, -2, "4", 2.5, True])
def test_bad_split_count(splits):
    with pytest.raises(ValueError, match="splits must be a whole number >= 1"):
        row_sum(torch.ones(2, 3, device=DEVICE), splits=splits)


@pytest.fixture(scope="module")
def traced():
    return run_trace("lesson03_rowsum.main")


def test_trace_reproduces_the_worked_example(traced):
    log = traced
    accs = log["acc"][:3]  # the unsplit walk: lane accumulators after each tile
    assert accs == [[[3.0, 1.0, 4.0, 1.0]], [[8.0, 10.0, 6.0, 7.0]], [[13.0, 13.0, 11.0, 15.0]]]
    assert log["tl.sum(acc)"][0] == [52.0]
    assert log["partial sums"] == [[9.0, 22.0, 21.0]]
    assert log["row_sum"] == [52.0]  # the second launch: the kernel again, on the partial sums
    assert log["program (pid_m, pid_n)"] == [[0, 0], [0, 0], [0, 1], [0, 2]]


def test_check_passes():
    assert all(check().column("ok"))


def test_script_sections(capsys):
    main(["--sections", "waves", "bench", "--shapes", "8x64"])
    out = capsys.readouterr().out
    assert "programs per SM" in out and "torch.sum(dim=1)" in out
    for bad in ("4x", "4x5x6", "0x100"):
        with pytest.raises(SystemExit):
            main(["--sections", "bench", "--shapes", bad])
        assert "--shapes" in capsys.readouterr().err


def test_waves_and_the_tail_effect():
    from lesson03_rowsum.main import waves

    assert waves(160, 148) == (1, 12, 136)  # the documents' B200: a second wave of 12, 136 SMs idle
    assert waves(110, 108) == (1, 2, 106)   # and A100: 2 programs in the second wave
    assert waves(264, 132) == (2, 0, 0) and waves(300, 132, per_sm=2) == (1, 36, 114)


def test_occupancy_arithmetic():
    from lesson03_rowsum.main import occupancy

    seed = occupancy(warps=4, registers=160)  # the documents' example: 20,480 registers per program
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


def test_coalescing_lines_per_warp():
    from lesson03_rowsum.coalescing import lines_per_warp

    assert lines_per_warp(1) == 1 and lines_per_warp(4096) == 32  # side by side: one 128-byte line; a row apart: 32
    assert lines_per_warp(1, itemsize=2) == 1 and lines_per_warp(2) == 2
