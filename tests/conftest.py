"""Shared test plumbing. Importing common.device first picks the mode (GPU or interpreter)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from common.device import DEVICE, INTERPRET, ROOT  # noqa: F401  (before triton)


def assert_matches(out: torch.Tensor, ref: torch.Tensor) -> None:
    """torch's default tolerances for the dtype (bf16: 2 of its 8-bit steps)."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref)


def run_trace(module: str) -> dict:
    """Run `module.trace()` under the interpreter; return every value it showed, by label, in order.

    Here when this process is the interpreter; on a GPU machine in a child process with
    TRITON_INTERPRET=1 (the mode cannot change once triton is imported).
    """
    code = (
        "import json, importlib, numpy as np\n"
        "from common import trace as t\n"
        f"importlib.import_module({module!r}).trace()\n"
        "log = {}\n"
        "for k, v in t.LOG: log.setdefault(k, []).append(np.asarray(v).tolist())\n"
        "print('@@JSON@@' + json.dumps(log))\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.split("@@JSON@@")[-1])


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
