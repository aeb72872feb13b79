"""``OptunaSearch`` that tells its Optuna study each trial's state the way the Optuna executor does.

Ray's ``OptunaSearch.on_trial_complete`` tells ``COMPLETE`` with the last reported metric
whenever there is one, so a trial a scheduler stopped (ASHA) reaches the sampler as a finished
trial, a diverged one as ``COMPLETE`` with its best finite loss (the sampler may rank it best),
and one whose only value is nan stays ``RUNNING`` (Optuna refuses ``tell(nan)``). `StudySearch`
reads the trial's state from its last report (`sweep.schema.ATTR_STATE`) instead:

=====================================  ==================
sweep state (or Ray event)             Optuna trial state
=====================================  ==================
``COMPLETE``, ``INFEASIBLE``           ``COMPLETE`` (the reported value; an infeasible trial
                                       reports the corpus's unigram baseline)
``PRUNED``, or stopped by the          ``PRUNED``
scheduler before it reported a state
``DIVERGED``, ``FAILED``, raised       ``FAIL``
=====================================  ==================

It also takes the finished trials of an earlier run of the study (`seed_trials`), so a rerun
whose Tune experiment cannot be restored does not train a finished config again, and queues
the params of its interrupted trials to be trained first (`retry_trials`), each Optuna trial
naming the trial it retries (user attribute `sweep.schema.ATTR_RETRY_OF`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

import optuna
from optuna.trial import TrialState as OptunaState
from ray.tune.search.optuna import OptunaSearch

from sweep.schema import ATTR_RETRY_OF, ATTR_STATE, TrialState

__all__ = ["StudySearch", "optuna_state"]

log = logging.getLogger(__name__)

_TO_OPTUNA = {TrialState.COMPLETE: OptunaState.COMPLETE,
              TrialState.INFEASIBLE: OptunaState.COMPLETE,
              TrialState.PRUNED: OptunaState.PRUNED,
              TrialState.DIVERGED: OptunaState.FAIL,
              TrialState.FAILED: OptunaState.FAIL}


def optuna_state(result: Mapping[str, Any] | None, error: bool = False) -> OptunaState:
    """The Optuna state of a Ray trial that ended with last report ``result``.

    Args:
        result: The trial's last report (None when it reported nothing).
        error: Whether the trial raised (Ray's ``on_trial_complete(error=True)``).
    """
    if error:
        return OptunaState.FAIL
    state = (result or {}).get(ATTR_STATE)
    if state is None:  # stopped by the scheduler before it could say how it ended
        return OptunaState.PRUNED
    return _TO_OPTUNA.get(TrialState(state), OptunaState.FAIL)


class StudySearch(OptunaSearch):
    """``OptunaSearch`` whose Optuna trials end in the trial's own state (module docstring).

    A ``COMPLETE`` trial whose value Optuna refuses (nan, or missing) is told ``FAIL``: it never
    stays ``RUNNING`` in the searcher's study.
    """

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return super().on_trial_complete(trial_id, result, error)
        ot_trial = self._ot_trials[trial_id]
        state = optuna_state(result, error)
        values = None
        if state is OptunaState.COMPLETE:
            values = self._values(result)
            if values is None:
                state = OptunaState.FAIL
        self._ot_study.tell(ot_trial, values, state=state)
        self._completed_trials.add(trial_id)

    def _values(self, result: Mapping[str, Any]) -> float | list[float] | None:
        metrics = self.metric if isinstance(self.metric, list) else [self.metric]
        values = [result.get(m) for m in metrics]
        if any(v is None or not math.isfinite(float(v)) for v in values):
            return None
        values = [float(v) for v in values]
        return values if isinstance(self.metric, list) else values[0]

    def seed_trials(self, trials: Iterable[tuple[dict[str, Any], OptunaState,
                                                 float | list[float] | None]]) -> int:
        """Add finished trials of an earlier run to the searcher's study; returns how many.

        Args:
            trials: ``(params, state, value)`` per finished trial: the sampled params under
                their dotted keys, the Optuna state (`optuna_state`), and the value(s) told for
                a ``COMPLETE`` one (None otherwise).

        Each is added with the distributions this spec's space gives its params
        (`sweep.space.define_by_run` on a fixed trial), so the sampler models them as its own.
        A trial whose params this space cannot take (a param missing, or outside its domain) is
        left out, and the count says so.
        """
        n = 0
        for params, state, value in trials:
            sampled = self._sampled(params)
            if sampled is None:
                continue
            kept, distributions = sampled
            if state is OptunaState.COMPLETE and value is None:
                state = OptunaState.FAIL
            multi = isinstance(value, list)
            self._ot_study.add_trial(optuna.trial.create_trial(
                state=state, params=kept, distributions=distributions,
                value=None if multi or state is not OptunaState.COMPLETE else value,
                values=value if multi and state is OptunaState.COMPLETE else None,
                system_attrs=_grid_attrs(self._sampler, kept)))
            n += 1
        return n

    def _sampled(self, params: Mapping[str, Any]) -> tuple[dict, dict] | None:
        """``(params, distributions)`` of the params this space samples, None if it cannot."""
        fixed = optuna.trial.FixedTrial(dict(params))
        try:
            self._space(fixed)  # the space's define-by-run calls, at these params
        except ValueError as exc:
            log.info("trial of an earlier run not given to the searcher: %s", exc)
            return None
        return {k: params[k] for k in fixed.distributions}, fixed.distributions

    def queue_points(self, points: Iterable[Mapping[str, Any]]) -> None:
        """Queue ``points`` (flat params) as new trials, asked before any the sampler draws."""
        for point in points:
            self._ot_study.enqueue_trial(dict(point), skip_if_exists=False)

    def retry_trials(self, trials: Iterable[tuple[int, dict[str, Any]]]) -> list[int]:
        """Queue interrupted trials of an earlier run to be trained again, first.

        Args:
            trials: ``(number, params)`` per interrupted trial, params under their dotted keys
                (those this space does not sample are left out).

        Returns:
            The numbers queued, in order; a trial whose params this space cannot take is not.
            Call after `seed_trials`: Optuna numbers queued trials as it numbers added ones.
        """
        queued = []
        for number, params in trials:
            sampled = self._sampled(params)
            if sampled is None:
                continue
            self._ot_study.enqueue_trial(sampled[0], user_attrs={ATTR_RETRY_OF: int(number)},
                                         skip_if_exists=False)
            queued.append(int(number))
        return queued


def _grid_attrs(sampler: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """What ``GridSampler`` marks its own trials with (``grid_id``), for an added trial.

    ``GridSampler`` skips the grid points of finished trials carrying ``grid_id`` and its search
    space; a trial added without them would leave its point to be trained again.
    """
    if not isinstance(sampler, optuna.samplers.GridSampler):
        return {}
    point = tuple(params.get(name) for name in sampler._param_names)
    try:
        grid_id = sampler._all_grids.index(point)
    except ValueError:
        return {}
    return {"grid_id": grid_id, "search_space": sampler._search_space}
