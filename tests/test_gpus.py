"""The GPUs learners own, from a free T4 to a B200: every kernel of every lesson compiled for each
of them, with no GPU (Triton ships its compiler: common/ptx.py), in the configurations the
launchers would pick there. A kernel must compile; the configurations a launcher runs untimed
(the fixed ones, and the last of an autotuned list, which small problems get) must fit the GPU's
shared memory; the larger ones may not (the autotuner skips them there); and the TMA path is
taken exactly where its kernel fits."""
import os

import pytest

from conftest import INTERPRET  # noqa: F401  (common.device before triton)
from common import ptx
from common.device import GPUS
from lesson02_softmax.main import one_pass_settings
from lesson03_rowsum.main import tile_config
from lesson04_matmul.hopper import GPU_TMA_CONFIGS, shared_bytes, tma_gpu
from lesson04_matmul.main import GPU_CONFIGS as MATMUL_CONFIGS
from lesson05_flash_attention.backward import GPU_DKDV_CONFIGS, GPU_DQ_CONFIGS
from lesson05_flash_attention.main import GPU_CONFIGS as ATTENTION_CONFIGS


def pointers(dtype: str, *names: str) -> dict:
    return {name: f"*{dtype}" for name in names}


def ints(*names: str) -> dict:
    return dict.fromkeys(names, "i32")


def from_config(config) -> dict:
    """A triton.Config as compile arguments."""
    return dict(constexprs=dict(config.kwargs), num_warps=config.num_warps, num_stages=config.num_stages)


SMALLEST_TMA = min(GPU_TMA_CONFIGS, key=shared_bytes)


def jobs_for(arch: int) -> dict:
    """{(what, must it fit?): compile job} for one GPU."""
    l1, l2, l3 = "lesson01_vector_add.main", "lesson02_softmax.main", "lesson03_rowsum.main"
    l4, l5 = "lesson04_matmul.main", "lesson05_flash_attention.main"
    jobs = {
        ("add_kernel, float32", True): dict(
            module=l1, kernel="add_kernel", signature={**pointers("fp32", "x_ptr", "y_ptr", "output_ptr"), "N": "i32"},
            constexprs={"BLOCK_SIZE": 1024}),
        ("gelu_kernel, bfloat16", True): dict(
            module=l1, kernel="gelu_kernel", signature={**pointers("bf16", "x_ptr", "y_ptr"), "N": "i32"},
            constexprs={"BLOCK_SIZE": 1024}),
        ("spin_kernel (lesson 3's waves)", True): dict(
            module=l3, kernel="spin_kernel", signature={"y_ptr": "*fp32", "iters": "i32"}, constexprs={"BLOCK": 1024},
            num_warps=32),
        ("softmax_online_kernel, bfloat16", True): dict(  # as softmax() launches it
            module=l2, kernel="softmax_online_kernel",
            signature={**pointers("bf16", "x_ptr", "y_ptr"), **ints("N", "stride_xm", "stride_xn", "stride_ym")},
            constexprs={"BLOCK_N": 8192}, num_warps=16),
    }
    for N in (1000, 65536):
        BLOCK_M, BLOCK_N, num_warps = one_pass_settings(N)
        jobs[f"softmax_kernel, bfloat16, N = {N}", True] = dict(
            module=l2, kernel="softmax_kernel",
            signature={**pointers("bf16", "x_ptr", "y_ptr"), **ints("M", "N", "stride_xm", "stride_xn", "stride_ym")},
            constexprs={"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N}, num_warps=num_warps)
    for N in (32, 16384):
        BLOCK_M, BLOCK_N, num_warps = tile_config(N)
        jobs[f"row_sum_kernel, bfloat16, N = {N}", True] = dict(
            module=l3, kernel="row_sum_kernel",
            signature={**pointers("bf16", "x_ptr", "y_ptr"), **ints("M", "N", "stride_xm", "stride_xn")},
            constexprs={"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N}, num_warps=num_warps)
        jobs[f"row_sum_split_kernel, bfloat16, N = {N}", True] = dict(
            module=l3, kernel="row_sum_split_kernel",
            signature={"x_ptr": "*bf16", "partial_ptr": "*fp32",
                       **ints("M", "N", "stride_xm", "stride_xn", "stride_pm", "COLS_PER_PROGRAM")},
            constexprs={"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N}, num_warps=num_warps)
    matmul_args = ints("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")
    for dtype, config, must_fit in (("fp16", MATMUL_CONFIGS[0], False), ("bf16", MATMUL_CONFIGS[-1], True),
                                    ("fp32", MATMUL_CONFIGS[-1], True)):
        jobs[f"matmul_kernel, {dtype}, {config}", must_fit] = dict(
            module=l4, kernel="matmul_kernel", signature={**pointers(dtype, "a_ptr", "b_ptr", "c_ptr"), **matmul_args},
            divisible_by_16=("a_ptr", "b_ptr", "c_ptr"), **from_config(config))
    attention_args = {**ints("H", "seq_len", *(f"stride_{t}{d}" for t in "qkvo" for d in "bhnd")), "sm_scale": "fp32"}
    for dtype, config, causal, must_fit in (("fp16", ATTENTION_CONFIGS[0], False, False),
                                            ("fp32", ATTENTION_CONFIGS[-1], True, True)):
        job = dict(module=l5, kernel="attention_kernel",
                   signature={**pointers(dtype, "q_ptr", "k_ptr", "v_ptr", "o_ptr"), "lse_ptr": "*fp32", **attention_args},
                   divisible_by_16=("q_ptr", "k_ptr", "v_ptr", "o_ptr"), **from_config(config))
        job["constexprs"].update(HEAD_DIM=128, CAUSAL=causal, INPUT_PRECISION="ieee" if dtype == "fp32" else "tf32")
        jobs[f"attention_kernel, {dtype}, head_dim 128, causal {causal}, {config}", must_fit] = job
    backward_args = {**pointers("fp32", "lse_ptr", "delta_ptr"), "sm_scale": "fp32", "seq_len": "i32"}
    for kernel, configs, outputs in (("dkdv_kernel", GPU_DKDV_CONFIGS, ("dk_ptr", "dv_ptr")),
                                     ("dq_kernel", GPU_DQ_CONFIGS, ("dq_ptr",))):
        for dtype, config, must_fit in (("fp32", configs[-1], True),):  # the configuration small problems get
            job = dict(module="lesson05_flash_attention.backward", kernel=kernel,
                       signature={**pointers(dtype, "q_ptr", "k_ptr", "v_ptr", "do_ptr"), **backward_args,
                                  **pointers(dtype, *outputs)},
                       divisible_by_16=("q_ptr", "k_ptr", "v_ptr", "do_ptr"), **from_config(config))
            job["constexprs"].update(HEAD_DIM=128, CAUSAL=True, INPUT_PRECISION="ieee" if dtype == "fp32" else "tf32")
            jobs[f"{kernel}, {dtype}, head_dim 128, {config}", must_fit] = job
    if arch >= 90:  # TMA came with Hopper: compiled where it exists, then the launcher's rule is checked
        jobs[f"matmul_kernel_tma, fp16, {SMALLEST_TMA}", False] = dict(
            module="lesson04_matmul.hopper", kernel="matmul_kernel_tma",
            signature={**pointers("fp16", "a_ptr", "b_ptr", "c_ptr"),
                       **ints("M", "N", "K", "stride_am", "stride_bk", "stride_cm")},
            divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"),
            **from_config(SMALLEST_TMA))
    for job in jobs.values():
        job.update(arch=arch, asm=["ptx"] if arch in (75, 80) else [])
    return jobs


@pytest.fixture(scope="module")
def compiled() -> dict:
    """Every job for every GPU, compiled once, in child processes side by side: {arch: {key: result}}."""
    jobs = {(arch, key): job for arch in GPUS for key, job in jobs_for(arch).items()}
    results = ptx.compile_kernels(list(jobs.values()), processes=min(8, os.cpu_count() or 1))
    out = {arch: {} for arch in GPUS}
    for (arch, key), result in zip(jobs, results):
        out[arch][key] = result
    return out


@pytest.mark.parametrize("arch", GPUS)
def test_every_kernel_compiles_and_fits(compiled, arch):
    name, limit = GPUS[arch]
    for (what, must_fit), result in compiled[arch].items():
        assert not must_fit or result["shared"] <= limit, (
            f"sm_{arch} ({name}): {what} needs {result['shared']} bytes of shared memory, the GPU has {limit}")


@pytest.mark.parametrize("arch", GPUS)
def test_the_tma_path_is_taken_exactly_where_its_kernel_fits(compiled, arch):
    limit = GPUS[arch][1]
    tma = [result["shared"] for (what, _), result in compiled[arch].items() if what.startswith("matmul_kernel_tma")]
    assert tma_gpu(arch, limit) == bool(tma and tma[0] <= limit)
    if tma:  # hopper.shared_bytes, the launcher's estimate, never undercounts (the barriers aside)
        assert tma[0] <= shared_bytes(SMALLEST_TMA) + 1024


def test_a_t4_has_no_tensor_core_path(compiled):
    # Triton's tl.dot uses the tensor cores from sm_80 (mma) on; on a T4 it compiles to FMA
    # instructions: correct, and no faster than CUDA cores make it. README says so.
    dots = {what: result for (what, _), result in compiled[75].items() if what.startswith(("matmul", "attention"))}
    assert len(dots) == 5 and all("mma" not in result["ptx"] for result in dots.values())
    assert all("mma" in result["ptx"] for (what, _), result in compiled[80].items() if what.startswith("matmul"))
