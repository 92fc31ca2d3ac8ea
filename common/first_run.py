"""How long a newcomer waits: each lesson's default run on a fresh GPU, timed.

    python -m common.first_run                      # every lesson; or name some (their rows replaced)
    python -m common.first_run --record lesson05_flash_attention   # the picks of common/tuned.py, recorded

Each lesson runs as a learner first runs it, `python lessonNN_*/main.py`, in a process of its own
with empty caches: a fresh TRITON_CACHE_DIR (Triton's compiled kernels, and the autotuners' picks
that cache_results keeps) and TORCHINDUCTOR_CACHE_DIR (torch.compile's). So every kernel compiles,
and every autotuner times its list for each key that common/tuned.py has no pick for on this GPU
model. The wall clock of the whole run (the interpreter's start and the imports included), the
kernels compiled and the autotuner keys timed (files in the fresh Triton cache) and the slowest
sections (timed from the headings the run prints) are printed, and written to FIRST_RUN.md with the
machine's stamp; every section's time is printed too. --record: the runs with COURSE_RECORD_PICKS=1,
which time every key (no pick used) and record the picks (common/tuned.py); their table is printed
only.
"""
import os
import sys
import tempfile
import time

from common import child
from common.device import ROOT
from common.results import LESSONS, machine_stamp, read_page, read_tables, refusal, stamp_table
from common.table import Table, print_table

LIMIT = 600  # seconds a lesson may take before it is stopped (its row says so)


def first_run(lesson: str, record: bool = False) -> tuple:
    """(seconds, exit code or 'stopped', kernels compiled, autotuner keys timed, {section number: seconds})
    of the lesson's default run. A section's seconds: from its heading (=== N. ... ===) to the next
    one's, or the end of the run."""
    headings = [(0.0, "start")]

    def stamp(line: str) -> None:
        if line.startswith("=== "):
            headings.append((time.perf_counter() - start, line.split()[1].rstrip(".")))

    with tempfile.TemporaryDirectory() as triton_cache, tempfile.TemporaryDirectory() as inductor_cache:
        env = dict(TRITON_CACHE_DIR=triton_cache, TORCHINDUCTOR_CACHE_DIR=inductor_cache,
                   **({"COURSE_RECORD_PICKS": "1"} if record else {}))
        start = time.perf_counter()
        done = child.script(os.path.join(ROOT, lesson, "main.py"), env=env, timeout=LIMIT, each_line=stamp)
        seconds = time.perf_counter() - start
        files = [name for _, _, names in os.walk(triton_cache) for name in names]
    if done is not None and done.returncode != 0:
        print(f"{lesson} failed; the end of what it printed to stderr:\n{done.stderr[-3000:]}")
    compiled = sum(name.endswith(".cubin") for name in files)
    timed = sum(name.endswith(".autotune.json") for name in files)
    ends = [t for t, _ in headings[1:]] + [seconds]
    sections = {name: end - t for (t, name), end in zip(headings, ends)}
    return seconds, "stopped" if done is None else done.returncode, compiled, timed, sections


def main(argv: list) -> int:
    record = "--record" in argv
    lessons = [name for name in argv if name != "--record"] or LESSONS
    problem = refusal(lessons, "common.first_run")
    if problem:
        print(problem)
        return 2
    rows = []
    for name in lessons:
        seconds, code, compiled, timed, sections = first_run(name, record)
        slowest = sorted(sections, key=sections.get, reverse=True)[:3]
        rows.append((name, seconds, code, compiled, timed, ", ".join(f"{s}: {sections[s]:.0f}" for s in slowest)))
        print(f"{name}: {seconds:.0f} s, exit code {code}; every section's seconds: "
              + ", ".join(f"{s}: {t:.0f}" for s, t in sections.items()), flush=True)
    table = print_table(rows, ["lesson", "seconds", "exit code", "kernels compiled", "autotuner keys timed",
                               "slowest sections: seconds"],
                        floatfmt=".0f", title="A lesson's default run on a fresh GPU"
                                              + (", every key timed and its pick recorded" if record else ""),
                        note="`python LESSON/main.py` in a fresh process, with empty Triton and Inductor caches; "
                             "seconds: the whole run's wall clock. Kernels compiled: the cubins the run left in its "
                             "Triton cache; keys timed: the autotuner keys it timed (the others took a pick of "
                             "common/tuned.py). Slowest sections: by their numbers in the chapter, each from its "
                             "heading to the next ('start': the imports and the banner, up to the first heading). "
                             f"'stopped': still running after {LIMIT} s.")
    if not record:
        write(table)
    return 0 if all(row[2] == 0 for row in rows) else 1


def write(table: Table) -> None:
    """FIRST_RUN.md: the table, and the rows of the lessons it lacks from the page as it was, where that
    page was measured on the same GPU, driver, CUDA, torch and triton (a run of some lessons refreshes
    their rows: a device's time limit may not hold every lesson's run in one)."""
    path = os.path.join(ROOT, "FIRST_RUN.md")
    stamp, page = machine_stamp(ceilings=False), read_page(path)
    rows = {row[0]: list(row) for row in table.rows}
    if page and all(page["stamp"].get(key) == str(stamp[key]) for key in ("GPU", "driver", "CUDA", "torch", "triton")):
        with open(path) as f:
            for old in read_tables(f.read())[0]["rows"]:
                rows.setdefault(old["lesson"], [old.get(header, "") for header in table.headers])
    table.rows = [rows[name] for name in LESSONS if name in rows]
    lines = ["# A first run on a fresh GPU", "",
             "Measured by `python -m common.first_run` (see the README and common/first_run.py) on the machine "
             "below; `python -m common.first_run LESSON` measures that lesson again, its row replaced.", "",
             *stamp_table(stamp), "",
             f"### {table.title}", "", table.note, "", table.markdown(), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
