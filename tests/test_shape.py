"""The course's one op shape, held: how many of the course's frames a call passes on its way to a
kernel, and which files import which.

From a model's op to its kernel a call passes at most 3 of the course's frames, forward and backward
alike: the public op (its checks and its route), an autograd function, the launcher with
`kernel[grid](...)` (DESIGN.md, rule 2). Files import one way: common/ <- a lesson's op files <- its
chapter (main.py) <- exercises and tests; a lesson's op files import common/ and their own lesson's
op files (and an earlier lesson's op file where a kernel is reused: lesson 1's GELU in lesson 4's
epilogue); lessons 6 and 7 import op files only; nothing imports a chapter but exercises and tests (rule 1).
"""
import ast
import os
import subprocess
import sys

import pytest
import torch

from conftest import DEVICE, INTERPRET, ROOT
from lesson01_vector_add.elementwise import add, gelu
from lesson02_softmax.cross_entropy import cross_entropy
from lesson02_softmax.softmax import softmax
from lesson03_rowsum.rmsnorm import rms_norm
from lesson03_rowsum.row_sum import row_sum
from lesson04_matmul.hopper import HOPPER
from lesson04_matmul.matmul import matmul
from lesson05_flash_attention.attention import attention, attention_qkv

LESSONS = sorted(name for name in os.listdir(ROOT) if name.startswith("lesson") and os.path.isdir(os.path.join(ROOT, name)))
COURSE = {"common", *LESSONS}  # the course's folders
MOST_FRAMES = 3


def course_frames_at_each_launch(fn, folders=COURSE) -> list[list[str]]:
    """Run fn(); at each `kernel[grid]` (triton's KernelInterface.__getitem__), the course's frames on
    the stack below the caller of fn (those of files in `folders`), innermost first, as 'file:function'."""
    jit = os.path.join("triton", "runtime", "jit.py")
    top = sys._getframe()
    stacks = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "__getitem__" and frame.f_code.co_filename.endswith(jit):
            names, f = [], frame.f_back
            while f is not None and f is not top:
                path = os.path.relpath(f.f_code.co_filename, ROOT)
                if path.split(os.sep)[0] in folders:  # (not the tests, not a virtual environment inside ROOT)
                    names.append(f"{path}:{f.f_code.co_name}")
                f = f.f_back
            stacks.append(names)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return stacks


def forward_and_backward(op, *shapes, dtype=torch.float32):
    """fn() for course_frames_at_each_launch: op on fresh inputs that require grad, then its backward."""
    def run():
        leaves = [torch.randn(shape, device=DEVICE, dtype=dtype, requires_grad=True) for shape in shapes]
        out = op(*leaves)
        out = out if isinstance(out, torch.Tensor) else sum(o.float().sum() for o in out)
        out.backward(torch.ones_like(out))
    return run


# name: fn() that calls the op as a model does, forward and backward. Each lesson adds its ops.
OPS = {
    "add": forward_and_backward(add, (5, 7), (5, 7)),
    "gelu": forward_and_backward(gelu, (5, 7)),
    "softmax, one pass": forward_and_backward(softmax, (5, 300)),
    "softmax, online (long rows)": forward_and_backward(lambda x: softmax(x, long_rows=True), (3, 300)),
    "softmax, down the columns": forward_and_backward(lambda x: softmax(x, dim=0), (6, 40)),
    "cross_entropy, mean": forward_and_backward(lambda x: cross_entropy(x, torch.arange(4, device=DEVICE) % 3), (4, 10)),
    "cross_entropy, none": forward_and_backward(
        lambda x: cross_entropy(x, torch.arange(4, device=DEVICE) % 3, reduction="none"), (4, 10)),
    "row_sum": forward_and_backward(row_sum, (5, 300)),
    "row_sum, rows split": forward_and_backward(lambda x: row_sum(x, splits=4), (3, 70000)),
    "rms_norm": forward_and_backward(lambda x, w: rms_norm(x, w), (4, 3, 40), (40,)),
    "rms_norm, residual fused": forward_and_backward(lambda x, r, w: rms_norm(x, w, residual=r), (6, 40), (6, 40), (40,)),
    "matmul": forward_and_backward(matmul, (37, 20), (20, 9)),
    "matmul, relu epilogue": forward_and_backward(lambda a, b: matmul(a, b, activation="relu"), (37, 20), (20, 9)),
    "matmul, gelu epilogue": forward_and_backward(lambda a, b: matmul(a, b, activation="gelu"), (37, 20), (20, 9)),
    "matmul, a transposed operand": forward_and_backward(lambda a, b: matmul(a.t(), b), (20, 37), (20, 9)),
    **({"matmul, TMA kernel, gelu epilogue": forward_and_backward(  # (the interpreter imitates TMA; on a GPU, Hopper's)
        lambda a, b: matmul(a, b, activation="gelu", tma=True), (40, 32), (32, 24), dtype=torch.float16)}
       if INTERPRET or HOPPER else {}),
    "attention": forward_and_backward(attention, (1, 2, 40, 16), (1, 2, 40, 16), (1, 2, 40, 16)),
    "attention, causal": forward_and_backward(lambda q, k, v: attention(q, k, v, causal=True), *[(2, 2, 33, 16)] * 3),
    # 4 query heads on 2 key heads, 9 queries on 40 keys (its backward in parts: dkdv_parts)
    "attention, grouped heads, two lengths": forward_and_backward(lambda q, k, v: attention(q, k, v, causal=True),
                                                                  (1, 4, 9, 16), (1, 2, 40, 16), (1, 2, 40, 16)),
    # decode.py's split keys: 4 query heads of one query on 1 key head of 1024 keys, in 2 shares, merged
    "attention, decoding": forward_and_backward(attention, (1, 4, 1, 8), (1, 1, 1024, 8), (1, 1, 1024, 8)),
    # a model's QKV projection, 4 query heads on 2 key heads, its gradient written in one buffer
    "attention_qkv, packed heads": forward_and_backward(lambda qkv: attention_qkv(qkv, 4, causal=True), (2, 33, 8, 16)),
}


@pytest.mark.parametrize("name", OPS)
def test_a_call_reaches_its_kernels_through_at_most_three_course_frames(name):
    stacks = course_frames_at_each_launch(OPS[name])
    assert stacks, f"{name} launched no kernel"
    deep = [stack for stack in stacks if len(stack) > MOST_FRAMES]
    assert not deep, f"{name}: a launch under more than {MOST_FRAMES} course frames: {deep[0]}"


def test_the_frame_count_sees_an_extra_frame():
    # the yardstick itself: one more function between the op and its launcher is one more frame
    # (the functions here are the tests', counted for this once)
    from lesson03_rowsum import row_sum as module

    def wrapped(x, splits):
        return module.launch(x, splits)

    def forward(ctx, x, splits):
        ctx.shape = x.shape
        return wrapped(x, splits)

    run, folders = forward_and_backward(row_sum, (5, 300)), {"tests", *COURSE}
    (plain,) = course_frames_at_each_launch(run, folders)
    original = module.RowSum.forward
    module.RowSum.forward = staticmethod(forward)
    try:
        (deeper,) = course_frames_at_each_launch(run, folders)
    finally:
        module.RowSum.forward = original
    assert len(deeper) == len(plain) + 1 and "tests/test_shape.py:wrapped" in deeper


def imports_of(path: str) -> set[str]:
    """The course modules a file imports, at its top or inside a function."""
    with open(path) as f:
        tree = ast.parse(f.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}  # `from lesson01 import main`
    return {n for n in names if n.split(".")[0] == "common" or n.split(".")[0] in LESSONS}


def modules_of(lesson: str) -> dict[str, str]:
    """{module name: path} of a lesson's own files (exercises apart)."""
    folder = os.path.join(ROOT, lesson)
    return {f"{lesson}.{name[:-3]}": os.path.join(folder, name) for name in sorted(os.listdir(folder))
            if name.endswith(".py") and name != "__init__.py"}


def is_module(name: str) -> bool:
    return os.path.exists(os.path.join(ROOT, *name.split(".")) + ".py")


@pytest.mark.parametrize("lesson", LESSONS)
def test_imports_point_one_way(lesson):
    # an op file imports common/, its own lesson's op files and an earlier lesson's op files; a
    # chapter imports no other chapter; lessons 6 and 7 no other lesson's chapter
    for module, path in modules_of(lesson).items():
        imported = {name for name in imports_of(path) if is_module(name)}
        chapters = {name for name in imported if name.endswith(".main")}
        if not module.endswith(".main"):
            assert not chapters, f"{module}, an op file, imports the chapter {chapters}"
        assert chapters <= {f"{lesson}.main"} - {module}, f"{module} imports another lesson's chapter: {chapters}"
        later = {name for name in imported if name.split(".")[0] in LESSONS and name.split(".")[0] > lesson}
        assert not later, f"{module} imports a later lesson: {later}"
        if lesson not in ("lesson06_gpt", "lesson07_hopper"):  # lessons 1-5 side by side; lesson 4 reuses lesson 1's GELU
            other = {name for name in imported if name.split(".")[0] in LESSONS and name.split(".")[0] != lesson}
            assert other <= {"lesson01_vector_add.elementwise"}, f"{module} imports another lesson: {other}"


def test_the_import_check_sees_an_op_file_import_a_chapter(tmp_path):
    bad = tmp_path / "ops.py"
    bad.write_text("def f():\n    from lesson03_rowsum.main import check\n")
    assert "lesson03_rowsum.main" in imports_of(str(bad))


@pytest.mark.parametrize("lesson", LESSONS)
def test_an_op_file_imports_without_a_chapter_or_a_command_line(lesson):
    # in a fresh process with a command line no chapter could parse: the op files load, no chapter does;
    # nor the compiler (torch._dynamo: seconds on a GPU machine, for a run that never compiles)
    ops = [module for module in modules_of(lesson) if not module.endswith(".main")]
    code = (f"import sys; sys.argv = ['x', '--no-such-option']\n"
            f"import {', '.join(ops) or 'common'}\n"
            "chapters = sorted(m for m in sys.modules if m.endswith('.main') and m.startswith('lesson'))\n"
            "assert not chapters, chapters\n"
            "assert 'torch._dynamo' not in sys.modules, 'an op file imports the compiler'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "PYTHONPATH": ROOT})
    # (no TRITON_INTERPRET inherited: as a user's fresh process, where an op file that imports triton
    # before common.device fails on a CPU)
    assert done.returncode == 0, done.stderr[-2000:]
