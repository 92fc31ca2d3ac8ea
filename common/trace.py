"""Printing from inside a kernel, for the step-by-step traces.

A kernel traces itself through a flag: `TRACE: tl.constexpr`. When it is False (always, in the
launchers), `if TRACE:` branches are removed at compile time and cost nothing. When it is True the
kernel must run under Triton's interpreter: the programs then run one after another, in order,
and `show(...)` prints the values each program holds, as numbers.

Triton's JIT refuses calls to ordinary Python functions inside a kernel; wrapping `show` in
`tl.constexpr` passes that check, and the compiled path never reaches the call anyway.
"""
import numpy as np

import common.device  # noqa: F401  (chooses the mode before triton is imported)
import triton.language as tl

LOG: list[tuple[str, object]] = []  # every value shown, in order, so tests can check the numbers


def value_of(x):
    """A plain Python / numpy value for a Triton tensor (interpreter), a torch tensor or a number;
    element-wise for a tuple (show("program", (pid_m, pid_n)) prints "(1, 0)")."""
    if isinstance(x, tuple):
        return tuple(value_of(v) for v in x)
    if hasattr(x, "handle"):  # a triton.language tensor under the interpreter
        data = np.asarray(x.handle.data)
        return data.reshape(x.shape).item() if len(x.shape) == 0 else data.reshape(x.shape)
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return x


def fmt(v, precision: int = 4) -> str:
    v = value_of(v)
    if isinstance(v, np.ndarray):
        return np.array2string(v, precision=precision, suppress_small=True, threshold=16,
                               edgeitems=3, max_line_width=100, separator=", ")
    if isinstance(v, (float, np.floating)):
        return f"{v:.{precision}g}"
    return str(v)


class Show:
    """show(label, value, indent=4): print a value (and keep it in LOG)."""

    def __call__(self, label, value, indent: int = 4):
        v = value_of(value)
        LOG.append((label, v))
        text = fmt(v)
        pad = " " * indent
        if "\n" in text:
            text = text.replace("\n", "\n" + pad + " " * (len(label) + 3))
        print(f"{pad}{label} = {text}")

    def __repr__(self):
        # torch.compile copies the global constants a kernel names into the code it generates, as
        # `show = tl.constexpr(<repr>)`: the repr must be valid Python. That code runs with TRACE off,
        # where show is never called, so print stands in for it.
        return "print"

    def __eq__(self, other):  # Triton checks that a kernel's globals keep their values: one show is the same as another
        return isinstance(other, Show)

    def __hash__(self):
        return hash(Show)


show = tl.constexpr(Show())



def logged(module: str, function: str = "trace") -> dict:
    """Run `module.function()` (a trace, under the interpreter); return every value it showed, by
    label, in order, as lists of plain numbers (what the tests check a trace by)."""
    import importlib

    LOG.clear()
    getattr(importlib.import_module(module), function)()
    log = {}
    for label, value in LOG:
        log.setdefault(label, []).append(np.asarray(value).tolist())
    return log
