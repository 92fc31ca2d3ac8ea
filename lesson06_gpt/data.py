"""Lesson 6's data: the bytes of this repository's own text, a fixed split, random windows.

A byte-level tokenizer is no tokenizer at all: each byte of UTF-8 text is a token, so the vocabulary
is the 256 byte values and any text file is a dataset (main.py, section 1, says more).
"""
import glob
import os
import pathlib

from common.device import DEVICE, ROOT

import torch

from common.checks import whole

WINDOW = 65  # the toy model's seq + 1 bytes: a window of inputs and, one byte ahead, their targets
MIN_BYTES = 10 * (WINDOW + 1)  # the shortest corpus whose validation split (its last 10%) holds a window


def corpus_files() -> list[str]:
    """The repository's text, in a fixed order: the README, then every lesson's and helper's Python."""
    files = [os.path.join(ROOT, "README.md")]
    for pattern in ("lesson0*/*.py", "common/*.py"):  # not the exercises: a learner's edits would move every number
        files += sorted(glob.glob(os.path.join(ROOT, pattern)))
    return files


def file_problem(path: str) -> str | None:
    """What keeps the file `path` from being a corpus (None: nothing): it is not there, or it is too
    short for both splits to hold a window. The chapter's --data asks at once (a usage error)."""
    if not os.path.isfile(path):
        return f"{path}: no such file"
    if os.path.getsize(path) < MIN_BYTES:
        return (f"{path} holds {os.path.getsize(path)} bytes: too few for a validation split (its last 10%) of "
                f"one window of {WINDOW} bytes; a corpus takes {MIN_BYTES} bytes or more")
    return None


def load_bytes(path: str | None = None) -> torch.Tensor:
    """The corpus as a 1-D tensor of byte values (int64 token ids): the file `path`, or this repository's text."""
    if path is not None:
        problem = file_problem(path)
        if problem:
            raise SystemExit(f"--data {problem}")
        data = pathlib.Path(path).read_bytes()
    else:
        data = b"".join(pathlib.Path(f).read_bytes() for f in corpus_files())
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def split(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed train / validation split: the first 90% and the last 10%."""
    cut = int(0.9 * len(data))
    return data[:cut], data[cut:]


def batch(data: torch.Tensor, batch_size: int, seq: int, generator: torch.Generator) -> tuple:
    """(inputs, targets): batch_size windows at random offsets, targets one byte ahead, on DEVICE."""
    batch_size, seq = whole("batch_size", batch_size), whole("seq", seq)
    if len(data) < seq + 2:  # (the starts are drawn from [0, len - seq - 1): one at least)
        raise ValueError(f"{len(data)} tokens hold no window of seq + 1 = {seq + 1} tokens: a longer text, or a "
                         "shorter seq")
    starts = torch.randint(0, len(data) - seq - 1, (batch_size,), generator=generator).tolist()
    x = torch.stack([data[s:s + seq] for s in starts])
    y = torch.stack([data[s + 1:s + seq + 1] for s in starts])
    if DEVICE == "cuda":  # pinned whole and non_blocking: the host goes on while the copy waits its turn
        # (main.py, section 8, says why a pageable copy, or a strided view of a pinned one, would wait)
        return x.pin_memory().to(DEVICE, non_blocking=True), y.pin_memory().to(DEVICE, non_blocking=True)
    return x, y
