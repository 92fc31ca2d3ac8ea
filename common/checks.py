"""Checking tensors: bad input rejected with a message that names the problem, and results
measured against a reference.

A kernel trusts its pointers: handed a tensor on the wrong device, of the wrong dtype or shape, it
reads the wrong bytes or crashes deep inside Triton. The launchers call `check_tensors` first. It
also resolves what PyTorch allows but a raw pointer cannot honour: a view with the negative bit
(`z.conj().imag`), whose memory holds -x, is copied, as PyTorch's own operators do.
"""
import math
import operator

import numpy as np
import torch

from common.device import DEVICE, GPU_COUNT, INTERPRET  # first: it decides how triton is imported
import triton.language as tl  # noqa: E402

ON_GPU = DEVICE == "cuda"


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> 'bfloat16'."""
    return str(dtype).removeprefix("torch.")


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref||, in float64: the error of a whole result, relative to its size."""
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def grad_errors(fn, reference, inputs: list, **kwargs) -> list[tuple[float, float]]:
    """For each input: the relative error of fn's gradient, and of the reference's own gradient in
    the inputs' dtype, both against the reference's gradient in float64 (torch's autograd, from the
    same inputs): d(sum(out * g))/d(input) for one random g. The second is the yardstick: a
    gradient in float16 or bfloat16 is only as good as that dtype allows (grad_ok)."""
    with torch.no_grad():
        g = torch.randn(reference(*inputs, **kwargs).shape, dtype=torch.float64, device=inputs[0].device)
    return errors_against_autograd(gradients(fn, inputs, g, inputs[0].dtype, **kwargs), reference, inputs, g, **kwargs)


def gradients(fn, inputs: list, g: torch.Tensor, dtype: torch.dtype, **kwargs) -> tuple:
    """d(sum(fn(inputs) * g))/d(input) for each input, by torch's autograd, the inputs cast to dtype."""
    xs = [x.detach().to(dtype).requires_grad_() for x in inputs]
    out = fn(*xs, **kwargs)
    return torch.autograd.grad(out, xs, g.to(out.dtype))


def errors_against_autograd(ours, reference, inputs: list, g: torch.Tensor, **kwargs) -> list[tuple[float, float]]:
    """grad_errors for gradients already made (ours: d(sum(out * g))/d(input), by a kernel called
    directly): each one's error and the reference's in the inputs' dtype, against float64."""
    def error(out, exact):  # relative; absolute where the exact gradient is 0 (attention over one key)
        diff = (out.double() - exact).norm().item()
        return diff / exact.norm().item() if exact.norm().item() > 0 else diff

    exact = gradients(reference, inputs, g, torch.float64, **kwargs)
    theirs = gradients(reference, inputs, g, inputs[0].dtype, **kwargs)
    return [(error(a, e), error(b, e)) for a, b, e in zip(ours, theirs, exact)]


GRAD_NOTE = ("Relative error of each gradient against torch's autograd in float64 from the same inputs (absolute "
             "where that gradient is 0); in brackets or beside it, torch's own in the inputs' dtype. ok: within "
             "twice torch's, plus 1e-5.")


def grad_ok(ours: float, theirs: float) -> bool:
    """A gradient passes within twice the error of torch's autograd in the same dtype (plus 1e-5)."""
    return ours <= 2 * theirs + 1e-5


def flag(name: str, value, *, optional: bool = False) -> bool | None:
    """value as a Python bool: True, False or numpy's bool_ (None too where `optional`). Anything
    else is refused by name. `value in (True, False)` would not do: 0 == False and 1.0 == True, so
    `softmax(x, 0)` (torch's `dim` habit) or `attention(q, k, v, 1.0)` would pass as a flag."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if value is None and optional:
        return None
    raise TypeError(f"{name} must be {'None, True or False' if optional else 'True or False'}, got {value!r}")


def whole(name: str, value, *, least: int = 1, power_of_two_to: int | None = None) -> int:
    """value as a Python int: any integral scalar (int, numpy's, a one-element integer tensor:
    whatever `operator.index` takes, never a bool), at least `least`, and, where `power_of_two_to`
    is given, a power of two up to it. Anything else is refused, naming the parameter."""
    if value.__class__ is int and value >= least and (power_of_two_to is None or (
            0 < value <= power_of_two_to and not value & (value - 1))):
        return value  # the common case, decided in a few comparisons
    wanted = (f"a power of two from {least} to {power_of_two_to}" if power_of_two_to
              else f"a whole number >= {least}")
    try:
        n = None if isinstance(value, (bool, np.bool_)) else operator.index(value)
    except TypeError:
        n = None
    if n is None:
        raise TypeError(f"{name} must be {wanted}, got {value!r}")
    if n < least or (power_of_two_to and (n > power_of_two_to or n < 1 or n & (n - 1))):  # (0 is no power of two)
        raise ValueError(f"{name} must be {wanted}, got {value!r}")
    return n


def real(name: str, value) -> float:
    """value as a finite Python float (a NaN or infinite scale would turn every output into NaN)."""
    try:
        x = None if isinstance(value, (bool, np.bool_, str)) else float(value)
    except (TypeError, ValueError):
        x = None
    if x is None:
        raise TypeError(f"{name} must be a real number, got {value!r}")
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return x


def check_tensors(tensors: dict, dtypes: tuple, ndim: int | None = None, same_shape: bool = False) -> list:
    """tensors: {name: tensor}, the inputs a kernel reads side by side. Each must be a dense tensor
    on the device the kernels run on, of one of `dtypes`, with `ndim` dimensions (if given); all of
    them on one device and of one dtype, and of one shape if `same_shape`. Returns the tensors, in
    order, as the kernel can read them (a negative-bit view resolved).

    It runs on every call, before every launch, so it is written to be cheap where the input is
    good: each test
    reads a field once, the device's number is asked of CUDA only where several GPUs make it a
    question, and the messages are built only when one fails."""
    first = first_index = None
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if not (x.is_cuda if ON_GPU else x.is_cpu):
            if x.is_meta:
                raise ValueError(f"{name} is on meta: a meta tensor has a shape but no data to compute on")
            where = "the CPU (Triton interpreter)" if INTERPRET else "the GPU"
            raise ValueError(f"{name} is on {x.device}, but kernels here run on {where}: "
                             f"move it with {name}.to('{DEVICE}')")
        if x.layout is not torch.strided or x.is_nested:
            kind = "nested" if x.is_nested else str(x.layout).removeprefix("torch.")
            raise ValueError(f"{name} is a {kind} tensor; the kernels read dense tensors: use {name}.to_dense()")
        if x.dtype not in dtypes:
            supported = ", ".join(dtype_name(d) for d in dtypes)
            raise TypeError(f"{name} has dtype {dtype_name(x.dtype)}; supported: {supported}")
        shape = x.shape
        if ndim is not None and len(shape) != ndim:
            raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(shape)}")
        n = x.numel()  # below NEAR_2_31 elements (and not empty) no dimension can be near 2**31
        if (n >= NEAR_2_31 or n == 0) and any(NEAR_2_31 <= d < 2**31 for d in shape):
            # see index_type: indices run a block past n
            raise ValueError(f"{name} has shape {tuple(shape)}: a dimension within 2**16 of 2**31, where the "
                             "kernels' 32-bit loop bounds and indices would wrap; pad or split it")
        index = x.get_device()  # the CUDA device's number; -1 on the CPU
        if first is None:
            first, first_index = x, index
            if index > 0 or (index == 0 and GPU_COUNT > 1):  # with one GPU, its tensors are on the current one
                if index != torch.cuda.current_device():
                    raise ValueError(f"{name} is on {x.device}, but kernels launch on the current device, "
                                     f"cuda:{torch.cuda.current_device()}: wrap the call in "
                                     f"`with torch.cuda.device({name}.device):`")
        elif index != first_index or x.dtype != first.dtype or (same_shape and shape != first.shape):
            _mismatch(tensors)
    if torch.compiler.is_compiling():  # Dynamo cannot trace is_neg(): torch.compile's tensors pass as they are
        if INTERPRET:  # nor the interpreter's kernels (numpy on the CPU): say so before it fails deep inside
            raise RuntimeError("torch.compile cannot trace kernels that Triton's interpreter runs (no CUDA GPU "
                               "here): on the CPU, call the lessons' functions without torch.compile")
        return distinct(list(tensors.values()))
    # x.is_neg(): a lazy negation. x.resolve_neg() writes -x into new memory (x itself if the bit is off).
    return distinct([x.resolve_neg() if x.is_neg() else x for x in tensors.values()])


def distinct(tensors: list) -> list:
    """The tensors, each one a different object: where one tensor comes twice (add(x, x), attention(x,
    x, x)), its repeats as views of it (the same memory). An autograd function given one tensor as two
    inputs is refused by torch.compile (torch 2.13: "duplicate tensor input") or, with torch 2.11,
    compiled into wrong gradients (add(x, x) on an H100); a view is another tensor, and autograd adds
    the gradients of both into x as before."""
    for i in range(1, len(tensors)):
        if any(tensors[i] is t for t in tensors[:i]):
            tensors[i] = tensors[i].view_as(tensors[i])
    return tensors


def _mismatch(tensors: dict):
    """The message for tensors that differ in device, dtype or shape (check_tensors found one)."""
    names, values = ", ".join(tensors), tensors.values()
    first = next(iter(values))
    if any(x.device != first.device for x in values):
        raise ValueError(f"{names} are on different devices: {', '.join(str(x.device) for x in values)}")
    if any(x.dtype != first.dtype for x in values):
        raise TypeError(f"{names} have different dtypes ({', '.join(dtype_name(x.dtype) for x in values)}): "
                        "cast one so all match")
    raise ValueError(f"{names} have different shapes: {', '.join(str(tuple(x.shape)) for x in values)}")


INDEX_ROOM = 2**16  # how far past a tensor's edge an index may run: the widest block of any kernel here
NEAR_2_31 = 2**31 - INDEX_ROOM


def index_type(*tensors: torch.Tensor):
    """tl.int32 or tl.int64: the integer type a kernel needs for element offsets into these tensors.

    A kernel computes an address as base + row * stride_row + col * stride_col. Triton does that
    arithmetic in int32 unless an operand is already 64-bit, and int32 wraps past 2**31 - 1: a
    softmax over a 65544 x 32768 fp16 tensor (a vocabulary-sized batch) reaches offset 65543 *
    32768 > 2**31, wraps negative and reads, or writes, memory that is not the tensor's. 64-bit
    offsets are always right and cost a little (wider registers, more instructions per address);
    like PyTorch's own generated kernels, we pay it only where a tensor needs it: where the offset
    of its farthest element is past 2**31 - 1, or where an index (a row, a column) is within 2**16
    of it (INDEX_ROOM). Indices run a block past the tensor's edge, where the mask stops them
    (rows < M); an index that wrapped to a negative number would pass that mask.
    """
    for t in tensors:
        if t.is_contiguous() and 0 < t.numel() < NEAR_2_31:  # the common case, decided cheaply:
            continue  # farthest offset numel - 1, and no dimension longer than numel
        farthest = sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
        if farthest >= 2**31 or max(t.shape, default=0) + INDEX_ROOM >= 2**31:
            return tl.int64
    return tl.int32
