"""Exercises: you write the kernel; this checks it, stage by stage, and stops at the first stage
that fails, with one plain message.

An exercise file (lessonNN_*/exercises/<name>.py) holds the statement, the stub you edit, the
launcher (unless writing it is the point) and, at its end, an `Exercise` naming the cases.
Running the file checks your work:

    python lesson01_vector_add/exercises/axpy.py              # check it
    python lesson01_vector_add/exercises/axpy.py --hint       # the next hint
    python lesson01_vector_add/exercises/axpy.py --solution   # the reference solution, same checks
    python lesson01_vector_add/exercises/axpy.py --bench      # on a GPU: yours against the solution
    python -m common.exercise                                 # your progress over every lesson

The stages, in order:
1. started: the stub as shipped is "not started" (and `--hint` says where to begin); a part not
   written in your file (imported from elsewhere) is refused, and so is a file whose given code
   (cases, reference, launcher, Exercise) is no longer the course's (solutions/<name>.py keeps its
   fingerprint, GIVEN): only the parts are yours;
2. runs: under Triton's interpreter; an error becomes one sentence naming your line. Code that asks
   whether it runs under the interpreter (or on a GPU) is refused first: a GPU never takes the
   interpreter's path. Then, on a machine without a GPU, each kernel is compiled for one (sm_90, in
   a child process, once per set of argument types): the interpreter runs code a GPU's compiler
   refuses, such as a float16 accumulator that its first float32 update turns float32. A program
   that never finishes (waiting for another) is stopped and named;
3. memory: every load, store and atomic checked against the tensors' bounds before it happens
   (common/accesses.py), no input written (an atomic writes, even one that adds 0), every output
   element written by exactly one program, no output read before the kernel stored it (nor read
   back by the program that stored it, without a tl.debug_barrier() between), and each
   output holding exactly what the kernel's stores and atomics left there: a write by the host,
   before or after the launch, fails. Where programs meet in an output, a GPU runs them at the
   same time in no fixed order: a store beside another program's atomic, or a read of what
   another program writes, is a race;
4. values: each named case against a float64 reference, within a tolerance from torch's own
   error in that dtype (so a correct tl.exp passes and an all-zero output fails); the wrong
   elements named, with the programs that wrote them. The interpreter computes here as a GPU
   does where it would otherwise hide a mistake: the masked-off lanes of a load without other=
   read NaN (a GPU's are undefined), a tl.dot in TF32 rounds its float32 inputs to TF32, a
   tl.sum of float16 adds in float16. Where programs meet in an output, the case runs again with
   the programs in reverse order: a result that changes is a race;
5. budget, where traffic is the point: every element of a budgeted tensor read, and how many
   times each tensor was read in all, by any instruction (a program's first one-element load of
   a tensor aside: one sector, not a walk).
A predict exercise's answer lives in solutions/<name>.py, read only when checking.
On a GPU, stages 2-5 run under the interpreter in a child process (the same messages), then the
values are checked again with the kernel compiled, and `--bench` times it against the solution.
"""
import argparse
import ast
import atexit
import glob
import hashlib
import importlib
import inspect
import itertools
import json
import linecache
import math
import os
import re
import sys
import textwrap
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from common import accesses, child
from common.device import DEVICE, INTERPRET, ROOT

PROGRESS = os.path.join(ROOT, ".progress.json")  # passes and hints seen, per exercise (git ignores it)
STAGES = ("started", "runs", "memory", "values", "budget")


@dataclass
class Case:
    """One named input to check on: `inputs` by the launcher's parameter names (tensors are made on
    the CPU and moved to the device), `meta` the launcher's keyword arguments (block sizes)."""
    name: str
    inputs: dict
    meta: dict = field(default_factory=dict)


@dataclass
class Result:
    stage: str      # the stage that failed, or "passed"
    message: str
    passed: tuple = ()  # the stages passed before it

    @property
    def ok(self) -> bool:
        return self.stage == "passed"


@dataclass
class Exercise:
    lesson: str                   # "lesson01_vector_add"
    name: str                     # the file's name: "axpy"
    kind: str                     # "write", "fix", "predict" or "optimise"
    parts: tuple                  # what the learner's file defines and the checker takes: ("axpy_kernel",)
    stub: str                     # fingerprint() of those parts as shipped
    hints: list                   # from the idea to nearly the line
    cases: list = field(default_factory=list)
    launch: Callable | None = None  # launch(**kernels, **inputs, **outputs, **meta); None: a part named "launch"
    reference: Callable | None = None  # reference(**inputs) -> {output name: tensor}, in torch
    verify: Callable | None = None  # verify(outputs, **inputs, **meta) -> message or None, where no reference can say
    outputs: Callable | None = None  # with verify: outputs(**inputs) -> {name: an empty tensor of its shape and dtype}
    budget: dict = field(default_factory=dict)  # {tensor: element loads allowed per element}: {"x": 1}
    budget_note: str = ""          # why, in one sentence
    budget_check: Callable | None = None  # budget_check(log, **inputs) -> message or None (accesses.Log: who read what)
    lines: int | None = None       # the kernel body's line budget (told, not enforced)
    # predict: the part is ANSWER; the right value and why come from solutions/<name>.py's answer(),
    # read only when checking (or with --solution), never from the learner's file
    bench_case: Callable | None = None  # --bench: a function that makes a large case (made only then)
    stretch: bool = False          # for those who want more

    # ----- what is checked, and where it comes from
    @property
    def module(self) -> str:
        return f"{self.lesson}.exercises.{self.name}"

    def implementation(self, which: str) -> tuple[dict, list]:
        """(parts, their source files) of "learner" (the exercise file), "solution", "wrong:<label>" or
        "variant:<label>" (an honest variation of the solution, which must pass)."""
        if which == "learner":
            module = sys.modules.get("__main__") if _is_main(self) else importlib.import_module(self.module)
            return {p: getattr(module, p) for p in self.parts}, [_file(module)]
        solutions = importlib.import_module(f"{self.lesson}.exercises.solutions.{self.name}")
        if which == "solution":
            return {p: getattr(solutions, p) for p in self.parts}, [_file(solutions)]
        kind, label = which.split(":", 1)
        wrong = next(w for w in getattr(solutions, "WRONG" if kind == "wrong" else "VARIANTS") if w.label == label)
        parts = {p: wrong.parts.get(p, getattr(solutions, p)) for p in self.parts}
        return parts, [_file(solutions)] + [f for f in map(_source_file, wrong.parts.values()) if "#patch" in (f or "")]

    # ----- the stages
    def stages(self, which: str = "learner", compiled: bool = False) -> Result:
        """Every stage for `which`, in this process: under the interpreter, or (compiled=True, on a
        GPU) the runs and values of the compiled kernel."""
        if not INTERPRET and not compiled and self.kind != "predict":
            raise RuntimeError("the memory stage needs Triton's interpreter: on a GPU, check() runs it in a child process")
        impl, files = self.implementation(which)
        if which == "learner":
            given = getattr(importlib.import_module(f"{self.lesson}.exercises.solutions.{self.name}"), "GIVEN", None)
            with open(files[0]) as f:
                if given is not None and given_fingerprint(f.read(), self.parts) != given:
                    return Result("started", f"{self.name}.py's given code (its cases, reference, launcher or "
                                             f"Exercise) is not the course's any more: only {', '.join(self.parts)} "
                                             f"{'is' if len(self.parts) == 1 else 'are'} yours to write (and "
                                             "@triton.jit helpers). Put the rest back (git checkout -- the file, "
                                             "keeping your code aside) and check again.")
            borrowed = [p for p in self.parts if p != "ANSWER" and _source_file(impl[p]) not in (None, files[0])]
            if borrowed:
                p = borrowed[0]
                return Result("started", f"{p} is not written in {self.name}.py: it comes from "
                                         f"{os.path.relpath(_source_file(impl[p]), ROOT)}. Write it in your file; "
                                         "the checker checks your own code (`--solution` runs ours).")
        if fingerprint(impl) == self.stub and which == "learner":
            return Result("started", f"{', '.join(self.parts)} {'is' if len(self.parts) == 1 else 'are'} as shipped: "
                                     f"not started. Edit {self.name}.py; `--hint` gives a first hint.")
        if self.kind == "predict":
            return self._predicted(impl)
        problem = interpreter_only(impl, files[0] if which == "learner" else None)
        if problem:
            return Result("runs", problem, ("started",))
        # no GPU here: compile for one (with a GPU, check() runs the compiled kernel itself after this)
        compile_check = INTERPRET and not compiled and not torch.cuda.is_available() and self.compile_check(which)
        if compile_check:
            compiler_child()  # starting now, beside the interpreted runs
        passed = ["started"]
        runs, skipped, launches = [], [], {}
        for case in self.cases:
            try:
                inputs, outputs, log = self._run(case, impl, record=not compiled, launches=launches)
            except Exception as error:  # noqa: BLE001  (the learner's code: any error is a message)
                if not compiled and accesses.lacks_bf16(error):
                    skipped.append(case.name)  # this Triton's interpreter cannot: the GPU checks it compiled
                    continue
                return self._failed(case, error, files, passed)
            runs.append((case, inputs, outputs, log))
        if skipped:
            print(f"(not checked here: {', '.join(skipped)}. This Triton's interpreter cannot run bfloat16; "
                  "a GPU checks those cases compiled.)")
        if compile_check:
            problem = gpu_compile_problem(self.module, which, launches)
            if problem:
                return Result("runs", problem, tuple(passed))
        passed.append("runs")
        if not compiled:
            if accesses.available():
                for case, inputs, outputs, log in runs:
                    problem = memory_problem(log, outputs)
                    if problem:
                        return Result("memory", f"case '{case.name}': {problem}", tuple(passed))
                passed.append("memory")
            else:
                print("(memory checks unavailable with this Triton version: its interpreter is not the one "
                      "common/accesses.py knows)")
        for case, inputs, outputs, log in runs:
            problem = self._wrong_values(case, inputs, outputs, log)
            if problem:
                return Result("values", f"case '{case.name}': {problem}", tuple(passed))
            if log is not None and meetings(log, outputs):  # programs meet in an output: does their order matter?
                try:
                    inputs_r, outputs_r, log_r = self._run(case, impl, record=True, reverse=True)
                except Exception as error:  # noqa: BLE001
                    return self._failed(case, error, files, passed, " (with the programs run in reverse order)")
                problem = self._wrong_values(case, inputs_r, outputs_r, log_r)
                if problem:
                    return Result("values", f"case '{case.name}': {race_message(outputs, outputs_r, log, log_r)}",
                                  tuple(passed))
        passed.append("values")
        if (self.budget or self.budget_check) and not compiled and accesses.available():
            for case, inputs, outputs, log in runs:
                problem = budget_problem(log, inputs, self.budget, self.budget_note)
                if problem is None and self.budget_check is not None:
                    problem = self.budget_check(log, **inputs)
                if problem:
                    return Result("budget", f"case '{case.name}': {problem}", tuple(passed))
            passed.append("budget")
        return Result("passed", f"all {len(self.cases)} cases pass.", tuple(passed))

    def _failed(self, case: Case, error: Exception, files: list, passed: list, how: str = "") -> Result:
        """The result for an error raised while running a case: out of bounds, a program that waits
        for another, or any other error of the learner's code."""
        oob = _cause(error, accesses.OutOfBounds)  # raised in the kernel, or wrapped by the interpreter
        if oob is not None:
            return Result("memory", f"case '{case.name}'{how}: {oob_message(oob)}", tuple(passed))
        spin = _cause(error, accesses.Spinning)
        if spin is not None:
            return Result("runs", f"case '{case.name}'{how}: program {_program(spin.program)} never finishes: it made "
                                  f"over {accesses.MOST_ACCESSES} loads, stores and atomics, the last at {spin.line}. "
                                  "Is it waiting for another program (spinning on a flag or a lock)? Programs run in no "
                                  "fixed order, and nothing makes one wait for another: here they run one at a time, "
                                  "and on a GPU the one it waits for may not be running at all.", tuple(passed))
        return Result("runs", f"case '{case.name}'{how}: {error_message(error, files)}", tuple(passed))

    def compile_check(self, which: str) -> bool:
        """Is `which` compiled for a GPU here, after its interpreted runs? The learner's file, the
        solution and its honest variants always; a wrong solution only where its mistake is one
        the compiler stops (a Wrong with compiles=False), as each compilation takes a second or two."""
        if which in ("learner", "solution") or which.startswith("variant:"):
            return True
        label = which.split(":", 1)[1]
        solutions = importlib.import_module(f"{self.lesson}.exercises.solutions.{self.name}")
        return not next(w for w in solutions.WRONG if w.label == label).compiles

    def _run(self, case: Case, impl: dict, record: bool, launches: dict | None = None, reverse: bool = False):
        """Launch on guarded copies of the case's tensors; returns (inputs, outputs, log). launches: a
        dict that gets each kernel's first launch (its arguments), for the GPU compile check;
        reverse: each launch runs its programs last to first."""
        inputs = {k: accesses.guarded(v.to(DEVICE), _sentinel(v.dtype)) if isinstance(v, torch.Tensor) else v
                  for k, v in case.inputs.items()}
        like = self.reference or self.outputs  # the outputs' shapes and dtypes: torch's result in the inputs' dtype
        expected = like(**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
        outputs = {k: accesses.guarded(torch.full_like(v, _sentinel(v.dtype)), _sentinel(v.dtype))
                   for k, v in expected.items()}
        kernels = {p: impl[p] for p in self.parts if p != "launch"}
        if launches is not None:
            kernels = {p: _FirstLaunch(k, p, launches) for p, k in kernels.items()}
        launch = impl["launch"] if "launch" in self.parts else self.launch
        log = accesses.Log([accesses.region(k, v, True) for k, v in inputs.items() if isinstance(v, torch.Tensor)]
                           + [accesses.region(k, v, False) for k, v in outputs.items()], watch=outputs,
                           scalars_apart=True)
        if record and accesses.available():
            with accesses.recording(log, reverse=reverse):
                launch(**kernels, **inputs, **outputs, **case.meta)
        else:
            log = None
            launch(**kernels, **inputs, **outputs, **case.meta)
        return inputs, outputs, log

    def _wrong_values(self, case: Case, inputs: dict, outputs: dict, log) -> str | None:
        if self.verify is not None:
            return self.verify(outputs, **inputs, **case.meta)
        exact = self.reference(**{k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                                  for k, v in inputs.items()})
        ours = self.reference(**inputs)  # torch in the inputs' dtype: the yardstick
        for name, out in outputs.items():
            problem = compare(name, out, exact[name], ours[name], log)
            if problem:
                return problem
        return None

    def _predicted(self, impl: dict) -> Result:
        right, why = importlib.import_module(f"{self.lesson}.exercises.solutions.{self.name}").answer()
        given = impl["ANSWER"]
        close = (isinstance(right, (int, float)) and isinstance(given, (int, float)) and not isinstance(given, bool)
                 and math.isclose(given, right, rel_tol=0.1)) or given == right
        if not close:
            return Result("values", f"ANSWER = {given!r} is not it. Think again (or `--hint`), then run this "
                                    "file again; `--solution` shows the answer and why.", ("started",))
        return Result("passed", f"ANSWER = {given!r}: right. {why}", ("started",))

    # ----- the command line
    def main(self, argv=None) -> int:
        p = argparse.ArgumentParser(description=f"Exercise {self.lesson}/{self.name} ({self.kind}).")
        p.add_argument("--hint", action="store_true", help="show the next hint")
        p.add_argument("--solution", action="store_true", help="run the reference solution through the same checks")
        p.add_argument("--bench", action="store_true", help="on a GPU: time yours against the solution")
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
        key = f"{self.lesson}/{self.name}"
        if args.hint:
            return self.next_hint(key)
        which = "solution" if args.solution else "learner"
        result = self.check(which)
        print(report(self, result))
        if which == "learner":
            record(key, result)
        if args.bench and result.ok:
            self.bench(which)
        elif args.bench:  # a wrong kernel's time is no kernel's speed
            print(f"--bench: not timed, as the check stops at its {result.stage} stage: a kernel is timed once "
                  "every stage passes.")
        return 0 if result.ok else 1

    def check(self, which: str = "learner") -> Result:
        """All stages, where this machine runs them: here under the interpreter; on a GPU stages 2-5
        under the interpreter in a child process, then the compiled kernel's values here."""
        if INTERPRET or self.kind == "predict":
            return self.stages(which)
        try:  # (one interpreter process checks every exercise this process asks for)
            _, (stage, message, passed) = child.run("common.exercise:interpreted_stages",
                                                    dict(module=self.module, which=which), interpret=True, keep=True)
        except RuntimeError as error:
            return Result("runs", f"the interpreter's run failed:\n{str(error)[-2000:]}")
        if stage != "passed":
            return Result(stage, message, tuple(passed))
        compiled = self.stages(which, compiled=True)
        if not compiled.ok:
            return Result(compiled.stage, f"compiled on the GPU: {compiled.message}", tuple(passed))
        return Result("passed", f"{message} Compiled on the GPU, the values pass too.", tuple(passed))

    def next_hint(self, key: str) -> int:
        progress = load_progress()
        seen = progress.setdefault(key, {}).get("hints", 0)
        if seen >= len(self.hints):
            print(f"No more hints ({len(self.hints)} of {len(self.hints)} shown). `--solution` runs the solution; "
                  f"it is in {self.lesson}/exercises/solutions/{self.name}.py (a spoiler).")
            seen = len(self.hints) - 1
        else:
            progress[key]["hints"] = seen + 1
            save_progress(progress)
        print(f"Hint {seen + 1} of {len(self.hints)}: {self.hints[seen]}")
        return 0

    def bench(self, which: str) -> None:
        """The kernel against the solution's on the bench case, by kernel time; the values re-checked."""
        if INTERPRET:
            print("--bench needs a CUDA GPU: the interpreter's times say nothing about a kernel's speed.")
            return
        from common import bench as timing
        from common.table import print_table

        case = self.bench_case() if self.bench_case is not None else self.cases[-1]
        rows = []
        for label, w in (("yours" if which == "learner" else "solution", which), ("solution", "solution")):
            impl, _ = self.implementation(w)
            inputs, outputs, _ = self._run(case, impl, record=False)
            problem = self._wrong_values(case, inputs, outputs, None)
            kernels = {p: impl[p] for p in self.parts if p != "launch"}
            launch = impl["launch"] if "launch" in self.parts else self.launch
            ms = timing.kernel_time_ms(lambda: launch(**kernels, **inputs, **outputs, **case.meta))
            rows.append((label, ms * 1e3, problem or "ok"))
        print_table(rows, ["kernel", "kernel µs", "values"], title=f"{self.name}, case '{case.name}'",
                    note="Kernel time (common.bench.kernel_time_ms: profiler timestamps, L2 flushed).")


# ----- messages
KNOWN_ERRORS = [  # a clue in Triton's message, and what it means
    ("Loop-carried variable", "a value carried through a loop changes type in the loop (a float16 accumulator "
                              "that its first float32 update makes float32, say): compiled, every value keeps "
                              "one type, so make it that type before the loop"),
    ("power of 2", "tl.arange(start, end) needs end - start to be a power of two: round the block up "
                   "(triton.next_power_of_2) and mask the lanes past the end"),
    ("of type tl.constexpr", "a block size must be known when the kernel compiles: declare it "
                             "`BLOCK_SIZE: tl.constexpr` in the signature and pass it by keyword"),
    ("of type `tl.constexpr`", "a block size must be known when the kernel compiles: declare it "
                               "`BLOCK_SIZE: tl.constexpr` in the signature and pass it by keyword"),
    ("broadcast", "two blocks whose shapes do not broadcast: make a column with [:, None] and a row with [None, :]"),
    ("incompatible", "two blocks whose shapes do not match: make a column with [:, None] and a row with [None, :]"),
    ("mask has unsupported dtype", "a mask must be a block of booleans, of the shape of the pointers it masks: "
                                   "build it from blocks (offsets < N) and combine blocks with &"),
]


def explain(error: Exception) -> str | None:
    """What a common Triton error means, in one sentence; None for the others."""
    text = str(error.__cause__ or error)
    return next((say for clue, say in KNOWN_ERRORS if clue in text), None)


def error_message(error: Exception, files: list) -> str:
    """One sentence for an error raised while running the learner's code, with the learner's line."""
    cause = error.__cause__ or error
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    sentence = explain(error)
    where = _learner_line(cause, files) or _learner_line(error, files)
    raw = f"{type(cause).__name__}: {text[:200]}"
    return (f"it does not run: {sentence or raw}" + (f", at {where}" if where else "")
            + (f" ({raw})." if sentence else "."))


def _learner_line(error: Exception, files: list) -> str | None:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if os.path.abspath(f.filename) in files]
    if not frames:
        return None
    f = frames[-1]
    return f"{os.path.basename(f.filename)} line {f.lineno}: `{(f.line or '').strip()}`"


def oob_message(oob: accesses.OutOfBounds) -> str:
    """Which program read or wrote where, past which tensor's end."""
    verb = {"load": "reads", "store": "writes", "atomic": "updates (an atomic)"}[oob.kind]
    program = _program(oob.program)
    near = oob.near
    if near is None:
        return f"program {program} {verb} memory that belongs to no tensor: mask the access"
    index = (oob.addresses.astype(np.int64) - near.start) // near.itemsize
    side = "past the end of" if index[0] >= near.numel else "before the start of"
    shown = _span(index)
    return (f"program {program} {verb} {near.name}[{shown}], {side} {near.name} ({_count(near.numel, 'element')}): "
            f"{_count(len(index), 'element')} out of bounds. Mask the {oob.kind} (mask=offsets < N) so that the lanes "
            "past the end do nothing, or check the pointer arithmetic (a stride, a base offset) that led there.")


def memory_problem(log: accesses.Log, outputs: dict) -> str | None:
    """Inputs written; outputs left unwritten, written twice, or holding what the kernel did not store
    there; outputs read before the kernel stored them."""
    for r in log.regions:
        if r.is_input and log.elements("store", r.name):
            return (f"program {_program(min(log.elements('store', r.name)))} writes into {r.name}, an input: a kernel "
                    "must leave its inputs as they are (check which pointer the tl.store gets)")
        if r.is_input and log.elements("atomic", r.name):
            return (f"program {_program(min(log.elements('atomic', r.name)))} runs an atomic on {r.name}, an input: an "
                    "atomic reads and writes (tl.atomic_add(p, 0) and a tl.atomic_cas that finds another value "
                    "included: the GPU locks the memory and writes it back), and a kernel must leave its inputs "
                    "as they are: read them with tl.load")
    for name, out in outputs.items():
        stored = log.elements("store", name)
        counts = np.zeros(out.numel(), dtype=np.int64)
        for indices in stored.values():
            np.add.at(counts, indices, 1)
        atomics = log.elements("atomic", name)
        for indices in atomics.values():
            counts[indices] = np.maximum(counts[indices], 1)
        twice = np.flatnonzero(counts > 1)
        if twice.size and not atomics:
            axes = _axes(list(stored))
            who = [_program(p, axes) for p, idx in stored.items() if np.isin(twice[0], idx)]
            return (f"{name}[{_index(twice[0], out.shape)}] is written {counts[twice[0]]} times, by programs "
                    f"{', '.join(who)} ({_count(twice.size, 'element')} written more than once): each output element "
                    "belongs to one program (on a GPU the programs race, and the last one wins); where several "
                    "programs each hold a part of one element's sum, they add it with tl.atomic_add")
        never = np.flatnonzero(counts == 0)
        if never.size:
            return (f"{name} has {never.size} of its {out.numel()} elements left unwritten, "
                    f"{name}[{_index(never[0], out.shape)}] the first: no program stored them. Does the grid "
                    "cover every element (rounded up: cdiv(N, BLOCK_SIZE), not N // BLOCK_SIZE), and does each "
                    "program store all of its part (its last tile too)?")
        problem = host_write(name, out, log)
        if problem:
            return problem
    problem = race_in_log(log, outputs)
    if problem:
        return problem
    if log.read_backs:
        program, name, element, line = log.read_backs[0]
        return (f"program {_program(program)} reads {name}[{_index(element, outputs[name].shape)}] back after storing "
                f"it ({line}), with no tl.debug_barrier() between: a block's lanes are spread over a GPU's threads, "
                "and a store by one thread and a load of the same address by another are not ordered without a "
                "barrier. Keep the value in registers, or compute it again from the inputs")
    if log.early_reads:
        program, name, element, line = log.early_reads[0]
        return (f"program {_program(program)} reads {name}[{_index(element, outputs[name].shape)}] before any program "
                f"stored it ({line}): an output holds nothing the kernel may use (on a GPU, whatever the memory held "
                "last); compute it from the inputs")
    return None


def host_write(name: str, out: torch.Tensor, log: accesses.Log) -> str | None:
    """The values checked must be the kernel's: `out` must hold exactly what its last store or atomic
    left in each element (an atomic's result read back after it: an add, a max, an exchange or a
    compare-and-swap alike). A write by the host, before the launch (other than zeroing it, for
    atomics to add into) or after it, fails."""
    found = log.found.get(name)
    if found is None:  # (the kernel never touched it: 'left unwritten' said so)
        return None
    sentinel = accesses.raw(torch.full((1,), _sentinel(out.dtype), dtype=out.dtype))[0]
    touched = np.zeros(out.numel(), dtype=bool)
    for _, n, indices, _, _ in log.written:
        if n == name:
            touched[indices] = True
    start_ok = (found == sentinel) | (found == 0)  # as the checker made it, or zeroed (for atomics to add into)
    if not start_ok[touched].all():
        i = int(np.flatnonzero(touched & ~start_ok)[0])
        return (f"{name}[{_index(i, out.shape)}] held a value before the kernel ran: something other than the kernel "
                f"wrote {name} before the launch. An output starts empty (zeroed, at most, for atomics to add "
                "into): the checker checks what the kernel computes")
    final, expect = accesses.raw(out), found.copy()
    for kind, n, indices, values, _ in log.written:
        if n == name:
            expect[indices] = np.asarray(values).reshape(-1).view(expect.dtype)
    differ = np.flatnonzero(final != expect)
    if differ.size:
        i = int(differ[0])
        as_value = lambda bits: torch.from_numpy(np.array([bits])).view(out.dtype).item()  # noqa: E731
        return (f"{name}[{_index(i, out.shape)}] = {as_value(final[i]):.6g} after the launch, but the kernel's stores "
                f"left {as_value(expect[i]):.6g} there ({_count(differ.size, 'element')} so): something other than the "
                f"kernel wrote {name} after it ran (the launcher?). The checker checks what the kernel stores")
    return None


def meetings(log: accesses.Log, outputs: dict) -> dict:
    """{(output name, element): [(position in the log, program, kind), ...]} for every output element
    that two programs touch (a load, a store or an atomic each); {} where programs keep apart. Only
    there can the order the programs run in change anything: a program that reads inputs alone and
    writes elements no other program touches computes the same in any order."""
    met = {}
    for name in outputs:
        rows = [(t, program, kind, indices) for t, (kind, program, n, indices) in enumerate(log.accesses) if n == name]
        if not rows:
            continue
        order = list(dict.fromkeys(program for _, program, _, _ in rows))
        number = {p: i for i, p in enumerate(order)}
        element = np.concatenate([indices for *_, indices in rows])
        program = np.concatenate([np.full(len(indices), number[p]) for _, p, _, indices in rows])
        row = np.concatenate([np.full(len(indices), r) for r, (*_, indices) in enumerate(rows)])
        lowest = np.full(int(element.max()) + 1, np.iinfo(np.int64).max)  # each element's programs, lowest ...
        highest = np.full(lowest.size, -1)                                  # ... and highest: two, if they differ
        np.minimum.at(lowest, element, program)
        np.maximum.at(highest, element, program)
        shared = (lowest != highest) & (highest >= 0)
        keep = shared[element]
        by = np.lexsort((row[keep], element[keep]))  # by element, then in the order the accesses ran
        for e, r in zip(element[keep][by], row[keep][by]):
            t, p, kind, _ = rows[r]
            seq = met.setdefault((name, int(e)), [])
            if not seq or seq[-1][0] != t:  # (an access with one element twice counts once)
                seq.append((t, p, kind))
    return met


def race_in_log(log: accesses.Log, outputs: dict) -> str | None:
    """Programs that meet in an output element in a way whose outcome a GPU leaves to chance, seen in
    the log of one run: a store and another program's atomic on one element (an add that lands
    before the store is wiped out); a program that reads (with a load) what another writes, or
    overwrites what another has read. A read after another program's write passes where the two
    meet through atomics (the writer's after its write, the reader's before its read: the release
    and acquire of a ticket counter)."""
    atomics = {}  # program: positions of its atomics, on any tensor
    for t, (kind, program, _, _) in enumerate(log.accesses):
        if kind == "atomic":
            atomics.setdefault(program, []).append(t)
    axes = _axes(log.programs())
    for (name, e), seq in meetings(log, outputs).items():
        where = f"{name}[{_index(e, outputs[name].shape)}]"
        stores = [p for _, p, k in seq if k == "store"]
        updates = [p for _, p, k in seq if k == "atomic" and p not in stores]
        if stores and updates:
            return (f"a race: program {_program(stores[0], axes)} stores {where} while program "
                    f"{_program(updates[0], axes)} updates it with an atomic: on a GPU programs run at the same time, "
                    "in no fixed order, and an update that lands before the store is wiped out. Let every program "
                    "use the atomic (into an output zeroed first).")
        if len(set(stores)) > 1:
            other = next(p for p in stores if p != stores[0])
            return (f"a race: programs {_program(stores[0], axes)} and {_program(other, axes)} both store {where}: "
                    "on a GPU they run at the same time, and which store lands last is chance")
        for t_r, r, kind in seq:
            if kind not in ("load", "scalar"):
                continue
            for t_w, w, k in seq:
                if w == r or k not in ("store", "atomic"):
                    continue
                if t_w > t_r:
                    return (f"a race: program {_program(r, axes)} reads {where}, and program {_program(w, axes)} writes "
                            f"it (here after the read, as program {_program(r, axes)} ran first): on a GPU programs run at "
                            "the same time, in no fixed order, so the write may land before the read, or after. A "
                            "program may read back only what it wrote itself; what needs another program's result "
                            "takes a second launch.")
                released = [a for a in atomics.get(w, []) if t_w < a < t_r]
                if not (released and any(released[0] < a < t_r for a in atomics.get(r, []))):
                    return (f"a race: program {_program(r, axes)} reads {where}, which program {_program(w, axes)} "
                            f"writes (here before the read, as program {_program(w, axes)} ran first): on a GPU programs "
                            "run at the same time, in no fixed order, and nothing makes one wait for another, so the "
                            "read may come first. A program may read back only what it wrote itself; what needs "
                            "another program's result takes a second launch.")
    return None


def race_message(outputs: dict, outputs_r: dict, log, log_r) -> str:
    """Values right with the programs in order, wrong in reverse (race_in_log found nothing in the
    order they ran: atomics alone meet there): which element, which programs."""
    for name, out in outputs.items():
        a, b = out.detach().double().cpu().reshape(-1), outputs_r[name].detach().double().cpu().reshape(-1)
        differ = ~((a == b) | (torch.isnan(a) & torch.isnan(b)))
        if differ.any():
            break
    i = int(differ.nonzero()[0, 0])
    order, axes = log.programs(), _axes(log.programs())
    named = ", ".join(_program(p, axes) for p in sorted({p for _, p, _ in meetings(log, {name: outputs[name]}).get(
        (name, i), [])}, key=order.index)[:6])
    ops = sorted({op for kind, n, idx, _, op in log.written if n == name and kind == "atomic" and np.isin(i, idx)})
    return (f"a race: {name}[{_index(i, outputs[name].shape)}] = {a[i].item():.6g} with the programs run in order, but "
            f"{b[i].item():.6g} with them run in reverse order" + (f" (programs {named} meet there" + (
                f", with atomics: {', '.join(ops)}" if ops else "") + ")" if named else "")
            + ". On a GPU programs run at the same time, in no fixed order: a result may not depend on which runs "
            "first (an atomic's returned value, an exchange or a compare-and-swap that one program wins, an output "
            "read through an atomic while others still add into it all do).")


def interpreter_only(impl: dict, learner_file: str | None) -> str | None:
    """Code that takes another path under the interpreter: it names the interpreter (common.device's
    INTERPRET, triton's knobs, TRITON_INTERPRET in the environment), or branches on whether a GPU is
    there. The checker would check what a GPU never runs. Read from the source of the parts and, in
    the learner's file, of its @triton.jit helpers."""
    functions = [getattr(obj, "fn", obj) for obj in impl.values() if callable(getattr(obj, "fn", obj))]
    module = next((m for m in list(sys.modules.values()) if learner_file and _file(m) == learner_file), None)
    if module is not None:
        functions += [v.fn for v in vars(module).values() if callable(getattr(v, "fn", None))
                      and _source_file(v) == learner_file]
    for fn in dict.fromkeys(functions):
        try:
            lines, start = inspect.getsourcelines(fn)
        except (OSError, TypeError):
            continue
        tree = ast.parse(textwrap.dedent("".join(lines)))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(n) is not None}
        tests = [n.test for n in ast.walk(tree) if isinstance(n, (ast.If, ast.IfExp, ast.While))]
        tests += [c for n in ast.walk(tree) if isinstance(n, ast.comprehension) for c in n.ifs]
        in_tests = {id(n) for t in tests for n in ast.walk(t)}
        for node in ast.walk(tree):
            word = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                    else node.value if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings else "")
            asks = "interpret" in word.lower() or word in ("environ", "getenv")
            if asks or (id(node) in in_tests and word in GPU_FLAGS):
                line = start + node.lineno - 1
                where = f"{os.path.basename(inspect.getsourcefile(fn)).split('#')[0]} line {line}"
                return (f"{fn.__name__} asks whether it runs under the interpreter or on a GPU ({where}: "
                        f"`{linecache.getline(inspect.getsourcefile(fn), line).strip()}`): a GPU never takes the "
                        "interpreter's path, so the checker would check code that a GPU does not run. Write one "
                        "path for both (what the interpreter cannot run here, a GPU checks compiled).")
    return None


GPU_FLAGS = ("is_cuda", "is_available", "ON_GPU", "DEVICE", "GPU_COUNT", "device_count")  # in a condition


def compare(name: str, out: torch.Tensor, exact: torch.Tensor, ours: torch.Tensor, log) -> str | None:
    """Wrong elements of `out` against the float64 `exact`, within twice torch's own error in the
    output's dtype (`ours` is torch's result in that dtype) plus two roundings of the output."""
    if out.shape != exact.shape:
        return f"{name} has shape {tuple(out.shape)}, expected {tuple(exact.shape)}"
    got, want = out.detach().double().cpu().reshape(-1), exact.detach().double().cpu().reshape(-1)
    yard = ours.detach().double().cpu().reshape(-1)
    eps = torch.finfo(out.dtype).eps if out.is_floating_point() else 0.0
    finite = torch.isfinite(want)
    torch_error = (yard - want)[finite].abs().max().item() if finite.any() else 0.0
    # two roundings of each element, and two of the largest: a different order of summation (a
    # tree of 4096 where torch's is finer), an FMA, another exp or tanh move a correct result by
    # about that much (seen on the H200: a softmax backward's sum, a K loop, a tanh)
    scale = want[finite].abs().max().item() if finite.any() else 0.0
    tolerance = 2 * torch_error + 2 * eps * (want.abs() + scale)
    same_special = (~finite) & ((got == want) | (torch.isnan(got) & torch.isnan(want)))
    bad = ~((finite & ((got - want).abs() <= tolerance)) | same_special)  # an inf expected: that inf, no tolerance
    if not bad.any():
        return None
    where = bad.nonzero().reshape(-1).numpy()
    first = int(where[0])
    text = (f"{len(where)} of {want.numel()} elements of {name} are wrong; the first, {name}[{_index(first, out.shape)}] "
            f"= {got[first].item():.9g}, should be {want[first].item():.9g}, off by {abs(got[first] - want[first]).item():.2g} "
            f"(tolerance {tolerance[first].item():.2g}: twice torch's own error in this dtype, plus roundings)")
    if log is not None:
        writers, programs = log.writers(name, out.numel()), log.programs()
        wrong_programs = sorted({int(writers[i]) for i in where if writers[i] >= 0})
        if wrong_programs:
            axes = _axes(programs)
            named = [_program(programs[p], axes) for p in wrong_programs[:8]]
            text += (f". Written by program{'s' if len(named) > 1 else ''} {', '.join(named)}"
                     f"{' and others' if len(wrong_programs) > 8 else ''} (of {len(programs)})")
    shown = ", ".join(f"[{_index(int(i), out.shape)}] {got[int(i)].item():.4g} (not {want[int(i)].item():.4g})"
                      for i in where[1:4])
    text += (f"; then {shown}" if shown else "") + "."
    if log is not None and log.poisoned and not torch.isfinite(got[where]).all():
        program, line = log.poisoned[0]
        text += (f" A masked load without other= ({line}) reads NaN in its masked-off lanes here, as a GPU reads "
                 "whatever the registers held there: give it an other= that the computation ignores (0 for a sum, "
                 "-inf for a max), or keep those lanes out of it.")
    if log is not None and log.rounded:
        what, line = log.rounded[0]
        text += (f" Rounding to look at: {what}, at {line}: the statement asks float32 arithmetic "
                 "(input_precision=\"ieee\" for a dot, .to(tl.float32) before a sum).")
    if INTERPRET and out.dtype == torch.bfloat16 and (got - want).abs().nan_to_num(1e38).max() > 1e4 * (want.abs().max() + 1):
        text += (" Values this far off in bfloat16 are the interpreter's: NumPy has no bfloat16, so arithmetic on "
                 "bf16 blocks gives garbage there. Convert each loaded block with .to(tl.float32) before computing "
                 "(a GPU computes on bf16 directly, but float32 arithmetic is the rule here anyway).")
    return text


def budget_problem(log: accesses.Log, inputs: dict, budget: dict, why: str) -> str | None:
    """Both ways: every element of a budgeted input read at least once, and no more than the budget in
    all. Every instruction that reads counts (a load, an atomic), but a program's first one-element
    load of a tensor (a "scalar" in the log: one sector, which its walk fetches anyway)."""
    for name, most in budget.items():
        t = inputs[name]
        numel = t.numel()
        loads = log.count("load", name) + log.count("atomic", name)
        # the log's indices count from the first element in memory: a strided view's elements are where
        # its strides put them (gaps between its rows belong to no element)
        span = sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1 if numel else 0
        where = torch.arange(span).as_strided(t.shape, t.stride()).reshape(-1).numpy()
        read = np.zeros(span, dtype=bool)
        for kind in ("load", "scalar", "atomic"):
            for indices in log.elements(kind, name).values():
                read[indices] = True
        unread = np.flatnonzero(~read[where])
        if unread.size:
            return (f"{name}[{_index(int(unread[0]), t.shape)}] is never read ({_count(unread.size, 'element')} of "
                    f"{name} not read): the result depends on every element of {name}, so every one must be loaded")
        if loads > most * numel:
            return (f"{name} was read {loads / numel:.2f} times over ({_count(loads, 'element load')} for its "
                    f"{_count(numel, 'element')}); the budget is {most}. {why}")
    return None


def report(exercise: Exercise, result: Result) -> str:
    marks = "  ".join([f"{s} ok" for s in result.passed] + ([] if result.ok else [f"{result.stage} FAILED"]))
    head = f"{exercise.lesson}/exercises/{exercise.name}.py ({exercise.kind}): {marks or result.stage}"
    body = result.message if result.ok else f"{result.stage}: {result.message}"
    tail = f"\nLine budget: about {exercise.lines} lines of your own." if exercise.lines and not result.ok else ""
    return f"{head}\n{'PASSED: ' if result.ok else ''}{body}{tail}"


# ----- helpers
def fingerprint(parts: dict) -> str:
    """A short hash of the parts' code (comments and layout ignored) or, for an answer, its value."""
    text = []
    for name in sorted(parts):
        obj = parts[name]
        fn = getattr(obj, "fn", obj)  # a @triton.jit kernel holds its Python function
        if callable(fn):
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
            for node in ast.walk(tree):  # a docstring is the statement, not code
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node) is not None:
                    node.body = node.body[1:] or [ast.Pass()]
            text.append(_shape(tree))
        else:
            text.append(repr(obj))
    return hashlib.sha256("\n".join(text).encode()).hexdigest()[:12]


def given_fingerprint(source: str, parts: tuple) -> str:
    """A short hash of what an exercise file gives the learner: every top-level statement but the parts
    they write, the imports, the @triton.jit helpers they may add and the docstrings (comments and
    layout ignored). An import or a helper that binds a name the given code binds (a reference, a
    launcher) is given code changed, and counts. The course keeps its own in solutions/<name>.py as
    GIVEN: the cases, the reference, the launcher and the Exercise the checker runs are the course's,
    not an edited copy."""
    tree = ast.parse(source)

    def bound(node) -> set:  # the module's names a top-level statement binds (not a function's own)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return {(a.asname or a.name).split(".")[0] for a in node.names}
        names, todo = set(), [node]
        while todo:
            n = todo.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)  # (and not the names inside it)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
            elif not isinstance(n, ast.Lambda):
                todo.extend(ast.iter_child_nodes(n))
        return names

    def learners(node) -> bool:  # a part, an import or a @triton.jit helper: the learner's to add
        return (bool(bound(node) & set(parts)) and not isinstance(node, (ast.Import, ast.ImportFrom))) or isinstance(
            node, (ast.Import, ast.ImportFrom)) or any("jit" in ast.dump(d) for d in getattr(node, "decorator_list", []))

    given = set().union(*(bound(node) for node in tree.body if not learners(node)))
    kept = []
    for node in tree.body:
        if learners(node) and not (bound(node) - set(parts)) & given:
            continue
        if isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
            continue  # the module's docstring: the statement
        for inner in ast.walk(node):
            if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(inner) is not None:
                inner.body = inner.body[1:] or [ast.Pass()]
        kept.append(_shape(node))
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:12]


def _shape(node) -> str:
    """The code's syntax tree as text: no comments, no layout, and the same in every Python from
    3.10 (fields left empty are left out: ast.dump shows the ones newer Pythons added, such as a
    function's type_params, and ast.unparse writes a tuple differently in 3.10)."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={_shape(value)}" for name, value in ast.iter_fields(node) if value not in (None, [])]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(_shape(item) for item in node) + "]"
    return repr(node)


def _sentinel(dtype):
    return float("nan") if dtype.is_floating_point else (torch.iinfo(dtype).min if dtype != torch.bool else False)


def _axes(programs: list) -> int:
    """How many grid axes the programs use (1 for a 1-D grid, 2 if any program_id(1) is not 0, ...)."""
    return max((max((i + 1 for i, v in enumerate(p) if v), default=1) for p in programs), default=1)


def _program(program, axes: int = 0) -> str:
    """A program's id as the kernel sees it: 3 on a 1-D grid, (3, 1) on a 2-D one."""
    p = tuple(program)[:max(axes, 1)] if axes else tuple(program)
    while not axes and len(p) > 1 and p[-1] == 0:
        p = p[:-1]
    return str(p[0]) if len(p) == 1 else str(p)


def _index(flat: int, shape) -> str:
    return ", ".join(str(int(i)) for i in np.unravel_index(flat, tuple(shape))) if len(shape) > 1 else str(flat)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _span(index: np.ndarray) -> str:
    lo, hi = int(index.min()), int(index.max())
    return str(lo) if lo == hi else f"{lo}..{hi}"


def _cause(error: BaseException, kind):
    while error is not None:
        if isinstance(error, kind):
            return error
        error = error.__cause__ or error.__context__
    return None


def _source_file(part) -> str | None:
    """The file a function or kernel was written in (None for a value, such as a predicted ANSWER)."""
    fn = getattr(part, "fn", part)
    try:
        return os.path.abspath(inspect.getsourcefile(fn)) if callable(fn) else None
    except TypeError:  # (a builtin)
        return None


def _file(module) -> str:
    return os.path.abspath(module.__file__) if getattr(module, "__file__", None) else ""


def _is_main(exercise: Exercise) -> bool:
    main = sys.modules.get("__main__")
    return main is not None and getattr(main, "EXERCISE", None) is exercise


@dataclass
class Wrong:
    """A wrong solution made of a mistake learners make: the parts it replaces (most of them the
    solution's own, patched()), and the stage and the phrase its failure must name."""
    label: str
    stage: str
    phrase: str
    parts: dict
    compiles: bool = True  # False: a GPU's compiler refuses it (the checker compiles only those wrongs)


@dataclass
class Variant:
    """An honest variation of the solution, a way of writing it that learners take (the parts it
    replaces, patched()): it must pass every stage, as the solution does."""
    label: str
    parts: dict


def patched(part, *edits: tuple):
    """The solution's kernel (or function) `part` with one mistake made in its source: each edit
    (old, new) replaces text found exactly once in it. The mistake is the edit, written in one place,
    and the rest stays the solution's; compiled anew in the solution's module, at its line numbers,
    from a source file of its own (so a message can show the patched line). An edit (old, new, n)
    replaces text found exactly n times."""
    fn = getattr(part, "fn", part)
    source = inspect.getsource(fn)
    for old, new, *times in edits:
        n = times[0] if times else 1
        if source.count(old) != n:
            raise ValueError(f"a patch of {fn.__name__}: {old!r} is {source.count(old)} times in it, not {n}")
        source = source.replace(old, new)
    path = f"{inspect.getsourcefile(fn)}#patch{next(_patches)}"  # a name of its own, for linecache
    text = "\n" * (fn.__code__.co_firstlineno - 1) + source
    linecache.cache[path] = (len(text), None, text.splitlines(True), path)
    namespace = dict(fn.__globals__)
    exec(compile(text, path, "exec"), namespace)
    return namespace[fn.__name__]


_patches = itertools.count(1)


def load_progress() -> dict:
    try:
        with open(PROGRESS) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save_progress(progress: dict) -> None:
    with open(PROGRESS, "w") as f:
        json.dump(progress, f, indent=1)


def record(key: str, result: Result) -> None:
    """What the last check found: an untouched stub is not started (and not tried); a failing check
    clears an earlier pass, as the file no longer passes."""
    progress = load_progress()
    entry = progress.setdefault(key, {})
    entry["tried"] = result.stage != "started"
    entry["passed"] = result.ok
    save_progress(progress)


class _FirstLaunch:
    """A kernel as a launcher uses it, kernel[grid](...), that notes in launches[part] the arguments of
    its first launch with each new set of types (its tensors' element types, its tl.dtype arguments):
    what the GPU compile check compiles it for (a second or so each)."""

    def __init__(self, kernel, part: str, launches: dict):
        self.kernel, self.part, self.launches = kernel, part, launches

    def __getitem__(self, grid):
        run = self.kernel[grid]

        def launch(*args, **kwargs):
            values = _launch_values(getattr(self.kernel, "fn", self.kernel), args, kwargs)
            key = json.dumps([values["values"][name] for name in sorted(values["values"])  # the types only
                              if values["values"][name][0] in ("tensor", "dtype")])
            self.launches.setdefault(self.part, {}).setdefault(key, values)
            return run(*args, **kwargs)
        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
          torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
          torch.bool: "i1"}


def _launch_values(fn, args, kwargs) -> dict:
    """A launch's arguments by parameter, as JSON can carry them: a tensor as its element type,
    numbers and strings as themselves, a tl.dtype by its name; and the launch's options."""
    import triton.language as tl

    params = inspect.signature(fn).parameters
    options = {k: v for k, v in kwargs.items() if k not in params}
    bound = dict(zip(params, args), **{k: v for k, v in kwargs.items() if k in params})
    values = {}
    for name, value in bound.items():
        annotation = params[name].annotation
        constexpr = annotation is tl.constexpr or str(annotation).split(".")[-1] == "constexpr"
        if isinstance(value, torch.Tensor):
            values[name] = ["tensor", _TYPES.get(value.dtype, "fp32")]
        elif isinstance(value, tl.dtype):
            values[name] = ["dtype", value.name]
        elif value is None or isinstance(value, (bool, int, float, str)):  # a number: its type, not its value
            values[name] = ["value" if constexpr or value is None else "number", value]
    return {"values": values, "num_warps": options.get("num_warps", 4), "num_stages": options.get("num_stages")}


def gpu_compile_problem(module: str, which: str, launches: dict) -> str | None:
    """Under the interpreter: compile each kernel for an H100/H200 (sm_90) as it was first launched,
    in a child process without the interpreter. The interpreter runs some kernels a GPU's compiler
    refuses (a loop-carried value whose type changes in the loop, such as a float16 accumulator that
    the first float32 update turns float32): None, or the message for the first such kernel."""
    if not launches:
        return None
    compiler = compiler_child()
    compiler.ask("common.exercise:compile_parts", dict(module=module, which=which, launches=launches))
    while len(compiler.asked) > 1:  # its start's answer first
        compiler.result()
    _, errors = compiler.result()
    for part, error in errors.items():
        if error:
            sentence = next((say for clue, say in KNOWN_ERRORS if clue in error), None)
            return (f"{part} runs under the interpreter, but a GPU's compiler refuses it: "
                    + (f"{sentence} ({error})." if sentence else f"{error}."))
    return None


_compiler = None  # the child process that compiles for the GPU compile check, kept for the next check


def compiler_child() -> child.Child:
    """The compile check's child process (without the interpreter), started at once if it is not
    running: stages() asks for it before its interpreted runs, so that its imports (torch, Triton's
    compiler) overlap them."""
    global _compiler
    if _compiler is None or _compiler.process.poll() is not None:
        _compiler = child.start("common.exercise:compiler_ready", interpret=False)
        atexit.register(_compiler.close)
    return _compiler


def compiler_ready() -> bool:
    import triton.backends.nvidia.compiler  # noqa: F401  (what compile_parts needs, imported ahead)
    import triton.compiler  # noqa: F401

    return True


def compile_parts(module: str, which: str, launches: dict) -> dict:
    """In a child without the interpreter: {part: None, or why it does not compile}, each kernel of
    the exercise's `which` compiled for sm_90 with the types of its first launch."""
    import triton
    import triton.language as tl

    from common import ptx

    impl, _ = importlib.import_module(module).EXERCISE.implementation(which)
    errors = {}
    for part, launch in ((part, launch) for part, each in launches.items() for launch in each.values()):
        if errors.get(part):
            continue
        fn, values = impl[part], dict(launch["values"])
        for param in fn.params:  # arguments the launch left to their defaults
            if param.name not in values and not param.is_constexpr:
                values[param.name] = ["value" if param.default is None else "number", param.default]
        types = sorted({value for kind, value in values.values() if kind == "tensor"})
        signature, constexprs = {}, {}  # ptx.compile_job's: the types of the others, the constexprs' values
        for name, (kind, value) in values.items():
            if kind == "tensor":
                signature[name] = "*" + value
            elif kind == "dtype":
                constexprs[name] = getattr(tl, value)
            elif kind == "value":  # a constexpr, or None (which Triton makes one)
                constexprs[name] = value
            else:  # a number
                signature[name] = ("i1" if isinstance(value, bool) else "fp32" if isinstance(value, float)
                                   else "i32" if -2**31 <= value < 2**31 else "i64")
        stages = {"num_stages": launch["num_stages"]} if launch["num_stages"] else {}
        job = dict(kernel=fn, signature=signature, constexprs=constexprs, divisible_by_16=[], arch=90, asm=[],
                   num_warps=launch["num_warps"], **stages)
        try:
            ptx.compile_job(job)
            errors[part] = None
        except triton.compiler.errors.CompilationError as error:
            lines, start = inspect.getsourcelines(fn.fn)
            at_def = start + next(i for i, line in enumerate(lines) if line.lstrip().startswith("def "))
            cause = error.error_message
            text = str(cause) if isinstance(cause, Exception) else str(cause or error).strip().splitlines()[-1]
            text = re.sub(r'^\w+\("(.*)"\)$', r"\1", text.strip())  # AssertionError("...") -> ...
            line = at_def + error.node.lineno - 1 if getattr(error, "node", None) is not None else None
            source = linecache.getline(inspect.getsourcefile(fn.fn), line).strip() if line else ""
            errors[part] = (f"{text} (line {line}: `{source}`, compiled for {'/'.join(types)} tensors)" if line
                            else text)
        except Exception as error:  # noqa: BLE001  (a learner's kernel: anything it raises is the message)
            errors[part] = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[-1][:300]}"
    return errors


def interpreted_stages(module: str, which: str) -> list:
    """Stages 2-5 of the exercise in `module` under the interpreter: [stage, message, stages passed]
    (what Exercise.check asks a child process for on a GPU)."""
    r = importlib.import_module(module).EXERCISE.stages(which)
    return [r.stage, r.message, list(r.passed)]


def all_exercises() -> list:
    """Every exercise of every lesson: (lesson, name, the Exercise), in order."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "lesson*", "exercises", "*.py"))):
        lesson, name = path.split(os.sep)[-3], os.path.basename(path)[:-3]
        if name.startswith("_"):
            continue
        found.append((lesson, name, importlib.import_module(f"{lesson}.exercises.{name}").EXERCISE))
    return found


def progress_table(check: bool = False) -> None:
    """Every exercise, its kind, and where you are with it (re-checked with check=True)."""
    from common.table import print_table

    progress = load_progress()
    rows = []
    for lesson, name, exercise in all_exercises():
        key = f"{lesson}/{name}"
        if check:
            record(key, exercise.check("learner"))
            progress = load_progress()
        entry = progress.get(key, {})
        status = "passed" if entry.get("passed") else "tried" if entry.get("tried") else "not started"
        rows.append((lesson, f"exercises/{name}.py", exercise.kind, status,
                     f"{entry.get('hints', 0)} of {len(exercise.hints)}"))
    done = sum(row[3] == "passed" for row in rows)
    print_table(rows, ["lesson", "exercise", "kind", "status", "hints seen"], title=f"Exercises: {done} of {len(rows)} passed",
                note="Run an exercise's file to check it; `python -m common.exercise --check` re-checks them all.")


if __name__ == "__main__":
    progress_table(check="--check" in sys.argv[1:])
