"""Launching for less: the host's share of a call, kept small.

Every call of a lesson's public function runs Python before its kernel starts: checks, the
output's allocation, the grid, then Triton's launcher. For small inputs that host time, not the
kernel, is what the caller waits for (lesson 1, "What a launch costs"). Three things cost more
than they look, and this file holds the cheap form of each:

- triton.cdiv and triton.next_power_of_2 are "constexpr functions" (the same function runs inside
  kernels), and a call from Python goes through that machinery: about a microsecond each, 30 times
  the plain integer expression. The launchers use `cdiv` and `next_power_of_2` below.
- triton.autotune times its configurations on the first call for each key (the arguments it was
  told to watch, and the dtypes) and keeps the winner; but every later call still runs its
  bookkeeping in Python: a dictionary of the arguments, the key rebuilt from them, each tensor's
  dtype turned into a string, the winner's keyword arguments merged in. `launch` keeps the winner
  under a key the launcher already has, and from the second call on launches the plain kernel
  with it: the same kernel, the same configuration, less Python.
- kernel[grid](...) itself redoes, on every call, what the first call settled: it binds the
  arguments to the kernel's parameters, works out what the compiled code was specialized on
  (each tensor's dtype and whether its address is a multiple of 16 bytes; each integer's class:
  1, a multiple of 16, past 32 bits), spells that out as a string and looks the compiled kernel
  up by it: a cost that grows with the number of arguments (attention's kernel takes 24).
  `launch` keeps the compiled kernel under a key that holds at least those facts (each tensor's
  dtype, device and 16-byte alignment; each integer itself, which fixes its class; any other
  argument with its type; the constexprs by name) and from then on hands the arguments straight
  to the launcher Triton generated for that compiled kernel (compiled.run). Two calls with the
  same key are calls Triton would have sent to the same compiled code, so the shortcut is safe.
  (Even Triton's own handle, compiled[grid](*arguments), costs more: on every launch it builds
  launch metadata and calls its launch hooks, empty unless a profiler such as Proton has added
  one; `launch` takes that path only then.)
  (What it skips besides: Triton's check that a global the kernel reads has not changed; the
  lessons' globals are constants.)

One more cost, paid only where it buys something: a custom operator. Lesson 1 section 5
registers each public function as a PyTorch operator (torch.library.triton_op), so that autograd
has its backward and torch.compile can trace it; a call through PyTorch's dispatcher pays several
microseconds more on the host (RESULTS.md, "Host cost per call"). `needs_op` says when a call
needs the operator; every other call runs the launcher directly. And while torch.compile traces an
operator's body, `launch` hands the kernel to torch.library.wrap_triton, which records the launch
in the graph instead of running it.
"""
import inspect

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.library import wrap_triton

from common.device import INTERPRET
from triton import knobs
from triton.runtime.autotuner import Autotuner


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for whole numbers: how many blocks of b cover a."""
    return (a + b - 1) // b


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


CHOSEN: dict = {}  # (autotuned kernel, key) -> (the configuration it chose, that configuration's keyword arguments)
COMPILED: dict = {}  # (kernel, key, what its compiled code depends on) -> (the compiled kernel, the arguments after *args)


def needs_op(*tensors) -> bool:
    """Must this call go through the registered operator? Where autograd records the call (grad mode
    on and an input that requires grad) or torch.compile traces it; not otherwise."""
    if torch.is_grad_enabled():  # a plain loop: this runs on every call (lesson 1, "What a launch costs")
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return True
    return torch.compiler.is_compiling()


def tracing(x) -> bool:
    """Is torch.compile tracing, with x one of its fake tensors (a shape, a dtype, a device, no memory)?
    (An operator's body also runs on fake tensors, outside Dynamo, to learn its outputs' shapes.)"""
    return torch.compiler.is_compiling() or (type(x) is not torch.Tensor and is_fake(x))


def launch(kernel, grid, key: tuple | None, *args, **kwargs) -> None:
    """kernel[grid](*args, **kwargs). For an autotuned kernel, the first call with this `key` goes
    through the autotuner and its choice is remembered; later ones launch kernel.fn with that choice
    (after the configuration's pre_hook, if it has one, as the autotuner would run it).
    `key` must tell apart every call the autotuner's own key does (its key arguments, the dtypes).
    On a GPU, the compiled kernel is kept under what it was specialized for, and later calls that
    match all of it launch it directly. `args` are the kernel's leading parameters, in order;
    `kwargs` the rest (constexprs) and launch options (num_warps). The tensors must be on the
    current device (the launchers' checks see to it): that is where Triton compiled and loaded it.
    While torch.compile traces (args[0] tells), the launch is recorded (wrap_triton) and compile's own
    autotuning runs."""
    if tracing(args[0]):
        if INTERPRET:
            raise RuntimeError("torch.compile cannot trace kernels that Triton's interpreter runs (no CUDA GPU here): "
                               "on the CPU, call the lessons' functions without torch.compile")
        fn = kernel.fn if isinstance(kernel, Autotuner) else kernel
        # The tracer wants every argument, defaults included (TRACE=False), and writes each into the
        # code it generates by its repr, so a default must be a plain value (not inf).
        defaults = {name: p.default for name, p in inspect.signature(fn.fn).parameters.items()
                    if p.default is not p.empty and name not in kwargs}
        wrap_triton(kernel)[grid](*args, **defaults, **kwargs)
        return
    fn, config_kwargs = kernel, {}
    if isinstance(kernel, Autotuner):
        chosen = CHOSEN.get((kernel, key))
        if chosen is None:
            kernel[grid](*args, **kwargs)  # the autotuner: times the configurations once per its key
            config = kernel.best_config
            CHOSEN[kernel, key] = config, config.all_kwargs()  # BLOCK_M=..., num_warps=..., num_stages=...
            return
        config, config_kwargs = chosen
        if config.pre_hook is not None:  # (no configuration here has one)
            config.pre_hook({**dict(zip(kernel.arg_names, args)), **kwargs, **config_kwargs})
        fn = kernel.fn
    compiled = spec = None
    if not INTERPRET:  # (the interpreter has no compiled kernels)
        spec = (kernel, key, *kwargs.items(), *specialization(args))  # the autotuner (its choice), or the kernel
        try:
            compiled = COMPILED.get(spec)
        except TypeError:  # an argument Python cannot hash: Triton's path, every time
            spec = None
    if compiled is None:  # Triton binds, specializes, compiles if it must, launches
        compiled = fn[grid](*args, **kwargs, **config_kwargs)
        if spec is not None:  # kept, with the arguments that follow *args (constexprs, defaults)
            meta = {**kwargs, **config_kwargs}
            rest = [meta.get(p.name, p.default) for p in list(inspect.signature(fn.fn).parameters.values())[len(args):]]
            if len(COMPILED) > 4096:  # integers that change call after call (a growing sequence): start afresh
                COMPILED.clear()
            COMPILED[spec] = compiled, rest
        return
    compiled, rest = compiled
    if callable(grid):
        grid = grid({**kwargs, **config_kwargs})
    grid = (*grid, 1, 1)  # padded to its three axes
    if launch_hooks():  # someone (a profiler such as Proton) asked to hear of every launch: Triton tells them
        compiled[grid](*args, *rest)
        return
    # compiled.run is the launcher Triton generated, in C, for this kernel: it reads each argument
    # (a tensor's address), then hands the kernel to the driver on the current stream. The three
    # Nones: no launch metadata, no hooks to call (compiled[grid] would build the metadata and call
    # Triton's empty hook chains). What the direct launch saves: lesson 1's RESULTS.md, "Host cost
    # per call", add_kernel[grid](...) against common.launch.
    compiled.run(grid[0], grid[1], grid[2], current_stream(), compiled.function, compiled.packed_metadata,
                 None, None, None, *args, *rest)


def launch_hooks() -> bool:
    """Has anything asked Triton to call it around each launch (triton.knobs.runtime's hooks)?"""
    return bool(knobs.runtime.launch_enter_hook.calls or knobs.runtime.launch_exit_hook.calls)


def current_stream() -> int:
    """The current CUDA stream of the current device, as the driver knows it (Triton launches there too)."""
    return torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())


def specialization(args) -> list:
    """What Triton compiles a kernel for, argument by argument, or more: a tensor's dtype, device and
    whether its address is a multiple of 16 bytes; an integer itself (Triton looks at its class: 1,
    a multiple of 16, 64-bit); anything else with its type (1.0 and True equal 1 in Python, but
    Triton compiles a float, a bool and an integer differently)."""
    return [a if type(a) is int else  # most arguments: sizes and strides (tested first: it is the cheaper test)
            (a.dtype, a.get_device(), a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor) else (type(a), a)
            for a in args]
