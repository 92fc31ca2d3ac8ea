"""torch.compile's trace of an op, forward and backward, without a GPU: for tests run on the CPU, in a
compiled-mode child process (common/child.py). Dynamo traces the op whole (fullgraph=True), then
AOTAutograd its joint forward-and-backward graph, in which each `kernel[grid](...)` becomes a node
whose writes torch.compile works out by compiling the kernel to Triton's IR (for an H200 here, as
tests/analysis.py does). Nothing is launched: the compilers given the graphs stop there.

What it stands in for without a GPU: the tracing half of tests/test_training.py's
test_torch_compile_* tests (graph breaks, a launch the tracer cannot read); not inductor's code
generation, nor the kernels' results."""
import importlib
import io
import logging

import common.device  # first: TRITON_INTERPRET=0 here, whatever this machine has
import torch
import torch.utils._triton
import triton
from functorch.compile import default_partition, make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

import common.checks
import common.launch
import lesson04_matmul.hopper
from analysis import H200  # the target the tracer compiles kernels for, to read which tensors they write


class Stop(Exception):
    pass


def linear(x, w):
    """Lesson 6's linear layer as the course's ops call it: x @ W^T, a float32 W beside 16-bit x."""
    from lesson06_gpt.model import CourseOps
    return CourseOps.linear(x, w)


def joint_graphs(cases: list) -> list:
    """For each case {"op": "module:function", "shapes": [...], "dtype": "float16" (or "dtypes", one a
    leaf), "kwargs": {...}, "offset": 2 (the first operand that many elements into its storage),
    "hopper": True (matmul's route as on an H100 or H200: lesson04_matmul.hopper.HOPPER)}: (the error
    torch.compile raised, or None; the kernels in the joint graph, in order; what the tracer warned of:
    "Encountered an exception" is its fallback, every input taken as written)."""
    triton.runtime.driver.set_active(H200())
    torch.utils._triton.has_triton = lambda: True  # (it looks for a GPU: without, Dynamo traces into Triton's launcher)
    common.checks.ON_GPU = False  # the inputs are CPU tensors
    # an H200's SMs, as under the interpreter
    common.device.sm_count = common.launch.sm_count = lesson04_matmul.hopper.sm_count = lambda: 132

    warned = io.StringIO()
    logging.getLogger("torch._dynamo").addHandler(logging.StreamHandler(warned))  # (the tracer's warnings)
    out = []
    for case in cases:
        module, name = case["op"].split(":")
        op = getattr(importlib.import_module(module), name)
        joints = []

        def partition(joint, *args, **kwargs):
            joints.append(joint)  # forward and backward, functionalised: the kernels' writes worked out
            return default_partition(joint, *args, **kwargs)

        def stop(gm, example_inputs):  # a compiler whose code, once run, stops the call
            def never(*args):
                raise Stop()
            return make_boxed_func(never)

        backend = aot_autograd(fw_compiler=stop, bw_compiler=stop, partition_fn=partition)
        dtypes = case.get("dtypes") or [case["dtype"]] * len(case["shapes"])
        leaves = [torch.randn(shape, dtype=getattr(torch, dtype), requires_grad=True)
                  for shape, dtype in zip(case["shapes"], dtypes)]
        kwargs, offset = case.get("kwargs", {}), case.get("offset", 0)
        if offset:  # the first operand a view `offset` elements into its storage, made inside the traced function
            first = case["shapes"][0]
            leaves[0] = torch.randn(leaves[0].numel() + offset, dtype=leaves[0].dtype, requires_grad=True)
        lesson04_matmul.hopper.HOPPER = case.get("hopper", False)
        torch._dynamo.reset()
        warned.seek(0)
        warned.truncate()
        error = None
        try:
            def traced(first_leaf, *rest):
                first_operand = first_leaf[offset:].view(first) if offset else first_leaf
                return op(first_operand, *rest, **kwargs).float().sum()

            torch.compile(traced, fullgraph=True, backend=backend)(*leaves)
        except Stop:
            pass
        except Exception as e:  # noqa: BLE001  (what torch.compile raised, for the test's message)
            error = f"{type(e).__name__}: {str(e)[:2000]}"
        kernels = []
        for joint in joints:
            for node in joint.graph.nodes:
                if node.op == "call_function" and "triton_kernel_wrapper" in str(node.target):
                    kernel = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])
                    kernels.append(getattr(kernel, "fn", kernel).__name__)
        out.append((error, kernels, warned.getvalue()))
    return out
