"""The exercises, and proof that their checker can fail: every stub as shipped is "not started",
every solution passes every stage, every wrong solution shipped beside it (the mistakes learners
make) fails at the stage, and with the phrase, that it names; stub and solution take the same
arguments. Then the checker's command line: hints one at a time, the progress table."""
import inspect
import os

import pytest

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


def checker_lessons():
    from common.results import LESSONS

    return LESSONS


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
    assert ex.main([]) == 1  # the stub: not started, and recorded as tried
    checker.progress_table()
    table = capsys.readouterr().out
    assert f"exercises/{name}.py" in table and "tried" in table and f"{len(ex.hints)} of {len(ex.hints)}" in table


def test_an_exercise_file_runs_as_a_script():
    lesson, name, _ = EXERCISES[0]
    path = os.path.join(ROOT, lesson, "exercises", f"{name}.py")
    stub = child.script(path)
    assert stub.returncode == 1 and "not started" in stub.stdout
    solution = child.script(path, "--solution")
    assert solution.returncode == 0 and "PASSED" in solution.stdout, solution.stdout + solution.stderr
