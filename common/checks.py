"""Checking tensors: bad input rejected with a message that names the problem, and results
measured against a reference.

A kernel trusts its pointers: handed a tensor on the wrong device, of the wrong dtype or shape, it
reads the wrong bytes or crashes deep inside Triton. The launchers call `check_tensors` first.
"""
import torch

from common.device import DEVICE, INTERPRET


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> 'bfloat16'."""
    return str(dtype).removeprefix("torch.")


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref||, in float64: the error of a whole result, relative to its size."""
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def check_tensors(tensors: dict, dtypes: tuple, ndim: int | None = None, same_shape: bool = False) -> None:
    """tensors: {name: tensor}, the inputs a kernel reads side by side. Each must be a dense tensor
    on the device the kernels run on, of one of `dtypes`, with `ndim` dimensions (if given); all of
    them on one device and of one dtype, and of one shape if `same_shape`."""
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.device.type == "meta":
            raise ValueError(f"{name} is on meta: a meta tensor has a shape but no data to compute on")
        if x.device.type != DEVICE:
            where = "the CPU (Triton interpreter)" if INTERPRET else "the GPU"
            raise ValueError(f"{name} is on {x.device}, but kernels here run on {where}: "
                             f"move it with {name}.to('{DEVICE}')")
        if x.layout != torch.strided:
            raise ValueError(f"{name} is a {x.layout} tensor; the kernels read dense tensors: "
                             f"use {name}.to_dense()")
        if x.dtype not in dtypes:
            supported = ", ".join(dtype_name(d) for d in dtypes)
            raise TypeError(f"{name} has dtype {dtype_name(x.dtype)}; supported: {supported}")
        if ndim is not None and x.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")
    names = ", ".join(tensors)
    first, *rest = tensors.values()
    if any(x.device != first.device for x in rest):
        raise ValueError(f"{names} are on different devices: {', '.join(str(x.device) for x in tensors.values())}")
    if any(x.dtype != first.dtype for x in rest):
        raise TypeError(f"{names} have different dtypes ({', '.join(dtype_name(x.dtype) for x in tensors.values())}): "
                        "cast one so all match")
    if same_shape and any(x.shape != first.shape for x in rest):
        raise ValueError(f"{names} have different shapes: {', '.join(str(tuple(x.shape)) for x in tensors.values())}")
