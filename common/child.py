"""A function run in a fresh Python process, and the tables it returns brought back.

Three things in the lessons need a process of their own: a trace on a GPU machine (Triton's
interpreter is chosen once per process, before triton is imported: common/device.py), host
timings (a process that has run torch.profiler or torch.compile pays more per call on the host,
PyTorch's own operators included, and a caller's process usually has done neither), and a section
that measures them. The child imports the function's module by name, so a lesson run as a script
is never imported a second time into its own process.
"""
import json
import os
import subprocess
import sys
import tempfile

from common.device import ROOT
from common.table import Table


def run(function: str, kwargs: dict | None = None, interpret: bool | None = None) -> tuple[str, list]:
    """function(**kwargs), 'package.module:name', in a new process (under Triton's interpreter if
    `interpret`, compiled if False, as this process if None): (what it printed, the Tables it
    returned, a Table or a list of them)."""
    module, name = function.split(":")
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    if interpret is not None:
        env["TRITON_INTERPRET"] = "1" if interpret else "0"
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "tables.json")
        code = (f"import json, {module} as m\n"
                f"r = m.{name}(**json.loads({json.dumps(json.dumps(kwargs or {}))}))\n"
                "r = r if isinstance(r, (list, tuple)) else [r]\n"
                f"with open({path!r}, 'w') as f:\n"
                "    json.dump([t.__dict__ for t in r if hasattr(t, 'markdown')], f)\n")
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{function} failed in its child process:\n{done.stderr}")
        with open(path) as f:
            return done.stdout, [Table(**t) for t in json.load(f)]
