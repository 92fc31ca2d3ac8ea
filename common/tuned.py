"""Autotuners' picks, recorded per GPU model, so that a first run on a fresh GPU skips the timing.

triton.autotune times every configuration of its list the first time it meets a new key (the
values of its `key` arguments and the tensors' dtypes), compiling each one first: on a fresh GPU
that is most of a lesson's first run. (cache_results=True keeps the picks in Triton's cache
directory, which helps the second run only.) A pick depends on the key and the GPU model alone, so
the course keeps one run's picks per model, in common/tuned/<model>.json:

    {"gpu": "NVIDIA H100 80GB HBM3", ..., "picks": {"matmul_kernel_tuned": [[key, configuration], ...]}}

and `recorded(name, autotuner)`, where an op file builds its autotuner, puts the picks recorded for
this process's GPU in the autotuner's cache (its public `cache` attribute: key -> Config), as if it
had timed them. A key without a pick (another size, another GPU model) is timed as before. A
configuration that is no longer in the autotuner's list is left out: the list decides.

A launcher that chooses among configurations itself, where an autotuner cannot (lesson 4's split
K is two launches), keeps its picks the same way: `picks(name, valid)` is its dict, key ->
configuration, holding this GPU's recorded picks that valid() accepts; its tuning adds to it, and
a recording run writes it with the autotuners' picks. Lesson 4's (hopper.tune, for the products of
lesson 6's step) come from its --full run of section 17:

    COURSE_RECORD_PICKS=1 python lesson04_matmul/main.py --full --sections layers

Recording, on the GPU: the lessons' default runs, which meet the keys a first run meets, each with
empty caches (common/first_run.py), or one lesson's run as it is:

    python -m common.first_run --record lesson04_matmul lesson05_flash_attention lesson06_gpt lesson07_hopper
    COURSE_RECORD_PICKS=1 python lesson05_flash_attention/main.py

With COURSE_RECORD_PICKS=1 in the environment (read once, at import, as common/device.py reads
TRITON_INTERPRET), no recorded pick is used, every key is timed, and at exit the process adds what
its autotuners picked to its GPU's file (a child process of the run adds its own).
"""
import atexit
import datetime
import functools
import json
import os
import re

import torch

from common.device import INTERPRET, ROOT, gpu_name

FOLDER = os.path.join(ROOT, "common", "tuned")
RECORDING = os.environ.get("COURSE_RECORD_PICKS") == "1" and not INTERPRET
AUTOTUNERS = {}  # name -> the autotuner recorded() was handed, for the picks written at exit
PICKED = {}  # name -> a launcher's picks (picks()), for the picks written at exit


def path(gpu: str) -> str:
    """The file of a GPU model's picks: its name in lower case, words joined by '_'."""
    return os.path.join(FOLDER, re.sub(r"[^a-z0-9]+", "_", gpu.lower()).strip("_") + ".json")


def described(config) -> dict:
    """A triton.Config as the file holds it: its block sizes, num_warps and num_stages."""
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


@functools.cache
def read(gpu: str) -> dict:
    """The picks recorded for `gpu`: {autotuner name: [[key, configuration], ...]} ({} if none)."""
    try:
        with open(path(gpu)) as f:
            return json.load(f)["picks"]
    except FileNotFoundError:
        return {}


def recorded(name: str, autotuner):
    """`autotuner` (a triton.autotune of an op file, `name` its variable's name), its cache holding
    the picks recorded for this GPU. Returns it."""
    AUTOTUNERS[name] = autotuner
    if not (INTERPRET or RECORDING) and torch.cuda.is_available():  # (a compile-only process has no GPU)
        seed(autotuner, read(gpu_name()).get(name, []))
    return autotuner


def picks(name: str, valid) -> dict:
    """A launcher's own picks, where an autotuner cannot choose (lesson 4's split K is two launches):
    a dict key -> configuration that the launcher looks in and its tuning writes to, holding the
    picks recorded for this GPU for which valid(key, configuration) holds (keys as tuples)."""
    table = PICKED[name] = {}
    if not (INTERPRET or RECORDING) and torch.cuda.is_available():
        table.update((tuple(key), config) for key, config in read(gpu_name()).get(name, [])
                     if valid(tuple(key), config))
    return table


def seed(autotuner, rows: list) -> None:
    """Put each [key, configuration] of `rows` in the autotuner's cache, as if it had timed that key;
    a configuration its list no longer holds is left out (that key is timed)."""
    listed = {json.dumps(described(c), sort_keys=True): c for c in autotuner.configs}
    for key, config in rows:
        config = listed.get(json.dumps(config, sort_keys=True))
        if config is not None:
            autotuner.cache[tuple(key)] = config


def write() -> None:
    """Add this process's picks to its GPU's file, under a lock (a run's processes may write at once)."""
    import fcntl

    import triton

    gpu = gpu_name()
    picks = {name: [[list(key), described(config)] for key, config in autotuner.cache.items()]
             for name, autotuner in AUTOTUNERS.items() if autotuner.cache}
    picks.update({name: [[list(key), config] for key, config in table.items()] for name, table in PICKED.items() if table})
    if not picks:
        return
    os.makedirs(FOLDER, exist_ok=True)
    with open(path(gpu), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        old = json.loads(f.read() or '{"picks": {}}')["picks"]
        for name, rows in picks.items():  # a key recorded again takes the new pick
            merged = {json.dumps(key): config for key, config in old.get(name, []) + rows}
            old[name] = [[json.loads(key), config] for key, config in sorted(merged.items())]
        f.seek(0)
        f.truncate()
        head = {"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__,
                "date": datetime.date.today().isoformat(), "recorded by": "COURSE_RECORD_PICKS=1 python LESSON/main.py"}
        lines = [f'  {json.dumps(name)}: [\n' + ",\n".join(f"    {json.dumps(row)}" for row in rows) + "\n  ]"
                 for name, rows in sorted(old.items())]
        f.write(json.dumps(head)[:-1] + ',\n "picks": {\n' + ",\n".join(lines) + "\n }\n}\n")


if RECORDING:
    atexit.register(write)
