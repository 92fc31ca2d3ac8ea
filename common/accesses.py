"""Every load and store a kernel makes under Triton's interpreter, checked and recorded.

The exercises' checker (common/exercise.py) needs to know, for a learner's kernel, which program
read or wrote which element of which tensor: to stop an out-of-bounds access before it happens
(the interpreter reads and writes raw memory: an unmasked store past the end of a tensor corrupts
the process, with no message), to name the program and the elements, to find outputs no program
wrote, and to count how often each tensor was read. Triton has no public API for this, so this
module is the one place that reaches into the interpreter: it wraps the interpreter's builder
methods that every tl.load, tl.store and tl.atomic_* goes through (a block pointer's or a tensor
descriptor's load too, as the builder turns them into masked loads). It checks that they exist
(`available()`), and where they do not (another Triton version), the checker says "memory
checks unavailable" and carries on with the other stages.

While it records, it also makes the interpreter run a kernel as a GPU may, where the
interpreter alone would hide a mistake:
- the programs in reverse order, when asked (`recording(log, reverse=True)`): the interpreter
  runs them one after another in order, and a GPU runs them at the same time in no fixed order,
  so a result that changes when the order does is a race;
- a tl.dot in TF32 (its default input_precision) with each float32 input rounded to TF32's 10
  bits, as a GPU's tensor cores do (the interpreter multiplies in full float32);
- a tl.sum of float16 values added in float16, pairwise, as a GPU's reduction is (NumPy sums
  float16 in float32, which hides a sum that a GPU rounds, or overflows to inf).
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
    names = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas", "create_dot",
             "create_barrier", "set_grid_idx", "set_grid_dim")
    return builder if builder is not None and all(hasattr(builder, n) for n in names) else None


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


class Spinning(Exception):
    """A program past MOST_ACCESSES loads, stores and atomics: waiting, most likely, for another
    program (a flag, a lock) that the interpreter runs only after it, so that it would never end."""

    def __init__(self, program: tuple, line: str):
        self.program, self.line = program, line
        super().__init__(f"program {program} made over {MOST_ACCESSES} memory accesses, the last at {line}")


MOST_ACCESSES = 1 << 14  # per program: far above any exercise's honest kernel (a few hundred)


@dataclass
class Log:
    """What a run did: (kind, program, tensor name, element indices) for every masked-in access; and,
    for the exercises' checker, what the stores and atomics wrote, the outputs as the kernel found
    them, outputs read before any store, and loads whose masked-off lanes had no `other=`.

    With scalars_apart, a program's first one-element load of each tensor is recorded as a
    "scalar", not a "load": one element costs a program one 32-byte sector, which its walks fetch
    anyway, so a budget of walks leaves it out (an extra x[row, 0] is not a third walk)."""
    regions: list
    accesses: list = field(default_factory=list)  # ("load" | "scalar" | "store" | "atomic", program, name, indices)
    watch: dict = field(default_factory=dict)      # {output name: tensor}: the outputs to follow, if any
    scalars_apart: bool = False
    written: list = field(default_factory=list)    # (kind, name, indices, raw values left there, atomic op) in order
    found: dict = field(default_factory=dict)      # {output name: its contents at the kernel's first access}
    early_reads: list = field(default_factory=list)  # (program, output name, element, line) read before stored
    read_backs: list = field(default_factory=list)  # (program, output name, element, line) read back, no barrier
    poisoned: list = field(default_factory=list)   # (program, line) of masked loads without other=
    rounded: list = field(default_factory=list)    # (what, line): the first float32 dot in TF32 or float16 sum
    _stored: dict = field(default_factory=dict)    # {output name: bool per element, stored so far}
    _storer: dict = field(default_factory=dict)    # {output name: per element, its last store's program and barriers}
    _numbers: dict = field(default_factory=dict)   # {program: a number of its own, from 1}
    _barriers: dict = field(default_factory=dict)  # {program: the tl.debug_barrier()s it has passed}
    _calls: dict = field(default_factory=dict)     # {program: its loads, stores and atomics so far}
    _scalars: set = field(default_factory=set)     # (program, name) whose first one-element load was seen

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
        calls = self._calls[program] = self._calls.get(program, 0) + 1
        if calls > MOST_ACCESSES:
            raise Spinning(program, learner_line())
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
        indices = (addresses - region.start) // region.itemsize
        if kind == "load" and self.scalars_apart and keep.size == 1 and (program, region.name) not in self._scalars:
            self._scalars.add((program, region.name))
            kind = "scalar"
        self.accesses.append((kind, program, region.name, indices))
        return region, indices, keep

    def follow(self, kind: str, program: tuple, region: Region, indices, keep, value=None, op=None) -> None:
        """What the checker follows beyond addresses, for the outputs in `watch`: a load's elements
        not stored yet, or stored by the same program since its last tl.debug_barrier(); what a
        store or an atomic left in memory (`value`: for an atomic, the elements as they are after
        it, read back)."""
        if region.name not in self.watch:
            return
        self.snapshot()
        stored = self._stored.setdefault(region.name, np.zeros(region.numel, dtype=bool))
        storer = self._storer.setdefault(region.name, np.zeros((2, region.numel), dtype=np.int64))
        mine = (self._numbers.setdefault(program, len(self._numbers) + 1), self._barriers.get(program, 0))
        if kind == "load":
            early = indices[~stored[indices]]
            if early.size:
                self.early_reads.append((program, region.name, int(early[0]), learner_line()))
            back = indices[(storer[0, indices] == mine[0]) & (storer[1, indices] == mine[1])]  # its own, no barrier
            if back.size and not self.read_backs:
                self.read_backs.append((program, region.name, int(back[0]), learner_line()))
            return
        values = np.asarray(value.data).reshape(-1)
        values = np.broadcast_to(values, keep.shape)[keep] if values.size != keep.size else values[keep]
        self.written.append((kind, region.name, indices, values, op))
        stored[indices] = True
        if kind == "store":
            storer[0, indices], storer[1, indices] = mine

    def barrier(self, program: tuple) -> None:
        """tl.debug_barrier(): the program's stores so far are visible to all its threads."""
        self._barriers[program] = self._barriers.get(program, 0) + 1

    def snapshot(self) -> None:
        """At the kernel's first access (before it happens): the outputs as the launcher handed them over."""
        if self.watch and not self.found:
            self.found = {name: raw(t).copy() for name, t in self.watch.items()}

    def elements(self, kind: str, name: str) -> dict:
        """{program: element indices} of every `kind` access ("load", "scalar", "store", "atomic") to tensor `name`."""
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


def raw(t: torch.Tensor) -> np.ndarray:
    """A contiguous tensor's elements as unsigned integers of its itemsize: its bits, as a store writes them."""
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().cpu().contiguous().view(bits).numpy().view(f"u{t.element_size()}").reshape(-1)


def learner_line() -> str:
    """The kernel's line running now: the innermost frame outside Triton, PyTorch, NumPy and common/."""
    import os
    import traceback

    skip = (os.sep + "triton" + os.sep, os.sep + "torch" + os.sep, os.sep + "numpy" + os.sep,
            os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(traceback.extract_stack()):
        if not any(part in frame.filename for part in skip):
            return f"{os.path.basename(frame.filename)} line {frame.lineno}: `{(frame.line or '').strip()}`"
    return "a tl.load"


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


def poison(ptrs):
    """Lanes a GPU leaves undefined: NaN for floating point, the most negative integer otherwise."""
    from triton.runtime import interpreter

    dtype = ptrs.get_element_ty()
    np_dtype = interpreter._get_np_dtype(dtype)
    if np_dtype == np.uint16 and dtype.is_bf16():
        fill = 0x7FC0  # bfloat16's NaN, as the interpreter holds bf16: its bits
    elif np.issubdtype(np_dtype, np.floating):
        fill = np.nan
    elif np_dtype == np.bool_:
        fill = True
    else:
        fill = np.iinfo(np_dtype).min
    return interpreter.TensorHandle(np.full(np.asarray(ptrs.data).shape, fill, dtype=np_dtype), dtype)


@contextlib.contextmanager
def recording(log: Log, reverse: bool = False):
    """Within the block, every load, store and atomic of an interpreted kernel is checked against
    log.regions (OutOfBounds before an access outside them) and recorded in log; a TF32 dot and a
    float16 sum compute as a GPU's do; with reverse=True, each launch runs its programs last to first."""
    from triton.runtime import interpreter

    builder = _builder()
    names = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas", "create_dot",
             "create_barrier", "set_grid_idx")
    own = {name: builder.__dict__[name] for name in names if name in builder.__dict__}  # (none, as Triton ships it)
    load, store, rmw, cas, dot, barrier, set_grid_idx = (getattr(builder, name) for name in names)

    def masked_load(ptrs, mask, other, *rest):
        program = builder.grid_idx
        found = log.record("load", program, ptrs, mask)
        if found:
            log.follow("load", program, *found)
        if log.watch and other is None and mask is not None and not np.asarray(mask.data).all():
            # a GPU leaves the masked-off lanes of a load without other= undefined (whatever the
            # registers held); the interpreter gives 0, which hides a sum that relies on it: poison them
            other = poison(ptrs)
            log.poisoned.append((program, learner_line()))
        return load(ptrs, mask, other, *rest)

    def masked_store(ptrs, value, mask, *rest):
        program = builder.grid_idx
        found = log.record("store", program, ptrs, mask)
        if found:
            log.follow("store", program, *found, value=value)
        return store(ptrs, value, mask, *rest)

    def left(ptrs, mask):
        """The elements at ptrs as they are now (after an atomic): what it left there."""
        dtype = ptrs.get_element_ty()
        np_dtype = interpreter._get_np_dtype(dtype)
        keep = np.ones(np.asarray(ptrs.data).shape, dtype=bool) if mask is None else np.asarray(mask.data, dtype=bool)
        other = np.zeros(np.asarray(ptrs.data).shape, dtype=np_dtype)
        return interpreter.TensorHandle(interpreter._interpreter.load(ptrs.data, keep, other, np_dtype), dtype)

    def atomic_rmw(op, ptr, value, mask, *rest):
        program = builder.grid_idx
        found = log.record("atomic", program, ptr, mask)
        log.snapshot()
        result = rmw(op, ptr, value, mask, *rest)
        if found:
            log.follow("atomic", program, *found, value=left(ptr, mask), op=str(op).rsplit(".", 1)[-1])
        return result

    def atomic_cas(ptr, cmp, value, *rest):
        program = builder.grid_idx
        found = log.record("atomic", program, ptr, None)
        log.snapshot()
        result = cas(ptr, cmp, value, *rest)
        if found:
            log.follow("atomic", program, *found, value=left(ptr, None), op="CAS")
        return result

    def create_dot(a, b, d, input_precision, *rest):
        if str(input_precision).rsplit(".", 1)[-1] == "TF32" and a.data.dtype == np.float32 == b.data.dtype:
            a = interpreter.TensorHandle(tf32(a.data), a.dtype)  # what a GPU's tensor cores multiply
            b = interpreter.TensorHandle(tf32(b.data), b.dtype)
            if not log.rounded:
                log.rounded.append(("a tl.dot of float32 blocks in TF32, its default input_precision (a GPU keeps 10 "
                                    "bits of each input, and so does this check)", learner_line()))
        return dot(a, b, d, input_precision, *rest)

    def create_barrier(*args):
        log.barrier(builder.grid_idx)
        return barrier(*args)

    def reversed_grid_idx(x, y, z):
        nx, ny, nz = builder.grid_dim
        return set_grid_idx(nx - 1 - x, ny - 1 - y, nz - 1 - z)

    reduce_sum = interpreter.ReduceOps.sum

    def sum_as_a_gpu(self, input):
        if input.handle.data.dtype != np.float16:
            return reduce_sum(self, input)
        if not log.rounded:
            log.rounded.append(("a tl.sum of float16 values (a GPU adds them in float16, and so does this check)",
                                learner_line()))
        return self.to_tensor(float16_sum(input.handle.data, self.axis, self.keep_dims), input.dtype)

    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas, builder.create_dot = atomic_rmw, atomic_cas, create_dot
    builder.create_barrier = create_barrier
    if reverse:
        builder.set_grid_idx = reversed_grid_idx
    interpreter.ReduceOps.sum = sum_as_a_gpu
    try:
        yield log
    finally:
        interpreter.ReduceOps.sum = reduce_sum
        for name in names:
            if name in own:
                setattr(builder, name, own[name])
            elif name in builder.__dict__:
                delattr(builder, name)  # the class's own method again


def tf32(data: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 bits of mantissa, to nearest, ties to even); inf and NaN kept."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    return np.where(special, bits, rounded).view(np.float32).reshape(np.shape(data))


def float16_sum(data: np.ndarray, axis, keep_dims: bool) -> np.ndarray:
    """A float16 sum as a GPU's reduction adds: in float16, neighbours pairwise, each addition rounded."""
    x = data.reshape(-1) if axis is None else np.moveaxis(data, axis, -1)
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = np.concatenate([x, np.zeros(x.shape[:-1] + (1,), np.float16)], axis=-1)
        with np.errstate(over="ignore"):  # past 65504: inf, as on a GPU
            x = x[..., 0::2] + x[..., 1::2]  # float16 + float16: rounded to float16
    total = x[..., 0]
    if not keep_dims:
        return total
    return total.reshape((1,) * data.ndim) if axis is None else np.expand_dims(total, axis)
