"""What a trial tells its executor: the `Reporter` it reports to and the `TrialResult` it ends with.

A reporter is the executor's side of a trial: Optuna and Ray Tune adapters implement its two
methods; `NullReporter` lets a trial run with no executor at all (like Optuna's ``FixedTrial``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from sweep.schema import TrialState

__all__ = ["NullReporter", "Reporter", "TrialResult"]


@runtime_checkable
class Reporter(Protocol):
    """What an executor gives the runner: a sink for evaluations and a pruning signal."""

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        """Receive the metrics of an evaluation after ``tokens`` training tokens."""

    def should_stop(self) -> bool:
        """Whether to stop the trial now (it ends as ``PRUNED``)."""


class NullReporter:
    """A reporter that records nothing and never prunes."""

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        pass

    def should_stop(self) -> bool:
        return False


@dataclass
class TrialResult:
    """Outcome of a trial (or of the training done so far, between chunks).

    Attributes:
        state: ``COMPLETE``, ``PRUNED``, ``DIVERGED`` or ``FAILED``; ``RUNNING`` between chunks.
        best_val_loss: Lowest finite ``val_loss`` (nats/token), nan if none.
        final_val_loss: ``val_loss`` of the last evaluation, nan if none.
        tokens: Training tokens seen.
        steps: Optimizer steps taken.
        wall_s: Wall time of training and evaluation, seconds.
        train_flops: tokens * ``sweep_models.cost.flops_per_token(config, train=True)``.
        mfu: Model FLOPs utilisation of the training steps, None where the peak is unknown.
        n_params: Parameters of the model (tied weights once).
        baseline_unigram_loss: The corpus's unigram entropy on val, nats/token.
        entropy_rate: The corpus's entropy rate (synthetic sources), else None.
        fail_reason: Why a trial diverged or failed, else None.
        device: The torch device it trained on (``cpu``, ``cuda:0``), tag ``sweep.device``.
        history: One dict per evaluation: ``tokens`` and the reported metrics.
    """

    state: TrialState
    best_val_loss: float
    final_val_loss: float
    tokens: int
    steps: int
    wall_s: float
    train_flops: float
    mfu: float | None
    n_params: int
    baseline_unigram_loss: float
    entropy_rate: float | None = None
    fail_reason: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    device: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-value dict (JSON-serialisable; nan stays a float)."""
        return asdict(self)
