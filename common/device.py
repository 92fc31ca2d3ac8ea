"""Where the kernels run: a CUDA GPU if there is one, Triton's interpreter on the CPU if not.

Triton reads TRITON_INTERPRET once, when it is first imported, and `@triton.jit` then builds
either a compiled kernel (GPU) or an interpreted one (numpy on the CPU). So this module must be
imported before triton; every lesson does that in its first lines. An explicit TRITON_INTERPRET
in the environment is respected (=1 forces the interpreter even on a GPU machine).
"""
import functools
import os
import sys

import torch

if "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules and not torch.cuda.is_available():
        raise RuntimeError(
            "triton was imported before common.device, in compiled mode, on a machine without a "
            "CUDA GPU: import common.device first (or set TRITON_INTERPRET=1)."
        )
    os.environ["TRITON_INTERPRET"] = "0" if torch.cuda.is_available() else "1"
# Triton 3.9 warns that the default for fusing a*b+c into one FMA instruction will change;
# keep today's default (fused) so results are the same across versions, and keep the output quiet.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

INTERPRET = os.environ["TRITON_INTERPRET"] == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fix_interpreter_loops() -> None:
    """Triton 3.6's interpreter turns a scalar into a Python int with int(array of shape (1,)),
    which NumPy >= 2.4 refuses: every `for ... in range(0, N, BLOCK)` over a kernel argument N
    fails. Triton 3.9 fixed it; do the same here for older versions."""
    from triton.runtime import interpreter

    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is None:
        return

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


if INTERPRET:
    _fix_interpreter_loops()
    # On a GPU, exp(1000) quietly gives inf and inf/inf NaN. The interpreter computes with numpy,
    # which warns each time; the lessons show such values on purpose, so keep the output clean.
    import warnings

    warnings.filterwarnings("ignore", message="(overflow|invalid value) encountered", category=RuntimeWarning)


@functools.cache
def sm_count() -> int:
    """Streaming multiprocessors: how many programs run at once, roughly (one or a few per SM).
    Under the interpreter there is no GPU; we use an H200's 132 so that launch decisions (and the
    tables that show them) are the same as on the GPU these lessons were measured on."""
    return 132 if INTERPRET else torch.cuda.get_device_properties(0).multi_processor_count


def gpu_name() -> str:
    return "CPU (Triton interpreter)" if INTERPRET else torch.cuda.get_device_name()


def stamp() -> str:
    """What every timing table names: the hardware, the versions, the date."""
    import datetime

    import triton

    return (f"{gpu_name()}, torch {torch.__version__}, triton {triton.__version__}, "
            f"{datetime.date.today().isoformat()}")


def banner() -> str:
    """One line: which mode runs, and what it means for the timings that follow."""
    import triton

    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    if INTERPRET:
        why = "TRITON_INTERPRET=1" if torch.cuda.is_available() else "no CUDA GPU"
        return (f"Mode: {why} -> Triton interpreter on CPU tensors ({versions}). Kernels give "
                "exact results; timings measure the interpreter (numpy), not a GPU.")
    return f"Mode: {gpu_name()} -> compiled Triton kernels ({versions}). Timings are real GPU timings."


def check_tensor(x, name: str, dtypes: tuple, ndim: int | None = None) -> None:
    """Reject bad input with a message that names the problem, before any kernel sees it."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.device.type != DEVICE:
        where = "the CPU (Triton interpreter)" if INTERPRET else "the GPU"
        raise ValueError(f"{name} is on {x.device}, but kernels here run on {where}: "
                         f"move it with {name}.to('{DEVICE}')")
    if x.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} has dtype {str(x.dtype).replace('torch.', '')}; supported: {names}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")


def check_same(a, b, names: str) -> None:
    """Two tensors that a kernel reads side by side: same device, dtype and shape."""
    for x, name in ((a, "first"), (b, "second")):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{names}: the {name} argument must be a torch.Tensor, got {type(x).__name__}")
    if a.device != b.device:
        raise ValueError(f"{names}: tensors on different devices ({a.device} and {b.device})")
    if a.dtype != b.dtype:
        raise TypeError(f"{names}: different dtypes ({a.dtype} and {b.dtype}); cast one first")
    if a.shape != b.shape:
        raise ValueError(f"{names}: different shapes {tuple(a.shape)} and {tuple(b.shape)}")
