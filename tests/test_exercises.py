"""The exercises, and proof that their checker can fail: every stub as shipped is "not started",
every solution passes every stage, every wrong solution shipped beside it (the mistakes learners
make) fails at the stage, and with the phrase, that it names; stub and solution take the same
arguments. Then the checker's command line: hints one at a time, the progress table."""
import inspect
import os

import numpy as np
import pytest
import torch

from conftest import INTERPRET, ROOT  # noqa: F401  (common.device before triton)
from common import accesses, child, exercise as checker

EXERCISES = checker.all_exercises()
IDS = [f"{lesson[:8]}/{name}" for lesson, name, _ in EXERCISES]


def wrong_ones():
    import importlib

    for lesson, name, ex in EXERCISES:
        if ex.kind == "predict":
            continue
        solutions = importlib.import_module(f"{lesson}.exercises.solutions.{name}")
        for wrong in getattr(solutions, "WRONG", []):
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


@pytest.mark.parametrize("edit", [("    cases=[", "    cases=[][:0] + ["),  # "all 0 cases pass"
                                  ("def reference(x, y, a):\n", "def reference(x, y, a):\n    return {'out': x}\n")])
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
    # a kernel written in the file changes nothing given: the stub as shipped still reads "not started"
    edited.write_text(source.replace("    pass\n", "    pid = tl.program_id(axis=0)\n", 1))
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
