"""The GPUs learners own, from a free T4 to a B200: every kernel of every lesson compiled for each
of them, with no GPU (Triton ships its compiler: common/ptx.py), in the configurations the
launchers would pick there. A kernel must compile; the configurations a launcher runs untimed
(the fixed ones, and the last of an autotuned list, which small problems get) must fit the GPU's
shared memory; the larger ones may not (the autotuner skips them there); and the TMA path is
taken exactly where its kernel fits.

What varies per kernel (its `Family`): the configurations of its launcher or autotuner, each dtype
a launcher can hand it, every head dim, the epilogues, int32 and int64 offsets, causal or not. Of
those, the block sizes, the dtype and the head dim decide what a kernel needs (registers, shared
memory); the flags only change the code. So `pytest --all-configs` compiles, for every GPU, every
kernel in the product of the first kind, with each flag's values spread over them (4,917
compilations; when they were 3,300, that took 34 minutes on 2 cores). The default run, for CI, compiles on every
GPU each kernel's largest variant that must fit, and covers every value of every dimension on
some GPU (321 compilations)."""
import itertools
import json
import os
import time

import pytest
import torch

from conftest import COMPILED, INTERPRET, LESSON6_PRODUCTS, as_on_an_h100  # noqa: F401  (common.device before triton)
from common import ptx
from common.device import GPUS
from lesson02_softmax import cross_entropy
from lesson02_softmax.softmax import MAX_ONE_PASS_N, one_pass_settings
from lesson03_rowsum import rmsnorm
from lesson03_rowsum.row_sum import tile_config
from lesson04_matmul import hopper
from lesson04_matmul.hopper import GPU_TMA_CONFIGS, shared_bytes, tma_gpu
from lesson04_matmul.matmul import ACTIVATIONS, GPU_CONFIGS as MATMUL_CONFIGS
from common.launch import dot_block, next_power_of_2
from lesson05_flash_attention import backward, decode
from lesson05_flash_attention.attention import NARROW, WIDE
from lesson06_gpt import adamw

L1, L2, L3 = "lesson01_vector_add.elementwise", "lesson02_softmax.softmax", "lesson03_rowsum.row_sum"
L4, L5, L5B = "lesson04_matmul.matmul", "lesson05_flash_attention.attention", "lesson05_flash_attention.backward"
DEC = "lesson05_flash_attention.decode"
HEAD_DIMS = (16, 64, 80, 128, 256)  # attention's: BLOCK_D 16, 64, 128 (80 padded), 128, 256
DTYPES = ("fp32", "fp16", "bf16")  # what every launcher takes (bf16 and fp16 are the same size: both kept)
INDEX = ("int32", "int64")         # common.checks.index_type's two answers
EPILOGUES = ACTIVATIONS + ("gelu_backward",)  # matmul's, and its backward's: dL/dC * gelu'(A @ B)
POWERS = tuple(2**i for i in range(17))


def pointers(dtype: str, *names: str) -> dict:
    return {name: f"*{dtype}" for name in names}


def ints(*names: str) -> dict:
    return dict.fromkeys(names, "i32")


def from_config(config) -> dict:
    """A triton.Config as compile arguments."""
    return dict(constexprs=dict(config.kwargs), num_warps=config.num_warps, num_stages=config.num_stages)


def show(value) -> str:
    return f"{value.kwargs}, {value.num_warps} warps, {value.num_stages} stages" if hasattr(value, "kwargs") else str(value)


class Family:
    """One kernel's variants. heavy: {dimension: values} whose product is compiled in full (block
    sizes, dtype, head dim); light: {dimension: values} spread over them (flags). job(v) -> the
    compile job for a variant v (a dict of one value per dimension); must_fit(v): does the launcher
    run v untimed (so it has to fit)? size(v): a number that grows with what v needs, to compile the
    largest must-fit variant on every GPU. applies(v): does the launcher ever run v (an autotuner's
    prune may keep a configuration from some head dims)?"""

    def __init__(self, name, heavy, light, job, must_fit=lambda v: True, size=lambda v: 0, applies=lambda v: True):
        self.name, self.heavy, self.light, self.job, self.must_fit, self.size = name, heavy, light, job, must_fit, size
        self.applies = applies

    def variants(self) -> list[dict]:
        """The product of the heavy dimensions that the launcher runs, with each light dimension's
        values in turn."""
        out = [dict(zip(self.heavy, values)) for values in itertools.product(*self.heavy.values())]
        out = [v for v in out if self.applies(v)]
        for i, v in enumerate(out):
            v.update((dim, values[i % len(values)]) for dim, values in self.light.items())
        return out

    def label(self, v: dict) -> str:
        return f"{self.name}, " + ", ".join(f"{dim} {show(value)}" for dim, value in v.items())


def elementwise(name, args, configs=((1024, 4),)):
    """A lesson 1 kernel: pointers of one dtype, N, BLOCK_SIZE; configs: (BLOCK_SIZE, num_warps)."""
    return Family(name, {"dtype": DTYPES, "config": configs}, {},
                  lambda v: dict(module=L1, kernel=name, signature={**pointers(v["dtype"], *args), "N": "i32"},
                                 constexprs={"BLOCK_SIZE": v["config"][0]}, num_warps=v["config"][1]))


def softmax_job(v):
    BLOCK_M, BLOCK_N, num_warps = one_pass_settings(v["N"])
    return dict(module=L2, kernel="softmax_kernel",
                signature={**pointers(v["dtype"], "x_ptr", "y_ptr"), **ints("M", "N", "stride_xm", "stride_xn", "stride_ym")},
                constexprs={"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "INDEX_TYPE": v["index"]}, num_warps=num_warps)


def softmax_backward_job(v):  # as softmax.softmax_backward launches it
    BLOCK_N = min(v["N"], 4096)
    return dict(module=L2, kernel="softmax_backward_kernel",
                signature={**pointers(v["dtype"], "y_ptr", "dy_ptr", "dx_ptr"),
                           **ints("M", "N", "stride_ym", "stride_dym", "stride_dxm")},
                constexprs={"BLOCK_M": max(1, 4096 // BLOCK_N), "BLOCK_N": BLOCK_N, "INDEX_TYPE": v["index"]}, num_warps=8)


def row_sum_job(v):  # x in the input's dtype, or fp32 for the second stage of a split row; y in the input's
    BLOCK_M, BLOCK_N, num_warps = tile_config(v["N"])
    x, y = v["dtypes"]
    return dict(module=L3, kernel="row_sum_kernel",
                signature={"x_ptr": f"*{x}", "y_ptr": f"*{y}", **ints("M", "N", "stride_xm", "stride_xn")},
                constexprs={"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "INDEX_TYPE": v["index"]}, num_warps=num_warps)


def row_sum_split_job(v):
    BLOCK_M, BLOCK_N, num_warps = tile_config(v["N"])
    return dict(module=L3, kernel="row_sum_split_kernel",
                signature={"x_ptr": f"*{v['dtype']}", "partial_ptr": "*fp32",
                           **ints("M", "N", "stride_xm", "stride_xn", "stride_pm", "COLS_PER_PROGRAM")},
                constexprs={"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "INDEX_TYPE": v["index"]}, num_warps=num_warps)


def cross_entropy_job(v, backward=False):  # lesson 2's cross-entropy (lesson 6's loss), as its launchers run it
    BLOCK_M, BLOCK_V, num_warps = cross_entropy.settings(v["V"])
    tensors = ({"x_ptr": f"*{v['dtype']}", "t_ptr": "*i64", **pointers("fp32", "lse_ptr", "dloss_ptr"),
                "dx_ptr": f"*{v['dtype']}"} if backward else
               {"x_ptr": f"*{v['dtype']}", "t_ptr": "*i64", **pointers("fp32", "loss_ptr", "lse_ptr")})
    strides = ("M", "V", "stride_xm", "stride_xv", "stride_t") + (("stride_dl",) if backward else ())
    return dict(module="lesson02_softmax.cross_entropy",
                kernel="cross_entropy_backward_kernel" if backward else "cross_entropy_kernel",
                signature={**tensors, **ints(*strides, "ignore_index")},
                constexprs={"BLOCK_M": BLOCK_M, "BLOCK_V": BLOCK_V, "INDEX_TYPE": v["index"]}, num_warps=num_warps)


def rms_norm_job(v):  # lesson 3's RMSNorm (lesson 6's norm), the residual fused or not
    BLOCK_M, BLOCK_N, num_warps = tile_config(v["N"])
    return dict(module="lesson03_rowsum.rmsnorm", kernel="rms_norm_kernel",
                signature={**pointers(v["dtype"], "x_ptr", "r_ptr", "h_ptr", "w_ptr", "y_ptr"), "rstd_ptr": "*fp32",
                           **ints("M", "N", "stride_x", "stride_r", "stride_h", "stride_y", "stride_w"), "eps": "fp32"},
                constexprs={"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "HAS_RESIDUAL": v["residual"],
                            "INDEX_TYPE": v["index"]}, num_warps=num_warps)


def rms_norm_backward_job(v):  # as rmsnorm.launch_backward runs it: the whole row in one block
    BLOCK_N = v["N"]
    BLOCK_M = max(1, 2048 // BLOCK_N)
    return dict(module="lesson03_rowsum.rmsnorm", kernel="rms_norm_backward_kernel",
                signature={**pointers(v["dtype"], "dy_ptr", "x_ptr", "w_ptr"), "rstd_ptr": "*fp32",
                           **pointers(v["dtype"], "dh_ptr", "dx_ptr"), "dw_ptr": "*fp32",
                           **ints("M", "N", "stride_dy", "stride_x", "stride_dh", "stride_w", "blocks_per_program")},
                constexprs={"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "HAS_DH": v["dh"], "INDEX_TYPE": v["index"]},
                num_warps=max(1, min(16, BLOCK_M * BLOCK_N // 256)))


def precision(v) -> str:  # what the launchers pass: float32 in full precision ("ieee"), else tf32 (ignored)
    return "ieee" if v["dtype"] == "fp32" else "tf32"


def matmul_job(v):  # float32 twice: matmul(precision="ieee"), and its default, "tf32" (the tensor cores)
    dtype = "fp32" if v["dtype"] == "fp32 as tf32" else v["dtype"]
    job = dict(module=L4, kernel="matmul_kernel", signature={**pointers(dtype, "a_ptr", "b_ptr", "c_ptr"),
               **ints("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")},
               divisible_by_16=("a_ptr", "b_ptr", "c_ptr"), **from_config(v["config"]))
    job["constexprs"].update(ACTIVATION=v["activation"] or "", INPUT_PRECISION="tf32" if dtype != v["dtype"] else precision(v),
                             INDEX_TYPE=v["index"])
    return with_gradient(job, v, dtype)


def with_gradient(job, v, dtype):
    """The backward's epilogue ("gelu_backward") reads dL/dC: one more pointer, in C's dtype."""
    if v["activation"] == "gelu_backward":
        job["signature"] = {**job["signature"], **pointers(dtype, "g_ptr")}
    return job


def tma_job(v):
    job = dict(module="lesson04_matmul.hopper", kernel="matmul_kernel_tma",
               signature={**pointers(v["dtype"], "a_ptr", "b_ptr", "c_ptr"),
                          **ints("M", "N", "K", "stride_am", "stride_bk", "stride_cm")},
               divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"),
               **from_config(v["config"]))
    job["constexprs"]["ACTIVATION"] = v["activation"] or ""
    return job


def tma_backward_job(v):
    """matmul_kernel_tma with ACTIVATION "gelu_backward", as Matmul's backward launches it: hopper.config's
    configuration for an MLP's recomputed Z (16384 x 3072 x 768), or, split, for a product of few tiles."""
    M, N, K = (768, 768, 16384) if v["split"] else (16384, 3072, 768)
    interpret, sms = hopper.INTERPRET, hopper.sm_count
    hopper.INTERPRET, hopper.sm_count = False, lambda: 132  # the rule on an H100's 132 SMs, asked on any machine
    try:
        config = hopper.config(M, N, K, activation="gelu_backward")
    finally:
        hopper.INTERPRET, hopper.sm_count = interpret, sms
    assert (config["SPLIT_K"] > 1) == v["split"], config
    job = dict(module="lesson04_matmul.hopper", kernel="matmul_kernel_tma",
               signature={**pointers(v["dtype"], "a_ptr", "b_ptr", "c_ptr"),
                          **ints("M", "N", "K", "stride_am", "stride_bk", "stride_cm"), **pointers(v["dtype"], "g_ptr"),
                          **(dict(ints("whole_tiles"), **pointers("fp32", "parts_ptr")) if v["split"] else {})},
               divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "g_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"),
               num_warps=config.pop("num_warps"), num_stages=config.pop("num_stages"))
    job["constexprs"] = dict(config, ACTIVATION="gelu_backward", B_T=True)
    return job


def attention_job(v):  # the forward, plain (attention.launch) or decoding's (decode.launch: PACKED, its rows as BLOCK_M)
    D = v["head_dim"]
    job = dict(module=L5, kernel="attention_kernel",
               signature={**pointers(v["dtype"], "q_ptr", "k_ptr", "v_ptr"), "o_ptr": f"*{v.get('out', v['dtype'])}",
                          "lse_ptr": "*fp32", "sm_scale": "fp32",
                          **ints("H", "GROUP", "seq_q", "seq_k", "share_len", "stride_os", "stride_ls",
                                 *(f"stride_{t}{d}" for t in "qkvo" for d in "bhnd"))},
               divisible_by_16=("q_ptr", "k_ptr", "v_ptr", "o_ptr"), **from_config(v["config"]))
    job["constexprs"].update(HEAD_DIM=D, BLOCK_D=dot_block(D), CAUSAL=v["causal"], INPUT_PRECISION=precision(v),
                             INDEX_TYPE=v["index"])
    if "rows" in v:
        job["constexprs"].update(PACKED=True, BLOCK_M=16 if v["rows"] == "fewest" else decode.max_rows(D))
    return job


def UNIT_STRIDES(tensors) -> dict:  # noqa: N802
    """The head dim's stride of each tensor, 1 as a launch passes it: Triton specializes an integer
    argument equal to 1 into the compiled kernel (unit-stride loads, vectorized)."""
    return {f"stride_{t}d": 1 for t in tensors}


def backward_job(kernel, outputs, **constexprs):
    def job(v):
        D = v["head_dim"]
        heads = (ints("H_KV", "GROUP", "seq_q", "seq_k", "parts", "part_stride") if kernel == "dkdv_kernel" else
                 ints("H", "GROUP", "seq_q", "seq_k"))
        tensors = ("q", "k", "v", "do", "dk" if kernel == "dkdv_kernel" else "dq")
        heads |= ints(*(f"stride_{t}{d}" for t in tensors for d in "bhn"))  # (and the head dims' 1s)
        out = dict(module=L5B, kernel=kernel,
                   signature={**pointers(v["dtype"], "q_ptr", "k_ptr", "v_ptr", "do_ptr", *outputs),
                              **pointers("fp32", "lse_ptr", "delta_ptr", "dq_sum_ptr"), "sm_scale": "fp32", **heads},
                   divisible_by_16=("q_ptr", "k_ptr", "v_ptr", "do_ptr", *(f"stride_{t}{d}" for t in tensors
                                                                          for d in "bhn")),  # (a launch's, head dim 16 and up)
                   **from_config(v["config"]))
        out["constexprs"].update(HEAD_DIM=D, BLOCK_D=dot_block(D), CAUSAL=v["causal"], INPUT_PRECISION=precision(v),
                                 INDEX_TYPE=v["index"], **UNIT_STRIDES(tensors), **constexprs)
        return out
    return job


def preprocess_job(v):
    D = v["head_dim"]
    return dict(module=L5B, kernel="preprocess_kernel",
                signature={**pointers(v["dtype"], "o_ptr", "do_ptr"), "delta_ptr": "*fp32", **ints("H", "seq_q"),
                           **ints(*(f"stride_{t}{d}" for t in ("o", "do") for d in "bhn"))},
                constexprs={"HEAD_DIM": D, "BLOCK_D": dot_block(D), "BLOCK_M": 64 if D <= 128 else 16,
                            "INDEX_TYPE": v["index"], **UNIT_STRIDES(("o", "do"))})


def sum_parts_job(v):  # as backward.launch_backward launches it where dK/dV run in parts (2 to 4 of them here)
    D = v["head_dim"]
    BLOCK_D = next_power_of_2(D)
    return dict(module=L5B, kernel="sum_parts_kernel",
                signature={**pointers("fp32", "dk_parts_ptr", "dv_parts_ptr"), **pointers(v["dtype"], "dk_ptr", "dv_ptr"),
                           **ints("rows", "H_KV", "seq_k"),
                           **ints(*(f"stride_{t}{d}" for t in ("dk", "dv") for d in "bhn"))},
                constexprs={"PARTS": v["parts"], "HEAD_DIM": D, "BLOCK_D": BLOCK_D, "BLOCK_R": max(1, 4096 // BLOCK_D),
                            "INDEX_TYPE": v["index"], **UNIT_STRIDES(("dk", "dv"))})


def combine_job(v):
    D = v["head_dim"]
    return dict(module=DEC, kernel="combine_splits_kernel",
                constexprs={"HEAD_DIM": D, "BLOCK_D": dot_block(D), "INDEX_TYPE": v["index"], "MAX_SPLITS": decode.MAX_SPLITS},
                signature={**pointers("fp32", "part_o_ptr", "part_lse_ptr"), "o_ptr": f"*{v['dtype']}",
                           "lse_ptr": "*fp32", **ints("num_splits", "H", "seq_q", "rows_total"),
                           **ints(*(f"stride_o{d}" for d in "bhnd"))})


def itemsize(v) -> int:
    return 4 if v.get("dtype", "").startswith("fp32") else 2


def last_of(configs):  # an autotuned kernel: small problems run its last configuration untimed
    return lambda v: v["config"] is configs[-1]


def attention_family(name, lists, job) -> Family:
    """A lesson 5 kernel whose autotuner tries one list to head dim 128 and another at 256."""
    narrow, wide = lists  # (no wide list: the kernel takes head dims to 128 only)
    applies = lambda v: any(v["config"] is c for c in (narrow if dot_block(v["head_dim"]) <= 128 else wide))  # noqa: E731
    must_fit = lambda v: v["config"] is (narrow if dot_block(v["head_dim"]) <= 128 else wide)[-1]  # noqa: E731
    head_dims = HEAD_DIMS if wide else tuple(d for d in HEAD_DIMS if dot_block(d) <= 128)
    return Family(name, {"dtype": DTYPES, "head_dim": head_dims, "config": tuple(narrow + wide)},
                  {"causal": (True, False), "index": INDEX}, job, must_fit=must_fit,
                  size=lambda v: v["head_dim"] * itemsize(v), applies=applies)


def families(arch: int) -> list[Family]:
    tiles = tuple(2**i for i in range(13))  # tile_config differs up to rows of 4096 columns
    out = [
        # lesson 1: add and gelu take BLOCK_SIZE and num_warps from the caller (1 to 65536, 1 to 32)
        elementwise("add_kernel", ("x_ptr", "y_ptr", "output_ptr"), ((1, 1), (1024, 4), (65536, 32))),
        elementwise("gelu_kernel", ("x_ptr", "y_ptr"), ((1, 1), (1024, 4), (65536, 32))),
        elementwise("gelu_backward_kernel", ("dy_ptr", "x_ptr", "dx_ptr")),
        Family("empty_kernel_8", {}, {}, lambda v: dict(
            module="lesson01_vector_add.timing", kernel="empty_kernel_8",
            signature={**pointers("fp32", "a_ptr", "b_ptr", "c_ptr", "d_ptr"), **ints("M", "N", "K", "L")}, constexprs={})),
        Family("spin_kernel", {}, {}, lambda v: dict(module="lesson03_rowsum.main", kernel="spin_kernel", signature={"y_ptr": "*fp32", "iters": "i32"},
                                                     constexprs={"BLOCK": 1024}, num_warps=32)),
        # lesson 2: one BLOCK_N per power of two up to the longest row of the one-pass kernel
        Family("softmax_kernel", {"dtype": DTYPES, "N": tuple(n for n in POWERS if n <= MAX_ONE_PASS_N)},
               {"index": INDEX}, softmax_job, size=lambda v: v["N"] * itemsize(v)),
        Family("softmax_online_kernel", {"dtype": DTYPES}, {"index": INDEX}, lambda v: dict(
            module=L2, kernel="softmax_online_kernel",
            signature={**pointers(v["dtype"], "x_ptr", "y_ptr"), **ints("N", "stride_xm", "stride_xn", "stride_ym")},
            constexprs={"BLOCK_N": 8192, "INDEX_TYPE": v["index"]}, num_warps=16), size=itemsize),
        Family("softmax_backward_kernel", {"dtype": DTYPES, "N": tiles}, {"index": INDEX}, softmax_backward_job,
               size=lambda v: v["N"] * itemsize(v)),
        # lesson 3
        Family("row_sum_kernel", {"dtypes": tuple((d, d) for d in DTYPES) + (("fp32", "bf16"), ("fp32", "fp16")),
                                  "N": tiles}, {"index": INDEX}, row_sum_job, size=lambda v: v["N"]),
        Family("row_sum_split_kernel", {"dtype": DTYPES, "N": tiles}, {"index": INDEX}, row_sum_split_job,
               size=lambda v: v["N"] * itemsize(v)),
        # lessons 2 and 3's files for lesson 6: cross-entropy (tiles to 8192), RMSNorm (rows to rmsnorm.MAX_N)
        # (the tiles' extremes and a middle: packed rows, one row a program, the widest tile)
        Family("cross_entropy_kernel", {"dtype": DTYPES, "V": (1, 256, 8192)}, {"index": INDEX}, cross_entropy_job,
               size=lambda v: v["V"] * itemsize(v)),
        Family("cross_entropy_backward_kernel", {"dtype": DTYPES, "V": (1, 256, 8192)}, {"index": INDEX},
               lambda v: cross_entropy_job(v, backward=True), size=lambda v: v["V"] * itemsize(v)),
        Family("rms_norm_kernel", {"dtype": DTYPES, "N": (1, 64, 1024, 4096)}, {"residual": (True, False),
                                                                                 "index": INDEX},
               rms_norm_job, size=lambda v: v["N"] * itemsize(v)),
        Family("rms_norm_backward_kernel", {"dtype": DTYPES, "N": (1, 1024, rmsnorm.MAX_N)},
               {"dh": (True, False), "index": INDEX}, rms_norm_backward_job, size=lambda v: v["N"] * itemsize(v)),
        # lesson 6: AdamW over every parameter, through its tables of addresses and hyperparameters
        Family("adamw_kernel", {}, {}, lambda v: dict(
            module="lesson06_gpt.adamw", kernel="adamw_kernel",
            signature={**pointers("i64", "table_ptr"), **pointers("fp32", "hyper_ptr"), **pointers("i32", "blocks_ptr")},
            constexprs={"BLOCK_SIZE": adamw.BLOCK_SIZE}, num_warps=4)),
        # lesson 4: the autotuned list, each epilogue, both precisions of float32
        Family("matmul_kernel", {"dtype": DTYPES + ("fp32 as tf32",), "config": tuple(MATMUL_CONFIGS)},
               {"activation": EPILOGUES, "index": INDEX}, matmul_job,
               must_fit=last_of(MATMUL_CONFIGS), size=lambda v: itemsize(v) + (v["dtype"] == "fp32 as tf32")),
        # lesson 5, every head dim: each list's configurations where its autotuner tries them (to head
        # dim 128, or at 256); the last of each, what small problems run untimed, must fit
        attention_family("attention_kernel", (NARROW, WIDE), attention_job),
        Family("attention_kernel for decoding", {"dtype": DTYPES, "head_dim": HEAD_DIMS, "rows": ("fewest", "most"),
                                              "config": tuple(decode.GPU_CONFIGS)},
               {"causal": (True, False), "index": INDEX}, lambda v: attention_job(dict(v, out="fp32")),
               must_fit=last_of(decode.GPU_CONFIGS), size=lambda v: v["head_dim"] * itemsize(v) * (v["rows"] == "most")),
        Family("combine_splits_kernel", {"dtype": DTYPES, "head_dim": HEAD_DIMS}, {"index": INDEX}, combine_job,
               size=lambda v: v["head_dim"] * itemsize(v)),
        Family("preprocess_kernel", {"dtype": DTYPES, "head_dim": HEAD_DIMS}, {"index": INDEX}, preprocess_job,
               size=lambda v: v["head_dim"] * itemsize(v)),
        Family("sum_parts_kernel", {"dtype": DTYPES, "head_dim": HEAD_DIMS}, {"parts": (2, 4), "index": INDEX},
               sum_parts_job, size=lambda v: v["head_dim"] * itemsize(v)),
        attention_family("dkdv_kernel", backward.LISTS["dkdv"], backward_job("dkdv_kernel", ("dk_ptr", "dv_ptr"))),
        attention_family("dkdv_kernel with atomic dQ", backward.LISTS["fused"],
                         backward_job("dkdv_kernel", ("dk_ptr", "dv_ptr"), ATOMIC_DQ=True)),
        attention_family("dq_kernel", backward.LISTS["dq"], backward_job("dq_kernel", ("dq_ptr",))),
    ]
    if arch >= 90:  # TMA came with Hopper: compiled where it exists (whether it fits is the launcher's rule, below)
        out.append(Family("matmul_kernel_tma", {"dtype": ("fp16", "bf16"), "config": tuple(GPU_TMA_CONFIGS)},
                          {"activation": ACTIVATIONS}, tma_job, must_fit=lambda v: False))
    if tma_gpu(arch, GPUS[arch][1]):  # the backward's GELU epilogue in the configuration hopper.config gives
        # it (its tile of dL/dC passes through shared memory), which runs untimed: it must fit where TMA runs
        out.append(Family("matmul_kernel_tma for the backward's epilogue", {"dtype": ("bf16",),
                                                                             "split": (False, True)}, {},
                          tma_backward_job))
    return out


def cover(variants: list[dict], first: list[dict]) -> list[dict]:
    """`first`, then variants until every value of every dimension appears at least once."""
    chosen, seen = list(first), {(dim, show(value)) for v in first for dim, value in v.items()}
    for v in variants:
        pairs = {(dim, show(value)) for dim, value in v.items()}
        if not pairs <= seen:
            chosen.append(v)
            seen |= pairs
    return chosen


def jobs(all_configs: bool) -> dict:
    """{(arch, label, must it fit?): compile job}. With all_configs, every variant on every GPU.
    Without: on every GPU the largest variant each kernel must fit, and on the GPUs from sm_80 in
    turn the variants that bring a value not yet compiled (the dimensions' values all covered)."""
    out, archs = {}, list(GPUS)
    for arch in archs:
        for fam in families(arch):
            variants = fam.variants()
            if not all_configs:
                fitting = [v for v in variants if fam.must_fit(v)]
                largest = [max(fitting, key=fam.size)] if fitting else []
                # each value by its smallest variant (a float32 tile at head dim 256, on a T4's CUDA
                # cores, takes a minute to compile; the value is as well covered by a small one)
                rest = cover(sorted((v for v in variants if v not in largest), key=fam.size), largest)[len(largest):]
                if not fam.name.startswith("matmul_kernel_tma"):  # (which has two or three GPUs: all of it on each)
                    # one GPU each, in turn, of those with tensor cores: a T4 (sm_75) multiplies tiles on its
                    # CUDA cores, where a large tile compiles for a minute, and runs small problems' tiles only
                    tensor_cores = [a for a in archs if a >= 80]
                    rest = [v for i, v in enumerate(rest) if tensor_cores[i % len(tensor_cores)] == arch]
                variants = largest + rest
            for v in variants:
                job = fam.job(v)
                job.update(arch=arch, asm=["ptx"] if arch in (75, 80) else [])
                out[arch, fam.label(v), fam.must_fit(v)] = job
    return out


@pytest.fixture(scope="session")
def compiled(request) -> dict:
    """Every job for every GPU, compiled once, in child processes side by side: {arch: {(label, must fit):
    result}}. Under pytest-xdist the controller compiled them, in the background, from the start of
    the run (conftest.pytest_sessionstart): its results are read here once they are there."""
    todo = jobs(request.config.getoption("--all-configs"))
    shared = os.environ.get(COMPILED)
    if shared:
        while not os.path.exists(shared):
            time.sleep(1)
        with open(shared) as f:
            results = json.load(f)
        if "error" in results:
            raise RuntimeError(results["error"])
    else:
        results = ptx.compile_kernels(list(todo.values()), processes=min(16, os.cpu_count() or 1))
    out = {arch: {} for arch in GPUS}
    for (arch, label, must_fit), result in zip(todo, results):
        out[arch][label, must_fit] = result
    return out


def test_every_kernel_and_every_value_is_compiled():
    # the default run leaves out no kernel on any GPU, and no value of any dimension
    default = jobs(False)
    for arch in GPUS:
        names = {fam.name for fam in families(arch)}
        assert names == {label.split(",")[0] for (a, label, _) in default if a == arch}
    for fam in families(90):
        wanted = {(dim, show(value)) for v in fam.variants() for dim, value in v.items()}
        labels = [label for (_, label, _) in default if label.split(",")[0] == fam.name]
        assert all(any(f"{dim} {value}" in label for label in labels) for dim, value in wanted), fam.name


@pytest.mark.parametrize("arch", GPUS)
def test_every_kernel_compiles_and_fits(compiled, arch):
    name, limit = GPUS[arch]
    for (what, must_fit), result in compiled[arch].items():
        assert not must_fit or result["shared"] <= limit, (
            f"sm_{arch} ({name}): {what} needs {result['shared']} bytes of shared memory, the GPU has {limit}")


SMALLEST_TMA = min(GPU_TMA_CONFIGS, key=shared_bytes)


@pytest.mark.parametrize("arch", GPUS)
def test_the_tma_path_is_taken_exactly_where_its_kernel_fits(compiled, arch):
    limit = GPUS[arch][1]
    tma = {what: result["shared"] for (what, _), result in compiled[arch].items() if what.startswith("matmul_kernel_tma")}
    smallest = [shared for what, shared in tma.items() if show(SMALLEST_TMA) in what]
    assert tma_gpu(arch, limit) == bool(smallest and min(smallest) <= limit)
    if smallest:  # hopper.shared_bytes, the launcher's estimate, never undercounts (the barriers aside)
        assert min(smallest) <= shared_bytes(SMALLEST_TMA) + 1024


def candidate_job(M, N, K, activation, out_dtype, a_t, b_t, meta) -> dict:
    """matmul_kernel_tma as hopper.tune launches one of its candidates for a product of LESSON6_PRODUCTS."""
    meta, c = dict(meta), "fp32" if out_dtype == torch.float32 else "bf16"
    num_warps, num_stages = meta.pop("num_warps"), meta.pop("num_stages")
    signature = {**pointers("bf16", "a_ptr", "b_ptr"), **pointers(c, "c_ptr"),
                 **ints("M", "N", "K", "stride_am", "stride_bk", "stride_cm")}
    if activation == "gelu_backward":
        signature.update(pointers("bf16", "g_ptr"))
    if meta["SPLIT_K"] > 1:  # (the parts' buffer, or None where atomics add them into a float32 C)
        into_c = meta.get("SPLIT_ATOMIC") and c == "fp32" and not activation
        signature.update(ints("whole_tiles"), **({} if into_c else pointers("fp32", "parts_ptr")))
    return dict(module="lesson04_matmul.hopper", kernel="matmul_kernel_tma", signature=signature, arch=90, asm=[],
                constexprs=dict(meta, ACTIVATION=activation or "", A_T=a_t, B_T=b_t), num_warps=num_warps,
                num_stages=num_stages, divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am",
                                                        "stride_bk", "stride_cm"))


def test_every_candidate_tune_times_for_lesson_6_fits_as_shared_bytes_counts(monkeypatch):
    # hopper.candidates keeps a configuration where hopper.shared_bytes says it fits: for each
    # product of lesson 6's step on an H100, every candidate compiles for sm_90 within its 227 KB,
    # and the count is the compiler's (the barriers aside): C's piece, a split's float32 piece
    # beside a 16-bit C's (shared with a float32 C's), gelu_backward's rearranged tile of dL/dC
    as_on_an_h100(monkeypatch, hopper)
    todo = {}
    for M, N, K, activation, out_dtype, a_t, b_t in LESSON6_PRODUCTS:
        for meta in hopper.candidates(M, N, K, activation=activation, out_dtype=out_dtype):
            job = candidate_job(M, N, K, activation, out_dtype, a_t, b_t, meta)
            counted = shared_bytes(meta, c_itemsize=4 if out_dtype == torch.float32 else 2, activation=activation)
            # once per layout of shared memory: what the count depends on (not the number of parts, nor
            # which operand is read transposed, nor a GELU in registers)
            kind = (json.dumps(dict(meta, SPLIT_K=meta["SPLIT_K"] > 1), sort_keys=True), str(out_dtype),
                    activation == "gelu_backward")
            todo.setdefault(kind, (job, counted))
    results = ptx.compile_kernels([job for job, _ in todo.values()], processes=min(4, os.cpu_count() or 1))
    for (job, counted), result in zip(todo.values(), results):
        what = {k: job["constexprs"][k] for k in ("BLOCK_N", "EPILOGUE_SPLIT", "SPLIT_K", "ACTIVATION")}
        assert result["shared"] <= GPUS[90][1], f"{what}, {job['num_stages']} stages: {result['shared']} bytes"
        assert counted <= result["shared"] <= counted + 1024, (what, job["num_stages"], counted, result["shared"])


def test_a_t4_has_no_tensor_core_path(compiled):
    # Triton's tl.dot uses the tensor cores from sm_80 (mma) on; on a T4 it compiles to FMA
    # instructions: correct, and no faster than CUDA cores make it. README says so.
    dots = {what: result for (what, _), result in compiled[75].items()
            if what.startswith(("matmul", "attention", "dkdv", "dq_kernel"))}
    assert len(dots) >= 4 and all("mma" not in result["ptx"] for result in dots.values())
    # and on an A100 they do, but for float32 in full precision (matmul(precision="ieee")), which they cannot hold
    tensor_core = [result for (what, _), result in compiled[80].items() if what.startswith("matmul") and "dtype fp32," not in what]
    assert tensor_core and all("mma" in result["ptx"] for result in tensor_core)


def test_every_recorded_pick_is_a_configuration_of_its_autotuners_list(monkeypatch):
    # common/tuned/: a pick whose configuration left its autotuner's list is dropped at import, and
    # that key is timed again on a first run; a list changed since the recording shows here. So for
    # hopper.tune's picks (every GPU recorded has an H100's 132 SMs and 227 KB): one of candidates()
    from common import tuned
    as_on_an_h100(monkeypatch, hopper)
    lists = {"matmul_kernel_tuned": MATMUL_CONFIGS, "matmul_kernel_tma_tuned": GPU_TMA_CONFIGS,
             "attention_kernel_tuned": NARROW + WIDE, "attention_kernel_decode": decode.GPU_CONFIGS,
             **{f"{name}_kernel_tuned": narrow + wide for name, (narrow, wide) in backward.LISTS.items()}}
    files = sorted(os.listdir(tuned.FOLDER))
    assert files, "no GPU model recorded"
    for file in files:
        with open(os.path.join(tuned.FOLDER, file)) as f:
            recorded = json.load(f)
        assert tuned.path(recorded["gpu"]) == os.path.join(tuned.FOLDER, file)  # found by its GPU's name
        for name, rows in recorded["picks"].items():
            if name == "matmul_kernel_tma config":
                stale = [key for key, config in rows if not hopper.valid_pick(tuple(key), config)]
                assert not stale, f"{file}: hopper.tune's picks for {stale} are not candidates: record them again"
                continue
            listed = [tuned.described(c) for c in lists[name]]
            stale = sorted({json.dumps(config) for _, config in rows if config not in listed})
            assert not stale, f"{file}: {name}'s picks {stale} are not in its list: record them again"
