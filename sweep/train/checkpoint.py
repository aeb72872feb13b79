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
import pickle
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

    Only tensors and plain data are built (``torch.load(weights_only=True)``); a file that
    holds any other Python object is refused without building it.

    Raises:
        CheckpointError: Missing file, unreadable content, a Python object other than tensors
            and plain data, or an unknown format version.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        # weights_only: tensors and plain containers only; any other object (a class, a
        # function, __reduce__) is refused unbuilt, so a checkpoint never runs code.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's message advises weights_only=False, which would run the file's code; the
        # one line that says what was refused is kept instead.
        lines = [line.strip() for line in str(err).splitlines()]
        named = next((line for line in lines if "GLOBAL" in line), None)
        if named is not None:
            raise CheckpointError(
                f"checkpoint {str(path)!r} is refused: it names a Python object beyond tensors "
                f"and plain data ({named}); building it could run code, so it is not loaded "
                "(checkpoints this service writes hold none)") from None
        detail = next((line for line in lines if line.startswith("Unsupported")), None)
        raise CheckpointError(
            f"checkpoint {str(path)!r} cannot be read: not a checkpoint this service wrote"
            + (f" ({detail})" if detail else "")) from None
    except Exception as err:  # torch raises several types for corrupt files
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read: {err}") from err
    version = state.get("format") if isinstance(state, dict) else None
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has format {version!r}; expected {FORMAT_VERSION}"
        )
    return state
