"""Shared test plumbing. Importing common.device first picks the mode (GPU or interpreter)."""
import os

import pytest
import torch

from common.device import DEVICE, INTERPRET, ROOT  # noqa: F401  (before triton)
from common import child, trace

TESTS = os.path.dirname(os.path.abspath(__file__))


def assert_matches(out: torch.Tensor, ref: torch.Tensor) -> None:
    """torch's default tolerances for the dtype (bf16: 2 of its 8-bit steps)."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref)


def run_trace(module: str, function: str = "trace") -> dict:
    """Run `module.function()` under the interpreter; return every value it showed, by label, in order
    (common.trace.logged: here on a CPU, on a GPU machine in the interpreter's child process)."""
    if INTERPRET:
        return trace.logged(module, function)
    return child.run("common.trace:logged", dict(module=module, function=function), interpret=True, keep=True)[1]


def run_as_notebook(lesson: str) -> list[str]:
    """What each cell of lesson/main.py printed, run as a notebook does (tests/notebook.py), in order.
    Under the interpreter on any machine: the notebook's shape is the test; a GPU's timings are not."""
    printed, _ = child.run("notebook:cells", dict(lesson=lesson), interpret=True, path=(TESTS,))
    return printed.split("@@CELL ")[1:]


def run_script(lesson: str, *argv: str):
    """`python lesson/main.py *argv` from the repository's root."""
    return child.script(os.path.join(lesson, "main.py"), *argv)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_addoption(parser):
    parser.addoption("--all-configs", action="store_true",
                     help="tests/test_gpus.py: compile every kernel in every configuration for every GPU (minutes)")
