"""What a Ray trainable tells Ray Tune.

`TuneReporter` sends each evaluation to `ray.tune.report`; the final report carries the trial's
state (`sweep.schema.ATTR_STATE`).
"""

from __future__ import annotations

import math
from typing import Any

from ray import tune

from sweep.adapters.ray import session_alive
from sweep.schema import ATTR_STATE, CONFIG_KEYS, METRIC_TOKENS, METRIC_VAL_LOSS
from sweep.spec import StudySpec

__all__ = ["Ended", "TuneReporter", "cost_report", "final_report", "trial_params"]

class Ended(BaseException):
    """Ray ended this trial (or this incarnation of a PBT member); leave its MLflow run as it is.

    A `BaseException`, so no ``except Exception`` on the way (the trainer's, a run's) records
    it as the trial's failure.
    """


class TuneReporter:
    """`sweep.train.Reporter` that sends each evaluation to `ray.tune.report`.

    Each report is ``{**metrics, "tokens": tokens, **extra}``, except the evaluation at
    ``budget_tokens`` (the end of the budget): the trainable's final report, with the trial's
    state, stands for it, so a scheduler rung there cannot turn a finished trial into a pruned
    one. The run's held writes (`sweep.tracking.TrialRun.send_held`: what the trial opened
    with, its evaluations) are sent before each report, where Ray may end the thread, so none
    is lost with it, and a short trial's go with its end. When Ray ends the trial while it
    waits in ``report`` (a scheduler stopped it, or the study was interrupted), the session
    exits the thread with ``SystemExit``, or it has shut the session down by the next
    evaluation. Then nothing more is reported, and the trial's run (``run``, when given) is
    detached and `Ended` raised: the driver, which knows why Ray ended the trial, ends the run
    (``PRUNED`` for a scheduler's stop, `sweep.executors.ray.callback.StudyCallback`;
    ``INTERRUPTED`` for a study stopped by a signal, `sweep.executors.ray.executor.run`). Without
    a run, ``should_stop()`` becomes True.
    """

    def __init__(self, extra: dict[str, Any] | None = None, *,
                 budget_tokens: int | None = None, run: Any = None) -> None:
        self.extra = dict(extra or {})
        self.budget_tokens = budget_tokens
        self.run = run  # the trial's `sweep.tracking.TrialRun`, left to the driver on `Ended`
        self.stopped = False

    def _ended(self) -> None:
        self.stopped = True
        if self.run is not None:
            self.run.detach()
            raise Ended

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        if self.stopped or (self.budget_tokens is not None and tokens >= self.budget_tokens
                            and ATTR_STATE not in metrics):
            return  # the evaluation at the budget's end goes with the final report
        if not session_alive():
            self._ended()
            return
        if self.run is not None:
            self.run.send_held()
        try:
            tune.report({**metrics, METRIC_TOKENS: int(tokens), **self.extra})
        except SystemExit:
            self._ended()

    def should_stop(self) -> bool:
        return self.stopped


def trial_params(config: dict[str, Any]) -> dict[str, Any]:
    """The sampled params of a Ray config: every key but the service's own (trial number...)."""
    return {k: v for k, v in config.items() if k not in CONFIG_KEYS}


def cost_report(spec: StudySpec, cost: dict[str, float]) -> dict[str, float]:
    """The cost objectives every report carries (multi-objective searches read them)."""
    return {name: float(cost.get(name, math.nan)) for name in spec.search.objectives
            if name != METRIC_VAL_LOSS}


def final_report(reporter: TuneReporter, tokens: int, values: dict[str, Any]) -> None:
    """Send a trial's last report: ``values`` (its state among them) win over the extras."""
    reporter.extra = {k: v for k, v in reporter.extra.items() if k not in values}
    reporter.report(tokens, values)
