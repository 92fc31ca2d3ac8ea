"""Look under the hood: compile a kernel for a named NVIDIA GPU, without one, and read its PTX.

Triton lowers a kernel in stages: Python AST -> TTIR (Triton IR, block-level) -> TTGIR (the same
with a layout: which thread holds which elements) -> LLVM IR -> PTX (NVIDIA's virtual assembly,
per thread) -> cubin. `triton.compile` with an explicit target runs the whole pipeline on any
machine: the compiler (LLVM, ptxas) ships inside the triton wheel; no GPU is needed.

On a GPU machine this process compiles them itself. Under the interpreter (a CPU) compilation
runs in a child process with TRITON_INTERPRET=0: the interpreter replaces `@triton.jit` kernels
with Python functions, which cannot be compiled. That child is kept for the run's later
compilations (common/child.py), and the child imports the lesson's module by name, so a lesson run
as a script is never imported a second time into its own process.
"""
import collections
import os
import re
import subprocess
import tempfile

from common import child
from common.device import INTERPRET


def compile_kernel(module: str, kernel: str, signature: dict, constexprs: dict,
                   divisible_by_16: tuple = (), arch: int = 90, num_warps: int = 4) -> dict:
    """Compile `module.kernel` for sm_<arch>; return {"ttir": ..., "ttgir": ..., "ptx": ...}. kernel:
    the @triton.jit function, or its name in the module (a lesson run as a script is __main__, so its
    kernels are handed over: a child process imports them by the module's name).

    signature: Triton types of the arguments, e.g. {"x_ptr": "*fp32", "N": "i32", "BLOCK_SIZE":
    "constexpr"}. divisible_by_16: the arguments the compiler may assume are multiples of 16 (when
    a kernel is launched, Triton checks this for every pointer and integer argument and compiles a
    specialised version; here we choose).
    """
    return compile_kernels([dict(module=module, kernel=kernel, signature=signature, constexprs=constexprs,
                                 divisible_by_16=divisible_by_16, arch=arch, num_warps=num_warps)])[0]


def compile_kernels(jobs: list, processes: int = 1) -> list:
    """Several compilations at once, each job a dict of compile_kernel's arguments, optionally with
    num_stages, `options` (more of triton.compile's, such as maxnreg) and `asm` (the IRs to return;
    default ttir, ttgir and ptx; "sass" is the machine code, by sass()). Each result also holds
    "shared": the bytes of shared memory the kernel needs. processes > 1: in that many child
    processes side by side (the tests' hundreds)."""
    jobs = [dict(dict(divisible_by_16=(), arch=90, num_warps=4, asm=("ttir", "ttgir", "ptx")), **job) for job in jobs]
    for job in jobs:
        job["divisible_by_16"], job["asm"] = list(job["divisible_by_16"]), list(job["asm"])
    if processes == 1 and not INTERPRET:  # here, on the kernels themselves where a job hands them over
        return _raise_failures(jobs, compile_all(jobs))
    for job in jobs:  # a child imports each kernel by its module's name
        job["kernel"] = getattr(job["kernel"], "__name__", job["kernel"])
    if processes == 1:
        return _raise_failures(jobs, child.run("common.ptx:compile_all", {"jobs": jobs}, interpret=False, keep=True)[1])
    shares = [jobs[i::processes] for i in range(processes)]
    children = [child.start("common.ptx:compile_all", {"jobs": share}, interpret=False) for share in shares]
    results = [None] * len(jobs)
    try:
        for i, running in enumerate(children):
            results[i::processes] = running.result()[1]
    finally:
        for running in children:
            running.close()
    return _raise_failures(jobs, results)


def _raise_failures(jobs: list, results: list) -> list:
    failed = [f"{getattr(job['kernel'], '__name__', job['kernel'])} for sm_{job['arch']}: {result['error']}" for job, result in zip(jobs, results)
              if "error" in result]
    if failed:
        raise RuntimeError("compilation failed:\n" + "\n".join(failed))
    return results


def compile_all(jobs: list) -> list:
    """Each job's result, or its error: what a child process of compile_kernels returns."""
    return [_compile_or_error(job) for job in jobs]


def compile_job(job: dict) -> dict:
    """One job of compile_kernels, here, its kernel handed over; raises what triton.compile raises."""
    import importlib

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    fn = job["kernel"]  # the kernel, or its name in job["module"]
    if isinstance(fn, str):
        fn = getattr(importlib.import_module(job["module"]), fn)
    signature, constexprs = {}, {}
    for param in fn.params:  # constexprs, and arguments with a default, not given take their defaults
        name = param.name       # (a dtype travels as its name)
        if param.is_constexpr or (name not in job["signature"] and param.has_default):
            value = job["constexprs"].get(name, param.default)
            constexprs[name] = getattr(tl, value) if isinstance(param.default, tl.dtype) and isinstance(value, str) else value
        signature[name] = "constexpr" if name in constexprs or name in job["constexprs"] else job["signature"][name]
    constexprs.update((k, v) for k, v in job["constexprs"].items() if k not in constexprs)
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in job["divisible_by_16"]}
    if fn.is_gluon():  # a Gluon kernel (@gluon.jit): its own front end, the same pipeline after it
        from triton.experimental.gluon._runtime import GluonASTSource as Source
    else:
        Source = triton.compiler.ASTSource
    src = Source(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": job["num_warps"], **({"num_stages": job["num_stages"]} if "num_stages" in job else {}),
               **job.get("options", {})}
    compiled = triton.compile(src, target=GPUTarget("cuda", job["arch"], 32), options=options)
    return {**{k: sass(compiled.asm["cubin"]) if k == "sass" else compiled.asm[k] for k in job["asm"]},
            "shared": compiled.metadata.shared}


def registers(ptx: str, arch: int = 90) -> int:
    """Registers per thread of a compiled kernel: what ptxas, the assembler that ships inside the
    triton wheel, reports when it turns the PTX into machine code (-v). Registers are what most
    often limits how many programs an SM holds at once (lesson 3, occupancy)."""
    return ptxas_info(ptx, arch)["registers"]


def ptxas_info(ptx: str, arch: int = 90) -> dict:
    """What ptxas -v says of a kernel: registers per thread, bytes spilled to local memory (stores),
    and whether it serialised the wgmma instructions for want of registers (its warning C7512: each
    then waits for the one before, so no matmul overlaps another)."""
    from triton.backends.nvidia.compiler import get_ptxas  # the ptxas Triton itself runs for this GPU

    tool = get_ptxas(arch).path
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        out = subprocess.run([tool, f"-arch=sm_{arch}a" if arch >= 90 else f"-arch=sm_{arch}", "-v", f.name,
                              "-o", os.devnull], capture_output=True, text=True, check=True)
    text = out.stdout + out.stderr
    return {"registers": int(re.search(r"Used (\d+) registers", text).group(1)),
            "spill bytes": sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", text)),
            "wgmma serialized": "C7512" in text}


def sass(cubin: bytes) -> str:
    """The machine code of a compiled kernel (SASS: what the GPU runs, after ptxas), as text, by the
    cuobjdump that ships inside the triton wheel (no CUDA install needed). compile_kernels returns
    it as asm "sass"."""
    from triton import knobs

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([knobs.nvidia.cuobjdump.path, "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout


def sass_loops(code: str, holding: str) -> list[list[str]]:
    """The innermost loops of SASS `code` with an instruction starting `holding` (e.g. "HGMMA") in
    their body, in address order, each as its instructions. A loop is a conditional branch back to
    an earlier address (ptxas closes a loop so); innermost, it has no other such loop inside it.
    (A wait on an mbarrier compiles to a test in the loop and a retry out of line, after the
    function's end: the retry branches back, unconditionally, and is not counted.)"""
    instructions = [(int(address, 16), text.strip()) for address, text in
                    re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", code)]
    loops = []
    for address, text in instructions:
        branch = re.match(r"@!?U?P\w+\s+BRA\s+(0x[0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) < address:
            loops.append((int(branch.group(1), 16), address))
    innermost = [(a, b) for a, b in loops if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in loops)]
    bodies = [[text for address, text in instructions if a <= address <= b] for a, b in innermost]
    return [body for body in bodies if any(text.startswith(holding) for text in body)]


def memory_ops(ptx: str) -> collections.Counter:
    """Count global loads and stores by form: ld.global.v4.b32 is one 16-byte (4 x 32-bit) access."""
    ops = re.findall(r"\b((?:ld|st)\.global[\w.:]*)", ptx)
    # drop cache hints (.L1::evict_last and the like) so the same access reads the same
    return collections.Counter(re.sub(r"\.L[12]::\w+", "", op) for op in ops)


def access_bits(op: str) -> int:
    """Width of one access in bits: ld.global.v4.b32 -> 128, st.global.b16 -> 16."""
    vec = re.search(r"\.v(\d)", op)
    bits = re.search(r"\.[bfus](\d+)$", op)
    return (int(vec.group(1)) if vec else 1) * int(bits.group(1))


def _compile_or_error(job: dict) -> dict:
    try:
        return compile_job(job)
    except Exception as error:  # noqa: BLE001  (reported per job by the parent)
        return {"error": f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[-1][:500]}"}

