"""What Triton's interpreter needs here, so that the kernels themselves carry no workaround.

Imported by common.device when the kernels run under the interpreter (numpy on the CPU):
- a fix for loops over kernel arguments with triton 3.6 and NumPy >= 2.4;
- float32 -> bfloat16 rounded to nearest, as a GPU does (the interpreter truncates);
- a helper's call patched once: the interpreter redoes, at every call of a @triton.jit helper from
  inside a kernel, the patching of triton.language that the launch already did (a third of a
  lesson's check time);
- NumPy's overflow, invalid-value and divide-by-zero warnings silenced where the interpreter's
  own arithmetic raises them (a GPU gives inf, or a NaN in lanes the mask then drops, quietly):
  the lessons' correct kernels do all three (gelu's exp(-2u) for very negative u; -inf - -inf in
  the padded rows of a softmax block; log(0) in those of a cross-entropy). Only there: the same
  warning from any other code still shows;
- and one rule the launchers follow (common.device.interpretable): NumPy has no bfloat16, so the
  interpreter holds bf16 values as raw 16-bit integers, and arithmetic or tl.dot on them gives
  garbage (about 1e10 for a dot of unit normals). Handed float32 copies instead, the kernels
  compute exactly; on a GPU they compute on bf16 directly.
"""
import warnings

from triton.runtime import interpreter


def _fix_loops() -> None:
    """Triton 3.6's interpreter turns a scalar into a Python int with int(array of shape (1,)),
    which NumPy >= 2.4 refuses: every `for ... in range(0, N, BLOCK)` over a kernel argument N
    fails. Triton 3.9 fixed it; do the same here for older versions."""
    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is None:
        return

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


def _round_bfloat16() -> None:
    """The interpreter turns float32 into bfloat16 by dropping the low 16 bits (rounding toward
    zero); a GPU rounds to nearest (even). Toward zero doubles the error of every bf16 result and
    biases it, enough to show in a gradient where terms cancel. Round to nearest here too."""
    builder = getattr(interpreter, "InterpreterBuilder", None)
    cast = getattr(builder, "cast_impl", None)
    if cast is None:
        return
    import numpy as np
    import triton.language as tl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            bits = np.ascontiguousarray(src.data, dtype=np.float32).view(np.uint32)
            rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
            nan = np.isnan(src.data)  # keep NaN a NaN (rounding could carry it into inf)
            out = np.where(nan, np.uint32(0x7FC0), rounded).astype(np.uint16)
            return interpreter.TensorHandle(out, dst_type.scalar)
        return cast(self, src, dst_type)

    builder.cast_impl = cast_impl


def _patch_once() -> None:
    """To run a kernel, the interpreter swaps the functions of the triton.language modules the
    kernel's file names (tl, tl.core) for its own, walking them with inspect.getmembers, and swaps
    them back when the launch ends. It walks them again at every call of a @triton.jit helper from
    inside the kernel (lesson 5's attend, its backward's dkdv_blocks: hundreds per check), where
    they are swapped already: lesson 5's check spent a third of its time there. Here a launch walks
    each module once: a helper whose file names only modules swapped already skips the walk (one
    that names another, as Triton's own tl.zeros names tl.core, still gets it), and the launch
    swaps everything back at its end. triton 3.6 to 3.9 alike: the launch keeps what _patch_lang
    returns and restores it; a helper's call drops it."""
    patch_lang = getattr(interpreter, "_patch_lang", None)
    if patch_lang is None:
        return
    import inspect

    import triton.language as tl

    current = []  # the launch in progress, if any (the interpreter runs one kernel at a time)

    class Launch:  # what a launch patched, in order, all restored when it ends
        def __init__(self):
            self.scopes, self.modules = [], set()

        def patch(self, fn, modules):
            self.scopes.append(patch_lang(fn))
            self.modules |= modules

        def restore(self):
            current.clear()
            for scope in reversed(self.scopes):
                scope.restore()

    def patched(fn):
        modules = {id(value) for value in fn.__globals__.values()
                   if inspect.ismodule(value) and (value is tl or value is tl.core)}
        if not current:  # a launch: it restores what this returns when it ends
            current.append(Launch())
            current[0].patch(fn, modules)
            return current[0]
        if not modules <= current[0].modules:  # a helper naming a module not patched yet
            current[0].patch(fn, modules)
        return None  # a helper's call drops what this returns

    interpreter._patch_lang = patched


_fix_loops()
_round_bfloat16()
_patch_once()
warnings.filterwarnings("ignore", message="(overflow|invalid value|divide by zero) encountered",
                        category=RuntimeWarning, module=r"triton\.runtime\.interpreter")

