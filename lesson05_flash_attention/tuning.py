"""Lesson 5, second file: the forward's measurements that most readers skip on a first pass.

main.py imports this file and hands each function what it times as arguments (attention.py's
launcher, kernel and op, the chapter's reference). Every function here needs a CUDA GPU.

- peak_memory: section 8, each implementation's peak memory against the sequence length (the
  arithmetic of section 1, measured).
- bench_configs: section 10, the autotuner's job done by hand: every candidate block size of the
  sweep, timed side by side (RESULTS.md, "Block sizes"); its winners are attention.py's NARROW.
- host_cases: section 11, the calls of the "Host cost per call" table (lesson 1, section 12).
- offsets_cases: section 12, the calls of "64-bit offsets: what they cost" (lesson 2).
- bench_general: section 17, forward and backward on the shapes models pass (BENCH_CASES), against
  SDPA's backends.
- bench_leaderboard: section 18, forward and backward together on CS336's leaderboard shape.
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
                            "v). Standard attention's peak holds more than the s and p of section 1: the scores in "
                            "float32, their float32 softmax and p in the input dtype (q k^T in the input dtype is "
                            "freed by then). Flash attention's is o and lse.")


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


def host_cases(attention, kernel, B=4, H=16, seq=1024, D=64) -> dict:
    """For bench.host_costs: {label: call}, the host's share of attention(q, k, v) beside PyTorch's
    SDPA and the bare launch of `kernel` (the autotuned attention_kernel, which attention() runs at
    this head dim), its arguments ready."""
    q, k, v, o = torch.randn(4, B, H, seq, D, device=DEVICE, dtype=torch.float16)
    lse = torch.empty(B, H, seq, device=DEVICE)

    def grid(meta):
        return (cdiv(seq, meta["BLOCK_M"]) * B * H,)

    return {f"SDPA ({B} x {H} x {seq} x {D} float16)": lambda: F.scaled_dot_product_attention(q, k, v),
            "attention_kernel_tuned[grid](...) alone, arguments ready": lambda: kernel[grid](
                q, k, v, o, lse, D ** -0.5, H, 1, seq, seq, seq, 0, 0, *q.stride(), *k.stride(), *v.stride(),
                *o.stride(), HEAD_DIM=D, BLOCK_D=D, CAUSAL=False, INPUT_PRECISION="tf32", INDEX_TYPE=tl.int32),
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


# Timing these shapes against PyTorch's SDPA (main.py, section 17; GPU only).
# (batch, query heads, key heads, seq_q, seq_k, head_dim, causal): grouped-query and multi-query
# heads, head dims that are not powers of two and the largest, new queries against a longer KV
# cache (causal, bottom-right), then decoding (decode.py's kernels): one query against 8192 keys, and
# four (speculative decoding, causal).
BENCH_CASES = [(4, 32, 8, 4096, 4096, 128, False), (4, 32, 8, 4096, 4096, 128, True), (4, 32, 1, 4096, 4096, 64, True),
               (4, 16, 16, 4096, 4096, 80, True), (4, 16, 16, 4096, 4096, 96, True), (4, 8, 8, 4096, 4096, 256, True),
               (4, 16, 16, 1024, 4096, 128, True), (16, 32, 8, 1, 8192, 128, False), (16, 32, 8, 4, 8192, 128, True)]


def visible_pairs(seq_q: int, seq_k: int, causal: bool) -> int:
    """The (query, key) pairs attention computes: all of them, or, causal and aligned bottom-right,
    sum over queries i of the keys j <= i + seq_k - seq_q."""
    if not causal:
        return seq_q * seq_k
    return sum(min(seq_k, max(0, i + 1 + seq_k - seq_q)) for i in range(seq_q))


def bench_general(impls: dict, cases=BENCH_CASES, dtype=torch.float16, *, kernel_of=None):
    """Forward and backward of each implementation in impls = {name: fn(q, k, v, causal=...)}
    (attention.py's attention first, then SDPA's backends, which the comparisons divide by) on each case,
    side by side; kernel_of(q, k, v): the paths the first runs, forward and backward, for its rows. A
    backend that refuses a shape (SDPA's do not take every head dim or mask) is left out of that
    case's rows. GPU only."""
    rows = []
    for B, H, H_KV, seq_q, seq_k, D, causal in cases:
        q = torch.randn(B, H, seq_q, D, device=DEVICE, dtype=dtype, requires_grad=True)
        k, v = (torch.randn(B, H_KV, seq_k, D, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(2))
        do = torch.randn(B, H, seq_q, D, device=DEVICE, dtype=dtype)
        outs = {}
        for name, fn in impls.items():
            try:
                out = fn(q, k, v, causal=causal)
                torch.autograd.grad(out, (q, k, v), do, retain_graph=True)  # its backward too
                outs[name] = out
            except RuntimeError as error:  # "No available kernel", for this shape
                print(f"{name} left out of {B} x {H}/{H_KV} x {seq_q}/{seq_k} x {D}: {str(error).splitlines()[0]}")
        forward = bench.side_by_side({name: functools.partial(impls[name], q, k, v, causal=causal) for name in outs})
        backward = bench.side_by_side({name: functools.partial(torch.autograd.grad, o, (q, k, v), do, retain_graph=True)
                                       for name, o in outs.items()})
        flops = 4 * B * H * visible_pairs(seq_q, seq_k, causal) * D
        ours = next(iter(outs))
        for name in outs:
            label = f"{name} ({kernel_of(q, k, v)})" if kernel_of and name == ours else name
            rows.append((f"{B} x {H}/{H_KV} x {seq_q}/{seq_k} x {D}", causal, label, forward[name] * 1e3,
                         backward[name] * 1e3, bench.tflops(flops, forward[name]),
                         bench.tflops(2.5 * flops, backward[name]), forward[name] / forward[ours],
                         backward[name] / backward[ours]))
        del q, k, v, do, outs
    return print_table(
        rows, ["B x heads q/kv x seq q/kv x head_dim", "causal", "implementation", "forward µs", "backward µs",
               "forward TFLOP/s", "backward TFLOP/s", "forward: its µs / ours", "backward: its µs / ours"],
        title=f"The shapes models pass against SDPA's backends, {dtype_name(dtype)}", floatfmt=".2f",
        note="Kernel time (profiler timestamps, L2 flushed between calls); the backward is the gradient call, "
             "torch.autograd.grad(o, (q, k, v), dO). " + bench.SIDE_BY_SIDE_NOTE + " TFLOP/s: forward 4 B H "
             "head_dim times the (query, key) pairs computed (causal: bottom-right, tuning.visible_pairs), backward "
             "2.5 times that; at head_dim 80 and 96 the kernels compute 128, which is not counted. 'its µs / ours': "
             "above 1, the course's kernels are the faster. SDPA gets k and v with their own heads (enable_gqa) and "
             "the bottom-right mask (causal_lower_right) where the lengths differ.")


# CS336's leaderboard shape (Stanford CS336, assignment 2): batch 1, 16 heads, seq 16384, head_dim 64,
# bfloat16, causal; what counts is one forward and one backward, together (main.py, section 18).
LEADERBOARD = (1, 16, 16384, 64)


def bench_leaderboard(impls: dict, shape=LEADERBOARD, dtype=torch.bfloat16):
    """Forward + backward, o = fn(q, k, v, causal=True) then the gradient call, of each implementation
    in impls (attention.py's attention first) on CS336's leaderboard shape, side by side. GPU only."""
    B, H, seq, D = shape
    q, k, v = (torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, seq, D, device=DEVICE, dtype=dtype)
    steps = {name: functools.partial(lambda fn: torch.autograd.grad(fn(q, k, v, causal=True), (q, k, v), do), fn)
             for name, fn in impls.items()}
    ms = bench.side_by_side(steps)
    ours = next(iter(impls))
    flops = 3.5 * 4 * B * H * visible_pairs(seq, seq, True) * D  # the forward's, and 2.5 times that backward
    rows = [(name, ms[name], bench.tflops(flops, ms[name]), ms[name] / ms[ours]) for name in impls]
    return print_table(rows, ["implementation", "forward + backward ms", "TFLOP/s", "its ms / ours"],
                       title=f"CS336's leaderboard shape: {B} x {H} x {seq} x {D}, {dtype_name(dtype)}, causal",
                       floatfmt=".3f",
                       note="Kernel time of one forward and its gradient call, torch.autograd.grad(o, (q, k, v), dO) "
                            "(profiler timestamps, L2 flushed between calls). " + bench.SIDE_BY_SIDE_NOTE +
                            " 'its ms / ours': above 1, the course's kernels are the faster.")
