"""Lesson 7, beside the chapter: the Hopper kernels compiled for an H100 or H200 (sm_90) on any
machine, and what their PTX and machine code hold.

triton.compile with an explicit target runs the whole pipeline without a GPU (common/ptx.py: LLVM,
ptxas and cuobjdump ship inside the triton wheel), so what each kernel becomes can be counted on a
laptop: the instructions that move tiles (cp.async, a thread's asynchronous copy; cp.async.bulk.tensor,
a TMA copy), Hopper's tensor-core instruction (wgmma.mma_async), the barriers' waits, the register
budgets the warps move to (setmaxnreg), the shared memory a program takes, what ptxas spills, and the
loops of the machine code (SASS). The counts are instructions in the code, not events at run time.

The kernels stay in their lessons' op files (lesson 4's and lesson 5's hopper.py), where the routes
run them; this file only describes their arguments to triton.compile and reads what comes back.
main.py, the chapter, prints the tables.
"""
import functools
import re

from common import ptx  # (first: common.device chooses triton's mode)
from common.table import Table, print_table
from lesson05_flash_attention import hopper as attention_hopper  # the Gluon forward and backward

from triton.experimental.gluon import language as gl

SETMAXNREG = r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)"  # a register budget, in the PTX
BOTH_HEAD_DIMS = ((64, False), (64, True), (128, False), (128, True))  # (head_dim, causal): the Gluon kernels' cases


# %% Lesson 4's two matmul kernels: which instructions move the tiles
def copy_instructions(BLOCK=(128, 128, 64)) -> Table:
    """Compile matmul.py's pointer kernel and hopper.py's TMA kernel for sm_90 and count, in the PTX,
    the instructions that move tiles (cp.async: per-thread asynchronous copies; cp.async.bulk.tensor:
    TMA) and Hopper's tensor-core instruction (wgmma.mma_async: a warpgroup, 4 warps, multiplies
    tiles read straight from shared memory, asynchronously)."""
    BM, BN, BK = BLOCK
    tile = dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, ACTIVATION="")
    sizes = {"M": "i32", "N": "i32", "K": "i32"}
    aligned = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")
    jobs = {
        "matmul_kernel (matmul.py, pointer loads)": dict(
            module="lesson04_matmul.matmul", kernel="matmul_kernel",
            signature={"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", **sizes, "stride_am": "i32",
                       "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr", "stride_cm": "i32",
                       "stride_cn": "constexpr", **dict.fromkeys(tile, "constexpr"),
                       "INPUT_PRECISION": "constexpr", "TRACE": "constexpr"},
            constexprs=dict(stride_ak=1, stride_bn=1, stride_cn=1, **tile, INPUT_PRECISION="tf32", TRACE=False),
            divisible_by_16=aligned),
        "matmul_kernel_tma (hopper.py, descriptors)": dict(
            module="lesson04_matmul.hopper", kernel="matmul_kernel_tma",
            signature={"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", **sizes, "stride_am": "i32",
                       "stride_bk": "i32", "stride_cm": "i32", **dict.fromkeys(tile, "constexpr"),
                       "FLATTEN": "constexpr"},
            constexprs=dict(**tile, FLATTEN=True),
            divisible_by_16=aligned),
    }
    rows = []
    for name, asm in zip(jobs, ptx.compile_kernels([dict(job, num_warps=8) for job in jobs.values()])):
        code = asm["ptx"]
        rows.append((name, code.count("cp.async.cg") + code.count("cp.async.ca"), code.count("cp.async.bulk.tensor"),
                     code.count("wgmma.mma_async")))
    return print_table(rows, ["kernel", "cp.async", "cp.async.bulk.tensor (TMA)", "wgmma.mma_async"],
                       title=f"Lesson 4's kernels compiled for sm_90, {BM} x {BN} x {BK} tiles float16 (PTX counted)",
                       note="Instructions in the PTX, not events at run time. cp.async: a thread's asynchronous copy "
                            "of a few bytes from memory to shared memory (the pipeliner's, for tl.load); "
                            "cp.async.bulk.tensor: a TMA copy of a whole tile, one thread's request (for desc.load). "
                            "Each counts more than the kernel's loads: a thread copies its share of a tile in several "
                            "16-byte pieces (cp.async), and the pipeliner writes each load out again for the stages "
                            "it starts before the loop. "
                            "wgmma.mma_async: a warpgroup's matmul on tiles in shared memory (for tl.dot, in both).")


# %% Lesson 5's Gluon kernels: their arguments, as triton.compile takes them
def tensordesc_type(rows: int, cols: int, dtype: str, layout=None) -> str:
    """A host TensorDescriptor's argument type for triton.compile: tensordesc<dtype[tile], its
    shared-memory layout>; by default the layout wgmma reads a rows x cols tile by (hopper.tile_layout's)."""
    if layout is None:
        layout = gl.NVMMASharedLayout.get_default_for([rows, cols], {"fp16": gl.float16, "bf16": gl.bfloat16}[dtype])
    return f"tensordesc<{dtype}[{rows},{cols}],{layout!r}>"


def forward_signature(head_dim: int, dtype: str = "fp16") -> dict:
    """attention_kernel_hopper's argument types (a host TensorDescriptor travels as its tile's type)."""
    h = attention_hopper

    def desc(rows):
        return tensordesc_type(rows, head_dim, dtype)
    return {"q_desc": desc(h.BLOCK_M // 2), "k_desc": desc(h.BLOCK_N), "v_desc": desc(h.BLOCK_N),
            "o_desc": desc(h.BLOCK_M // 2), "lse_ptr": "*fp32", "sm_scale": "fp32", "seq_len": "i32"}


def backward_signature(head_dim: int, dtype: str = "fp16") -> dict:
    """attention_bwd_kernel_hopper's argument types (as forward_signature)."""
    h = attention_hopper

    def desc(rows):
        return tensordesc_type(rows, head_dim, dtype)
    block_m = h.bwd_block_m(head_dim)
    return {"q_desc": desc(block_m), "k_desc": desc(h.BLOCK_N_BWD // 2), "v_desc": desc(h.BLOCK_N_BWD // 2),
            "do_desc": desc(block_m), "lse_desc": tensordesc_type(1, block_m, "fp32", h.ROW_LAYOUT),
            "delta_desc": tensordesc_type(1, block_m, "fp32", h.ROW_LAYOUT),
            "dq_desc": tensordesc_type(*h.DQ_TILE, "fp32", h.DQ_LAYOUT), "dk_ptr": f"*{dtype}", "dv_ptr": f"*{dtype}",
            "sm_scale": "fp32", "seq_len": "i32", "H_KV": "i32", "GROUP": "i32",
            **{f"stride_{t}{d}": "i32" for t in ("q", "k", "do", "dk") for d in "bhs"}}


def budgets(code: str) -> str:
    """The register budgets setmaxnreg moves warps to, in the PTX, as '24, 120, ...'."""
    return ", ".join(map(str, sorted({int(n) for n in re.findall(SETMAXNREG, code)})))


# %% The forward
def compiled_forward(cases=BOTH_HEAD_DIMS) -> Table:
    """Compile attention_kernel_hopper for sm_90 and count in its PTX the pieces of the warp-specialized
    forward: the register budgets set by setmaxnreg, the TMA copies, the wgmma instructions, the
    mbarrier waits; and the shared memory it takes."""
    h = attention_hopper
    jobs = [dict(module="lesson05_flash_attention.hopper", kernel="attention_kernel_hopper",
                 signature=forward_signature(D),
                 constexprs=dict(HEAD_DIM=D, BLOCK_M=h.BLOCK_M, BLOCK_N=h.BLOCK_N, NUM_BUFFERS=h.NUM_BUFFERS,
                                 CAUSAL=causal, CONSUMER_REGS=h.CONSUMER_REGS, PRODUCER_REGS=h.PRODUCER_REGS),
                 divisible_by_16=("lse_ptr", "seq_len"), options={"maxnreg": h.MAXNREG}, asm=("ptx",))
            for D, causal in cases]
    rows = []
    for (D, causal), result in zip(cases, ptx.compile_kernels(jobs)):
        code = result["ptx"]
        rows.append((D, causal, result["shared"] // 1024, budgets(code), code.count("cp.async.bulk.tensor"),
                     code.count("wgmma.mma_async"), code.count("mbarrier.try_wait")))
    return print_table(rows, ["head_dim", "causal", "shared KB", "setmaxnreg budgets", "TMA copies (cp.async.bulk.tensor)",
                              "wgmma.mma_async", "mbarrier waits"],
                       title="attention_kernel_hopper, compiled for sm_90 (PTX, counted in the code, not executed)",
                       note=f"{h.BLOCK_M} query rows per program (64 per consumer), {h.BLOCK_N} keys per block, "
                            f"{h.NUM_BUFFERS} key/value slots. The counts are instructions in the PTX, not events at run "
                            "time: wgmma, head_dim / 16 (S) and 128 / 16 (P V) per matmul site, two sites each, for each "
                            "consumer; TMA copies, at head_dim 128 two per tile (a 256-byte row is copied as two "
                            "128-byte halves, the swizzle's width); waits, 7 per consumer and 1 in the producer. "
                            "Shared: the queries (16 or 32 KB) and the slots, K and V each (at head_dim 128, the "
                            "queries and 3 slots are 224 KB of an H100's 227; a fourth slot would not fit). setmaxnreg: the register budgets the "
                            f"warps move to ({h.PRODUCER_REGS} for the producer, {h.CONSUMER_REGS} for each consumer; "
                            "the others are the compiler's: for the workers' warps (consumer 1 and the producer) while "
                            "they wait to be handed their partition, and for the kernel's own four warps (consumer 0) "
                            "before and after the partitions; the three "
                            "warpgroups' budgets at any moment stay within the SM's 512 per thread of a warpgroup "
                            "(64K registers / 128 threads)).")


# %% The backward: the register budget, and the step in the machine code
@functools.cache
def compiled_backward(cases=BOTH_HEAD_DIMS) -> list:
    """attention_bwd_kernel_hopper compiled for sm_90, each case's PTX and SASS (compiled once a run:
    both of the chapter's backward tables read them)."""
    h = attention_hopper
    jobs = [dict(module="lesson05_flash_attention.hopper", kernel="attention_bwd_kernel_hopper",
                 signature=backward_signature(D),
                 constexprs=dict(HEAD_DIM=D, BLOCK_N=h.BLOCK_N_BWD, NUM_BUFFERS=h.NUM_BUFFERS_BWD, CAUSAL=causal,
                                 CONSUMER_REGS=h.CONSUMER_REGS, PRODUCER_REGS=h.PRODUCER_REGS),
                 divisible_by_16=("dk_ptr", "dv_ptr", "seq_len", *(f"stride_{t}{d}" for t in ("q", "k", "do", "dk")
                                                                 for d in "bhs")),
                 options={"maxnreg": h.MAXNREG}, asm=("ptx", "sass"))
            for D, causal in cases]
    return ptx.compile_kernels(jobs)


def backward_budget(cases=BOTH_HEAD_DIMS) -> Table:
    """The backward's pieces counted in its PTX (register budgets, TMA copies in and reduce-adds out,
    wgmma instructions, mbarrier waits), and what ptxas reports: the bytes it spills, and whether it
    had to serialise the wgmma instructions."""
    h = attention_hopper
    rows = []
    for (D, causal), result in zip(cases, compiled_backward(cases)):
        code = result["ptx"]
        info = ptx.ptxas_info(code)
        rows.append((D, causal, h.bwd_block_m(D), result["shared"] // 1024, budgets(code),
                     code.count("cp.async.bulk.tensor"), code.count("cp.reduce.async.bulk.tensor"),
                     code.count("wgmma.mma_async"), code.count("mbarrier.try_wait"), info["spill bytes"],
                     info["wgmma serialized"]))
    return print_table(rows, ["head_dim", "causal", "query rows per step", "shared KB", "setmaxnreg budgets",
                              "TMA copies", "TMA reduce-adds", "wgmma.mma_async", "mbarrier waits", "spill bytes",
                              "wgmma serialized"],
                       title="attention_bwd_kernel_hopper, compiled for sm_90 (PTX counted; spills by this machine's "
                             "ptxas)",
                       note=f"{h.BLOCK_N_BWD} keys per program (64 per consumer), {h.NUM_BUFFERS_BWD} slots for Q, dO, "
                            "lse and Delta. Counts are instructions in the PTX, not events at run time. Each consumer's "
                            "step is written out once; causal, twice: the steps at the query blocks the diagonal "
                            "crosses (2 at head_dim 128, 1 at 64), masked, have a loop of their own. "
                            "TMA copies in: K, V once; Q, dO, lse, Delta per step; at head_dim 128 a 256-byte row is "
                            "copied as two 128-byte halves, the swizzle's width. Reduce-adds: dQ's tiles out "
                            "(cp.reduce.async.bulk.tensor), one per copy of the step. wgmma: S^T, dP^T, dV, dK and "
                            "the consumer's 64 x 64 tile of dQ_i, per copy of the step. 'spill bytes', "
                            "'wgmma serialized': what `ptxas -v` of the installed triton says (its warning C7512: for "
                            "want of registers every wgmma waits for the one before). The dQ tile is 64 x 64, 32 "
                            "registers a thread: a 64 x 128 float32 tile, 64, beside dK and dV (128) and S^T and "
                            "dP^T (64) would pass the 240 a consumer has.")


def step_in_sass(cases=BOTH_HEAD_DIMS) -> Table:
    """The consumers' step in the backward's machine code (SASS) of each case: each loop that holds
    wgmma (HGMMA), with its instructions, its local-memory loads and stores (spilled registers, read
    back and written every step), the exponentials (MUFU.EX2) and how many come before the wait for
    dP^T (WARPGROUP.DEPBAR.LE gsb0, 0x0 after the wait for S^T alone, ... 0x1), and its selects
    (FSEL: the causal mask's)."""
    rows = []
    for (D, causal), result in zip(cases, compiled_backward(cases)):
        for n, body in enumerate(ptx.sass_loops(result["sass"], "HGMMA"), 1):
            ops = [text.split()[1] if text.startswith("@") else text.split()[0] for text in body]
            waits = [i for i, text in enumerate(body) if text.startswith("WARPGROUP.DEPBAR.LE gsb0")]
            first = next((i for i in waits if body[i].endswith("0x1")), None)
            then = next((i for i in waits if first is not None and i > first and body[i].endswith("0x0")), None)
            early = "" if then is None else sum(op == "MUFU.EX2" for op in ops[first:then])
            rows.append((D, causal, n, len(body), sum(op.startswith("HGMMA") for op in ops),
                         sum(op.startswith("LDL") for op in ops), sum(op.startswith("STL") for op in ops),
                         sum(op == "MUFU.EX2" for op in ops), early, sum(op == "FSEL" for op in ops)))
    return print_table(rows, ["head_dim", "causal", "loop", "instructions", "HGMMA", "local loads", "local stores",
                              "MUFU.EX2", "... before dP^T's wait", "FSEL"],
                       title="attention_bwd_kernel_hopper's step in the machine code (sm_90 SASS, by this machine's "
                             "ptxas and cuobjdump)",
                       note="Each loop of the machine code that holds wgmma (HGMMA: S^T, dP^T, dV, dK and the dQ "
                            "tile), in address order: one per consumer; causal at head_dim 128, two per consumer, the "
                            "masked steps' loop (its FSEL: the mask) and then the rest's (at 64 the masked step is "
                            "one, not a loop). 'local loads', 'local stores': LDL and STL in the loop, registers "
                            "spilled and read back every step. '... before dP^T's wait': the exponentials between "
                            "the wait for S^T alone (WARPGROUP.DEPBAR.LE gsb0, 0x1) and the wait for dP^T too "
                            "(... 0x0): those that run under dP^T's matmul. Fewer than a thread's exponentials "
                            "(its MUFU.EX2) means ptxas moved the second wait up, to interleave dS^T's arithmetic "
                            "with them.")
