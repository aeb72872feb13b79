"""The one trial policy, for both executors and for resume.

- **What a searcher is told** of a trial that ended (`told`): the Optuna state and value(s)
  for each `TrialState`, whether the trial ran live (the Optuna objective, Ray's searcher) or is
  read back from MLflow (an Optuna trial whose process died after its run ended; an earlier
  run's trials given to a new Ray searcher):

  ==============  ==========================================================================
  sweep state     Optuna state and value
  ==============  ==========================================================================
  ``COMPLETE``    ``COMPLETE``, its objective values (`objective_values`); ``FAIL`` when one
                  is not finite (nan never ranks as best)
  ``INFEASIBLE``  with a sampler that takes constraints (TPE, GP, NSGA-II) and the trial's
                  constraint values known: ``COMPLETE``, the constraints recorded and
                  ``val_loss`` no better than the corpus's unigram baseline; else ``PRUNED``
  ``PRUNED``      ``PRUNED``
  ``DIVERGED``,   ``FAIL``
  ``FAILED``,
  ``INTERRUPTED``
  ==============  ==========================================================================

- **Which interrupted trials run again** (`to_retry`): every trial interrupted from outside
  and not retried yet, unless its point has been interrupted `MAX_RETRIES` times in a row (a
  trial that kills its process each time is given up). A retry names the trial it retries.

Ending the runs of interrupted trials is `sweep.tracking.TrialContext.end_running`, for both
executors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import TrialState as OptunaState

from sweep.schema import (
    METRIC_BEST_VAL_LOSS,
    METRIC_FLOPS_PER_TOKEN,
    METRIC_MEM_ESTIMATE,
    METRIC_N_PARAMS,
    METRIC_VAL_LOSS,
    TrialState,
)

__all__ = ["CONSTRAINED_SAMPLERS", "MAX_RETRIES", "Attempt", "Told", "objective_values",
           "to_retry", "told", "told_from_run"]

#: Times one point is queued again after interruptions before it is given up.
MAX_RETRIES = 3
#: Samplers that rank infeasible trials by their constraint values (Optuna 5's
#: ``Trial.set_constraint``): an infeasible trial is told to them, not hidden as pruned.
CONSTRAINED_SAMPLERS = ("tpe", "gp", "nsga2")


@dataclass(frozen=True)
class Told:
    """What a searcher is told of one ended trial.

    Attributes:
        state: The Optuna state (``COMPLETE``, ``PRUNED`` or ``FAIL``).
        values: The objective values in ``search.objectives`` order (``COMPLETE`` only).
        constraints: Constraint values to record with it (<= 0 feasible), or None.
    """

    state: OptunaState
    values: list[float] | None = None
    constraints: list[float] | None = None

    def value(self, n_objectives: int) -> float | list[float] | None:
        """The value as Optuna takes it: one float for one objective, else the list."""
        if self.values is None:
            return None
        return self.values if n_objectives > 1 else self.values[0]


def objective_values(objectives: Sequence[str], metrics: Mapping[str, Any]) -> list[float]:
    """A trial's objective values: ``val_loss`` is its best val loss, the others its cost.

    Args:
        objectives: ``search.objectives``.
        metrics: ``best_val_loss`` (nats/token) and the cost metrics by name (a trial's
            `TrialOutcome` or its MLflow run's metrics); a missing one is nan.
    """
    return [float(metrics.get(METRIC_BEST_VAL_LOSS if name == METRIC_VAL_LOSS else name,
                              math.nan)) for name in objectives]


def told_from_run(spec: Any, run: Mapping[str, Any], *, baseline: float,
                  device: str | None = None) -> Told:
    """`told` for a trial read back from MLflow (`sweep.tracking.read_trials`' dict).

    An infeasible trial's constraint values are recomputed from its logged cost metrics and
    the memory limit of ``device`` (default: its ``train.device``), as the trial computed them.
    """
    metrics = run["metrics"]
    constraints = None
    if all(name in metrics for name in (METRIC_N_PARAMS, METRIC_FLOPS_PER_TOKEN,
                                        METRIC_MEM_ESTIMATE)):
        from sweep import space

        device = device or str(run["params"].get("train.device", "auto"))
        constraints = space.constraint_values(
            spec, metrics, memory_limit_bytes=space.memory_limit_bytes(spec, device))
    return told(spec, TrialState(run["state"]), metrics, baseline=baseline,
                constraints=constraints)


def told(spec: Any, state: TrialState, metrics: Mapping[str, Any], *, baseline: float,
         constraints: Sequence[float] | None = None) -> Told:
    """What the searcher is told of a trial that ended in ``state`` (module docstring).

    Args:
        spec: The study spec (its ``search.objectives`` and ``search.sampler``).
        state: The trial's final `TrialState`.
        metrics: Its ``best_val_loss`` and cost metrics (`objective_values`).
        baseline: The corpus's unigram loss, nats/token: an infeasible trial's ``val_loss``.
        constraints: The trial's constraint values, when it was priced.
    """
    objectives = list(spec.search.objectives)
    if state is TrialState.COMPLETE:
        values = objective_values(objectives, metrics)
        if all(math.isfinite(v) for v in values):
            return Told(OptunaState.COMPLETE, values)
        return Told(OptunaState.FAIL)
    if state is TrialState.INFEASIBLE:
        if spec.search.sampler in CONSTRAINED_SAMPLERS and constraints is not None:
            values = objective_values(objectives, {**metrics, METRIC_BEST_VAL_LOSS: baseline})
            if all(math.isfinite(v) for v in values):
                return Told(OptunaState.COMPLETE, values, [float(c) for c in constraints])
        return Told(OptunaState.PRUNED)
    if state is TrialState.PRUNED:
        return Told(OptunaState.PRUNED)
    return Told(OptunaState.FAIL)


@dataclass(frozen=True)
class Attempt:
    """One trial of a study's history, as the retry rule sees it.

    Attributes:
        number: The trial number.
        state: Its `TrialState` (``INTERRUPTED`` for one stopped from outside).
        retry_of: The number of the interrupted trial it retries, or None.
    """

    number: int
    state: TrialState
    retry_of: int | None = None


def to_retry(history: Iterable[Attempt]) -> list[int]:
    """The interrupted trials to queue again, oldest first (module docstring).

    A trial is retried once (the trials naming it in ``retry_of`` are its retries), and a
    chain of `MAX_RETRIES` interrupted attempts at one point ends it.
    """
    history = list(history)
    retry_of = {a.number: a.retry_of for a in history}
    retried = {a.retry_of for a in history if a.retry_of is not None}
    out = []
    for attempt in sorted(history, key=lambda a: a.number):
        if attempt.state is not TrialState.INTERRUPTED or attempt.number in retried:
            continue
        attempts, back = 1, attempt.retry_of
        while back is not None and attempts <= MAX_RETRIES:
            attempts, back = attempts + 1, retry_of.get(back)
        if attempts <= MAX_RETRIES:
            out.append(attempt.number)
    return out
