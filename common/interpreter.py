"""What Triton's interpreter needs here, so that the kernels themselves carry no workaround.

Imported by common.device when the kernels run under the interpreter (numpy on the CPU):
- a fix for loops over kernel arguments with triton 3.6 and NumPy >= 2.4;
- NumPy's overflow warnings silenced (a GPU gives inf quietly; the lessons show such values);
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


_fix_loops()
warnings.filterwarnings("ignore", message="(overflow|invalid value) encountered", category=RuntimeWarning)

