"""A function run in a fresh Python process, and the tables it returns brought back.

Three things in the lessons need a process of their own: a trace on a GPU machine (Triton's
interpreter is chosen once per process, before triton is imported: common/device.py), host
timings (a process that has run torch.profiler or torch.compile pays more per call on the host,
PyTorch's own operators included, and a caller's process usually has done neither), and a section
that measures them. The child imports the function's module by name, so a lesson run as a script
is never imported a second time into its own process. On a GPU a lesson starts such processes
ahead of time (`keep_spare`): as many as its run will use, all at once while its first sections
run, so that no section waits seconds for one to import torch, and none imports while another
section times the host.
"""
import atexit
import json
import os
import subprocess
import sys
import tempfile

from common.device import INTERPRET, ROOT
from common.table import Table

# The child's program. It imports `preload` first (the lesson: torch, triton, the kernels; seconds
# on a GPU machine), then waits for one request on stdin: so a process started ahead of time
# (`keep_spare`) answers at once, and still runs one function only, as a fresh process does.
SERVE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
line = sys.stdin.readline()
if not line:  # the parent ended without a request for this spare
    sys.exit(0)
request = json.loads(line)
r = getattr(importlib.import_module(request["module"]), request["name"])(**request["kwargs"])
if not request["raw"]:  # the Tables returned
    r = r if isinstance(r, (list, tuple)) else [r]
    r = [t.__dict__ for t in r if hasattr(t, "markdown")]
with open(request["path"], "w") as f:
    json.dump(r, f)
"""

_spares: dict = {}  # interpret -> [(an idle process of that mode, what it preloaded), ...], oldest first


def _start(interpret: bool | None, preload: tuple) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    if interpret is not None:
        env["TRITON_INTERPRET"] = "1" if interpret else "0"
    # A child runs one function. The one that calls torch.compile (lesson 1's CUDA-graphs section)
    # compiles one small kernel; inductor would first start its pool of compile workers, a process
    # per core each importing torch, which costs more than it saves there. One thread: in-process.
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return subprocess.Popen([sys.executable, "-c", SERVE, *preload], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True)


def _mode(interpret: bool | None) -> bool | None:
    """None for this process's own mode, however it is asked for: one spare serves both."""
    return None if interpret is None or interpret == INTERPRET else interpret


def keep_spare(interpret: bool | None, preload: tuple = (), count: int = 1) -> None:
    """Start, now, the processes that will serve the next `count` run()s in this mode: they import
    `preload` while this process goes on, and then wait, idle, for their request. (Each Python
    process with torch costs seconds to start; a lesson on a GPU runs several.) After each run()
    in this mode, one more starts if none is left."""
    interpret = _mode(interpret)
    waiting = _spares.setdefault(interpret, [])
    while len(waiting) < count:
        waiting.append((_start(interpret, tuple(preload)), tuple(preload)))


@atexit.register
def _drop_spares() -> None:
    for waiting in _spares.values():
        for process, _ in waiting:
            process.kill()
            process.communicate()
    _spares.clear()


def run(function: str, kwargs: dict | None = None, interpret: bool | None = None, *,
        raw: bool = False) -> tuple[str, list]:
    """function(**kwargs), 'package.module:name', in a new process (under Triton's interpreter if
    `interpret`, compiled if False, as this process if None): (what it printed, the Tables it
    returned, a Table or a list of them; with raw=True, what it returned, as JSON gives it back).
    The process is the spare of that mode if there is one."""
    module, name = function.split(":")
    interpret = _mode(interpret)
    waiting = _spares.get(interpret)
    spare = waiting.pop(0) if waiting else None
    process = spare[0] if spare else _start(interpret, ())
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "tables.json")
        request = json.dumps(dict(module=module, name=name, kwargs=kwargs or {}, path=path, raw=raw))
        out, err = process.communicate(request + "\n")
        if spare:
            keep_spare(interpret, spare[1])  # the next one, while this process goes on
        if process.returncode:
            raise RuntimeError(f"{function} failed in its child process:\n{err}")
        with open(path) as f:
            returned = json.load(f)
        return out, returned if raw else [Table(**t) for t in returned]
