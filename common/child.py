"""Child processes: the one place the course starts one.

Three things need a Python process of their own, because of a choice made once per process:
- a trace on a GPU machine: Triton's interpreter is chosen before triton is imported
  (common/device.py), so the interpreter's programs, run in order and printing, need a process
  started with TRITON_INTERPRET=1; and on a CPU, compiling for a GPU (common/ptx.py) needs one
  started with TRITON_INTERPRET=0;
- host timings: a process that has run torch.profiler or torch.compile pays more per call on the
  host, PyTorch's own operators included, and a caller's process usually has done neither;
- a lesson's whole run for its results page (common/results.py): a crash in one, even a CUDA
  error, cannot take the others down.

`run(function, kwargs)` calls 'package.module:name' in a new process and brings back what it printed
and what it returned (JSON, Tables as Tables). The child imports the function's module by name, so
a lesson run as a script is never imported a second time into its own process. keep=True leaves
the process running after it answers, to serve this process's next keep=True run in the same mode:
the traces of a run share one interpreter process, and so do the exercises a test run checks. Each
Python process with torch costs seconds to start; nothing is started before it is needed.
`start` is `run` without the wait (several side by side); `script` runs a file as `python FILE ...`
does, as a learner types it.
"""
import atexit
import json
import os
import signal
import subprocess
import sys
import threading

from common.device import INTERPRET, ROOT
from common.table import Table

# The child's program: it answers the requests that come on stdin, one JSON line each, with one
# JSON line each on the file descriptor it is given (its stdout stays the function's, to capture
# or to pass through).
PROGRAM = """
import contextlib, importlib, io, json, os, sys, traceback
answers = os.fdopen(int(sys.argv[1]), "w")

def plain(value):  # a Table as its fields, lists and tuples as lists, the rest as JSON has it
    if hasattr(value, "markdown"):
        return {"__table__": value.__dict__}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value

for line in sys.stdin:
    request = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    capture = contextlib.ExitStack()
    if request["capture"]:
        capture.enter_context(contextlib.redirect_stdout(out))
        capture.enter_context(contextlib.redirect_stderr(err))
    answer = {}
    with capture:
        try:
            module, name = request["function"].split(":")
            answer["returned"] = plain(getattr(importlib.import_module(module), name)(**request["kwargs"]))
        except BaseException:
            answer["error"] = traceback.format_exc()
    answer.update(printed=out.getvalue(), stderr=err.getvalue())
    answers.write(json.dumps(answer, default=lambda value: None) + "\\n")  # (what JSON cannot hold: None)
    answers.flush()
"""

_kept: dict = {}  # mode -> the process keep=True runs reuse


def _environment(interpret: bool | None, path: tuple) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT, *path, os.environ.get("PYTHONPATH", "")]))
    if interpret is not None:
        env["TRITON_INTERPRET"] = "1" if interpret else "0"
    return env


class Child:
    """A Python process that runs functions on request (started by `start`)."""

    def __init__(self, interpret: bool | None, path: tuple = ()):
        read, write = os.pipe()
        # A child runs a few functions. The one that calls torch.compile compiles one small kernel;
        # inductor would first start its pool of compile workers, a process per core each importing
        # torch, which costs more than it saves there. One thread: in-process.
        env = {"TORCHINDUCTOR_COMPILE_THREADS": "1", **_environment(interpret, path)}
        self.process = subprocess.Popen([sys.executable, "-c", PROGRAM, str(write)], stdin=subprocess.PIPE,
                                        env=env, cwd=ROOT, pass_fds=(write,), text=True)
        os.close(write)
        self.answers = os.fdopen(read)
        self.asked = []

    def ask(self, function: str, kwargs: dict | None = None, capture: bool = True) -> None:
        self.process.stdin.write(json.dumps(dict(function=function, kwargs=kwargs or {}, capture=capture)) + "\n")
        self.process.stdin.flush()
        self.asked.append(function)

    def result(self) -> tuple[str, object]:
        """(what the function printed, what it returned), for the oldest request not yet answered."""
        function = self.asked.pop(0)
        line = self.answers.readline()
        if not line:
            self.close()
            raise RuntimeError(f"{function}: its child process ended with exit code {self.process.returncode}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{function} failed in its child process:\n{answer['stderr']}{answer['error']}")
        return answer["printed"], _tables(answer["returned"])

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()
        self.answers.close()


def _tables(value):
    if isinstance(value, dict) and "__table__" in value:
        return Table(**value["__table__"])
    if isinstance(value, list):
        return [_tables(v) for v in value]
    return value


def _mode(interpret: bool | None) -> bool | None:
    """None for this process's own mode, however it is asked for."""
    return None if interpret is None or interpret == INTERPRET else interpret


def start(function: str, kwargs: dict | None = None, interpret: bool | None = None, *, path: tuple = (),
          capture: bool = True) -> Child:
    """function(**kwargs) in a new process, not waited for: `.result()` waits. interpret: under Triton's
    interpreter if True, compiled if False, as this process if None; path: more folders to import from;
    capture=False lets what it prints through as it prints it."""
    child = Child(_mode(interpret), tuple(path))
    child.ask(function, kwargs, capture)
    return child


def run(function: str, kwargs: dict | None = None, interpret: bool | None = None, *, keep: bool = False,
        path: tuple = (), capture: bool = True) -> tuple[str, object]:
    """function(**kwargs), 'package.module:name', in a new process: (what it printed, what it returned).
    keep=True: in the process an earlier keep=True run of this mode left running, if any, and left
    running for the next."""
    if not keep:
        child = start(function, kwargs, interpret, path=path, capture=capture)
        try:
            return child.result()
        finally:
            child.close()
    kept = prepare(interpret, path)
    while kept.asked:  # prepare's import, a head start only: where it failed, the request's answer says why
        try:
            kept.result()
        except RuntimeError:
            kept = prepare(interpret, path)  # (a new process, if that one ended)
    kept.ask(function, kwargs, capture)
    return kept.result()


def prepare(interpret: bool | None = None, path: tuple = (), module: str | None = None) -> Child:
    """The process keep=True runs of this mode use, started if none is running, without waiting:
    given a module, it imports it (torch, triton, the kernels: seconds) while this process goes on."""
    key = (_mode(interpret), tuple(path))
    if key not in _kept or _kept[key].process.poll() is not None:
        _kept[key] = Child(*key)
        if module:
            _kept[key].ask("importlib:import_module", {"name": module})
    return _kept[key]


@atexit.register
def _close_kept() -> None:
    for child in _kept.values():
        child.close()
    _kept.clear()


def script(path: str, *argv: str, cwd: str = ROOT, env: dict | None = None, timeout: float | None = None,
           each_line=None) -> subprocess.CompletedProcess | None:
    """`python path *argv`, as a learner runs it, from `cwd`, `env` added to the environment: its exit
    code, stdout and stderr; None if it ran past `timeout` seconds (it and its children are stopped).
    each_line(line): called with each line it prints, as it prints it."""
    stopped, out, err = [], [], []
    with subprocess.Popen([sys.executable, path, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env={**_environment(None, ()), **(env or {})}, text=True, start_new_session=True) as process:

        def stop():  # its session: the lesson's own child processes too
            try:
                os.killpg(process.pid, signal.SIGKILL)
                stopped.append(True)
            except ProcessLookupError:  # (it ended as the time ran out)
                pass

        timer = threading.Timer(timeout or 0, stop)
        if timeout:
            timer.start()
        reader = threading.Thread(target=lambda: err.append(process.stderr.read()))  # (both pipes drained at once)
        reader.start()
        for line in process.stdout:
            out.append(line)
            if each_line is not None:
                each_line(line)
        reader.join()
        process.wait()
        timer.cancel()
    return None if stopped else subprocess.CompletedProcess(process.args, process.returncode, "".join(out), err[0])
