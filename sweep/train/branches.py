"""WSD branches: one stable-phase trunk per shape serves every budget the shape trains for.

With ``schedule: wsd`` the learning rate is the peak from the end of the warmup to the
cooldown start, ``max(warmup, T * (1 - decay_fraction))`` tokens, whatever the budget T
(`sweep.train.schedule`). So runs of one model on one data stream with the same settings and
budgets T_1 < T_2 < ... are identical step for step up to T_1's cooldown start, and the run
for T_2 can start from a checkpoint of the run for T_1 taken there instead of from step 0
(Hagele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training
Durations", section 4: cooldowns branched from one constant-rate run reproduce the scaling
curve of separate runs). Each budget keeps its own run, cooled down on its own branch: its
final loss is exactly that of a run trained for T_k alone, and it is its own point of the
IsoFLOP curve.

Cost and trade-off. The budgets of one shape cost T_max + decay_fraction * (the sum of the
other T_k) tokens instead of the sum of all T_k: for a shape trained at three budgets 3x apart
with a 20% cooldown, 9.8 T_1 instead of 13 T_1 (25% fewer tokens). In return the
warmup must be a fixed number of tokens (a fraction of the budget would differ per budget), the
cooldown is 10-20% of every budget, the stable-phase evaluations lie above a cosine run's at
equal tokens (only each run's cooled-down end is a valid point of a scaling curve), and budgets
must run in ascending order on a file system the trials share (a trial that finds no trunk
trains from step 0: the same result, at the full cost).

Storage. The trunk of a (model, corpus, training settings) triple is
``<folder>/<key>/stable-<tokens>.pt``, ``key`` a hash of the model config, the corpus's
content hash and the train config without its budget and evaluation fields. Only the latest
trunk point is kept, so disk use is one checkpoint per shape. A missing or unreadable trunk
means training from step 0; a trunk that cannot be written (disk full) is skipped with a note.
The trial's result never depends on either.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep.schema import TrialState
from sweep.train.checkpoint import CheckpointError
from sweep.train.config import BUDGET_FIELDS
from sweep.train.reporter import Reporter, TrialResult
from sweep.train.schedule import wsd_stable_end

__all__ = ["BranchInfo", "check_branchable", "stable_end_tokens", "train_branch", "trunk_key"]

_TRUNK = re.compile(r"^stable-(\d+)\.pt$")
# Train fields that do not change the training trajectory before the cooldown.
_NOT_IN_KEY = (*BUDGET_FIELDS, "eval_every", "eval_tokens")


@dataclass(frozen=True)
class BranchInfo:
    """How a branched run used and left stable-phase trunks.

    Attributes:
        reused_tokens: Training tokens taken from a trunk checkpoint (0: trained from step 0).
        source: The ``meta`` of the trunk it started from (e.g. the run that wrote it); empty
            if none.
        saved_tokens: Tokens of the trunk checkpoint this run left for longer budgets; None if
            it left none.
        notes: Why a trunk was not used or not written, one line each.
    """

    reused_tokens: int = 0
    source: dict[str, Any] = field(default_factory=dict)
    saved_tokens: int | None = None
    notes: tuple[str, ...] = ()


def check_branchable(trainer: Any) -> None:
    """Check that ``trainer`` can share a trunk.

    Raises:
        ValueError: Not ``wsd``, a seconds budget, or a warmup given as a fraction.
    """
    tc = trainer.train_config
    if tc.schedule != "wsd":
        raise ValueError(f"branches need schedule 'wsd', got {tc.schedule!r}")
    if trainer.budget.total_tokens is None:
        raise ValueError("branches need a token, step or FLOP budget, not seconds")
    if 0 < tc.warmup < 1:
        raise ValueError(f"branches need warmup in tokens (>= 1) or 0, got the fraction "
                         f"{tc.warmup} (it would differ per budget)")


def stable_end_tokens(trainer: Any) -> int:
    """Where ``trainer``'s trunk is saved: `sweep.train.schedule.wsd_stable_end` of its budget."""
    b = trainer.budget
    return wsd_stable_end(b.total_tokens, b.step_tokens, b.warmup_tokens or 0,
                          trainer.train_config.decay_fraction)


def trunk_key(trainer: Any) -> str:
    """The hash naming a trainer's trunk folder: model, corpus, and settings but the budget."""
    train = {k: v for k, v in trainer.train_config.to_dict().items() if k not in _NOT_IN_KEY}
    blob = json.dumps({"model": trainer.model_config.to_dict(), "train": train,
                       "corpus": trainer.corpus.content_hash}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _trunks(folder: Path) -> list[tuple[int, Path]]:
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _TRUNK.match(p.name))]
    return sorted(found)


def train_branch(
    make_trainer: Callable[[], Any],
    reporter: Reporter | None,
    folder: Path | str,
    *,
    meta: dict[str, Any] | None = None,
) -> tuple[TrialResult, BranchInfo]:
    """Train one budget's run from the latest trunk that fits it, leaving a trunk for the next.

    1. Start from the latest ``stable-<tokens>.pt`` in this trainer's trunk folder with tokens
       at most `stable_end_tokens` (none: from step 0).
    2. Train on to `stable_end_tokens` and save the trunk there (only the latest is kept).
    3. Cool down to the end of the budget.

    Evaluations before the trunk point were reported by the runs that trained them; this run
    reports its own from there on. Its `TrialResult` counts every token the model saw
    (``tokens``, ``train_flops``, ``wall_s`` include the trunk's share; ``reused_tokens`` says
    how much that is).

    Args:
        make_trainer: Builds a fresh `sweep.train.Trainer` for this run (called again if a trunk
            turns out unreadable).
        reporter: Receives each evaluation this run makes.
        folder: The folder holding every trunk folder (e.g. ``<study>/branches``).
        meta: Plain data saved with the trunk this run leaves (e.g. its run id).

    Returns:
        The run's result and its `BranchInfo`.

    Raises:
        ValueError: The trainer cannot share a trunk (`check_branchable`).
    """
    trainer = make_trainer()
    check_branchable(trainer)
    own = Path(folder) / trunk_key(trainer)
    end = stable_end_tokens(trainer)
    notes: list[str] = []
    reused, source = 0, {}
    for tokens, path in reversed(_trunks(own)):
        if tokens > end:
            continue
        try:
            source = trainer.load_checkpoint(path)
            reused = trainer.tokens_seen
        except CheckpointError as err:
            notes.append(f"trunk {path.name} not used: {err}")
            trainer = make_trainer()  # nothing half-loaded
        break
    saved = None
    if end > trainer.tokens_seen:
        trainer.train(reporter, until_tokens=end)
        if trainer.state == TrialState.RUNNING and trainer.tokens_seen == end:
            try:
                trainer.save_checkpoint(own / f"stable-{end}.pt", meta=meta)
                saved = end
            except OSError as err:
                notes.append(f"trunk at {end} tokens not saved: {err}")
    elif reused == end > 0:
        saved = end  # this run's trunk point is the one it started from
    if saved is not None:
        for tokens, path in _trunks(own):
            if tokens < saved:
                path.unlink(missing_ok=True)
    result = trainer.train(reporter)
    return result, BranchInfo(reused, source, saved, tuple(notes))
