"""The exercises, and proof that their checker can fail: every stub as shipped is "not started",
every solution passes every stage, every wrong solution shipped beside it (the mistakes learners
make) fails at the stage, and with the phrase, that it names; stub and solution take the same
arguments. Then the checker's command line: hints one at a time, the progress table."""
import dataclasses
import inspect
import os
import signal

import numpy as np
import pytest
import torch

from conftest import INTERPRET, ROOT  # noqa: F401  (common.device before triton)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from common import accesses, child, exercise as checker  # noqa: E402
from lesson01_vector_add.exercises import axpy  # noqa: E402

EXERCISES = checker.all_exercises()
IDS = [f"{lesson[:8]}/{name}" for lesson, name, _ in EXERCISES]


def wrong_ones(kind: str = "WRONG"):
    import importlib

    for lesson, name, ex in EXERCISES:
        if ex.kind == "predict":
            continue
        solutions = importlib.import_module(f"{lesson}.exercises.solutions.{name}")
        for wrong in getattr(solutions, kind, []):
            yield pytest.param(ex, wrong, id=f"{lesson[:8]}/{name}: {wrong.label}")


def test_every_lesson_has_three_exercises_and_a_stretch():
    per_lesson = {}
    for lesson, _, ex in EXERCISES:
        per_lesson.setdefault(lesson, []).append(ex)
    assert sorted(per_lesson) == checker_lessons()
    for lesson, exercises in per_lesson.items():
        assert len(exercises) >= 4, lesson
        assert any(ex.stretch for ex in exercises), f"{lesson} has no stretch exercise"


NO_EXERCISES = {"lesson07_hopper"}  # a reading of the Hopper kernels: Gluon runs on sm_90 alone, not under the interpreter


def checker_lessons():
    from common.results import LESSONS

    return [lesson for lesson in LESSONS if lesson not in NO_EXERCISES]


@pytest.mark.parametrize("ex", [e for _, _, e in EXERCISES], ids=IDS)
def test_the_stub_as_shipped_is_not_started(ex):
    result = ex.check("learner")
    assert result.stage == "started" and "not started" in result.message and "--hint" in result.message


@pytest.mark.parametrize("ex", [e for _, _, e in EXERCISES], ids=IDS)
def test_the_solution_passes_every_stage(ex):
    result = ex.check("solution")
    assert result.ok, result.message
    if ex.kind != "predict":
        expected = ("started", "runs", "memory", "values") + (("budget",) if ex.budget or ex.budget_check else ())
        assert result.passed == expected


@pytest.mark.parametrize("ex, wrong", list(wrong_ones()))
# the mistakes' own warnings: a float16 accumulator overflows, a log of the softmax takes log(0), a
# merge's 2^lse overflows and inf * 0 sums to NaN
@pytest.mark.filterwarnings("ignore:overflow encountered in reduce:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in reduce:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning")
def test_each_wrong_solution_fails_at_its_stage(ex, wrong):
    if "NumPy has no bfloat16" in wrong.phrase and not accesses.runs_bf16():
        pytest.skip("the interpreter's bf16 garbage: this Triton's interpreter runs no bf16 at all (the case is skipped)")
    result = ex.check(f"wrong:{wrong.label}")
    assert (result.stage, wrong.phrase in result.message) == (wrong.stage, True), result.message


@pytest.mark.parametrize("ex, variant", list(wrong_ones("VARIANTS")))
def test_each_honest_variant_passes(ex, variant):
    # a way of writing the solution that learners take, harmless on a GPU: refusing it would be the checker's mistake
    result = ex.check(f"variant:{variant.label}")
    assert result.ok, result.message


@pytest.mark.parametrize("ex", [e for _, _, e in EXERCISES if e.kind != "predict"], ids=[
    i for i, (_, _, e) in zip(IDS, EXERCISES) if e.kind != "predict"])
def test_stub_and_solution_take_the_same_arguments(ex):
    stub, _ = ex.implementation("learner")
    solution, _ = ex.implementation("solution")
    for part in ex.parts:
        a, b = (getattr(obj[part], "fn", obj[part]) for obj in (stub, solution))
        assert inspect.signature(a) == inspect.signature(b), part


def test_every_exercise_has_three_hints_and_cases_that_defeat_the_known_cheats():
    for lesson, name, ex in EXERCISES:
        assert len(ex.hints) >= 3, name
        if ex.kind != "predict":
            assert len(ex.cases) >= 3, name


def test_hints_one_at_a_time_and_the_progress_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(checker, "PROGRESS", str(tmp_path / "progress.json"))
    lesson, name, ex = EXERCISES[0]
    for i in range(1, len(ex.hints) + 2):
        ex.main(["--hint"])
    out = capsys.readouterr().out
    assert out.count("Hint 1 of") == 1 and f"Hint {len(ex.hints)} of" in out and "No more hints" in out
    assert ex.main([]) == 1  # the stub as shipped: not started, and recorded so (not "tried")
    capsys.readouterr()
    checker.progress_table()
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if f"exercises/{name}.py" in line)
    assert "not started" in row and "tried" not in row and f"{len(ex.hints)} of {len(ex.hints)}" in row


def test_progress_tells_the_truth(tmp_path, monkeypatch):
    # an untouched stub is "not started"; a pass is recorded; a failing re-check clears it
    monkeypatch.setattr(checker, "PROGRESS", str(tmp_path / "progress.json"))
    key = "lessonXX/example"
    checker.record(key, checker.Result("started", "not started"))
    assert checker.load_progress()[key] == {"tried": False, "passed": False}
    checker.record(key, checker.Result("passed", "all pass", ("started", "runs", "memory", "values")))
    assert checker.load_progress()[key] == {"tried": True, "passed": True}
    checker.record(key, checker.Result("values", "wrong", ("started", "runs", "memory")))
    assert checker.load_progress()[key] == {"tried": True, "passed": False}


def test_an_exercise_file_runs_as_a_script():
    lesson, name, _ = EXERCISES[0]
    path = os.path.join(ROOT, lesson, "exercises", f"{name}.py")
    stub = child.script(path)
    assert stub.returncode == 1 and "not started" in stub.stdout
    solution = child.script(path, "--solution")
    assert solution.returncode == 0 and "PASSED" in solution.stdout, solution.stdout + solution.stderr


# ----- the guards against shortcuts (issue 40): each shortcut rebuilt, each seen to pass before its guard
# These tests run the checker's stages in this process, with a launcher or a kernel swapped in, which
# a child process cannot be handed. The memory stage records the interpreter's loads and stores, so
# on a GPU (where check() runs that stage in an interpreter child) they are left to the CPU run; the
# refusals at the "started" stage need no kernel run and run on both (compiled=not INTERPRET).
IN_THIS_PROCESS = pytest.mark.skipif(not (INTERPRET and accesses.available()), reason=(
    "runs the checker's memory stage in this process, which needs Triton's interpreter (on a GPU, check() "
    "runs it in a child)"))


def _cheat(monkeypatch, ex, launch):
    """The exercise with its launcher replaced, as a learner can edit the one in their file."""
    import dataclasses

    return dataclasses.replace(ex, launch=launch)


@IN_THIS_PROCESS
def test_a_launcher_that_writes_the_answer_after_the_kernel_fails(monkeypatch):
    from lesson01_vector_add.exercises import axpy
    import triton
    import triton.language as tl

    @triton.jit
    def stores_zeros(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(out_ptr + offsets, tl.zeros([BLOCK_SIZE], dtype=tl.float32).to(out_ptr.dtype.element_ty),
                 mask=offsets < N)

    def launch(axpy_kernel, x, y, out, a, BLOCK_SIZE=1024):
        axpy.launch(stores_zeros, x, y, out, a, BLOCK_SIZE)
        out.copy_(axpy.reference(x, y, a)["out"])  # the answer, by torch, after the launch

    result = _cheat(monkeypatch, axpy.EXERCISE, launch).stages("solution")
    assert result.stage == "memory" and "after it ran" in result.message and "out[0]" in result.message


@IN_THIS_PROCESS
def test_a_launcher_that_fills_the_output_for_the_kernel_to_store_back_fails(monkeypatch):
    from lesson01_vector_add.exercises import axpy
    import triton
    import triton.language as tl

    @triton.jit
    def stores_back(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < N
        tl.store(out_ptr + offsets, tl.load(out_ptr + offsets, mask=mask), mask=mask)

    def launch(axpy_kernel, x, y, out, a, BLOCK_SIZE=1024):
        out.copy_(axpy.reference(x, y, a)["out"])  # the answer, by torch, before the launch
        axpy.launch(stores_back, x, y, out, a, BLOCK_SIZE)

    result = _cheat(monkeypatch, axpy.EXERCISE, launch).stages("solution")
    assert result.stage == "memory" and "before the launch" in result.message

    def launch_reads_early(axpy_kernel, x, y, out, a, BLOCK_SIZE=1024):  # the fill undone: the read itself is the fault
        axpy.launch(stores_back, x, y, out, a, BLOCK_SIZE)

    result = _cheat(monkeypatch, axpy.EXERCISE, launch_reads_early).stages("solution")
    assert result.stage == "memory" and "before any program stored it" in result.message


@IN_THIS_PROCESS
def test_a_masked_load_without_other_reads_nan_where_a_gpu_reads_garbage():
    from common.exercise import Wrong
    from lesson03_rowsum.exercises import rmsnorm
    from lesson03_rowsum.exercises.solutions import rmsnorm as solution

    no_other = checker.patched(solution.rmsnorm_kernel, ("mask=cols < N, other=0.0)", "mask=cols < N)"))  # the sum's load

    wrong = Wrong("other= forgotten in the sum", "values", "without other=", dict(rmsnorm_kernel=no_other))
    solution.WRONG.append(wrong)
    try:
        result = rmsnorm.EXERCISE.stages(f"wrong:{wrong.label}")
    finally:
        solution.WRONG.remove(wrong)
    assert result.stage == "values" and "without other=" in result.message and "line" in result.message


def test_a_part_imported_from_elsewhere_is_refused(monkeypatch):
    from lesson01_vector_add.exercises import axpy
    from lesson01_vector_add.exercises.solutions import axpy as solution

    monkeypatch.setattr(axpy, "axpy_kernel", solution.axpy_kernel)  # `from ...solutions.axpy import axpy_kernel`
    result = axpy.EXERCISE.stages("learner", compiled=not INTERPRET)
    assert result.stage == "started" and "is not written in axpy.py" in result.message
    assert "solutions/axpy.py" in result.message


@pytest.mark.skipif(not accesses.available(), reason="the budget counts the interpreter's loads")
def test_a_budget_holds_both_ways():
    from common.exercise import budget_problem

    x = torch.zeros(4, 3)
    region = accesses.region("x", x, True)
    base = region.start // region.itemsize

    class Pointers:  # what the interpreter hands a load: addresses, and a mask
        def __init__(self, elements):
            self.data = (np.array(elements) + base) * region.itemsize

    log = accesses.Log([region])
    log.record("load", (0, 0, 0), Pointers(range(11)), None)  # x[3, 2] never read
    message = budget_problem(log, {"x": x}, {"x": 1}, "")
    assert message is not None and "x[3, 2] is never read" in message
    log.record("load", (1, 0, 0), Pointers([11, 0]), None)  # now all read, x[0, 0] twice: 13 loads for 12
    assert "read 1.08 times over" in budget_problem(log, {"x": x}, {"x": 1}, "")
    assert budget_problem(log, {"x": x}, {"x": 2}, "") is None


def test_the_values_tolerance_is_twice_torchs_error_not_more():
    # the checker's boundary: an output 3x torch's own error away fails, 1.5x passes (a tolerance made
    # 5x looser would pass both and fail this test)
    from common.exercise import compare

    exact = torch.linspace(1.0, 2.0, 100, dtype=torch.float64)
    ours = (exact + 1e-3).float()  # torch's result in the dtype: 1e-3 off everywhere (far above float32's rounding)
    good, bad = (exact + 1.5e-3).float(), exact.float().clone()
    bad[37] += 3e-3
    assert compare("y", good, exact, ours, None) is None
    message = compare("y", bad, exact, ours, None)
    assert message is not None and "y[37]" in message and "1 of 100 elements" in message


@IN_THIS_PROCESS
def test_an_output_with_one_element_unwritten_fails(monkeypatch):
    import dataclasses

    from lesson01_vector_add.exercises import axpy
    from lesson01_vector_add.exercises.solutions import axpy as solution

    one_short = checker.patched(solution.axpy_kernel, ("mask = offsets < N", "mask = offsets < N - 1"))  # the last one
    ex = dataclasses.replace(axpy.EXERCISE, launch=lambda axpy_kernel, **kw: axpy.launch(one_short, **kw))
    result = ex.stages("solution")
    assert result.stage == "memory" and "1 of its" in result.message and "left unwritten" in result.message


def test_a_predict_exercises_answer_is_not_in_the_learners_file():
    # the right value and why live in solutions/, read only when checking: nothing a few lines below
    # ANSWER = None hands it over
    import importlib

    for lesson, name, ex in EXERCISES:
        if ex.kind == "predict":
            module = importlib.import_module(f"{lesson}.exercises.{name}")
            assert not hasattr(module, "answer") and not hasattr(ex, "answer"), name
            assert callable(importlib.import_module(f"{lesson}.exercises.solutions.{name}").answer), name


def test_the_given_code_is_the_courses():
    # each exercise file as shipped matches its solution's GIVEN (update GIVEN when an exercise changes)
    import importlib

    for lesson, name, ex in EXERCISES:
        with open(os.path.join(ROOT, lesson, "exercises", f"{name}.py")) as f:
            given = checker.given_fingerprint(f.read(), ex.parts)
        assert given == importlib.import_module(f"{lesson}.exercises.solutions.{name}").GIVEN, name


@pytest.mark.parametrize("edit", [
    ("    cases=[", "    cases=[][:0] + ["),  # "all 0 cases pass"
    ("def reference(x, y, a):\n", "def reference(x, y, a):\n    return {'out': x}\n"),
    ("(cdiv(N, BLOCK_SIZE),)", "(cdiv(N, BLOCK_SIZE) - 1,)"),  # inside the launcher, after its docstring
    ("\nEXERCISE = Exercise(", "\nfrom lesson01_vector_add.exercises.solutions.axpy import launch\nEXERCISE = Exercise("),
    ("\nEXERCISE = Exercise(", "\n@triton.jit\ndef reference(x, y, a):\n    pass\n\n\nEXERCISE = Exercise(")])
def test_an_edited_case_list_or_reference_is_refused(tmp_path, monkeypatch, edit):
    from lesson01_vector_add.exercises import axpy

    with open(os.path.join(ROOT, "lesson01_vector_add", "exercises", "axpy.py")) as f:
        source = f.read()
    assert edit[0] in source
    edited = tmp_path / "axpy.py"
    edited.write_text(source.replace(edit[0], edit[1], 1))
    monkeypatch.setattr(checker, "_file", lambda module: str(edited))
    result = axpy.EXERCISE.stages("learner", compiled=not INTERPRET)
    assert result.stage == "started" and "given code" in result.message and "not the course's" in result.message
    # a kernel written in the file changes nothing given, nor do a helper and an import of one's own
    edited.write_text(source.replace("    pass\n", "    pid = tl.program_id(axis=0)\n", 1).replace(
        "\nEXERCISE = Exercise(", "\nimport math\n\n\n@triton.jit\ndef helper(x):\n    return x\n\n\nEXERCISE = Exercise("))
    assert "given code" not in axpy.EXERCISE.stages("learner", compiled=not INTERPRET).message


def test_bench_says_why_it_does_not_time_a_failing_kernel(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(checker, "PROGRESS", str(tmp_path / "progress.json"))
    _, _, ex = EXERCISES[0]
    assert ex.main(["--bench"]) == 1  # the stub as shipped
    out = capsys.readouterr().out
    assert "--bench: not timed" in out and "started stage" in out


def test_a_patch_makes_its_edit_or_says_why_not():
    # a wrong solution is the solution with one edit (common.exercise.patched): the edit must find its
    # text exactly as often as it says, and the patched kernel computes the mistake
    from lesson01_vector_add.exercises import axpy
    from lesson01_vector_add.exercises.solutions import axpy as solution

    with pytest.raises(ValueError, match="is 0 times in it, not 1"):
        checker.patched(solution.axpy_kernel, ("no such text", "x"))
    with pytest.raises(ValueError, match="not 2"):
        checker.patched(solution.axpy_kernel, ("tl.program_id(axis=0)", "0", 2))
    with pytest.raises(ValueError, match="is 3 times in it, not 1"):  # more often than it says: which one was meant?
        checker.patched(solution.axpy_kernel, ("mask=mask", "mask=None"))
    launch = checker.patched(axpy.launch, ("BLOCK_SIZE=BLOCK_SIZE", "BLOCK_SIZE=BLOCK_SIZE // 2"))
    assert "BLOCK_SIZE // 2" in inspect.getsource(launch) and "BLOCK_SIZE // 2" not in inspect.getsource(axpy.launch)
    # the solution's line numbers: a message naming a line names the edited one
    assert launch.__code__.co_firstlineno == axpy.launch.__code__.co_firstlineno


@pytest.mark.parametrize("ex, wrong", list(wrong_ones()))
def test_each_wrong_solution_is_an_edit_of_the_solution(ex, wrong):
    # written once: each function a wrong solution replaces is the solution's, patched (common.exercise.patched),
    # not a copy of its code beside it
    for part, fn in wrong.parts.items():
        if callable(fn):
            assert "#patch" in (checker._source_file(fn) or ""), f"{part} of '{wrong.label}' is not patched()"


def test_a_value_that_changes_type_in_a_loop_is_explained_where_a_gpu_compiles():
    # on a GPU the compiled run raises the compiler's error itself (no interpreter child to compile
    # it): its message names the mistake as the CPU's compile check does
    import ast

    from triton.compiler.errors import CompilationError

    source = "def kernel():\n    acc = zeros()\n    for i in range(3):\n        acc = acc * 1.0\n"
    loop = ast.parse(source).body[0].body[1]
    error = CompilationError(source, loop, "Loop-carried variable acc has initial type <['16', '16'], fp16> but "
                                           "is re-assigned to <['16', '16'], fp32> in loop!")
    message = checker.error_message(error, [])
    assert "changes type in the loop (a float16 accumulator" in message, message


# ----- the checker's own guards, each at its edge (issue 60)
@triton.jit
def axpy_block(N, BLOCK_SIZE: tl.constexpr):
    """This program's offsets and their mask, as axpy's kernel makes them (for the kernels below)."""
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    return offsets, offsets < N


@IN_THIS_PROCESS
def test_a_program_that_reads_what_another_stores_is_a_race():
    # right in the order the interpreter runs the programs; on a GPU program 1 may read before program 0 stores
    @triton.jit
    def carries(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
        pid = tl.program_id(axis=0)
        offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < N
        out = a * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
        previous = tl.load(out_ptr + pid * BLOCK_SIZE - 1, mask=pid > 0, other=0.0)  # the block before's last
        tl.store(out_ptr + offsets, out + 0 * previous, mask=mask)

    ex = _cheat(None, axpy.EXERCISE, lambda axpy_kernel, **kw: axpy.launch(carries, **kw))
    result = ex.stages("solution")
    assert result.stage == "memory" and "a race: program 1 reads out[127], which program 0 writes" in result.message


@IN_THIS_PROCESS
def test_a_result_that_depends_on_the_programs_order_is_a_race():
    # atomics alone meet here (no store or load beside them): the programs run in reverse order show it


    @triton.jit
    def tickets(out_ptr):
        ticket = tl.atomic_add(out_ptr, 1.0)  # out[0] before this program's add: the order it came in
        tl.store(out_ptr + 1 + tl.program_id(axis=0), ticket)

    def launch(axpy_kernel, x, y, out, a, BLOCK_SIZE=128):
        out.zero_()  # (for the atomics to add into)
        tickets[(x.numel() - 1,)](out)

    in_order = lambda x, y, a: {"out": torch.tensor([x.numel() - 1.0] + list(range(x.numel() - 1)), dtype=x.dtype)}
    ex = dataclasses.replace(axpy.EXERCISE, launch=launch, reference=in_order,
                             cases=[checker.Case("five", dict(x=torch.zeros(5), y=torch.zeros(5), a=1.0))])
    result = ex.stages("solution")
    assert result.stage == "values" and "a race: out[1] = 0 with the programs run in order, but 3 with them run in " \
                                        "reverse order" in result.message, result.message


@IN_THIS_PROCESS
def test_a_program_that_waits_for_another_is_stopped(monkeypatch):
    # program 0 spins until program 1 has added: the interpreter runs program 1 only after it, forever


    @triton.jit
    def waits(out_ptr):
        if tl.program_id(axis=0) == 0:
            while tl.atomic_add(out_ptr, 0.0) == 0.0:
                pass
        else:
            tl.atomic_add(out_ptr, 1.0)

    def launch(axpy_kernel, x, y, out, a, BLOCK_SIZE=128):
        out.zero_()
        waits[(2,)](out)

    def hangs(*_):
        raise TimeoutError("the checker let a spinning program run on")

    monkeypatch.setattr(accesses, "MOST_ACCESSES", 64)
    ex = dataclasses.replace(axpy.EXERCISE, launch=launch, cases=axpy.EXERCISE.cases[:1])
    before = signal.signal(signal.SIGALRM, hangs)  # without the guard, this test would never end
    signal.alarm(60)
    try:
        result = ex.stages("solution")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    assert result.stage == "runs" and "program 0 never finishes: it made over 64" in result.message


@IN_THIS_PROCESS
def test_a_load_of_a_block_only_part_of_which_was_stored_fails():
    @triton.jit
    def halves(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
        offsets, mask = axpy_block(N, BLOCK_SIZE)
        first = tl.arange(0, BLOCK_SIZE) < BLOCK_SIZE // 2
        out = a * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, out, mask=mask & first)
        tl.debug_barrier()  # (the first half read back after it: a barrier between)
        both = tl.load(out_ptr + offsets, mask=mask)  # the first half stored, the second not yet
        tl.store(out_ptr + offsets, out + 0 * both, mask=mask & ~first)

    ex = _cheat(None, axpy.EXERCISE, lambda axpy_kernel, **kw: axpy.launch(halves, **kw))
    result = ex.stages("solution")
    assert result.stage == "memory" and "reads out[64] before any program stored it" in result.message, result.message


def test_expected_values_that_are_not_finite_must_be_matched():
    # where the float64 answer is inf or NaN, only the same inf (or a NaN) passes; the tolerance is no help there
    from common.exercise import compare

    exact = torch.tensor([1.0, float("inf"), float("-inf"), float("nan")], dtype=torch.float64)
    ours = exact.float()
    assert compare("y", exact.float(), exact, ours, None) is None
    for i, wrong in ((1, 3.4e38), (1, float("-inf")), (1, float("nan")), (2, float("inf")), (3, 0.0)):
        got = exact.float().clone()
        got[i] = wrong
        message = compare("y", got, exact, ours, None)
        assert message is not None and f"y[{i}]" in message, (i, wrong)


def test_the_dropout_statistics_bound_is_five_standard_deviations():
    # the share of zeros may stray 4.5 standard deviations from p N (a correct kernel, by chance), not 5.5
    import math

    from lesson01_vector_add.exercises.dropout import verify

    n, p = 1 << 16, 0.5
    sigma = math.sqrt(n * p * (1 - p))
    x = torch.ones(n)
    for strays, fails in ((4.5, False), (5.5, True)):
        zeros = torch.zeros(n, dtype=torch.bool)
        zeros[torch.randperm(n, generator=torch.Generator().manual_seed(0))[:round(p * n + strays * sigma)]] = True
        out = torch.where(zeros, 0.0, x / (1 - p))
        outputs = dict(out=out, again=out, reblocked=out, other=torch.where(~zeros, 0.0, x / (1 - p)))
        message = verify(outputs, x, p, seed=1, BLOCK_SIZE=1024)
        assert (message is not None and "elements are zero" in message) == fails, (strays, message)


@pytest.mark.skipif(not INTERPRET or torch.cuda.is_available(), reason="the compile check runs where no GPU is")
def test_a_compile_check_takes_no_error_for_success():
    # any failure to compile is the learner's message, not only Triton's CompilationError: here the
    # kernel compiled for a tensor type that Triton has no name for
    from common.exercise import gpu_compile_problem

    bogus = {"x_ptr": ["tensor", "no-such-type"], "y_ptr": ["tensor", "fp32"], "out_ptr": ["tensor", "fp32"],
             "a": ["number", 1.5], "N": ["number", 10], "BLOCK_SIZE": ["value", 128]}
    launches = {"axpy_kernel": {"k": {"values": bogus, "num_warps": 4, "num_stages": None}}}
    problem = gpu_compile_problem("lesson01_vector_add.exercises.axpy", "solution", launches)
    assert problem is not None and problem.startswith("axpy_kernel runs under the interpreter, but a GPU's compiler")


def test_the_interpreter_flag_in_the_learners_code_is_refused():
    from common.exercise import interpreter_only

    def launch(kernel, x):
        """Under the interpreter a GPU's path is not taken: this docstring says so, harmlessly."""
        if triton.knobs.runtime.interpret:  # noqa: F821  (never run: only read)
            return kernel(x)
        return None

    def helper(x):
        return x if x.is_cuda else x  # a condition on where it runs

    def plain(x):
        """Runs on the interpreter and on a GPU alike."""
        return x.device

    assert "launch asks whether it runs under the interpreter" in interpreter_only({"launch": launch}, None)
    assert "helper asks whether" in interpreter_only({"helper": helper}, None)
    assert interpreter_only({"plain": plain}, None) is None


def test_the_interpreter_runs_a_dot_and_a_float16_sum_as_a_gpu():
    # TF32 keeps 10 bits of a float32 (rounded to nearest); a float16 sum adds in float16, pairwise, and overflows
    x = np.array([1 + 2 ** -11, 1 + 2 ** -10 + 2 ** -12, -3.0, np.inf], dtype=np.float32)
    assert accesses.tf32(x).tolist() == [1.0, 1 + 2 ** -10, -3.0, np.inf]
    h = np.full((2, 64), 2048, dtype=np.float16)
    h[1] = 1.0
    total = accesses.float16_sum(h, 1, False)
    assert total[0] == np.inf and total[1] == 64  # (NumPy alone: 131072 in float32, and no inf)
    assert accesses.float16_sum(np.full(3, 2049, np.float16), None, True).shape == (1,)


@pytest.mark.skipif(not (INTERPRET and accesses.available()), reason="the interpreter's arithmetic, made a GPU's")
def test_a_kernels_float16_sum_is_rounded_as_on_a_gpu():
    # 2048 and 63 ones: pairwise in float16 the first 1 is rounded away (2110); summed in float32, 2111 -> 2112

    @triton.jit
    def total(x_ptr, out_ptr, BLOCK: tl.constexpr):
        tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, BLOCK)), axis=0).to(tl.float32))

    x, out = torch.ones(64, dtype=torch.float16), torch.zeros(1)
    x[0] = 2048
    with accesses.recording(accesses.Log([accesses.region("x", x, True), accesses.region("out", out, False)])):
        total[(1,)](x, out, BLOCK=64)
    assert out.item() == 2110


@pytest.mark.skipif(not accesses.available(), reason="the budget counts the interpreter's loads")
def test_a_budget_counts_every_read_but_a_programs_first_scalar():
    from common.exercise import budget_problem

    x = torch.zeros(4, 3)
    region = accesses.region("x", x, True)
    base = region.start // region.itemsize

    class Pointers:
        def __init__(self, elements):
            self.data = (np.array(elements) + base) * region.itemsize

    log = accesses.Log([region], scalars_apart=True)
    log.record("load", (0, 0, 0), Pointers(range(12)), None)
    log.record("load", (0, 0, 0), Pointers([5]), None)  # program 0's first one-element load of x: not a walk
    assert budget_problem(log, {"x": x}, {"x": 1}, "") is None
    log.record("load", (0, 0, 0), Pointers([6]), None)  # its second is counted
    assert "read 1.08 times over" in budget_problem(log, {"x": x}, {"x": 1}, "")
    atomics = accesses.Log([region], scalars_apart=True)
    atomics.record("atomic", (0, 0, 0), Pointers(range(12)), None)  # an atomic reads, whatever it writes
    assert budget_problem(atomics, {"x": x}, {"x": 1}, "") is None
    atomics.record("load", (1, 0, 0), Pointers(range(12)), None)
    assert "read 2.00 times over" in budget_problem(atomics, {"x": x}, {"x": 1}, "")


def test_a_read_after_another_programs_write_passes_only_through_atomics():
    # a ticket counter: program 0 stores y, then adds to c; program 1 adds to c, then reads y (release, acquire)
    from common.exercise import race_in_log

    outputs = {"y": torch.zeros(1), "c": torch.zeros(1)}
    p0, p1 = (0, 0, 0), (1, 0, 0)
    one = np.array([0])
    log = accesses.Log([], accesses=[("store", p0, "y", one), ("atomic", p0, "c", one), ("atomic", p1, "c", one),
                                     ("load", p1, "y", one)])
    assert race_in_log(log, outputs) is None
    log.accesses[1], log.accesses[0] = log.accesses[0], log.accesses[1]  # program 0's atomic before its store
    assert "a race: program 1 reads y[0], which program 0 writes" in race_in_log(log, outputs)


@IN_THIS_PROCESS
def test_a_read_through_tl_atomic_cas_is_seen():
    # atomic_cas has a builder method of its own: recorded like every other access (an input refused by name)
    @triton.jit
    def swaps(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr):
        offsets, mask = axpy_block(N, BLOCK_SIZE)
        never = tl.full([BLOCK_SIZE], -12345.0, tl.float32)  # (a block: triton 3.6's interpreter broadcasts no scalar)
        y = tl.atomic_cas(y_ptr + offsets, never, never)  # swaps nothing in: y, read
        tl.store(out_ptr + offsets, a * tl.load(x_ptr + offsets, mask=mask) + y, mask=mask)

    ex = dataclasses.replace(axpy.EXERCISE, launch=lambda axpy_kernel, **kw: axpy.launch(swaps, **kw),
                             cases=axpy.EXERCISE.cases[2:3])  # N = 128, BLOCK_SIZE 128: in bounds
    result = ex.stages("solution")
    assert result.stage == "memory" and "runs an atomic on y, an input" in result.message, result.message


@IN_THIS_PROCESS
def test_a_read_back_of_a_programs_own_store_needs_a_barrier():
    # the load of the first half is ordered after its store only by tl.debug_barrier(): with it, the kernel passes
    @triton.jit
    def reads_back(x_ptr, y_ptr, out_ptr, a, N, BLOCK_SIZE: tl.constexpr, BARRIER: tl.constexpr):
        offsets, mask = axpy_block(N, BLOCK_SIZE)
        first = tl.arange(0, BLOCK_SIZE) < BLOCK_SIZE // 2
        out = a * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, out, mask=mask & first)
        if BARRIER:
            tl.debug_barrier()
        half = tl.load(out_ptr + offsets, mask=mask & first, other=0.0)  # read back: the first half, stored
        tl.store(out_ptr + offsets, out + 0 * tl.sum(half, axis=0), mask=mask & ~first)

    for barrier in (False, True):
        ex = dataclasses.replace(axpy.EXERCISE, cases=axpy.EXERCISE.cases[:5], launch=lambda axpy_kernel, x, y, out, a,
                                 BLOCK_SIZE: reads_back[(triton.cdiv(x.numel(), BLOCK_SIZE),)](
                                     x, y, out, a, x.numel(), BLOCK_SIZE=BLOCK_SIZE, BARRIER=barrier))
        result = ex.stages("solution")
        assert result.ok if barrier else "program 0 reads out[0] back after storing it" in result.message, result.message
