"""Lesson 6's data: the bytes of this repository's own text, a fixed split, random windows.

A byte-level tokenizer is no tokenizer at all: each byte of UTF-8 text is a token, so the vocabulary
is the 256 byte values and any text file is a dataset (main.py, section 1, says more).
"""
import glob
import os
import pathlib

from common.device import DEVICE, ROOT

import torch

WINDOW = 65  # the shortest corpus holds a few windows of the toy model's seq + 1 bytes


def corpus_files() -> list[str]:
    """The repository's text, in a fixed order: the README, then every lesson's and helper's Python."""
    files = [os.path.join(ROOT, "README.md")]
    for pattern in ("lesson0*/*.py", "common/*.py"):  # not the exercises: a learner's edits would move every number
        files += sorted(glob.glob(os.path.join(ROOT, pattern)))
    return files


def load_bytes(path: str | None = None) -> torch.Tensor:
    """The corpus as a 1-D tensor of byte values (int64 token ids)."""
    if path is not None:
        if not os.path.isfile(path):
            raise SystemExit(f"--data {path}: no such file")
        data = pathlib.Path(path).read_bytes()
    else:
        data = b"".join(pathlib.Path(f).read_bytes() for f in corpus_files())
    if len(data) < 4 * WINDOW:
        raise SystemExit(f"{path or 'the corpus'} holds {len(data)} bytes: too few for windows of {WINDOW}")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def split(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed train / validation split: the first 90% and the last 10%."""
    cut = int(0.9 * len(data))
    return data[:cut], data[cut:]


def batch(data: torch.Tensor, batch_size: int, seq: int, generator: torch.Generator) -> tuple:
    """(inputs, targets): batch_size windows at random offsets, targets one byte ahead, on DEVICE."""
    starts = torch.randint(0, len(data) - seq - 1, (batch_size,), generator=generator)
    windows = torch.stack([data[s:s + seq + 1] for s in starts.tolist()])
    return windows[:, :-1].to(DEVICE), windows[:, 1:].to(DEVICE)
