"""Every load and store a kernel makes under Triton's interpreter, checked and recorded.

The exercises' checker (common/exercise.py) needs to know, for a learner's kernel, which program
read or wrote which element of which tensor: to stop an out-of-bounds access before it happens
(the interpreter reads and writes raw memory: an unmasked store past the end of a tensor corrupts
the process, with no message), to name the program and the elements, to find outputs no program
wrote, and to count how often each tensor was read. Triton has no public API for this, so this
module is the one place that reaches into the interpreter: it wraps the interpreter's builder
methods that every tl.load, tl.store and tl.atomic_* goes through. It checks that they exist
(`available()`), and where they do not (another Triton version), the checker says "memory
checks unavailable" and carries on with the other stages.
"""
import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch


def _builder():
    """The interpreter's builder (one per process), or None where this Triton has another design."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return None
    builder = getattr(interpreter, "interpreter_builder", None)
    names = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "grid_idx")
    return builder if builder is not None and all(hasattr(builder, n) for n in names[:3]) else None


def available() -> bool:
    """Can loads and stores be recorded with the installed Triton?"""
    return _builder() is not None


def runs_bf16() -> bool:
    """Can the installed Triton's interpreter run a kernel on bfloat16 blocks at all? (Triton 3.6's
    cannot: its builder has no bf16 constants, and a bf16 store fails inside it.)"""
    builder = _builder()
    return builder is None or hasattr(builder, "get_bf16")


def lacks_bf16(error: BaseException) -> bool:
    """Is `error` the interpreter failing on bfloat16 for want of it (runs_bf16() is False)?"""
    return not runs_bf16() and "bf16" in str(error)


@dataclass
class Region:
    """A tensor's memory as the kernel may touch it: [start, end) in bytes."""
    name: str
    start: int
    end: int
    itemsize: int
    numel: int
    is_input: bool


class OutOfBounds(Exception):
    """A load or store outside every tensor the kernel was given (raised before it happens)."""

    def __init__(self, kind: str, program: tuple, addresses: np.ndarray, near: Region | None):
        self.kind, self.program, self.addresses, self.near = kind, program, addresses, near
        super().__init__(f"{kind} outside every tensor by program {program}")


@dataclass
class Log:
    """What a run did: (kind, program, tensor name, element indices) for every masked-in access."""
    regions: list
    accesses: list = field(default_factory=list)  # ("load" | "store" | "atomic", program, name, indices)

    def region_of(self, addresses: np.ndarray) -> Region | None:
        """The region holding every one of `addresses`, or None."""
        lo, hi = int(addresses.min()), int(addresses.max())
        for r in self.regions:
            if r.start <= lo and hi < r.end:
                return r
        return None

    def nearest(self, address: int) -> Region | None:
        return min(self.regions, key=lambda r: min(abs(address - r.start), abs(address - r.end)), default=None)

    def record(self, kind: str, program: tuple, ptrs, mask) -> None:
        addresses = np.asarray(ptrs.data, dtype=np.uint64).reshape(-1)
        keep = np.asarray(mask.data, dtype=bool).reshape(-1) if mask is not None else np.ones(addresses.size, bool)
        keep = np.broadcast_to(keep, addresses.shape) if keep.size != addresses.size else keep
        addresses = addresses[keep].astype(np.int64)
        if addresses.size == 0:
            return
        region = self.region_of(addresses)
        if region is None:  # part of it outside: which part, and beside which tensor
            outside = np.array([a for a in addresses if not any(r.start <= a < r.end for r in self.regions)])
            raise OutOfBounds(kind, program, outside, self.nearest(int(outside[0])))
        self.accesses.append((kind, program, region.name, (addresses - region.start) // region.itemsize))

    def elements(self, kind: str, name: str) -> dict:
        """{program: element indices} of every `kind` access ("load", "store", "atomic") to tensor `name`."""
        out = {}
        for k, program, n, indices in self.accesses:
            if k == kind and n == name:
                out.setdefault(program, []).append(indices)
        return {p: np.concatenate(v) for p, v in out.items()}

    def count(self, kind: str, name: str) -> int:
        """How many elements of tensor `name` were accessed by `kind`, in all (an element twice counts twice)."""
        return sum(len(i) for k, _, n, i in self.accesses if k == kind and n == name)

    def writers(self, name: str, numel: int) -> np.ndarray:
        """For each element of output `name`, the last program (as an index into `programs()`) that
        stored it, -1 where none did."""
        last = np.full(numel, -1)
        order = self.programs()
        for k, program, n, indices in self.accesses:
            if k in ("store", "atomic") and n == name:
                last[indices] = order.index(program)
        return last

    def programs(self) -> list:
        """The programs that touched memory, in the order they ran."""
        return list(dict.fromkeys(program for _, program, _, _ in self.accesses))


def region(name: str, t: torch.Tensor, is_input: bool) -> Region:
    """The bytes a (possibly strided) tensor spans: from its first element to its farthest one."""
    span = sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1 if t.numel() else 0
    start = t.data_ptr()
    return Region(name, start, start + span * t.element_size(), t.element_size(), t.numel(), is_input)


def guarded(t: torch.Tensor, fill, pad: int = 4096) -> torch.Tensor:
    """A copy of t (same shape and strides) inside an allocation with `pad` elements of `fill` on
    each side, so that a small overrun lands in memory that belongs to no tensor."""
    span = sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1 if t.numel() else 1
    storage = torch.full((pad + span + pad,), fill, dtype=t.dtype, device=t.device)
    view = storage.as_strided(t.shape, t.stride(), pad)
    view.copy_(t)
    return view


@contextlib.contextmanager
def recording(log: Log):
    """Within the block, every load, store and atomic of an interpreted kernel is checked against
    log.regions (OutOfBounds before an access outside them) and recorded in log."""
    builder = _builder()
    names = ("create_masked_load", "create_masked_store", "create_atomic_rmw")
    own = {name: builder.__dict__[name] for name in names if name in builder.__dict__}  # (none, as Triton ships it)
    load, store, rmw = (getattr(builder, name) for name in names)

    def masked_load(ptrs, mask, *rest):
        log.record("load", builder.grid_idx, ptrs, mask)
        return load(ptrs, mask, *rest)

    def masked_store(ptrs, value, mask, *rest):
        log.record("store", builder.grid_idx, ptrs, mask)
        return store(ptrs, value, mask, *rest)

    def atomic_rmw(op, ptr, value, mask, *rest):
        log.record("atomic", builder.grid_idx, ptr, mask)
        return rmw(op, ptr, value, mask, *rest)

    builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw = masked_load, masked_store, atomic_rmw
    try:
        yield log
    finally:
        for name in names:
            if name in own:
                setattr(builder, name, own[name])
            else:
                delattr(builder, name)  # the class's own method again
