"""Whole-training-state checkpoints, written atomically.

A checkpoint holds everything a `sweep.train.Trainer` needs to continue as if never stopped:
model and optimizer state, the mutable hyperparameters, step and token counters, elapsed time,
the RNG states, the data position (batches are a pure function of seed and index, so the step
is the position) and the evaluation history. The learning-rate schedule is a pure function of
the token count (`sweep.train.schedule`), so it has no state of its own beyond the counters.

Files are written to a temporary file in the target folder and renamed over the target, so a
reader (another PBT member, a resumed worker) never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["FORMAT_VERSION", "CheckpointError", "read_checkpoint", "write_checkpoint"]

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint cannot be read or does not fit the trainer loading it."""


def write_checkpoint(path: Path | str, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically (temp file in the same folder, then rename).

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT_VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_checkpoint(path: Path | str) -> dict[str, Any]:
    """Read a checkpoint written by `write_checkpoint` (tensors loaded on the CPU).

    Raises:
        CheckpointError: Missing file, unreadable content or an unknown format version.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for corrupt files
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read: {err}") from err
    version = state.get("format") if isinstance(state, dict) else None
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has format {version!r}; expected {FORMAT_VERSION}"
        )
    return state
