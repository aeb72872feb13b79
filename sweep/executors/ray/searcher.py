"""``OptunaSearch`` that tells its Optuna study each trial's end as the trial policy says.

Ray's ``OptunaSearch.on_trial_complete`` tells ``COMPLETE`` with the last reported metric
whenever there is one, so a trial a scheduler stopped (ASHA) reaches the sampler as a finished
trial, a diverged one as ``COMPLETE`` with its best finite loss (the sampler may rank it best),
and one whose only value is nan stays ``RUNNING`` (Optuna refuses ``tell(nan)``). `StudySearch`
reads the trial's state from its last report (`sweep.schema.ATTR_STATE`) and tells what
`sweep.study.policy.told` says, as the Optuna executor does; a trial a scheduler stopped before
it could report its state is ``PRUNED``, one that raised ``FAIL``.

It also takes the finished trials of an earlier run of the study (`seed_trials`), so a rerun
whose Tune experiment cannot be restored does not train a finished config again, and queues
the params of its interrupted trials to be trained first (`retry_trials`), each Optuna trial
naming the trial it retries (user attribute `sweep.schema.ATTR_RETRY_OF`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import optuna
from optuna.trial import TrialState as OptunaState
from ray.tune.search.optuna import OptunaSearch

from sweep import space
from sweep.adapters import optuna as optuna_private
from sweep.adapters import ray as ray_private
from sweep.schema import (
    ATTR_CONSTRAINTS,
    ATTR_RETRY_OF,
    ATTR_STATE,
    METRIC_BEST_VAL_LOSS,
    METRIC_VAL_LOSS,
    TrialState,
)
from sweep.study import policy

__all__ = ["StudySearch"]

log = logging.getLogger(__name__)


class StudySearch(OptunaSearch):
    """``OptunaSearch`` whose Optuna trials end as the trial policy says (module docstring).

    Args:
        spec: The study spec (objectives, sampler).
        baseline: The corpus's unigram loss, nats/token (an infeasible trial's ``val_loss``).
        **kwargs: ``OptunaSearch``'s.
    """

    def __init__(self, *, spec: Any, baseline: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec, self.baseline = spec, baseline

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        ot_trial = ray_private.search_trial(self, trial_id)
        if ray_private.completed(self, trial_id) or ot_trial is None:
            return super().on_trial_complete(trial_id, result, error)
        told = self.told(result, error)
        if told.constraints is not None:
            space.record_constraints(ot_trial, told.constraints)
        optuna_private.tell_outside_optimize(
            ray_private.search_study(self), ot_trial,
            told.value(len(self.spec.search.objectives)), told.state)
        ray_private.mark_completed(self, trial_id)

    def told(self, result: Mapping[str, Any] | None, error: bool = False) -> policy.Told:
        """What a Ray trial that ended with last report ``result`` is told.

        Args:
            result: The trial's last report (None when it reported nothing).
            error: Whether the trial raised (Ray's ``on_trial_complete(error=True)``).
        """
        if error:
            return policy.Told(OptunaState.FAIL)
        state = (result or {}).get(ATTR_STATE)
        if result is None or state is None:  # stopped by the scheduler before it could say
            return policy.Told(OptunaState.PRUNED)
        # The last report's val_loss is the trial's best, as the trainable reports it.
        metrics = {**result, METRIC_BEST_VAL_LOSS: result.get(METRIC_BEST_VAL_LOSS,
                                                             result.get(METRIC_VAL_LOSS))}
        return policy.told(self.spec, TrialState(state), metrics, baseline=self.baseline,
                           constraints=result.get(ATTR_CONSTRAINTS))

    def seed_trials(self, trials: Iterable[tuple[dict[str, Any], policy.Told]]) -> int:
        """Add finished trials of an earlier run to the searcher's study; returns how many.

        Args:
            trials: ``(params, told)`` per finished trial: the sampled params under their
                dotted keys, and what the policy tells of it (`sweep.study.policy.told_from_run`).

        Each is added with the distributions this spec's space gives its params
        (`sweep.space.define_by_run` on a fixed trial), so the sampler models them as its own.
        A trial whose params this space cannot take (a param missing, or outside its domain) is
        left out, and the count says so.
        """
        study = ray_private.search_study(self)
        multi = len(self.spec.search.objectives) > 1
        n = 0
        for params, told in trials:
            sampled = self._sampled(params)
            if sampled is None:
                continue
            kept, distributions = sampled
            system = optuna_private.grid_attrs(ray_private.search_sampler(self), kept)
            user = {}
            if told.constraints is not None:
                system |= optuna_private.constraint_attrs(space.CONSTRAINT_NAMES,
                                                          told.constraints)
                user[ATTR_CONSTRAINTS] = told.constraints
            study.add_trial(optuna.trial.create_trial(
                state=told.state, params=kept, distributions=distributions,
                value=told.values[0] if not multi and told.values else None,
                values=told.values if multi else None,
                system_attrs=system, user_attrs=user))
            n += 1
        return n

    def _sampled(self, params: Mapping[str, Any]) -> tuple[dict, dict] | None:
        """``(params, distributions)`` of the params this space samples, None if it cannot."""
        fixed = optuna.trial.FixedTrial(dict(params))
        try:
            ray_private.search_space(self)(fixed)  # the space's define-by-run calls
        except ValueError as exc:
            log.info("trial of an earlier run not given to the searcher: %s", exc)
            return None
        return {k: params[k] for k in fixed.distributions}, fixed.distributions

    def queue_points(self, points: Iterable[Mapping[str, Any]]) -> None:
        """Queue ``points`` (flat params) as new trials, asked before any the sampler draws."""
        for point in points:
            ray_private.search_study(self).enqueue_trial(dict(point), skip_if_exists=False)

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
            ray_private.search_study(self).enqueue_trial(
                sampled[0], user_attrs={ATTR_RETRY_OF: int(number)}, skip_if_exists=False)
            queued.append(int(number))
        return queued
