"""A lesson's main.py run as Jupyter or VS Code runs it: its `# %%` cells in order, in one namespace
named __main__, without __file__, from the lesson's own folder, with a kernel's arguments on the
command line (which are not the lesson's). Like IPython, it files each cell's source under a name
of its own in linecache, where inspect (and so @triton.jit, which reads a kernel's source) finds it.
conftest.run_as_notebook calls `cells` in a child process (common/child.py)."""
import linecache
import os
import pathlib
import re
import sys

from common.device import ROOT


def cells(lesson: str) -> None:
    """Run lesson/main.py cell by cell, printing `@@CELL i@@` before each cell's output."""
    os.chdir(os.path.join(ROOT, lesson))
    sys.argv = ["ipykernel_launcher.py", "-f", "/tmp/kernel-1234.json"]
    source = pathlib.Path("main.py").read_text()
    namespace = {"__name__": "__main__"}
    for i, cell in enumerate(re.split(r"^# %%.*$", source, flags=re.M)):
        print(f"@@CELL {i}@@")
        name = f"<ipython-input-{i}>"
        linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
        exec(compile(cell, name, "exec"), namespace)
