"""Trials that checkpoint as they train, so the retry of an interrupted one goes on from there.

With ``search.checkpoint_interval`` a trial trains in chunks of that many tokens and saves its
whole training state after each (`sweep.train.Trainer.save_checkpoint`: weights, AdamW state,
counters, RNG states, data position, evaluation history) to one file,
``<folder>/latest.pt``, replaced atomically each time. A trial interrupted from outside (its
process killed, Ctrl-C, a store that failed) leaves the file; its retry, a new trial with the
same parameters (`sweep.study.resume`), takes the folder over and continues from the file:
batches are a pure function of seed and step and the learning rate of the token count, so the
retry's losses are exactly those of a trial never stopped, and only the tokens after the
checkpoint are trained again. Chunks end without an evaluation of their own
(``eval_at_chunk_end=False``), so a checkpointed trial reports exactly the evaluations of one
trained at once.

A checkpoint is used only by a trainer of the same model, training settings and corpus (its
``key``); any other, or a file that cannot be read, means training from step 0, with a note.
A checkpoint that cannot be written (disk full) is skipped with a note: the trial goes on, and
an interruption then costs more tokens. The folder is deleted when the trial ends.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep.schema import METRIC_TOKENS, TrialState
from sweep.train.checkpoint import CheckpointError
from sweep.train.reporter import Reporter, TrialResult

#: The checkpoint file in a trial's checkpoint folder.
LATEST = "latest.pt"

__all__ = ["LATEST", "ResumeInfo", "checkpoint_key", "train_checkpointed"]


@dataclass(frozen=True)
class ResumeInfo:
    """How a checkpointed trial started and what it saved.

    Attributes:
        resumed_tokens: Training tokens taken from the interrupted trial's checkpoint (0:
            trained from step 0).
        source: The ``meta`` of the checkpoint it continued (e.g. the run that wrote it).
        saved: Checkpoints it wrote.
        notes: Why a checkpoint was not used or not written, one line each.
    """

    resumed_tokens: int = 0
    source: dict[str, Any] = field(default_factory=dict)
    saved: int = 0
    notes: tuple[str, ...] = ()


def checkpoint_key(trainer: Any) -> str:
    """The hash a checkpoint must carry to be continued by ``trainer``.

    SHA-256 (16 hex digits) of the model config, the whole train config and the corpus's
    content hash.
    """
    blob = json.dumps({"model": trainer.model_config.to_dict(),
                       "train": trainer.train_config.to_dict(),
                       "corpus": trainer.corpus.content_hash}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _take_over(source: Path, folder: Path, notes: list[str]) -> None:
    """Move the interrupted trial's checkpoint folder to this trial's (a rename)."""
    if not (source / LATEST).is_file() or folder.exists():
        return
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, folder)
    except OSError as err:
        notes.append(f"checkpoint of {source.name} not taken over: {err}")


def train_checkpointed(
    make_trainer: Callable[[], Any],
    reporter: Reporter,
    folder: Path | str,
    *,
    interval: int,
    resume_from: Path | str | None = None,
    meta: dict[str, Any] | None = None,
) -> tuple[TrialResult, ResumeInfo]:
    """Train to the end, checkpointing every ``interval`` tokens; continue a checkpoint first.

    1. With ``resume_from`` (the folder of the interrupted trial this one retries) holding a
       checkpoint, move it to ``folder``; a checkpoint in ``folder`` of this trainer's
       `checkpoint_key` is loaded, and its evaluations are reported to ``reporter`` again (so
       this trial's run and pruner see the whole curve).
    2. Train in chunks ending at multiples of ``interval`` tokens, saving after each one that
       did not end the trial.
    3. Delete ``folder`` once the trial has ended (any final state). An exception leaves it, for
       a retry; the caller deletes it when the exception is the trial's own fault.

    Args:
        make_trainer: Builds a fresh `sweep.train.Trainer` (called again if a checkpoint turns
            out unusable).
        reporter: Receives each evaluation.
        folder: This trial's checkpoint folder (``<study>/checkpoints/trial-<n>``).
        interval: Tokens between checkpoints (> 0).
        resume_from: The checkpoint folder of the trial this one retries, or None.
        meta: Plain data (str, int, float) saved with each checkpoint (e.g. the run id).

    Returns:
        The trial's result (its ``tokens``, ``wall_s`` and ``train_flops`` count what the
        checkpoint had trained) and its `ResumeInfo`.
    """
    if interval <= 0:
        raise ValueError(f"interval must be > 0 tokens, got {interval}")
    folder = Path(folder)
    notes: list[str] = []
    if resume_from is not None and Path(resume_from) != folder:
        _take_over(Path(resume_from), folder, notes)
    trainer = make_trainer()
    key = checkpoint_key(trainer)
    path = folder / LATEST
    resumed, source = 0, {}
    if path.is_file():
        try:
            source = trainer.load_checkpoint(path)
            if source.get("key") != key:
                raise CheckpointError("it was saved by a trial of other settings or data")
            resumed = trainer.tokens_seen
        except CheckpointError as err:
            notes.append(f"checkpoint {path.name} not used: {err}")
            trainer, source = make_trainer(), {}
    if resumed:
        for point in trainer.history:
            reporter.report(int(point[METRIC_TOKENS]),
                            {k: v for k, v in point.items() if k != METRIC_TOKENS})
            if reporter.should_stop():
                trainer.state = TrialState.PRUNED
                break
    saved, failed = 0, False
    while trainer.state == TrialState.RUNNING:
        target = (trainer.tokens_seen // interval + 1) * interval
        trainer.train(reporter, until_tokens=target, eval_at_chunk_end=False)
        if trainer.state != TrialState.RUNNING:
            break
        try:
            trainer.save_checkpoint(path, meta={**(meta or {}), "key": key})
            saved += 1
        except OSError as err:
            if not failed:
                notes.append(f"checkpoint at {trainer.tokens_seen} tokens not saved: {err}")
                failed = True
    shutil.rmtree(folder, ignore_errors=True)
    return trainer.result(), ResumeInfo(resumed, source, saved, tuple(notes))
