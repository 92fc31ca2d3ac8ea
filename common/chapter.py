"""A lesson's run: its sections in reading order, its command line, and what a CPU shows where a
GPU is needed.

Each lesson's main.py is a chapter in `# %%` cells. Its first cells declare the sections, in the
order they are read, and parse the command line:

    SECTIONS = {"trace": "2. The trace: add_kernel, program by program", ...}
    chapter = Chapter("lesson01_vector_add", __doc__, SECTIONS, running=__name__ == "__main__")
    args = chapter.start()

and the cell after each section's code runs it:

    chapter.run("check", check)

The same cells run as a script (`python lesson01_vector_add/main.py --sections check`), as a
notebook (Jupyter or VS Code: every section, in order, each one's output under its cell) and on
import (the tests: nothing runs, `args` holds the defaults). `run` prints the section's heading,
numbered as in the code, runs it and keeps the tables it returns (`python -m common.results`
writes them to RESULTS.md). Three kinds of section are run differently:
- trace=True: the trace prints from inside the kernel, program after program, which only Triton's
  interpreter does. On a GPU machine this process has triton in compiled mode already (the mode
  is chosen once, before triton is imported: common/device.py), so the trace runs in a child
  process with TRITON_INTERPRET=1 (one for all the run's traces), and its output is printed here.
- gpu=True: the section times kernels or asks the profiler which kernels ran, which means nothing
  under the interpreter. Without a GPU, the runner prints the section as RESULTS.md recorded it on
  a GPU instead, with that machine's stamp once per run; stand_in names the recorded tables
  that stand in for it (by words of their titles: a sweep of many rows can stay on the page).
- full=True: a sweep (many configurations, each compiled and timed: minutes on a fresh GPU) that
  runs with --full only; a default run prints RESULTS.md's record of it, as a CPU does.
- fresh=True: the section times what a call costs the host, which a process that has run the
  profiler or torch.compile pays more for: it runs in a fresh process.
A default run on a GPU so starts two processes at most: the traces' (at the start of a run that
includes the section named "trace": it imports the lesson while the sections before it run) and
the host table's.
"""
import argparse
import os
import re
import sys

import torch

from common import child
from common.device import INTERPRET, ROOT, gpu_name
from common.results import read_page
from common.table import Table


def banner() -> str:
    """One line: which mode runs, and what it means for what follows."""
    import triton

    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    if INTERPRET:
        why = "TRITON_INTERPRET=1" if torch.cuda.is_available() else "no CUDA GPU"
        return (f"Mode: {why} -> Triton's interpreter on CPU tensors ({versions}). The kernels give exact results and "
                "print their traces; the sections that need a GPU show the tables a GPU recorded (RESULTS.md).")
    return f"Mode: {gpu_name()} -> compiled Triton kernels ({versions}). Timings are this GPU's."


def positive_int(text: str) -> int:
    """An argparse type: a size must be a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a size: it must be at least 1")
    return value


def shape_arg(text: str) -> tuple[int, int]:
    """An argparse type: 'MxN', two whole numbers >= 1."""
    parts = text.lower().split("x")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape: write rows x columns, e.g. 4096x16384")
    return tuple(positive_int(part) for part in parts)


class Chapter:
    def __init__(self, lesson: str, doc: str, sections: dict, running: bool):
        """lesson: the package ("lesson01_vector_add"); doc: main.py's docstring; sections: {name:
        heading}, in reading order; running: whether the cells should run (the module is __main__:
        a script or a notebook), not just define things (an import)."""
        self.lesson, self.doc, self.sections, self.running = lesson, doc, sections, running
        listing = "; ".join(f"{name}: {heading}" for name, heading in sections.items())
        self.parser = argparse.ArgumentParser(description=doc.split("\n")[0], epilog=f"Sections: {listing}.")
        self.parser.add_argument("--sections", nargs="+", default=list(sections), choices=list(sections),
                                 metavar="SECTION", help="what to run (default: all of them, in reading order)")
        self.parser.add_argument("--skip", nargs="+", default=[], choices=list(sections), metavar="SECTION",
                                 help="sections to leave out")
        self.parser.add_argument("--full", action="store_true",
                                 help="on a GPU, the full sweeps of RESULTS.md instead of a quick look (minutes)")
        self.args = None
        self.tables: dict[str, list[Table]] = {}  # the titled tables each section returned, for RESULTS.md
        self.stamped = False  # the recorded page's stamp printed already (once per run)

    def start(self) -> argparse.Namespace:
        """Parse the command line, when this lesson is the script being run (a notebook's kernel has
        arguments of its own, which are not the lesson's); print the banner when running."""
        script = os.path.realpath(os.path.join(ROOT, self.lesson, "main.py"))
        as_script = self.running and os.path.realpath(sys.argv[0]) == script
        self.args = self.parser.parse_args(sys.argv[1:] if as_script else [])
        self.args.sections = [s for s in self.args.sections if s not in self.args.skip]
        if self.running and not INTERPRET and "trace" in self.args.sections:
            child.prepare(interpret=True, module=f"{self.lesson}.main")  # the traces' process: it imports the
            # lesson (seconds) while the sections before the first trace run here
        if self.running:
            print(banner())
        return self.args

    def sizes(self, table: dict):
        """The lesson's sizes for this run: table["full"] with --full, table["quick"] otherwise."""
        return table["full" if self.args.full else "quick"]

    def run(self, name: str, section, *, gpu: bool = False, trace: bool = False, fresh: bool = False,
            full: bool = False, stand_in: tuple | None = None) -> None:
        """Run section() under its heading, if this run includes it, and keep the tables it returns.
        gpu: it needs a CUDA GPU (without one, RESULTS.md's record of it is printed: the tables whose
        titles hold one of the words in stand_in, every table by default); trace: it runs
        under the interpreter (in a child process on a GPU machine); fresh: it runs in a fresh
        process (host timings: a process that has run the profiler pays more per call); full: it runs
        with --full only (a sweep; otherwise the record is printed, as without a GPU). A section
        run in a child process must be a function of the module, without arguments."""
        heading = self.sections[name]  # (a KeyError here: the name is not in SECTIONS)
        if not self.running or name not in self.args.sections:
            return
        print(f"\n=== {heading} ===")
        if (gpu and INTERPRET) or (full and not self.args.full):
            return self.recorded(name, stand_in, why="needs a GPU" if INTERPRET else "is a sweep that --full runs")
        if (trace and not INTERPRET) or fresh:
            result = self.in_child(section, trace=trace)
        else:
            result = section()
        tables = result if isinstance(result, (list, tuple)) else [result]
        self.tables[name] = [t for t in tables if isinstance(t, Table) and t.title]

    def recorded(self, name: str, stand_in: tuple | None = None, why: str = "needs a GPU") -> None:
        """Print section `name` as this lesson's RESULTS.md recorded it, the page's stamp the first time:
        its tables whose titles hold one of the words in stand_in (all of them by default), and the
        titles of the others. why: what keeps the section from running here."""
        path = os.path.join(ROOT, self.lesson, "RESULTS.md")
        page = read_page(path)
        block = page and page["sections"].get(name)
        where = os.path.relpath(path, ROOT)
        if not block:
            print(f"This section {why}, and {where} has no record of it yet: `python -m common.results "
                  f"{self.lesson}` on a GPU writes it.")
            return
        left = ""
        if stand_in is not None:  # the tables whose titles hold one of its words, and what precedes them
            parts = re.split(r"^(?=### )", block, flags=re.M)
            shown = [p for p in parts if not p.startswith("### ") or any(w in p.split("\n")[0] for w in stand_in)]
            left = "; ".join(p.split("\n")[0][4:] for p in parts if p not in shown)
            if not any(p.startswith("### ") for p in shown):  # none (a sweep of many rows, say): where they are
                print(f"This section {why}. {where} records what it printed on a GPU: {left}.")
                return
            block = "".join(shown).rstrip("\n")
        if not self.stamped:
            print(f"This section {why}. What it printed on {page['stamp'].get('GPU', 'a GPU')}, recorded in "
                  f"{where} (the machine, once for this run):\n" + "\n".join(page["stamp_lines"]) + "\n")
            self.stamped = True
        else:
            print(f"This section {why}. What it printed there ({where}):\n")
        print("\n".join(line for line in block.splitlines() if not line.startswith("![")))
        if left:
            print(f"Also recorded there: {left}.")

    def in_child(self, section, trace: bool) -> list:
        """Run section() in a child process: a trace under Triton's interpreter, in the process the
        run's traces share; otherwise in a fresh one. Print what it printed; return its tables."""
        module = section.__module__ if section.__module__ != "__main__" else f"{self.lesson}.main"
        if section.__name__ == "<lambda>":
            raise TypeError("a section run in a child process must be a function of the module, not a lambda")
        printed, returned = child.run(f"{module}:{section.__name__}", interpret=True if trace else None, keep=trace)
        print(printed, end="")
        return [t for t in (returned if isinstance(returned, list) else [returned]) if isinstance(t, Table)]

    def results(self) -> list:
        """[(name, heading, tables)] of the sections that returned tables, in reading order."""
        return [(name, heading, self.tables[name]) for name, heading in self.sections.items() if self.tables.get(name)]


def add_compile_option(parser: argparse.ArgumentParser) -> None:
    """--compile / --no-compile: include torch.compile in a GPU section's comparisons (compiling takes
    seconds per shape)."""
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                        help="include torch.compile in the GPU comparisons (default: yes)")
