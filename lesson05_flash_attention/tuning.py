"""Lesson 5, second file: the forward's measurements that most readers skip on a first pass.

main.py imports this file and hands each function what it needs of the chapter (the launcher, the
kernel, the public function, the reference) as arguments. Every function here needs a CUDA GPU.

- peak_memory: section 7, each implementation's peak memory against the sequence length (the
  arithmetic of section 1, measured).
- bench_configs: section 9, the autotuner's job done by hand: every candidate block size of the
  sweep, timed side by side (RESULTS.md, "Block sizes"); its winners are main.py's GPU_CONFIGS.
- host_cases: section 10, the calls of the "Host cost per call" table (lesson 1, section 12).
- offsets_cases: section 11, the calls of "64-bit offsets: what they cost" (lesson 2).
"""
import functools

from common.device import DEVICE  # first: it decides how triton is imported

import torch
import torch.nn.functional as F
import triton.language as tl

from common import bench
from common.checks import dtype_name
from common.launch import cdiv
from common.table import print_table

SWEEP = [(128, 64, 8, 3), (128, 64, 4, 3), (128, 64, 8, 2), (128, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3),
         (128, 32, 4, 3)]  # (BLOCK_M, BLOCK_N, num_warps, num_stages)


def peak_memory(impls: dict, seqs, B=4, H=32, D=64, dtype=torch.float16):
    """impls = {name: fn(q, k, v)}: the memory each call allocates beyond its inputs, at its peak
    (torch.cuda's allocator statistics), against seq. A call that runs out of memory says so."""
    rows = []
    for seq in seqs:
        row = [seq]
        for fn in impls.values():
            q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
            try:
                fn(q, k, v)  # once first: compilation and autotuning (which allocates buffers of its own) stay out
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                fn(q, k, v)
                torch.cuda.synchronize()
                row.append(f"{(torch.cuda.max_memory_allocated() - base) / 2**30:.2f}")
            except torch.OutOfMemoryError:
                row.append("out of memory")
            del q, k, v
            torch.cuda.empty_cache()
        rows.append(row)
    return print_table(rows, ["seq", *(f"{name}: peak extra GiB" for name in impls)],
                       title=f"Peak memory, batch {B}, {H} heads, head_dim {D}, {dtype_name(dtype)}",
                       note="torch.cuda.max_memory_allocated during one call, less what was allocated before it (q, k, "
                            "v). Standard attention's peak holds more than the s and p of section 1: q k^T in the "
                            "input dtype, its float32 copy, the float32 softmax and p. Flash attention's is o and lse.")


def bench_configs(launch, kernel, seq: int = 4096, configs=SWEEP, shapes=((4, 32, 64), (4, 16, 128)),
                  causals=(False, True), dtype=torch.float16):
    """Every configuration in `configs`, (BLOCK_M, BLOCK_N, num_warps, num_stages), side by side:
    launch(kernel, q, k, v, causal, sm_scale, **block sizes) for the plain attention_kernel."""
    rows = []
    for B, H, D in shapes:
        q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
        for causal in causals:
            times = bench.side_by_side({cfg: functools.partial(launch, kernel, q, k, v, causal, D ** -0.5,
                                                               BLOCK_M=cfg[0], BLOCK_N=cfg[1], num_warps=cfg[2],
                                                               num_stages=cfg[3]) for cfg in configs})
            flops = 4 * B * H * seq * seq * D / (2 if causal else 1)
            best = min(times.values())
            for (bm, bn, warps, stages), ms in times.items():
                rows.append((D, causal, f"{bm} x {bn}", warps, stages, ms * 1e3, bench.tflops(flops, ms),
                             100 * best / ms))
    return print_table(rows, ["head_dim", "causal", "BLOCK_M x BLOCK_N", "num_warps", "num_stages",
                              "kernel µs", "TFLOP/s", "% of best"],
                       title=f"Block sizes, seq {seq}, {dtype_name(dtype)}",
                       note=f"batch x heads = {' and '.join(f'{B} x {H}' for B, H, _ in shapes)}. Kernel time "
                            f"(profiler timestamps, L2 flushed between calls). {bench.SIDE_BY_SIDE_NOTE}")


def host_cases(attention, kernel, config, B=4, H=16, seq=1024, D=128) -> dict:
    """For bench.host_costs: {label: call}, the host's share of attention(q, k, v) beside PyTorch's
    SDPA and the bare launch of `kernel` (attention_kernel) with the block sizes of `config`."""
    q, k, v, o = torch.randn(4, B, H, seq, D, device=DEVICE, dtype=torch.float16)
    lse = torch.empty(B, H, seq, device=DEVICE)
    meta = config.all_kwargs()  # BLOCK_M, BLOCK_N, num_warps, num_stages...
    grid = (cdiv(seq, meta["BLOCK_M"]) * B * H,)
    return {f"SDPA ({B} x {H} x {seq} x {D} float16)": lambda: F.scaled_dot_product_attention(q, k, v),
            "attention_kernel[grid](...) alone, arguments ready": lambda: kernel[grid](
                q, k, v, o, lse, 0.125, H, seq, *q.stride(), *k.stride(), *v.stride(), *o.stride(), HEAD_DIM=D,
                CAUSAL=False, INPUT_PRECISION="tf32", INDEX_TYPE=tl.int32, **meta),
            "attention(q, k, v)": lambda: attention(q, k, v),
            "attention(q, k, v, causal=True)": lambda: attention(q, k, v, causal=True)}


def offsets_cases(launch, kernel, shapes, seq: int = 4096) -> dict:
    """For bench.offsets_cost: {label: fn(index_type)}, each a call of launch(kernel, ...) (the
    autotuned kernel) with that integer type for its offsets."""
    cases = {}
    for B, H, D in shapes:
        q, k, v = torch.randn(3, B, H, seq, D, device=DEVICE, dtype=torch.float16)
        for causal in (False, True):
            cases[f"attention(q, k, v, causal={causal}), {B} x {H} x {seq} x {D} float16"] = (
                lambda t, q=q, k=k, v=v, causal=causal, D=D: launch(kernel, q, k, v, causal, D ** -0.5, index_type=t))
    return cases
