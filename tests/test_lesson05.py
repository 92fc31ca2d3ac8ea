"""Lesson 5: flash attention against float64 standard attention; the traces' numbers (the online
softmax, the kernel, the backward); bad input; the chapter's runs (notebook, script)."""
import math

import pytest
import torch

from conftest import DEVICE, INTERPRET, run_as_notebook, run_script, parse_command_line, run_trace
from common.checks import dtype_name, rel_error
from lesson05_flash_attention import main as chapter
from lesson05_flash_attention.attention import DTYPES, attention
from lesson05_flash_attention.main import (SCORES, SECTIONS, TOLERANCE as TOL, VALUES, attention_standard, check,
                                           online_softmax_demo)

SHAPES = [(1, 1, 1, 16), (2, 3, 50, 32), (1, 2, 129, 64), (2, 1, 100, 128), (1, 1, 17, 64)]  # B, H, seq, D


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_attention_matches_float64(shape, dtype, causal):
    q, k, v = (torch.randn(*shape, device=DEVICE, dtype=dtype) for _ in range(3))
    out = attention(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == dtype
    assert rel_error(out, attention_standard(q.double(), k.double(), v.double(), causal=causal)) < TOL[dtype]


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


def test_empty_input():
    q = torch.empty(2, 3, 0, 16, device=DEVICE)
    assert attention(q, q, q).shape == q.shape


@pytest.mark.parametrize(
    "shapes, dtypes, error, message",
    [
        (((1, 2, 8, 64), (1, 2, 9, 64), (1, 2, 8, 64)), None, ValueError, "k and v must have one shape"),
        (((1, 3, 8, 64), (1, 2, 9, 64), (1, 2, 9, 64)), None, ValueError, "3 heads must be a multiple of k's and v's 2"),
        (((1, 2, 8, 64), (2, 2, 8, 64), (2, 2, 8, 64)), None, ValueError, "must agree in batch .dim 0. and head_dim"),
        (((1, 2, 8, 64), (1, 2, 8, 32), (1, 2, 8, 32)), None, ValueError, "must agree in batch .dim 0. and head_dim"),
        (((1, 2, 8, 320),) * 3, None, ValueError, "head_dim must be from 0 to 256, got 320"),
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
        attention(q, q, q, causal=causal)


def test_causal_and_sm_scale_are_keyword_only():
    q = torch.ones(1, 1, 8, 16, device=DEVICE)
    with pytest.raises(TypeError):
        attention(q, q, q, True)


def test_online_softmax_demo_matches_softmax():
    result = online_softmax_demo(SCORES, VALUES, 4)
    assert result["m"] == 5.0 and result["l"] == pytest.approx(result["l_ref"])
    assert result["out"] == pytest.approx(result["ref"])
    assert result["l"] == pytest.approx(1.6031, abs=1e-4)  # the worked example's running sum after both blocks


# ----- the teaching kernel (main.py, section 3) and the steps from it to attention_kernel (section 4)

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("seq, BLOCK_M, BLOCK_N", [(1, 16, 16), (17, 16, 16), (100, 32, 16), (70, 16, 32)])
def test_the_teaching_kernel_matches_float64(seq, BLOCK_M, BLOCK_N, dtype, causal):
    # a ragged last block, query blocks taller than the key blocks and shorter (the causal loop's end
    # falls inside a key block), one row; float32 within float16's tolerance: on a GPU its dots are TF32
    from lesson05_flash_attention.main import flash_attention

    q, k, v = (torch.randn(2, 3, seq, 16, device=DEVICE, dtype=dtype) for _ in range(3))
    out = flash_attention(q, k, v, causal=causal, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    assert out.shape == q.shape and out.dtype == dtype
    assert rel_error(out, attention_standard(q.double(), k.double(), v.double(), causal=causal)) < TOL[torch.float16]


def test_the_teaching_launcher_refuses_what_its_kernel_would_get_wrong():
    from lesson05_flash_attention.main import flash_attention

    x = torch.ones(1, 2, 8, 16, device=DEVICE)
    with pytest.raises(ValueError, match="q, k and v of one shape only"):
        flash_attention(x, x[:, :1], x[:, :1])
    with pytest.raises(ValueError, match="contiguous tensors only"):
        flash_attention(x.transpose(1, 2), x.transpose(1, 2), x.transpose(1, 2))
    y = torch.ones(1, 2, 8, 80, device=DEVICE)
    with pytest.raises(ValueError, match="a head_dim that is a power of two, got 80"):
        flash_attention(y, y, y)


def causal_teaching_trace() -> None:
    from lesson05_flash_attention.main import flash_attention, tiny_problem

    flash_attention(*tiny_problem(), causal=True, sm_scale=1.0, BLOCK_M=4, BLOCK_N=4, trace=True)


@pytest.mark.skipif(not INTERPRET, reason="a trace in this process: the interpreter's")
def test_the_teaching_kernel_causal_never_reads_the_blocks_above_the_diagonal():
    # query block 0 stops after key block 0; query block 1 takes both, later keys masked
    from common import trace

    log = trace.logged(__name__, "causal_teaching_trace")
    assert log["program (query block, batch x head)"] == [[0, 0], [1, 0]] and log["key block"] == [0, 0, 1]
    assert log["scores"][0][0][1:] == [float("-inf")] * 3 and log["scores"][2][0][1] == float("-inf")


def test_the_steps_bring_every_parameter_of_attention_kernel():
    # attention_kernel's parameters: the teaching kernel's (its seq split in two) and, once each,
    # those the steps of section 4 add
    from lesson05_flash_attention.attention import attention_kernel
    from lesson05_flash_attention.main import STEP_PARAMETERS, flash_kernel

    added = [name for names in STEP_PARAMETERS.values() for name in names]
    assert len(added) == len(set(added))
    taught = set(flash_kernel.arg_names) - {"seq"}
    assert not taught & set(added) and taught | set(added) == set(attention_kernel.arg_names)


def test_the_steps_table():
    # the teaching kernel within float16's tolerance; each step's case refused by its launcher where
    # its kernel would be wrong, and right through attention(); a KV cache's queries get the rows of
    # the square problem's last queries; the numbers of the arithmetic rows
    from lesson05_flash_attention.main import STEP_PARAMETERS, steps

    teaching, table = steps()
    assert all(teaching.column("ok")) and len(teaching.rows) == 6
    assert table.column("step") == list(STEP_PARAMETERS)
    cells = dict(zip(table.column("step"), zip(table.column("the teaching kernel (flash_attention)"),
                                               table.column("attention() (attention_kernel)"))))
    for step in ("any layout", "grouped-query heads", "a KV cache: two lengths", "head dim 80", "float32 inputs"):
        teaching_cell, ours = cells[step]
        assert teaching_cell.startswith("refuses: ") == (step != "float32 inputs"), step
        assert ours.startswith("relative error ") and float(ours.split()[2].rstrip(",")) < TOL[torch.float16], step
    assert float(cells["a KV cache: two lengths"][1].split(" to ")[-1]) < 1e-6
    assert cells["past 2**31 elements"] == ("its last offset in int32: -1,879,048,193", "offsets in int64")
    assert cells["decoding"][1].startswith("split keys: 640 programs (5 shares per key head), 4 real rows")
    assert cells["training"] == ("P kept for it: 4.0 GiB in float16", "lse kept: 2.0 MiB, one float per query row")


@pytest.fixture(scope="module")
def traced():
    return run_trace("lesson05_flash_attention.main")


def test_trace_reproduces_the_worked_example(traced):
    log = traced
    # the teaching kernel's first program, row 0, after key blocks 0 and 1: the online-softmax demo's numbers
    assert log["l"][0][0] == pytest.approx(1.5530, abs=1e-4) and log["l"][1][0] == pytest.approx(1.6031, abs=1e-4)
    assert log["alpha"][1][0] == pytest.approx(math.exp(3 - 5), abs=1e-4)
    assert log["scores"][0][0] == SCORES[:4].tolist() and log["scores"][1][0] == SCORES[4:].tolist()
    row0 = torch.softmax(SCORES, dim=0) @ VALUES
    assert log["output"][0][0] == pytest.approx(row0.tolist(), abs=1e-5)
    # two programs, each over key blocks 0 and 1
    assert log["program (query block, batch x head)"] == [[0, 0], [1, 0]]
    assert log["key block"] == [0, 1, 0, 1]


@pytest.fixture(scope="module")
def traced_stages():
    return run_trace("lesson05_flash_attention.main", "trace_stages")


def test_attention_kernel_trace_walks_the_causal_blocks_in_two_stages(traced_stages):
    # causal, the same problem: query block 0 takes key block 0 masked (the diagonal) and skips block 1;
    # query block 1 takes key block 0 unmasked (stage 1), then block 1 masked (stage 2)
    from lesson05_flash_attention.main import tiny_problem

    log = traced_stages
    assert log["program (query block, batch x head)"] == [[0, 0], [1, 0]]
    assert log["key block"] == [0, 0, 1] and log["stage"] == [2, 1, 2]
    assert float("-inf") not in sum(log["scores (natural units)"][1], [])  # stage 1: no mask
    assert log["scores (natural units)"][-1][0][1] == float("-inf")  # key 5 is after query 4: masked
    # each program's l and output against torch: row i's sum of exp(score - max) over keys 0..i
    q, k, v = (t.double().cpu() for t in tiny_problem())
    s = (q @ k.transpose(-2, -1))[0, 0].masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
    l = torch.exp(s - s.max(dim=1, keepdim=True).values).sum(dim=1)
    assert log["l"][0] == pytest.approx(l[:4].tolist(), abs=1e-4) and log["l"][-1] == pytest.approx(l[4:].tolist(), abs=1e-4)
    exact = attention_standard(q, k, v, causal=True, sm_scale=1.0)[0, 0]
    assert sum(log["output"], []) == [pytest.approx(row, abs=1e-5) for row in exact.tolist()]


@pytest.fixture(scope="module")
def traced_backward():
    return run_trace("lesson05_flash_attention.main", "trace_backward")


def test_backward_trace_matches_autograd(traced_backward):
    log = traced_backward
    # causal: key block 0 takes query block 0 (its diagonal) then 1; key block 1 only 1
    assert log["dK, dV program (key block, batch x head)"] == [[0, 0], [1, 0]]
    assert log["query block"] == [0, 1, 1]
    assert log["dQ program (query block, batch x head)"] == [[0, 0], [1, 0]]
    # what the kernels printed (dQ per query block; dK, dV after each key block's last query block)
    # against autograd here, not the host's "max |dQ - autograd's|" lines, which compare them in trace()
    from lesson05_flash_attention.main import tiny_problem

    leaves = [t.double().requires_grad_() for t in tiny_problem()]
    out = attention_standard(*leaves, causal=True, sm_scale=1.0)
    do = torch.zeros_like(out)
    do[..., 0] = 1  # the trace's loss: the sum of the outputs' first column
    out.backward(do)
    dk_dv = [log[name][1] + log[name][2] for name in ("dK so far (before * sm_scale)", "dV so far")]  # sm_scale 1
    for printed, leaf in zip([log["dQ"][0] + log["dQ"][1], *dk_dv], leaves):
        torch.testing.assert_close(torch.tensor(printed, dtype=torch.float64), leaf.grad[0, 0].cpu(), atol=1e-5, rtol=1e-5)
    assert all(log[f"max |{name} - autograd's|"][0] < 1e-5 for name in ("dQ", "dK", "dV"))  # the chapter's lines


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_check_passes(monkeypatch, dtype):
    # section 7's check, a dtype at a time (each compiles its own kernels: on a GPU, a test each runs
    # on a worker of its own)
    monkeypatch.setitem(chapter.SIZES["quick"], "checked", [dtype])
    plain, shapes = check()
    assert all(plain.column("ok")) and all(shapes.column("ok")) and len(plain.rows) == 6 and len(shapes.rows) == 8
    assert set(plain.column("dtype")) == set(shapes.column("dtype")) == {dtype_name(dtype)}


def test_runs_as_a_notebook_each_sections_output_under_its_cell():
    cells = run_as_notebook("lesson05_flash_attention")
    text = "".join(cells)
    online_cell = next(c for c in cells if "=== 2. Online softmax" in c)
    assert "l = 1.6031" in online_cell and "o / l = [0.0934, 1.5699]" in online_cell
    trace_cell = next(c for c in cells if "=== 3. The teaching kernel" in c)
    assert "l = [1.6031, 2.6023, 3.5096, 1.6031]" in trace_cell and "[0.0934, 1.5699]," in trace_cell
    backward_cell = next(c for c in cells if "=== 13. The backward" in c)
    assert "max |dQ - autograd's|" in backward_cell and "dV so far" in backward_cell
    assert "relative error" in next(c for c in cells if "=== 7. Correctness" in c)
    headings = [line for line in text.splitlines() if line.startswith("=== ")]
    numbers = [int(h.split()[1].rstrip(".")) for h in headings]
    assert numbers == list(range(1, len(SECTIONS) + 1))  # every section, numbered as in the code, none skipped
    assert "ipykernel" not in text and "usage:" not in text  # the kernel's own arguments were ignored
    if INTERPRET:  # the sections that need a GPU print the page's record, its GPU's stamp once
        assert text.count("This section needs a GPU") == 9
        assert text.count("| GPU | driver |") <= 1 and "interpreter µs" not in text


def test_script_and_its_command_line():
    done = run_script("lesson05_flash_attention", "--sections", "trace")
    assert done.returncode == 0, done.stderr
    assert "l = [1.6031, 2.6023, 3.5096, 1.6031]" in done.stdout and "=== 4." not in done.stdout
    assert "Sections: memory: 1. Standard attention" in parse_command_line("lesson05_flash_attention", "--help")[1]
    code, _, err = parse_command_line("lesson05_flash_attention", "--sections", "bench", "--seqs", "-1")
    assert code == 2 and "must be at least 1" in err

@pytest.mark.skipif(INTERPRET, reason="measures GPU memory")
def test_flash_memory_stays_linear():
    from lesson05_flash_attention.tuning import peak_memory

    table = peak_memory({"standard": attention_standard, "flash": attention}, [1024, 4096], B=1, H=8)
    standard = [float(v) for v in table.column("standard: peak extra GiB")]
    flash = [float(v) for v in table.column("flash: peak extra GiB")]
    assert standard[1] > 10 * standard[0]           # the scores: 16x the memory for 4x the sequence
    assert flash[1] <= 4.5 * flash[0] + 0.01        # q, k, v, o: 4x
    assert flash[1] < standard[1] / 10


def fake_side_by_side(monkeypatch, times: list):
    """bench.side_by_side with a clock that reads `times` in turn: nothing is timed; each case runs once."""
    from common import bench

    clock = iter(times)

    def side_by_side(cases, rounds=3):
        for fn in cases.values():
            fn()
        return {name: next(clock) for name in cases}

    monkeypatch.setattr(bench, "side_by_side", side_by_side)


def test_bench_configs_with_a_fake_clock(monkeypatch):
    # Each causal group is ranked against its own best (3 ms and 1.5 ms: the second row is the best),
    # and each row's call runs its own block sizes on attention that is causal as its row says
    from lesson05_flash_attention.attention import attention_kernel, launch
    from lesson05_flash_attention.tuning import bench_configs

    calls = []

    def launch_and_check(kernel, q, k, v, causal, sm_scale, **meta):
        o, lse = launch(kernel, q, k, v, causal, sm_scale, **meta)
        exact = attention_standard(q.double(), k.double(), v.double(), causal=causal, sm_scale=sm_scale)
        calls.append((causal, meta, rel_error(o, exact)))
        return o, lse

    fake_side_by_side(monkeypatch, [3.0, 1.5, 1.0, 4.0])
    B, H, seq, D = 1, 2, 64, 16
    table = bench_configs(launch_and_check, attention_kernel, seq, configs=[(16, 16, 4, 1), (32, 16, 2, 2)],
                          shapes=((B, H, D),), dtype=torch.float32)
    causals = [False, False, True, True]
    assert [(row[1], row[2], row[3], row[4]) for row in table.rows] == [
        (c, b, w, s) for c, (b, w, s) in zip(causals, [("16 x 16", 4, 1), ("32 x 16", 2, 2)] * 2)]
    assert [(c, m) for c, m, _ in calls] == [(c, dict(BLOCK_M=bm, BLOCK_N=16, num_warps=w, num_stages=s))
                                             for c, (bm, w, s) in zip(causals, [(16, 4, 1), (32, 2, 2)] * 2)]
    assert all(err < TOL[torch.float32] for _, _, err in calls)
    assert table.column("kernel µs") == [3000.0, 1500.0, 1000.0, 4000.0]
    assert table.column("% of best") == pytest.approx([50.0, 100.0, 100.0, 25.0])
    flops = [4 * B * H * seq * seq * D / (2 if causal else 1) for causal in causals]  # causal: half the blocks
    assert table.column("TFLOP/s") == pytest.approx([f / (ms * 1e-3) / 1e12 for f, ms in zip(flops, [3, 1.5, 1, 4])])


def test_backward_bench_configs_with_a_fake_clock(monkeypatch):
    # Each row varies the kernel its row names, with its configuration, the other left to the
    # autotuner; the two designs (a dQ pass, atomic dQ) are ranked against the best of both; every
    # call gives autograd's gradients
    import functools

    import triton

    from lesson05_flash_attention import backward
    from lesson05_flash_attention.attention import attention_kernel_tuned, launch

    dkdv_configs = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}), triton.Config({"BLOCK_M": 16, "BLOCK_N": 32})]
    dq_configs = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}), triton.Config({"BLOCK_M": 32, "BLOCK_N": 16})]
    fused_configs = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32})]
    monkeypatch.setattr(backward, "capability", lambda: 80)  # no Hopper: no TMA rows (the fake clock's count)
    monkeypatch.setattr(backward, "NARROW_DKDV", dkdv_configs)
    monkeypatch.setattr(backward, "NARROW_DQ", dq_configs)
    monkeypatch.setattr(backward, "NARROW_FUSED", fused_configs)
    calls, launch_backward = [], backward.launch_backward

    def launch_backward_and_check(do, q, k, v, o, lse, causal, sm_scale, **kernels):
        grads = launch_backward(do, q, k, v, o, lse, causal, sm_scale, **kernels)
        leaves = [t.double().requires_grad_() for t in (q, k, v)]
        attention_standard(*leaves, causal=causal, sm_scale=sm_scale).backward(do.double())
        calls.append((causal, kernels, max(rel_error(g, leaf.grad) for g, leaf in zip(grads, leaves))))
        return grads

    monkeypatch.setattr(backward, "launch_backward", launch_backward_and_check)
    fake_side_by_side(monkeypatch, [2.0, 1.0, 1.0, 4.0, 0.5])
    table = backward.bench_configs(functools.partial(launch, attention_kernel_tuned), 64, shapes=((1, 2, 16),),
                                   causals=(True,), dtype=torch.float32)
    assert [(row[2], row[3]) for row in table.rows] == [("dK, dV", "16 x 16"), ("dK, dV", "16 x 32"),
                                                        ("dQ", "16 x 16"), ("dQ", "32 x 16"),
                                                        ("dK, dV + atomic dQ", "16 x 32")]
    varied = ([dict(dkdv=backward.dkdv_kernel, dkdv_meta=c.all_kwargs(), atomic_dq=False, tma_dq=False)
               for c in dkdv_configs]
              + [dict(dq=backward.dq_kernel, dq_meta=c.all_kwargs()) for c in dq_configs]
              + [dict(dkdv=backward.dkdv_kernel, dkdv_meta=c.all_kwargs(), atomic_dq=True, tma_dq=False)
                 for c in fused_configs])
    # each case runs once before the timing (its compilation, which a configuration too large for
    # the GPU fails), then once more by the clock
    assert [kernels for _, kernels, _ in calls] == varied * 2 and all(causal for causal, _, _ in calls)
    assert all(err < 1e-4 for _, _, err in calls), calls
    assert table.column("% of best") == pytest.approx([25.0, 50.0, 50.0, 12.5, 100.0])
    assert table.column("whole backward µs") == [2000.0, 1000.0, 1000.0, 4000.0, 500.0]
    assert "Left out" not in table.note


def test_backward_bench_configs_leave_out_what_does_not_fit(monkeypatch):
    # A configuration needing more shared memory than the GPU has (Triton raises OutOfResources
    # at its launch) gets no row, and the note names it; the others are timed as usual
    import functools

    import triton

    from lesson05_flash_attention import backward
    from lesson05_flash_attention.attention import attention_kernel_tuned, launch

    dkdv_configs = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}), triton.Config({"BLOCK_M": 32, "BLOCK_N": 32})]
    monkeypatch.setattr(backward, "capability", lambda: 80)  # no Hopper: no TMA rows (the fake clock's count)
    monkeypatch.setattr(backward, "NARROW_DKDV", dkdv_configs)
    monkeypatch.setattr(backward, "NARROW_DQ", dkdv_configs[:1])
    monkeypatch.setattr(backward, "NARROW_FUSED", dkdv_configs[:1])
    launch_backward = backward.launch_backward

    def too_large_at_32(*args, **kernels):
        if kernels.get("dkdv_meta", {}).get("BLOCK_M") == 32:
            raise triton.runtime.OutOfResources(264192, 232448, "shared memory")
        return launch_backward(*args, **kernels)

    monkeypatch.setattr(backward, "launch_backward", too_large_at_32)
    fake_side_by_side(monkeypatch, [2.0, 1.0, 1.0])
    table = backward.bench_configs(functools.partial(launch, attention_kernel_tuned), 64, shapes=((1, 2, 16),),
                                   causals=(True,), dtype=torch.float32)
    assert [(row[2], row[3]) for row in table.rows] == [("dK, dV", "16 x 16"), ("dQ", "16 x 16"),
                                                        ("dK, dV + atomic dQ", "16 x 16")]
    assert "Left out, more shared memory than this GPU has: dK, dV 32 x 32, 3 stages at head_dim 16." in table.note


def test_offsets_cases_take_the_index_type():
    # Nothing timed here: the cases bench.offsets_cost times, each run with either offsets type
    import triton.language as tl

    from lesson05_flash_attention.attention import attention_kernel_tuned, launch
    from lesson05_flash_attention.tuning import offsets_cases

    calls = []

    def launch_and_keep(kernel, q, k, v, causal, sm_scale, **kwargs):
        calls.append((q, k, v, causal, sm_scale))
        return launch(kernel, q, k, v, causal, sm_scale, **kwargs)

    cases = offsets_cases(launch_and_keep, attention_kernel_tuned, [(1, 2, 64)], seq=80)
    assert list(cases) == [f"attention(q, k, v, causal={c}), 1 x 2 x 80 x 64 float16" for c in (False, True)]
    for label, fn in cases.items():
        o32, lse32 = fn(tl.int32)
        o64, lse64 = fn(tl.int64)
        torch.testing.assert_close(o32, o64)
        torch.testing.assert_close(lse32, lse64)
        q, k, v, causal, sm_scale = calls[-1]
        assert f"causal={causal}" in label and sm_scale == 64 ** -0.5
        exact = attention_standard(q.double(), k.double(), v.double(), causal=causal, sm_scale=sm_scale)
        assert rel_error(o64, exact) < TOL[torch.float16]


# ----- every shape: grouped-query heads, cross-attention, any head dim to 256, decoding

from lesson05_flash_attention import backward, decode, tuning  # noqa: E402
from lesson05_flash_attention.attention import ROUTES, attention_kernel_decode, attention_kernel_tuned, launch, route  # noqa: E402

DECODE_KERNELS = dict(split_kernel=attention_kernel_decode)  # decode.launch's kernel: attention_kernel, PACKED

MODEL_SHAPES = [  # B, H_Q, H_KV, seq_q, seq_k, head_dim
    (1, 4, 2, 33, 33, 64),    # grouped-query heads
    (2, 3, 1, 17, 17, 32),    # multi-query: one key head
    (1, 2, 2, 5, 37, 64),     # fewer queries than keys: new queries against a KV cache
    (1, 2, 2, 40, 9, 32),     # more queries than keys: causal, the first 31 see no key
    (1, 4, 1, 20, 29, 80),    # head dim 80 (computed as 128), grouped, cross
    (1, 1, 1, 18, 18, 96),    # head dim 96 (not a power of two)
    (1, 1, 1, 9, 9, 1),       # head dim 1
    (1, 2, 1, 19, 23, 256),   # head dim 256
    (3, 4, 2, 21, 21, 16),    # batch 3 with grouped heads: the batch's stride counts every query head
]


def model_inputs(B, H, H_KV, seq_q, seq_k, D, dtype, requires_grad=False):
    make = lambda *shape: torch.randn(*shape, device=DEVICE, dtype=dtype).requires_grad_(requires_grad)  # noqa: E731
    return make(B, H, seq_q, D), make(B, H_KV, seq_k, D), make(B, H_KV, seq_k, D)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", MODEL_SHAPES, ids=[f"{s[0]}b{s[1]}q{s[2]}kv-{s[3]}x{s[4]}-d{s[5]}" for s in MODEL_SHAPES])
def test_every_shape_matches_float64(shape, dtype, causal):
    q, k, v = model_inputs(*shape, dtype)
    out = attention(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == dtype
    exact = attention_standard(q.double(), k.double(), v.double(), causal=causal)
    assert rel_error(out, exact) < TOL[dtype]
    if causal and shape[3] > shape[4]:  # the queries that see no key: exactly 0
        assert (out[:, :, : shape[3] - shape[4]] == 0).all()


def test_the_reference_matches_sdpa_bottom_right():
    # attention_standard against PyTorch's own: SDPA with enable_gqa and causal_lower_right
    from torch.nn.attention.bias import causal_lower_right
    import torch.nn.functional as F

    q, k, v = (t.double() for t in model_inputs(1, 4, 2, 7, 30, 64, torch.float32))
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(7, 30), enable_gqa=True)
    assert rel_error(attention_standard(q, k, v, causal=True), sdpa) < 1e-12
    assert rel_error(attention(q.float(), k.float(), v.float(), causal=True), sdpa) < TOL[torch.float32]


def test_the_route_names_the_kernel_for_each_kind_of_input():
    # decoding (a few packed query rows per key head against >= 512 keys): the split keys; on an
    # H100/H200 float16 q, k, v of one shape at head_dim 128, seq a multiple of 128: the Gluon kernel;
    # everything else, this chapter's kernel
    make = lambda *shape, dtype=torch.float16: torch.randn(*shape, device=DEVICE, dtype=dtype)  # noqa: E731
    from lesson05_flash_attention import hopper

    cases = {"split keys": [(make(2, 8, 1, 64), make(2, 2, 1024, 64)), (make(1, 4, 4, 16), make(1, 1, 512, 16))],
             "triton": [(make(1, 2, 64, 64), make(1, 2, 64, 64)), (make(1, 4, 33, 80), make(1, 2, 33, 80)),
                        (make(1, 2, 1, 64), make(1, 2, 511, 64)), (make(1, 2, 256, 64), make(1, 2, 256, 64)),
                        (make(1, 2, 256, 128, dtype=torch.float32), make(1, 2, 256, 128, dtype=torch.float32)),
                        (make(1, 2, 200, 128), make(1, 2, 200, 128))],
             "gluon" if hopper.HOPPER else "triton": [(make(1, 2, 256, 128), make(1, 2, 256, 128))]}
    for kernel, inputs in cases.items():
        for q, k in inputs:
            assert route(q, k, k) == kernel, (kernel, q.shape, k.shape, q.dtype)


class OnGPU(torch.Tensor):
    """A CPU tensor that says it is on a GPU: hopper.takes's first question, for the route's Gluon
    rows on any machine (nothing is launched: route() reads shapes, dtypes, strides, addresses)."""

    @property
    def is_cuda(self):
        return True


@pytest.mark.parametrize("row", ROUTES, ids=[f"{row[0]}, {row[1]}" for row in ROUTES])
def test_each_path_of_the_route_takes_its_example(row, monkeypatch):
    # ROUTES' example of each path (float16, empty) takes that path, as on an H100 or H200 with the
    # Gluon backward timed faster at every head dim it takes (the Hopper flag set here; the Triton
    # rows' examples take Triton there too); the Gluon rows' examples take Triton while torch.compile
    # traces, and the Gluon backward's under torch.use_deterministic_algorithms(True)
    from lesson05_flash_attention import hopper

    direction, path, _, _, (B, H, H_KV, seq_q, seq_k, D) = row
    q = torch.empty(B, H, seq_q, D, device=DEVICE, dtype=torch.float16)
    k = torch.empty(B, H_KV, seq_k, D, device=DEVICE, dtype=torch.float16)
    if not q.is_cuda:
        q, k = q.as_subclass(OnGPU), k.as_subclass(OnGPU)
    monkeypatch.setattr(hopper, "HOPPER", True)
    monkeypatch.setattr(hopper, "FASTER_BACKWARD_HEAD_DIMS", hopper.HEAD_DIMS)
    assert route(q, k, k, direction) == path
    if path == "gluon":
        deterministic = torch.are_deterministic_algorithms_enabled()
        try:
            torch.use_deterministic_algorithms(True)
            assert route(q, k, k, direction) == ("triton" if direction == "backward" else "gluon")
        finally:
            torch.use_deterministic_algorithms(deterministic)
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        assert route(q, k, k, direction) == "triton"
    monkeypatch.setattr(hopper, "HOPPER", False)  # any other GPU, or the CPU: Triton's kernels
    assert route(q, k, k, direction) == ("triton" if path == "gluon" else path)


def test_every_launch_names_every_argument_of_its_kernel(monkeypatch):
    # torch.compile's tracer reads a kernel's code with the arguments its launch hands it (an
    # autotuner's first configuration added) and takes a kernel handed fewer than all of them to write
    # every tensor it reads (then an input that is a view fails to compile): so attention's launches,
    # forward and backward, each path the CPU reaches, name every argument, defaults too (TRACE=False)
    from triton.runtime import Autotuner
    from triton.runtime.jit import KernelInterface

    launched, getitem = {}, KernelInterface.__getitem__

    def record(self, grid):
        launch = getitem(self, grid)

        def run(*args, **kwargs):
            jit = self.fn if isinstance(self, Autotuner) else self
            tuned = set(self.configs[0].kwargs) if isinstance(self, Autotuner) else set()
            missing = set(jit.arg_names) - set(jit.arg_names[:len(args)]) - set(kwargs) - tuned
            launched.setdefault(jit.__name__, set()).update(missing)
            return launch(*args, **kwargs)
        return run

    monkeypatch.setattr(KernelInterface, "__getitem__", record)
    for shape in [(1, 2, 2, 40, 40, 16), (1, 4, 2, 9, 40, 16), (1, 4, 1, 1, 1024, 8)]:  # plain, grouped, decoding
        q, k, v = model_inputs(*shape, torch.float32, requires_grad=True)
        attention(q, k, v, causal=True).sum().backward()
    assert sorted(launched) == ["attention_kernel", "combine_splits_kernel", "dkdv_kernel", "dq_kernel",
                                "preprocess_kernel", "sum_parts_kernel"]
    assert all(not missing for missing in launched.values()), launched


def test_torch_compile_traces_attention_whole_forward_and_backward():
    # Dynamo (fullgraph) and AOTAutograd trace attention on each path torch.compile reaches: the
    # Triton kernel (plain, grouped heads and two lengths causal; at head_dim 128 in float16, where
    # an H100 or H200 would run Gluon's, which Dynamo does not trace) and decoding's split keys with
    # their merge; its backward's three kernels; no launch the tracer cannot read. Without a GPU:
    # tests/compile_trace.py, in a compiled-mode child (tests/test_training.py runs them on a GPU)
    from common import child
    from conftest import TESTS

    op = "lesson05_flash_attention.attention:attention"
    cases = [dict(op=op, shapes=[(1, 2, 40, 16)] * 3, dtype="float32"),
             dict(op=op, shapes=[(1, 4, 9, 16), (1, 2, 40, 16), (1, 2, 40, 16)], dtype="float32",
                  kwargs=dict(causal=True)),
             dict(op=op, shapes=[(1, 2, 256, 128)] * 3, dtype="float16"),
             dict(op=op, shapes=[(1, 4, 1, 8), (1, 1, 1024, 8), (1, 1, 1024, 8)], dtype="float32"),
             dict(op="lesson05_flash_attention.attention:attention_qkv", shapes=[(1, 40, 8, 16)], dtype="bfloat16",
                  kwargs=dict(heads=4, causal=True))]  # a model's packed projection (lesson 6's)
    _, results = child.run("compile_trace:joint_graphs", dict(cases=cases), interpret=False, path=(TESTS,))
    # (with grouped heads, dK/dV in parts, added by sum_parts_kernel: backward.dkdv_parts)
    backward_kernels = ["preprocess_kernel", "dkdv_kernel", "dq_kernel"]
    in_parts = ["preprocess_kernel", "dkdv_kernel", "sum_parts_kernel", "dq_kernel"]
    expected = [["attention_kernel", *backward_kernels], ["attention_kernel", *in_parts],
                ["attention_kernel", *backward_kernels], ["attention_kernel", "combine_splits_kernel", *in_parts],
                ["attention_kernel", *in_parts]]
    for case, (error, kernels, warned), wanted in zip(cases, results, expected):
        assert error is None, (case, error)
        assert "Encountered an exception" not in warned, (case, warned[-2000:])
        assert kernels == wanted, case


def test_the_route_table_has_a_row_for_each_path():
    # every path route() returns, once, in the order it tries them
    assert [(direction, path) for direction, path, *_ in ROUTES] == [
        ("forward", "split keys"), ("forward", "gluon"), ("forward", "triton"), ("backward", "gluon"),
        ("backward", "triton")]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [MODEL_SHAPES[0], MODEL_SHAPES[2], MODEL_SHAPES[3], MODEL_SHAPES[4], MODEL_SHAPES[8]],
                         ids=["grouped", "kv-cache", "queries-past-keys", "d80-grouped-cross", "batch3-grouped"])
def test_every_shapes_gradients(shape, dtype, causal):
    from common.checks import grad_errors, grad_ok

    q, k, v = model_inputs(*shape, dtype)
    errors = grad_errors(attention, attention_standard, [q, k, v], causal=causal)
    assert all(grad_ok(ours, theirs) for ours, theirs in errors), errors


def test_gradients_with_frozen_keys():
    # a frozen k: its gradient is never asked for, the others still right (grouped, cross, causal)
    q, k, v = model_inputs(1, 4, 2, 12, 21, 32, torch.float32, requires_grad=True)
    k.requires_grad_(False)
    g = torch.randn(1, 4, 12, 32, device=DEVICE)
    dq, dv = torch.autograd.grad(attention(q, k, v, causal=True), (q, v), g)
    leaves = [t.detach().double().requires_grad_() for t in (q, v)]
    exact = torch.autograd.grad(attention_standard(leaves[0], k.double(), leaves[1], causal=True), leaves, g.double())
    assert rel_error(dq, exact[0]) < 1e-5 and rel_error(dv, exact[1]) < 1e-5


def test_lse_is_the_log_of_each_querys_sum():
    # lse, which the backward reads: log2 of sum_j exp(score_ij), -inf for a query that sees no key
    q, k, v = model_inputs(1, 2, 1, 12, 5, 32, torch.float32)
    o, lse = launch(attention_kernel_tuned, q, k, v, True, 0.25)
    s = (q.double() @ k.double().repeat_interleave(2, dim=1).transpose(-2, -1)) * 0.25
    allowed = torch.arange(5, device=DEVICE)[None, :] <= torch.arange(12, device=DEVICE)[:, None] - 7
    exact = torch.logsumexp(s.masked_fill(~allowed, float("-inf")), dim=-1) / math.log(2)
    assert torch.equal(lse[..., :7], torch.full_like(lse[..., :7], float("-inf")))
    assert rel_error(lse[..., 7:], exact[..., 7:]) < 1e-6
    assert torch.equal(o[:, :, :7], torch.zeros_like(o[:, :, :7]))


def test_no_keys_or_no_queries():
    # no key at all: every query sees nothing, so 0 (and no gradient); no query: an empty output
    q, k, v = model_inputs(1, 2, 1, 5, 0, 16, torch.float32, requires_grad=True)
    out = attention(q, k, v)
    assert torch.equal(out, torch.zeros_like(out))
    (dq,) = torch.autograd.grad(out.sum(), (q,))
    assert torch.equal(dq, torch.zeros_like(dq))
    q, k, v = model_inputs(1, 2, 1, 0, 7, 16, torch.float32)
    assert attention(q, k, v, causal=True).shape == (1, 2, 0, 16)


def test_dkdv_parts_split_a_multi_query_heads_work():
    # dK/dV in parts where the key heads' blocks alone give fewer than 4 programs per SM (132 SMs
    # here, as on the H200): multi-query 32/1 at 4096 keys, batch 4, in 5 parts; grouped-query 32/8 in
    # one. Any number of parts, dividing the query heads or not (7 heads in 1, 2, 3 and 7 parts),
    # gives the gradients of one part, to float32 rounding of the sums' order; batch 2.
    assert backward.dkdv_parts(4 * 1, 4096, 32) == 5 and backward.dkdv_parts(4 * 8, 4096, 4) == 1
    assert backward.dkdv_parts(1, 17, 3) == 3            # at most GROUP
    q, k, v = model_inputs(2, 7, 1, 21, 37, 32, torch.float32)
    o, lse = launch(attention_kernel_tuned, q, k, v, True, 0.3)
    do = torch.randn_like(o)
    whole = backward.launch_backward(do, q, k, v, o, lse, True, 0.3, parts=1)
    for parts in (2, 3, 7):
        for a, b in zip(backward.launch_backward(do, q, k, v, o, lse, True, 0.3, parts=parts), whole):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    # the parts' sum (sum_parts_kernel) cast to bfloat16 and written where dk and dv lie, each its own
    # layout: dk a view of a (B, seq_k, 2, D) buffer, as in attention_qkv's d(QKV), dv contiguous; the
    # same numbers as one part's, to bfloat16's rounding
    q, k, v, o, do = (t.to(torch.bfloat16) for t in (q, k, v, o, do))
    buffer = torch.full((2, 37, 2, 32), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    out = (torch.empty_like(q), buffer[:, :, :1].transpose(1, 2), torch.full_like(v, float("nan")))
    dq, dk, dv = backward.launch_backward(do, q, k, v, o, lse, True, 0.3, parts=3, out=out)
    assert dk is out[1] and dv is out[2] and not buffer[:, :, :1].isnan().any() and not dv.isnan().any()
    for a, b in zip((dq, dk, dv), backward.launch_backward(do, q, k, v, o, lse, True, 0.3, parts=1)):
        torch.testing.assert_close(a, b, atol=1e-2, rtol=1.6e-2)


@pytest.mark.parametrize("D, split", [(80, 2), (256, 4)])
def test_head_dim_split_gives_one_slices_gradients(D, split):
    # DIM_SPLIT programs per key block, each keeping a slice of the head dim's columns of dK and dV
    # (head dim 256: whole accumulators would spill), give the gradients of one program per block.
    # Head dim 80 computes as 128: its second slice of 64 columns holds 16 real ones and the padding.
    q, k, v = model_inputs(1, 4, 2, 19, 37, D, torch.float32)
    o, lse = launch(attention_kernel_tuned, q, k, v, True, 0.3)
    do = torch.randn_like(o)
    whole = backward.launch_backward(do, q, k, v, o, lse, True, 0.3)
    sliced = backward.launch_backward(do, q, k, v, o, lse, True, 0.3, dkdv=backward.dkdv_kernel,
                                      dkdv_meta=dict(BLOCK_M=16, BLOCK_N=16, DIM_SPLIT=split))
    for a, b in zip(sliced, whole):  # the same float32 sums in another order (16-blocks, not the launcher's):
        assert rel_error(a, b) < 1e-5  # ~1e-6 apart (a slice at the wrong columns is off by its whole size)


def test_the_autotuners_lists_by_head_dim_and_problem_size():
    # the forward's and each backward kernel's: from 512 x 512 (query, key) pairs up every
    # configuration of the head dim's list (to 128, or 256), below it the list's last alone; the
    # backward's float32 the last too; a head-dim split (DIM_SPLIT) at head dim 256 only
    from lesson05_flash_attention import attention as op

    x16, x32 = torch.empty(1, dtype=torch.float16), torch.empty(1)
    prune = op.configs_for
    everything = op.NARROW + op.WIDE
    assert prune(everything, {"seq_q": 64, "seq_k": 4096}, BLOCK_D=128) == op.NARROW
    assert prune(everything, {"seq_q": 4096, "seq_k": 64}, BLOCK_D=256) == op.WIDE
    assert prune(everything, {"seq_q": 511, "seq_k": 512}, BLOCK_D=64) == op.NARROW[-1:]
    for name, (narrow, wide) in backward.LISTS.items():
        prune = backward.configs_for(name)["early_config_prune"]
        big = {"seq_q": 4096, "seq_k": 4096, "q_ptr": x16}
        assert prune(narrow + wide, big, BLOCK_D=64) == narrow and prune(narrow + wide, dict(big, seq_q=16), BLOCK_D=64) \
            == narrow[-1:]
        assert prune(narrow + wide, dict(big, q_ptr=x32), BLOCK_D=64) == narrow[-1:]
        if wide:
            assert prune(narrow + wide, big, BLOCK_D=256) == wide
        assert all(c.kwargs.get("DIM_SPLIT", 1) == 1 for c in narrow)
        if wide:  # (atomic dQ takes head dims to 128 only)
            assert prune(narrow + wide, dict(big, seq_q=16), BLOCK_D=256) == wide[-1:] and narrow[-1] is not wide[-1]
    assert any(c.kwargs.get("DIM_SPLIT", 1) > 1 for c in backward.WIDE_DKDV)


def test_bench_general_with_a_fake_clock(monkeypatch):
    # Each implementation runs forward and backward on each case; one that refuses a shape is left
    # out of that case; the ratios divide by the first implementation's time, whose rows name the
    # kernel it ran; TFLOP/s count only the (query, key) pairs a bottom-right causal mask keeps
    def refuses_grouped(q, k, v, causal):
        if k.shape[1] != q.shape[1]:
            raise RuntimeError("No available kernel. Aborting execution.\nmore")
        return attention_standard(q, k, v, causal=causal)

    impls = {"ours": attention, "reference": refuses_grouped}
    cases = [(1, 2, 1, 5, 9, 24, True), (1, 2, 2, 3, 3, 16, False)]
    fake_side_by_side(monkeypatch, [1.0, 3.0, 2.0, 2.0, 2.0, 8.0])  # case 1: forward, backward; case 2: the same
    table = tuning.bench_general(impls, cases, dtype=torch.float32, kernel_of=lambda q, k, v: f"{route(q, k, v)} forward")
    assert [(row[0], row[2]) for row in table.rows] == [("1 x 2/1 x 5/9 x 24", "ours (triton forward)"),
                                                        ("1 x 2/2 x 3/3 x 16", "ours (triton forward)"),
                                                        ("1 x 2/2 x 3/3 x 16", "reference")]
    assert table.column("forward µs") == [1000.0, 2000.0, 2000.0] and table.column("backward µs") == [3000.0, 2000.0, 8000.0]
    assert table.column("backward: its µs / ours") == [1.0, 1.0, 4.0]
    # causal, 5 queries on 9 keys, bottom-right: query i sees 4 + i + 1 keys, 5 + 6 + 7 + 8 + 9 = 35 pairs
    assert tuning.visible_pairs(5, 9, True) == 35 and tuning.visible_pairs(9, 5, True) == 15  # 0,0,0,0,1,2,3,4,5
    assert table.column("forward TFLOP/s")[0] == pytest.approx(4 * 2 * 35 * 24 / 1e-3 / 1e12)


# ----- decode.py: a few queries against many keys, the keys split between programs

DECODE = [  # B, H_Q, H_KV, seq_q, seq_k, head_dim
    (2, 6, 2, 1, 50, 64),     # one query, three query heads packed per key head
    (1, 4, 1, 3, 37, 80),     # three queries each (speculative decoding), multi-query, head dim 80
    (1, 2, 2, 5, 3, 32),      # more queries than keys: causal, the first two see no key
    (1, 2, 1, 1, 129, 256),   # head dim 256
    (2, 3, 3, 2, 70, 16),     # one query head per key head
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", DECODE, ids=[f"{s[1]}q{s[2]}kv-{s[3]}x{s[4]}-d{s[5]}" for s in DECODE])
def test_decode_matches_float64_for_any_split(shape, dtype, causal):
    # the keys in 1, 3 and 7 shares (a share of a few keys, one the causal mask hides from some
    # rows): the merged output within the dtype's tolerance, lse the plain launch's to float32
    # rounding (-inf exactly where a query sees no key), which the backward reads
    q, k, v = model_inputs(*shape, dtype)
    exact = attention_standard(q.double(), k.double(), v.double(), causal=causal, sm_scale=0.3)
    _, lse_plain = launch(attention_kernel_tuned, q, k, v, causal, 0.3)
    seen = torch.isfinite(lse_plain)
    for num_splits in (1, 3, 7):
        o, lse = decode.launch(q, k, v, causal, 0.3, num_splits=num_splits, **DECODE_KERNELS)
        assert o.dtype == dtype and rel_error(o, exact) < TOL[dtype], num_splits
        assert torch.equal(torch.isfinite(lse), seen) and (lse[seen] - lse_plain[seen]).abs().max() < 1e-5


def test_decode_merges_large_scores():
    # scores of thousands in base 2 (2^lse overflows float32) in 4 shares: the merge must weigh the
    # shares from the largest lse. Tolerance: float32 scores of about 6,400 carry rounding errors of
    # about 1e-3 in the exponent, which near-one-hot rows turn into relative errors of that size
    q, k, v = model_inputs(1, 2, 1, 1, 2048, 16, torch.float32)
    q, k = q * 40, k * 40
    assert route(q, k, v) == "split keys" and decode.choose_splits(1, 2048) == 4
    out = attention(q, k, v)
    assert torch.isfinite(out).all() and rel_error(out, attention_standard(q.double(), k.double(), v.double())) < 1e-2


def test_decode_default_shares_cover_every_key():
    # 8,200 keys on one key head: 16 shares wanted, of 513 keys rounded up to whole key blocks (640):
    # 13 shares, no more than the merge reads (rounded down, 512, they would be 17)
    q, k, v = model_inputs(1, 2, 1, 1, 8200, 16, torch.float32)
    assert route(q, k, v) == "split keys" and decode.choose_splits(1, 8200) == decode.MAX_SPLITS
    assert rel_error(attention(q, k, v), attention_standard(q.double(), k.double(), v.double())) < TOL[torch.float32]


def test_decode_chooses_its_splits_and_attention_takes_it(monkeypatch):
    # decoding: GROUP x seq_q packed rows, at most 64 and 64 x 64 elements, against >= 512 keys; shares
    # for 4 programs per SM
    # (132 SMs here, as on the H200), of at least 512 keys, at most 16
    q, k = torch.empty(16, 32, 1, 128), torch.empty(16, 8, 8192, 128)
    assert decode.takes(q, k) and decode.takes(torch.empty(1, 32, 16, 8), torch.empty(1, 32, 512, 8))
    assert not decode.takes(torch.empty(1, 32, 17, 8), torch.empty(1, 8, 4096, 8))  # 68 rows
    assert not decode.takes(q, torch.empty(16, 8, 511, 128))
    assert decode.max_rows(256) == 16 and decode.max_rows(80) == 32 and decode.max_rows(64) == 64
    assert not decode.takes(torch.empty(1, 17, 1, 256), torch.empty(1, 1, 512, 256))  # 17 rows of 256
    assert decode.choose_splits(16 * 8, 8192) == 5      # 528 programs wanted: 5 x 128
    assert decode.choose_splits(8, 8192) == 16          # 66 wanted, 16 at most
    assert decode.choose_splits(8, 1500) == 2           # shares of 512 keys or more
    assert decode.choose_splits(1024, 8192) == 1        # enough programs already
    q, k, v = model_inputs(1, 4, 1, 2, 512, 16, torch.float32)
    with pytest.raises(ValueError, match="num_splits must be from 1 to 16"):
        decode.launch(q, k, v, False, 0.25, num_splits=17, **DECODE_KERNELS)
    calls = []
    monkeypatch.setattr(decode, "launch", lambda *args, **kwargs: calls.append(args) or (None, None))
    attention(q, k, v)
    assert len(calls) == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_decode_gradients(dtype):
    # attention() on a decode shape, forward by decode.py (2 shares of 520 keys), backward by backward.py's
    from common.checks import grad_errors, grad_ok

    q, k, v = model_inputs(1, 4, 2, 2, 1100, 32, dtype)
    assert decode.takes(q, k) and decode.choose_splits(2, 1100) == 2
    errors = grad_errors(attention, attention_standard, [q, k, v], causal=True)
    assert all(grad_ok(ours, theirs) for ours, theirs in errors), errors


PACKED = [  # B, H_Q, H_KV, seq_q, seq_k, head_dim: the packed block's GROUP x seq_q rows, and where each one goes
    (2, 8, 2, 3, 129, 32),   # 12 rows per key head, 2 key heads, 2 batches; causal, the rows' last keys cross key 128
    (1, 16, 1, 4, 70, 16),   # 64 rows, the most a block takes (decode.MAX_ROWS): 4 queries of 16 heads
    (1, 12, 4, 5, 40, 64),   # 15 rows of a 16-row block: one row of padding
    (3, 6, 3, 7, 33, 8),     # 14 rows, 3 batches, causal: each query's last key 26 + i
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", PACKED, ids=[f"{s[0]}b{s[1]}q{s[2]}kv-{s[3]}x{s[4]}-d{s[5]}" for s in PACKED])
def test_decode_packs_each_groups_heads_and_queries_into_one_block(shape, causal):
    # decode.py's packed block: row r of key head hk's block is query head hk * GROUP + r // seq_q, query
    # r % seq_q. Each (batch, head, query) row against float64, in 1, 2 and 3 shares of the keys: a row
    # computed for the wrong head or query, or not at all (blocks of more than 16 rows), or a causal
    # stage that lets a row see keys past its own (the unmasked stage must stop at the first query's
    # last key: seq_k 129, seq_q 3 put the queries' last keys on both sides of 128, a multiple of every
    # key block) shows in its own row
    q, k, v = model_inputs(*shape, torch.float32)
    exact = attention_standard(q.double(), k.double(), v.double(), causal=causal, sm_scale=0.3)
    for num_splits in (1, 2, 3):
        o, _ = decode.launch(q, k, v, causal, 0.3, num_splits=num_splits, **DECODE_KERNELS)
        per_row = (o.double() - exact).norm(dim=-1) / exact.norm(dim=-1)
        assert per_row.max() < TOL[torch.float32], (num_splits, (per_row >= TOL[torch.float32]).nonzero()[:4].tolist())


# ----- the route's Gluon paths (hopper.py's kernels; lesson 7 and tests/test_lesson07.py take them apart)

from lesson05_flash_attention import hopper  # noqa: E402


@pytest.mark.skipif(not hopper.HOPPER, reason="the Gluon kernel runs on sm_90 (H100, H200) only")
def test_attention_takes_the_gluon_kernel_on_hopper_forward_and_for_training(monkeypatch):
    # attention() runs hopper.launch, for inference and for training, where takes() says so and the
    # head_dim is one it was timed faster at (128); the backward (Triton's, backward.py) reads its
    # lse and gives float64 autograd's gradients
    from common.checks import grad_errors, grad_ok

    calls = []
    real_launch = hopper.launch
    monkeypatch.setattr(hopper, "launch", lambda *a: calls.append(a[0].shape) or real_launch(*a))
    q, k, v = (torch.randn(1, 2, 256, 128, device=DEVICE, dtype=torch.float16) for _ in range(3))
    attention(q, k, v, causal=True)
    assert len(calls) == 1
    errors = grad_errors(lambda q, k, v: attention(q, k, v, causal=True),
                         lambda q, k, v: attention_standard(q, k, v, causal=True), [q, k, v])
    assert len(calls) > 1 and all(grad_ok(ours, theirs) for ours, theirs in errors)
    before = len(calls)
    attention(q[:, :, :200].contiguous(), k[:, :, :200].contiguous(), v[:, :, :200].contiguous())
    assert len(calls) == before  # seq 200: the Triton kernel
    attention(q[..., :64].contiguous(), k[..., :64].contiguous(), v[..., :64].contiguous())
    assert len(calls) == before  # head_dim 64: takes() would, but the Triton kernel is as fast there


def backward_path(path: str) -> tuple:
    """(B, H, H_KV, seq, D) and the backward's launcher for `path`: "gluon", hopper.py's, on an H100 or
    H200 only (seq in 128s), or "triton", backward.py's, anywhere."""
    if path == "gluon" and not hopper.HOPPER:
        pytest.skip("the Gluon backward runs on sm_90 (H100, H200) only")
    if path == "gluon":
        return (2, 4, 2, 384, 64), hopper.launch_backward
    return (2, 4, 2, 80, 32), backward.launch_backward


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("path", ["triton", "gluon"])
def test_each_dq_row_lands_on_its_own_query(path, causal):
    # dQ's row i is dS_i K, and dS_i = P_i * (dO_i V^T - rowsum(dO_i * O_i)) is exactly 0 where dO_i is:
    # with dO zero on a random half of the rows (a pattern of its own in every head), a backward that
    # adds a query block's dQ into another block's rows, another head's or another batch's puts numbers
    # where zeros must be, whatever their size; the other rows, and dK, dV, within twice the error of
    # torch's autograd in float16 (grad_ok). The Gluon backward (hopper.py: a dQ tile's row, computed
    # from its head, query block and consumer, added by TMA) runs on an H100 or H200 only; the Triton
    # backward's run here shows the test fails where rows are mixed.
    from common.checks import errors_against_autograd, grad_ok

    (B, H, H_KV, seq, D), run = backward_path(path)
    q = torch.randn(B, H, seq, D, device=DEVICE, dtype=torch.float16)
    k, v = (torch.randn(B, H_KV, seq, D, device=DEVICE, dtype=torch.float16) for _ in range(2))
    silent = torch.rand(B, H, seq, 1, device=DEVICE) < 0.5
    do = torch.randn_like(q).masked_fill(silent, 0.0)
    o, lse = launch(attention_kernel_tuned, q, k, v, causal, D ** -0.5)
    if path == "gluon":
        assert hopper.backward_takes(q, k, v)
    dq, dk, dv = run(do, q, k, v, o, lse, causal, D ** -0.5)
    stray = dq.masked_select(silent).ne(0).view(-1, D).any(dim=1)  # (a query's row of dQ, where dO's is 0)
    assert not stray.any(), f"{int(stray.sum())} rows of dQ where dO is 0 hold numbers"
    errors = errors_against_autograd((dq, dk, dv), attention_standard, [q, k, v], do, causal=causal)
    for name, (ours, theirs) in zip("qkv", errors):
        assert grad_ok(ours, theirs), f"d{name}: {ours:.2e} against torch's {theirs:.2e}"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("path", ["triton", "gluon"])
def test_the_backward_reads_and_writes_a_qkv_projections_heads_where_they_lie(path, causal):
    # lesson 6's layout: q, k and v the heads of one (B, seq, H + 2 H_KV, D) projection, side by side in
    # each row, dO a transposed view as the model's; the backward writes dq, dk and dv into one d(QKV)
    # buffer through out (AttentionQKV). The buffer starts as NaN: every element written, each
    # gradient within twice torch's error against float64 autograd on the same views. The Gluon
    # backward (each head's tile from its row and column: hopper.origin) on an H100 or H200 only.
    from common.checks import errors_against_autograd, grad_ok
    from lesson05_flash_attention.attention import split_heads

    (B, H, H_KV, seq, D), run = backward_path(path)
    qkv = torch.randn(B, seq, H + 2 * H_KV, D, device=DEVICE, dtype=torch.float16)
    q, k, v = split_heads(qkv, H)
    do = torch.randn(B, seq, H, D, device=DEVICE, dtype=torch.float16).transpose(1, 2)
    o, lse = launch(attention_kernel_tuned, q, k, v, causal, D ** -0.5)
    if path == "gluon":
        assert hopper.backward_takes(q, k, v) and hopper.rows_readable(do)
    dqkv = torch.full_like(qkv, float("nan"))
    run(do, q, k, v, o, lse, causal, D ** -0.5, out=split_heads(dqkv, H))
    assert not dqkv.isnan().any(), f"{int(dqkv.isnan().sum())} elements of d(QKV) never written"
    errors = errors_against_autograd(split_heads(dqkv, H), attention_standard, [q, k, v], do, causal=causal)
    for name, (ours, theirs) in zip("qkv", errors):
        assert grad_ok(ours, theirs), f"d{name}: {ours:.2e} against torch's {theirs:.2e}"


@pytest.mark.skipif(not hopper.HOPPER, reason="the Gluon kernel runs on sm_90 (H100, H200) only")
def test_attention_qkv_backward_takes_the_gluon_kernel_where_timed_faster(monkeypatch):
    # lesson 6's op: attention_qkv's gradient runs hopper.launch_backward into its d(QKV) buffer at
    # FASTER_BACKWARD_HEAD_DIMS (set here), within twice torch's float16 error against float64 autograd
    from common.checks import grad_errors, grad_ok
    from lesson05_flash_attention.attention import attention_qkv, split_heads

    calls = []
    real = hopper.launch_backward
    monkeypatch.setattr(hopper, "launch_backward", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    monkeypatch.setattr(hopper, "FASTER_BACKWARD_HEAD_DIMS", (64, 128))
    qkv = torch.randn(2, 256, 12, 64, device=DEVICE, dtype=torch.float16)  # 8 query heads, 2 key heads
    (ours, theirs), = grad_errors(lambda x: attention_qkv(x, 8, causal=True),
                                  lambda x: attention_standard(*split_heads(x, 8), causal=True), [qkv])
    assert len(calls) == 1 and "out" in calls[0] and grad_ok(ours, theirs), (ours, theirs)


def test_the_gluon_backward_takes_the_layouts_tma_reads_as_rows():
    # hopper.rows_readable: contiguous heads, and a projection's heads side by side in a row; not a
    # layout whose rows are not contiguous, nor heads that overrun their row
    from lesson05_flash_attention.attention import split_heads

    qkv = torch.empty(2, 256, 8, 64, dtype=torch.float16)
    q, k, v = split_heads(qkv, 4)
    assert all(hopper.rows_readable(t) for t in (q, k, v, torch.empty(2, 4, 256, 64, dtype=torch.float16)))
    assert not hopper.rows_readable(q.transpose(2, 3).contiguous().transpose(2, 3))  # (columns contiguous)
    assert not hopper.rows_readable(torch.empty(2, 256, 4, 64, dtype=torch.float16).as_strided(
        (2, 4, 256, 64), (256 * 128, 48, 128, 1)))  # heads 48 apart, 64 wide: the last overruns its 128-wide row


@pytest.mark.skipif(not hopper.HOPPER, reason="the Gluon kernel runs on sm_90 (H100, H200) only")
def test_attention_backward_takes_the_gluon_kernel_where_timed_faster(monkeypatch):
    # attention()'s gradient runs hopper.launch_backward at FASTER_BACKWARD_HEAD_DIMS (set here: the
    # rule, whatever the table says today) and gives float64 autograd's gradients; under
    # torch.use_deterministic_algorithms(True) the Triton backward runs instead
    from common.checks import grad_errors, grad_ok

    calls = []
    real = hopper.launch_backward
    monkeypatch.setattr(hopper, "launch_backward", lambda *a: calls.append(a[1].shape) or real(*a))
    monkeypatch.setattr(hopper, "FASTER_BACKWARD_HEAD_DIMS", (64, 128))
    q = torch.randn(1, 4, 256, 64, device=DEVICE, dtype=torch.float16)
    k, v = (torch.randn(1, 2, 256, 64, device=DEVICE, dtype=torch.float16) for _ in range(2))
    assert route(q, k, v, "backward") == "gluon"
    errors = grad_errors(lambda q, k, v: attention(q, k, v, causal=True),
                         lambda q, k, v: attention_standard(q, k, v, causal=True), [q, k, v])
    assert len(calls) == 1 and all(grad_ok(ours, theirs) for ours, theirs in errors)
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        assert route(q, k, v, "backward") == "triton"
    finally:
        torch.use_deterministic_algorithms(deterministic)
    monkeypatch.setattr(hopper, "FASTER_BACKWARD_HEAD_DIMS", ())
    assert route(q, k, v, "backward") == "triton"


def test_under_torch_compile_each_kernel_takes_one_recorded_configuration():
    # the tracer refuses an autotuner launched once a layer (common.launch.traced_config): the plain
    # kernels, with the sweeps' fastest configuration for 16-bit inputs and the list's last (which
    # fits every GPU) for float32; at head dim 64 with the causal mask 64 x 64 (section 10's winner)
    from common.launch import traced_config
    from lesson05_flash_attention import attention as op

    bf16, fp32 = (torch.empty(1, 1, 8, 64, dtype=t) for t in (torch.bfloat16, torch.float32))
    assert traced_config(op.NARROW, torch.bfloat16)["BLOCK_M"] == op.NARROW[0].kwargs["BLOCK_M"]
    assert traced_config(op.NARROW, torch.float32) == {**op.NARROW[-1].kwargs, "num_warps": op.NARROW[-1].num_warps,
                                                       "num_stages": op.NARROW[-1].num_stages}
    assert (op.traced(bf16, True)["BLOCK_M"], op.traced(bf16, False)["BLOCK_M"]) == (64, 128)
    assert op.traced(fp32, True) == traced_config(op.NARROW, torch.float32)
    kernels = backward.traced_kernels(bf16)
    assert kernels["dkdv"] is backward.dkdv_kernel and kernels["dq"] is backward.dq_kernel
    assert (kernels["dkdv_meta"]["BLOCK_N"], kernels["dkdv_meta"]["num_warps"]) == (64, 4)
