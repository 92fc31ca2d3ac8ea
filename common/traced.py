"""What a launcher reads while torch.compile traces it; imported there only.

A traced tensor has no address yet (data_ptr()), and Dynamo does not trace storage_offset(), an
int: storage_offset_bytes runs at trace time instead, and its answer becomes a constant of the
graph (torch.compiler.assume_constant_result). That decorator imports the compiler (torch._dynamo:
seconds on a GPU machine), which a run that never compiles should not pay: a launcher imports this
module inside its `if torch.compiler.is_compiling():` branch (lesson 4's hopper.starts_aligned).
"""
import torch


@torch.compiler.assume_constant_result
def storage_offset_bytes(t) -> int:
    """t's first element's distance from its storage's start, in bytes, as a constant of the traced graph."""
    return t.storage_offset() * t.element_size()
