"""Whole-training-state checkpoints, written atomically.

A checkpoint holds everything a `sweep.train.Trainer` needs to continue as if never stopped:
model and optimizer state, the mutable hyperparameters, step and token counters, elapsed time,
the RNG states, the data position (batches are a pure function of seed and index, so the step
is the position) and the evaluation history. The learning-rate schedule is a pure function of
the token count (`sweep.train.schedule`), so it has no state of its own beyond the counters.

`save_trainer` and `restore_trainer` are that layout, both ways. Files are written to a
temporary file in the target folder and renamed over the target, so a reader (another PBT
member, a resumed worker) never sees half a file.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sweep.schema import TrialState
from sweep.train.config import LIVE_HPARAMS

if TYPE_CHECKING:
    from sweep.train.trainer import Trainer

__all__ = ["FORMAT_VERSION", "CheckpointError", "read_checkpoint", "restore_trainer",
           "save_trainer", "write_checkpoint"]

FORMAT_VERSION = 1
# Model fields a live trainer may change: a checkpoint's model may differ from ours only there.
_LIVE_MODEL_FIELDS = tuple(k for k, section in LIVE_HPARAMS.items() if section == "model")


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


def save_trainer(trainer: Trainer, path: Path | str, meta: dict[str, Any] | None = None) -> Path:
    """Write ``trainer``'s whole training state to ``path`` atomically.

    Args:
        trainer: The trainer to save.
        path: The file to write.
        meta: Plain data (str, int, float) kept with the state and returned by
            `restore_trainer`.

    Returns:
        The path written.
    """
    return write_checkpoint(path, {
        "model_config": trainer.model_config.to_dict(),
        "train_config": trainer.train_config.to_dict(),
        "corpus_hash": trainer.corpus.content_hash,
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "hparams": trainer.hparams(),
        "counters": {"step": trainer.step, "tokens_seen": trainer.tokens_seen,
                     "loss_sum": trainer._loss_sum, "loss_n": trainer._loss_n,
                     "last_eval_tokens": trainer._last_eval_tokens,
                     "window": list(trainer._window), "state": trainer.state.value},
        "timings": dict(trainer.timings),
        "rng": {"cpu": trainer._rng_cpu, "cuda": trainer._rng_cuda},
        "data": {"seed": trainer._data_seed,
                 "next_batch": trainer.step * trainer.budget.grad_accum},
        "history": trainer.history,
        "meta": dict(meta or {}),
    })


def restore_trainer(trainer: Trainer, path: Path | str) -> dict[str, Any]:
    """Restore ``trainer``'s training state from the checkpoint at ``path``.

    The model's shape must match. Mutable hyperparameters, RNG states and the data stream
    (seed and position) take the checkpoint's values.

    Returns:
        The ``meta`` the checkpoint was saved with (empty if none).

    Raises:
        CheckpointError: Unreadable file, or a model of another shape.
    """
    ckpt = read_checkpoint(path)
    mine = {k: v for k, v in trainer.model_config.to_dict().items()
            if k not in _LIVE_MODEL_FIELDS}
    theirs = {k: v for k, v in ckpt["model_config"].items() if k not in _LIVE_MODEL_FIELDS}
    if mine != theirs:
        diff = sorted(k for k in mine if mine[k] != theirs.get(k))
        raise CheckpointError(f"checkpoint {str(path)!r} is of another model shape "
                              f"(differs in {', '.join(diff)})")
    trainer.model.load_state_dict(ckpt["model"])
    # The groups' multipliers follow from the model config, which the checkpoint's
    # matches; keep ours (a checkpoint written before groups had them has none).
    optimizer = trainer.optimizer
    mults = [(g["lr_mult"], g["wd_mult"]) for g in optimizer.param_groups]
    optimizer.load_state_dict(ckpt["optimizer"])
    for group, (lr_mult, wd_mult) in zip(optimizer.param_groups, mults, strict=True):
        group["lr_mult"], group["wd_mult"] = lr_mult, wd_mult
    trainer.set_hparams(**ckpt["hparams"])
    c = ckpt["counters"]
    trainer.step, trainer.tokens_seen = c["step"], c["tokens_seen"]
    trainer.state = TrialState(c["state"])
    trainer._loss_sum, trainer._loss_n = c["loss_sum"], c["loss_n"]
    trainer._last_eval_tokens, trainer._window = c["last_eval_tokens"], list(c["window"])
    trainer.timings = dict(ckpt["timings"])
    trainer._rng_cpu = ckpt["rng"]["cpu"]
    if trainer._rng_cuda is not None and ckpt["rng"]["cuda"] is not None:
        trainer._rng_cuda = ckpt["rng"]["cuda"]
    trainer._data_seed = ckpt["data"]["seed"]
    trainer.history = [dict(h) for h in ckpt["history"]]
    trainer.fail_reason = None
    return dict(ckpt.get("meta") or {})
