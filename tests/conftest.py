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


def parse_command_line(lesson: str, *argv: str) -> tuple:
    """lesson/main.py's command line read in this process, by the parser its script runs, without
    running the lesson (a process each would cost seconds): (exit code, what it printed, its errors)."""
    import contextlib
    import importlib
    import io

    parser = importlib.import_module(f"{lesson}.main").chapter.parser
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            parser.parse_args(list(argv))
            code = 0
        except SystemExit as done:
            code = done.code
    return code, out.getvalue(), err.getvalue()


# The matmuls of lesson 6's step at GPT-2 small (16384 tokens), as lesson 4's TMA kernel takes them:
# (M, N, K, activation, C's dtype (None: the inputs'), A_T, B_T). A forward x @ W^T reads W as it
# lies (B_T), dX = dY @ W reads both as they lie, a weight's gradient dY^T @ X (out x in, as W lies)
# reads dY^T (A_T), written in bfloat16 or, for lesson 6's float32 weights, float32.
LESSON6_PRODUCTS = [
    *[(16384, n, k, None, None, False, True) for k, n in ((768, 1280), (768, 768), (768, 3072), (3072, 768))],
    (16384, 3072, 768, "gelu", None, False, True), (16384, 3072, 768, "gelu_backward", None, False, True),
    *[(16384, k, n, None, None, False, False) for k, n in ((768, 1280), (768, 3072), (3072, 768))],
    *[(n, k, 16384, None, out, True, False) for k, n in ((768, 1280), (768, 768), (768, 3072), (3072, 768))
      for out in (None, torch.float32)]]


def as_on_an_h100(monkeypatch, hopper) -> None:
    """lesson 4's hopper choosing as on an H100 or H200 (132 SMs, 227 KB of shared memory), on any machine."""
    monkeypatch.setattr(hopper, "INTERPRET", False)
    monkeypatch.setattr(hopper, "sm_count", lambda: 132)
    monkeypatch.setattr(hopper, "shared_memory", lambda: 227 << 10)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_addoption(parser):
    parser.addoption("--all-configs", action="store_true",
                     help="tests/test_gpus.py: compile every kernel in every configuration for every GPU (minutes)")


# tests/test_gpus.py compiles hundreds of kernels for seven GPUs (minutes of work for every core).
# Under pytest-xdist the controller process, idle while its workers test, starts that at once, in
# the background, and leaves the results in a file the workers' fixture waits for; without xdist the
# fixture compiles them itself.
COMPILED = "LESSONS_TEST_GPUS_COMPILED"  # the file's path, for the workers (they inherit it)
_background = []


def pytest_sessionstart(session):
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return  # a worker, or no workers
    if config.args and not any("test_gpus" in arg or os.path.abspath(arg) in (TESTS, ROOT) for arg in config.args):
        return  # test_gpus.py is not in this run
    import json
    import tempfile
    import threading

    import test_gpus  # (tests/ is on the path: this file's folder)
    from common import ptx

    todo = list(test_gpus.jobs(config.getoption("--all-configs")).values())
    path = os.path.join(tempfile.mkdtemp(prefix="test-gpus-"), "compiled.json")
    os.environ[COMPILED] = path

    def compile_all():
        try:
            results = ptx.compile_kernels(todo, processes=min(16, os.cpu_count() or 1))
        except Exception as error:  # noqa: BLE001  (the workers' fixture raises it)
            results = {"error": f"{type(error).__name__}: {error}"}
        with open(path + ".part", "w") as f:
            json.dump(results, f)
        os.replace(path + ".part", path)  # whole or not there

    _background.append(threading.Thread(target=compile_all, daemon=True))
    _background[0].start()


def pytest_sessionfinish(session):
    for thread in _background:  # its child processes end with it
        thread.join()
