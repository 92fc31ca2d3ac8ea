"""Shared test plumbing. Importing common.device first picks the mode (GPU or interpreter)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from common.device import DEVICE, INTERPRET, ROOT  # noqa: F401  (before triton)

CHILD_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))


def assert_matches(out: torch.Tensor, ref: torch.Tensor) -> None:
    """torch's default tolerances for the dtype (bf16: 2 of its 8-bit steps)."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref)


def run_trace(module: str, function: str = "trace") -> dict:
    """Run `module.function()` under the interpreter; return every value it showed, by label, in order.

    In a child process with TRITON_INTERPRET=1 (on a GPU machine the mode cannot change once triton
    is imported, and the child keeps the log apart from the tests' own calls).
    """
    code = (
        "import json, importlib, numpy as np\n"
        "from common import trace as t\n"
        f"getattr(importlib.import_module({module!r}), {function!r})()\n"
        "log = {}\n"
        "for k, v in t.LOG: log.setdefault(k, []).append(np.asarray(v).tolist())\n"
        "print('@@JSON@@' + json.dumps(log))\n"
    )
    env = dict(CHILD_ENV, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.split("@@JSON@@")[-1])


# Runs a lesson's main.py as Jupyter or VS Code would: its `# %%` cells in order, in one namespace
# named __main__, without __file__, from the lesson's own folder, with a kernel's arguments on the
# command line (which are not the lesson's). Like IPython, it files each cell's source under a name
# of its own in linecache, where inspect (and so @triton.jit, which reads a kernel's source) finds it.
NOTEBOOK = """
import linecache, pathlib, re, sys
sys.argv = ["ipykernel_launcher.py", "-f", "/tmp/kernel-1234.json"]
source = pathlib.Path("main.py").read_text()
cells = re.split(r"^# %%.*$", source, flags=re.M)
namespace = {"__name__": "__main__"}
for i, cell in enumerate(cells):
    print(f"@@CELL {i}@@")
    name = f"<ipython-input-{i}>"
    linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
    exec(compile(cell, name, "exec"), namespace)
"""


def run_as_notebook(lesson: str) -> list[str]:
    """What each cell of lesson/main.py printed, run as a notebook does (NOTEBOOK above), in order."""
    out = subprocess.run([sys.executable, "-c", NOTEBOOK], cwd=os.path.join(ROOT, lesson), env=CHILD_ENV,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    return out.stdout.split("@@CELL ")[1:]


def run_script(lesson: str, *argv: str) -> subprocess.CompletedProcess:
    """`python lesson/main.py *argv` from the repository's root."""
    return subprocess.run([sys.executable, os.path.join(lesson, "main.py"), *argv], cwd=ROOT, env=CHILD_ENV,
                          capture_output=True, text=True)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_addoption(parser):
    parser.addoption("--all-configs", action="store_true",
                     help="tests/test_gpus.py: compile every kernel in every configuration for every GPU (minutes)")
