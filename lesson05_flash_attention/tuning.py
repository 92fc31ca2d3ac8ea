"""Lesson 5, second file: what most readers skip on a first pass.

memory_table() measures section 7's point: each implementation's peak memory against seq.
offsets_cases() feeds "64-bit offsets: what they cost" (lesson 2, section 4).

bench_configs() is the autotuner's job done by hand: every candidate block size of the sweep,
timed side by side (main.py's section "configs" with --full; RESULTS.md, "Block sizes"); its
winners are main.GPU_CONFIGS. host_cases() feeds the "Host cost per call" table (lesson 1, "What
a launch costs").
"""
import math

import torch
import torch.nn.functional as F
import triton.language as tl

from common import bench
from common.checks import dtype_name
from common.device import DEVICE, INTERPRET
from common.launch import cdiv
from lesson05_flash_attention.main import GPU_CONFIGS, attention, attention_kernel, attention_standard, launch, score_bytes

SWEEP = [(128, 64, 8, 3), (128, 64, 4, 3), (128, 64, 8, 2), (128, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3),
         (128, 32, 4, 3)]  # (BLOCK_M, BLOCK_N, num_warps, num_stages)


def bench_configs(seq: int = 4096, configs=SWEEP, shapes=((4, 32, 64), (4, 16, 128)),
                  dtype=torch.float16) -> bench.Table:
    rows = []
    for B, H, D in shapes:
        q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
        for causal in (False, True):
            times = bench.side_by_side({cfg: (lambda cfg=cfg: launch(
                attention_kernel, q, k, v, causal, 1.0 / math.sqrt(D), BLOCK_M=cfg[0], BLOCK_N=cfg[1],
                num_warps=cfg[2], num_stages=cfg[3])) for cfg in configs})
            flops = 4 * B * H * seq * seq * D / (2 if causal else 1)
            best = min(times.values())
            for (bm, bn, warps, stages), ms in times.items():
                rows.append((D, causal, f"{bm} x {bn}", warps, stages, ms * 1e3, bench.tflops(flops, ms),
                             100 * best / ms))
    return bench.print_table(rows, ["head_dim", "causal", "BLOCK_M x BLOCK_N", "num_warps", "num_stages",
                                    "kernel µs", "TFLOP/s", "% of best"],
                             title=f"Block sizes, seq {seq}, {dtype_name(dtype)}",
                             note=f"batch x heads = {' and '.join(f'{B} x {H}' for B, H, _ in shapes)}."
                                  f"{bench.SIDE_BY_SIDE_NOTE}" + (f" {bench.TIMING_NOTE}" if INTERPRET else ""))


def host_cases() -> dict:
    """For bench.host_costs: the host's share of each call, beside PyTorch's and the bare launch
    (lesson 1, "What a launch costs")."""
    B, H, seq, D = 4, 16, 1024, 128
    q, k, v, o = torch.randn(4, B, H, seq, D, device=DEVICE, dtype=torch.float16)
    lse = torch.empty(B, H, seq, device=DEVICE)
    config = GPU_CONFIGS[0].all_kwargs()
    grid = (cdiv(seq, config["BLOCK_M"]) * B * H,)
    return {f"SDPA ({B} x {H} x {seq} x {D} float16)": lambda: F.scaled_dot_product_attention(q, k, v),
            "attention_kernel[grid](...) alone, arguments ready": lambda: attention_kernel[grid](
                q, k, v, o, lse, 0.125, H, seq, *q.stride(), *k.stride(), *v.stride(), *o.stride(), HEAD_DIM=D,
                CAUSAL=False, INPUT_PRECISION="tf32", INDEX_TYPE=tl.int32, **config),
            "attention(q, k, v)": lambda: attention(q, k, v),
            "attention(q, k, v, causal=True)": lambda: attention(q, k, v, causal=True)}


def offsets_cases() -> dict:
    """For bench.offsets_cost: what int64 offsets (lesson 2, section 4) would cost here."""
    from lesson05_flash_attention.main import SHAPES

    qkv = {(B, H, D): torch.randn(3, B, H, 4096, D, device=DEVICE, dtype=torch.float16) for B, H, D in SHAPES["full"]}
    return {f"attention(q, k, v, causal={causal}), {B} x {H} x 4096 x {D} float16":
            (lambda t=t, causal=causal: attention(*t, causal=causal))
            for (B, H, D), t in qkv.items() for causal in (False, True)}


def memory_table(seqs, B=4, H=32, D=64, dtype=torch.float16) -> bench.Table:
    rows = []
    for seq in seqs:
        qkv_out = 4 * B * H * seq * D * torch.tensor([], dtype=dtype).element_size()
        scores = score_bytes(B, H, seq, torch.float32) + score_bytes(B, H, seq, dtype)  # s in fp32, p
        measured = ["-", "-"]
        if not INTERPRET:
            for i, fn in enumerate((attention_standard, attention)):
                q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype) for _ in range(3))
                if fn is attention:  # once first: autotuning allocates a buffer of its own
                    fn(q, k, v)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                try:
                    fn(q, k, v)
                    torch.cuda.synchronize()
                    measured[i] = f"{(torch.cuda.max_memory_allocated() - base) / 2**30:.2f}"
                except torch.OutOfMemoryError:
                    measured[i] = "out of memory"
                del q, k, v
                torch.cuda.empty_cache()
        rows.append((seq, qkv_out / 2**30, scores / 2**30, *measured))
    return bench.print_table(rows, ["seq", "q, k, v, o (GiB)", "scores s and p (GiB)",
                                    "standard: peak extra GiB", "flash: peak extra GiB"], floatfmt=".2f",
                             title=f"Memory, batch {B}, {H} heads, head_dim {D}, {dtype_name(dtype)}",
                             note="The scores grow as seq^2, everything else as seq. Standard attention's peak holds "
                                  "more than s and p: q k^T in the input dtype, its float32 copy, the float32 "
                                  "softmax and p.")
