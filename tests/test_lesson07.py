"""Lesson 7: the Hopper kernels as the chapter shows them. The persistent grid's arithmetic; the TMA
kernel under the interpreter; the barrier phases against an mbarrier's rule; what each kernel compiles
to for sm_90 (on any machine); the timing tables' rows on a fake clock; the routes on Hopper; the
Gluon kernels' preconditions and, on an H100 or H200, their values; the chapter's runs."""
import math

import pytest
import torch
import triton

from conftest import DEVICE, INTERPRET, parse_command_line, run_as_notebook, run_script
from common.checks import rel_error
from lesson04_matmul import hopper as matmul_hopper
from lesson05_flash_attention import hopper
from lesson05_flash_attention.attention import ROUTES, attention_kernel_tuned, launch
from lesson05_flash_attention.main import TOLERANCE as TOL, attention_standard
from lesson07_hopper import machine_code
from lesson07_hopper.main import SECTIONS, bench_forward, bench_steps, check, phases, routes, schedule


# ----- TMA and a persistent grid (lesson 4's hopper.py)

def test_the_persistent_schedule_counts_every_tile_once():
    # 4096^2 in 128 x 256 tiles: 32 x 16 = 512 tiles on 132 SMs, 3.88 waves; persistent, 116 programs
    # take 4 tiles and 16 take 3; 3 descriptors per program
    table = schedule()
    row = dict(zip(table.headers, table.rows[0]))
    assert row["tiles"] == 512 and row["persistent programs"] == 132 and row["tiles per persistent program"] == "3 or 4"
    assert row["waves, a program per tile"] == pytest.approx(512 / 132)
    assert (row["descriptors built, a program per tile"], row["... persistent"]) == (3 * 512, 3 * 132)
    for tiles, programs, share in zip(table.column("tiles"), table.column("persistent programs"),
                                      table.column("tiles per persistent program")):
        counts = [len(range(p, tiles, programs)) for p in range(programs)]  # the kernel's tl.range over tile ids
        assert sum(counts) == tiles and share.split(" or ") in ([str(min(counts))], [str(min(counts)), str(max(counts))])


def test_the_tma_check_passes():
    if not INTERPRET and not matmul_hopper.HOPPER:
        pytest.skip("TMA needs a Hopper GPU (sm_90) or newer")
    table = check()
    assert all(table.column("ok")) and len(table.rows) == 16
    assert 3 in table.column("programs") and max(table.column("tiles")) > 3  # programs that loop over tiles
    assert set(table.column("parts of K")) == {1, 2, 3} and len(set(table.column("as they lie"))) == 4
    assert set(table.column("pieces of C")) == {1, 2, 4}
    split = list(zip(table.column("tiles"), table.column("tiles split")))
    assert any(0 < s < t for t, s in split) and any(0 < s == t for t, s in split)  # the last wave's, and all


def test_ptx_pointer_loads_become_cp_async_and_descriptors_become_tma():
    # compiled for sm_90: Triton pipelines the pointer loads with per-thread asynchronous copies; the
    # descriptor loads become TMA bulk copies; tl.dot becomes wgmma in both
    pointers, descriptors = machine_code.copy_instructions().rows
    cp_async, tma, wgmma = 1, 2, 3
    assert pointers[cp_async] > 0 and pointers[tma] == 0
    assert descriptors[tma] > 0 and descriptors[cp_async] == 0
    assert pointers[wgmma] > 0 and descriptors[wgmma] > 0


def test_c_in_halves_makes_room_for_a_fourth_stage():
    # section 6's last step, compiled for sm_90: 128 x 256 tiles with 4 stages need 256 KB with C's
    # tile whole, past the 227 KB a program may have; with C stored in halves (EPILOGUE_SPLIT=2), 224
    # KB. hopper.shared_bytes, the chapter's arithmetic, counts the same (the barriers aside)
    from common import ptx
    from lesson07_hopper.main import STEP_TILE

    tile = {k: STEP_TILE[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}
    signature = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                 "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32", **dict.fromkeys(tile, "constexpr"),
                 "FLATTEN": "constexpr", "EPILOGUE_SPLIT": "constexpr"}
    jobs = [dict(module="lesson04_matmul.hopper", kernel="matmul_kernel_tma", signature=signature,
                 constexprs=dict(tile, FLATTEN=True, EPILOGUE_SPLIT=pieces), num_warps=8, num_stages=4,
                 divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"),
                 asm=("ptx",)) for pieces in (1, 2)]
    whole, halves = (result["shared"] for result in ptx.compile_kernels(jobs))
    limit = 227 * 1024
    assert whole > limit >= halves
    config = triton.Config(dict(tile, EPILOGUE_SPLIT=2), num_stages=4)
    assert matmul_hopper.shared_bytes(config) <= halves <= matmul_hopper.shared_bytes(config) + 1024


def fake_side_by_side(monkeypatch, times: list):
    """bench.side_by_side with a clock that reads `times` in turn: nothing is timed or run."""
    from common import bench

    clock = iter(times)
    monkeypatch.setattr(bench, "side_by_side", lambda cases, rounds=3: {name: next(clock) for name in cases})


def test_bench_steps_rows_on_a_fake_clock(monkeypatch):
    # six rows per size, each step's % of cuBLAS its time over cuBLAS's
    monkeypatch.setattr(matmul_hopper, "HOPPER", True)
    fake_side_by_side(monkeypatch, [1.0, 2.0, 4.0, 1.25, 0.5, 0.8])
    table = bench_steps(sizes=(256,))
    assert table.column("kernel")[0] == "cuBLAS (torch.matmul)" and len(table.rows) == 6
    assert table.column("% of cuBLAS") == pytest.approx([100, 50, 25, 80, 200, 125])
    assert table.column("kernel µs") == [1000.0, 2000.0, 4000.0, 1250.0, 500.0, 800.0]
    assert table.column("TFLOP/s")[0] == pytest.approx(2 * 256**3 / 1e-3 / 1e12)


def test_bench_forward_rows_on_a_fake_clock(monkeypatch):
    # per shape and mask: Triton, Gluon, cuDNN, FA2; 'x cuDNN' and 'x Triton' their time over this one's;
    # causal does half the FLOPs
    monkeypatch.setattr(hopper, "HOPPER", True)
    fake_side_by_side(monkeypatch, [2.0, 1.0, 1.0, 4.0] * 2)
    table = bench_forward(shapes=((1, 2, 64),), seqs=(128,))
    assert table.column("implementation")[:4] == ["Triton (attention.py)", "Gluon (hopper.py)", "SDPA cuDNN",
                                                  "SDPA flash (FA2)"]
    assert table.column("x cuDNN")[:4] == pytest.approx([0.5, 1, 1, 0.25])
    assert table.column("x Triton")[:4] == pytest.approx([1, 2, 2, 0.5])
    flops = 4 * 1 * 2 * 128 * 128 * 64
    assert table.column("TFLOP/s")[0] == pytest.approx(flops / 2e-3 / 1e12)
    assert table.column("TFLOP/s")[4] == pytest.approx(flops / 2 / 2e-3 / 1e12)


# ----- warp specialization: the barrier phases, the Gluon kernels compiled for sm_90

def passes(completions: int, parity: int) -> bool:
    """An mbarrier's rule: a wait on `parity` returns once the phase of that parity is over, that is
    while the barrier's current phase (the completions so far) has the other parity; a fresh
    barrier's 'previous' phase, parity 1, counts as over."""
    return completions % 2 != parity


def test_each_wait_of_the_phase_table_blocks_until_its_phase_and_no_longer():
    # the table's parities under the rule: the producer's wait on kv_empty[slot] for block j blocks
    # while the consumers still hold block j - NB (the slot's r - 1 completions) and passes once they
    # release it (r); a consumer's wait on k_ready[slot] blocks until block j's copy lands (r + 1)
    table = phases(blocks=9)
    for j, slot, r, producer, _, consumer, turn in table.rows:
        assert slot == j % hopper.NUM_BUFFERS and r == j // hopper.NUM_BUFFERS
        assert passes(r, producer) and (r == 0 or not passes(r - 1, producer)), j
        assert passes(r + 1, consumer) and not passes(r, consumer), j
        assert passes(j + 1, turn) and not passes(j, turn), j  # turns[c]: completed once per block before


def test_gluon_kernel_compiles_for_hopper_with_its_partitions():
    # Compiled for sm_90 on any machine: each case's PTX moves the producer to 24 registers and the
    # consumers to 240 (setmaxnreg), copies by TMA, multiplies by wgmma, and fits an H100's
    # shared memory (227 KB per program)
    table = machine_code.compiled_forward()
    assert len(table.rows) == 4
    for budgets, copies, wgmmas, shared in zip(table.column("setmaxnreg budgets"),
                                               table.column("TMA copies (cp.async.bulk.tensor)"),
                                               table.column("wgmma.mma_async"), table.column("shared KB")):
        regs = {int(b) for b in budgets.split(", ")}
        assert {hopper.PRODUCER_REGS, hopper.CONSUMER_REGS} <= regs
        assert copies > 0 and wgmmas > 0 and shared <= 227


def test_gluon_backward_compiles_for_hopper_with_its_partitions():
    # Compiled for sm_90 on any machine: each case moves the producer to 24 registers and the
    # consumers to 240, copies in by TMA, multiplies by wgmma, adds dQ's tiles by TMA's reduce-add (one
    # per consumer and copy of the step: causal, the masked steps at the diagonal have a loop of their
    # own) and fits an H100's shared memory. (Whether ptxas spills or serialises its wgmma depends on
    # the ptxas: the table says, the test does not assert it.)
    table, loops = machine_code.backward_budget(), machine_code.step_in_sass()
    assert len(table.rows) == 4
    for head_dim, causal, budgets, copies, wgmmas, adds, shared in zip(
            table.column("head_dim"), table.column("causal"), table.column("setmaxnreg budgets"),
            table.column("TMA copies"), table.column("wgmma.mma_async"), table.column("TMA reduce-adds"),
            table.column("shared KB")):
        steps = 2 if causal else 1
        assert {hopper.PRODUCER_REGS, hopper.CONSUMER_REGS} <= {int(b) for b in budgets.split(", ")}
        assert copies > 0 and wgmmas > 0 and adds == 2 * steps and shared <= 227, (head_dim, causal)
        # the machine code: a loop per consumer (causal at 128, a masked one before it), five matmuls in each
        # (S^T, dP^T, dV, dK: head_dim or BLOCK_M / 16 HGMMA each, dQ's tile 2 x 64 / 16), exponentials,
        # and the mask's selects in the masked loops alone
        mine = [row for row in loops.rows if list(row[:2]) == [head_dim, causal]]
        block_m = hopper.bwd_block_m(head_dim)
        assert len(mine) == (4 if causal and head_dim == 128 else 2), (head_dim, causal)
        for _, _, n, _, hgmma, _, _, mufu, _, fsel in mine:
            masked = causal and head_dim == 128 and n % 2 == 1
            assert hgmma == 2 * (head_dim + block_m) // 16 + 8 and mufu > 0 and (fsel > 0) == masked, mine


def test_gluon_kernel_takes_only_what_it_computes():
    # takes(): float16/bfloat16, q, k, v of one contiguous shape, head_dim 64 or 128, seq a multiple
    # of 128, on sm_90; everything else goes to the Triton kernel
    q = torch.randn(1, 2, 256, 64, device=DEVICE, dtype=torch.float16)
    on_hopper = DEVICE == "cuda" and torch.cuda.get_device_capability() == (9, 0)
    assert hopper.takes(q, q, q) == on_hopper
    one_head = q[:, :1].contiguous()
    refused = {"head_dim 32": (q[..., :32].contiguous(),) * 3, "seq 200": (q[:, :, :200].contiguous(),) * 3,
               "float32": (q.float(),) * 3, "a strided view": (torch.randn_like(q).transpose(1, 2).contiguous().transpose(1, 2),) * 3,
               "grouped heads": (q, one_head, one_head),
               "not 16-byte aligned": (torch.randn(q.numel() + 1, device=DEVICE, dtype=q.dtype)[1:].view(q.shape),) * 3}
    for name, (a, b, c) in refused.items():
        assert not hopper.takes(a, b, c), name



GLUON_SHAPES = [(1, 1, 128, 64), (2, 3, 384, 64), (2, 2, 256, 128), (1, 4, 1024, 128)]  # B, H, seq, D



@pytest.mark.skipif(not hopper.HOPPER, reason="the Gluon kernel runs on sm_90 (H100, H200) only")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", GLUON_SHAPES)
def test_gluon_forward_matches_float64(shape, dtype, causal):
    # o against float64 standard attention; lse (which the backward reads) against the float64
    # log2 of each query's sum
    q, k, v = (torch.randn(*shape, device=DEVICE, dtype=dtype) for _ in range(3))
    D = shape[-1]
    o, lse = hopper.launch(q, k, v, causal, D ** -0.5)
    qd, kd, vd = q.double(), k.double(), v.double()
    assert rel_error(o, attention_standard(qd, kd, vd, causal=causal)) < TOL[dtype]
    s = qd @ kd.transpose(-2, -1) * D ** -0.5
    if causal:
        seq = shape[2]
        s = s.masked_fill(torch.ones(seq, seq, dtype=torch.bool, device=DEVICE).triu(1), float("-inf"))
    assert rel_error(lse, torch.logsumexp(s, dim=-1) / math.log(2)) < 1e-5



def test_gluon_backward_takes_only_what_it_computes():
    # backward_takes(): as takes(), grouped-query heads too, and never where deterministic
    # algorithms are asked for (its dQ's reduce-adds add in no fixed order)
    q = torch.randn(1, 4, 256, 64, device=DEVICE, dtype=torch.float16)
    kv = q[:, :2].contiguous()
    on_hopper = hopper.HOPPER
    assert hopper.backward_takes(q, kv, kv) == on_hopper
    refused = {"head_dim 32": (q[..., :32].contiguous(), kv[..., :32].contiguous()),
               "seq 200": (q[:, :, :200].contiguous(), kv[:, :, :200].contiguous()),
               "float32": (q.float(), kv.float()), "3 heads for 2": (q[:, :3].contiguous(), kv),
               "k longer than q": (q, torch.cat([kv, kv], dim=2)), "no queries": (q[:, :, :0], kv[:, :, :0]),
               "no batch": (q[:0], kv[:0])}
    for name, (a, b) in refused.items():
        assert not hopper.backward_takes(a, b, b), name
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        assert not hopper.backward_takes(q, kv, kv)
    finally:
        torch.use_deterministic_algorithms(deterministic)



GLUON_BACKWARD_SHAPES = [(1, 1, 1, 128, 64), (2, 3, 3, 384, 64), (1, 8, 1, 512, 64), (2, 2, 2, 256, 128),
                         (1, 4, 2, 1024, 128)]  # B, H, H_KV, seq, D: one key block; odd heads; multi-query; GQA



@pytest.mark.skipif(not hopper.HOPPER, reason="the Gluon kernel runs on sm_90 (H100, H200) only")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", GLUON_BACKWARD_SHAPES)
def test_gluon_backward_matches_float64(shape, dtype, causal):
    # dq, dk, dv from the Gluon backward (given the forward's o and lse) within twice the error of
    # torch's autograd in the same dtype, both against float64 autograd (common.checks.grad_ok)
    from common.checks import errors_against_autograd, grad_ok

    B, H, H_KV, seq, D = shape
    q = torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype)
    k, v = (torch.randn(B, H_KV, seq, D, device=DEVICE, dtype=dtype) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = launch(attention_kernel_tuned, q, k, v, causal, D ** -0.5)
    ours = hopper.launch_backward(do, q, k, v, o, lse, causal, D ** -0.5)
    errors = errors_against_autograd(ours, attention_standard, [q, k, v], do, causal=causal)
    for name, (a, b) in zip("qkv", errors):
        assert grad_ok(a, b), f"d{name}: {a} vs {b}"



@pytest.mark.big
@pytest.mark.skipif(not hopper.HOPPER, reason="the Gluon kernel runs on sm_90 (H100, H200) only")
def test_gluon_backward_past_2_31_elements():
    # 2 x (2^17 + 8) heads of 128 x 64 float16 (4.3 GB each of q, k, v, dO and O; 43 GB in all with
    # the gradients): the last heads' rows of O and dO (Delta's kernel) and of dK and dV (the Gluon
    # kernel's stores) start past element 2^31, where 32-bit offsets wrap. TMA's coordinates are
    # rows, which fit. The first and last heads against float64 autograd: a wrapped store would miss
    # the last, or land in the first.
    from common.checks import errors_against_autograd, grad_ok

    B, H, seq, D = 2, 2**17 + 8, 128, 64
    q, k, v, do = (torch.randn(B, H, seq, D, device=DEVICE, dtype=torch.float16) for _ in range(4))
    assert q.numel() > 2**31 and hopper.backward_takes(q, k, v)
    o, lse = hopper.launch(q, k, v, False, D ** -0.5)  # (the Gluon forward: TMA's coordinates too)
    ours = hopper.launch_backward(do, q, k, v, o, lse, False, D ** -0.5)
    for b, h in ((0, 0), (B - 1, H - 2), (B - 1, H - 1)):
        head = [t[b, h][None, None] for t in (q, k, v, do)]
        errors = errors_against_autograd([g[b, h][None, None] for g in ours], attention_standard, head[:3], head[3])
        for name, (a, t) in zip("qkv", errors):
            assert grad_ok(a, t), f"d{name} of head ({b}, {h}): {a} vs {t}"


# ----- the routes on Hopper

def test_the_routes_table_asks_matmuls_route_and_lists_attentions():
    # matmul on an H100: the TMA kernel from TMA_FROM up in 16-bit, the pointer kernel below it and in
    # float32; its backward either, as the route says for each product; then attention's ROUTES, each
    # row, in order
    table = routes()
    matmul_rows = [row for row in table.rows if row[0] == "matmul()"]
    assert [row[3].split()[0] for row in matmul_rows] == ["matmul_kernel_tma", "matmul_kernel_tma", "matmul_kernel",
                                                          "matmul_kernel", "matmul_kernel_tma"]
    assert "matmul_kernel (matmul.py)" in matmul_rows[-1][3]
    attention_rows = [row for row in table.rows if row[0] == "attention()"]
    assert [(row[1], row[2].split(":")[0]) for row in attention_rows] == [(r[0], r[1]) for r in ROUTES]


# ----- the chapter's runs

def test_runs_as_a_notebook_each_sections_output_under_its_cell():
    cells = run_as_notebook("lesson07_hopper")
    text = "".join(cells)
    assert "3 or 4" in next(c for c in cells if "=== 3. The persistent grid" in c)
    assert "relative error" in next(c for c in cells if "=== 4. Correctness" in c)
    assert "wgmma.mma_async" in next(c for c in cells if "=== 5. Which instructions" in c)  # for sm_90, no GPU
    assert "MUFU.EX2" in next(c for c in cells if "=== 13. Reading the SASS" in c)
    headings = [line for line in text.splitlines() if line.startswith("=== ")]
    numbers = [int(h.split()[1].rstrip(".")) for h in headings]
    assert numbers == sorted(numbers) and len(headings) == len(SECTIONS)  # every section, numbered as in the code
    assert "ipykernel" not in text and "usage:" not in text  # the kernel's own arguments were ignored
    if INTERPRET:  # the sections that need a GPU print the recorded tables, the stamp once
        assert text.count("This section needs a GPU") == 3 and "no record of it yet" not in text
        assert text.count("| GPU | driver |") == 1 and "NVIDIA H100" in text  # (the page's GPU: an H100)


def test_script_and_its_command_line():
    done = run_script("lesson07_hopper", "--sections", "phases", "routes")
    assert done.returncode == 0, done.stderr
    assert "passes: a fresh barrier" in done.stdout and "=== 15." in done.stdout and "=== 9." not in done.stdout
    assert "Sections: schedule: 3. The persistent grid" in parse_command_line("lesson07_hopper", "--help")[1]
    code, _, err = parse_command_line("lesson07_hopper", "--sections", "no_such_section")
    assert code == 2 and "invalid choice" in err
