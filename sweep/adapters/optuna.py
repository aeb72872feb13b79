"""Optuna's private parts the service uses, in one place. Checked against Optuna 5.0.0.

- A trial's storage record (``Study._storage``, ``FrozenTrial._trial_id``): reconciling a trial
  that another process ran (its user attributes, its state) has no public API, nor ending a
  queued trial that never started (``Study.tell`` takes running trials only).
- The fixed params of a queued trial: ``Study.enqueue_trial`` keeps them in system attribute
  ``fixed_params`` until the trial starts.
- `GridSampler`'s grid (``_param_names``, ``_all_grids``, ``_search_space``): a trial added to a
  study from another run must carry the ``grid_id`` the sampler marks its own trials with.
- The system attributes ``Trial.set_constraint`` writes (``constraints:<name>``), for a trial
  added whole with ``create_trial``.
- The logger of ``optuna.study._optimize``, which warns of every trial that raised.
- `FrozenStudy`, the type a storage's ``get_all_studies`` returns (``optuna.study._frozen``).
- ``Study._thread_local.in_optimize_loop`` and ``Study._stop_flag``: a searcher that tells trials
  outside ``Study.optimize`` (Ray Tune's) must take ``GridSampler``'s ``Study.stop`` calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial, TrialState

__all__ = ["OPTIMIZE_LOGGER", "FrozenStudy", "constraint_attrs", "fixed_params", "grid_attrs",
           "handle", "reload", "set_state", "tell_outside_optimize"]

#: The logger Optuna's optimize loop warns on.
OPTIMIZE_LOGGER = "optuna.study._optimize"


def handle(study: optuna.Study, trial: FrozenTrial) -> optuna.Trial:
    """A live `optuna.Trial` of any running trial of ``study``, whichever process runs it.

    Its public methods (``set_user_attr``, ``set_constraint``) then write to the storage.
    """
    return optuna.Trial(study, trial._trial_id)


def set_state(study: optuna.Study, trial: FrozenTrial, state: TrialState,
              values: Sequence[float] | None = None) -> None:
    """End any trial of ``study`` (running or queued) in ``state`` with ``values``.

    Raises:
        optuna.exceptions.UpdateFinishedTrialError: The trial had ended meanwhile.
    """
    study._storage.set_trial_state_values(trial._trial_id, state,
                                          list(values) if values is not None else None)


def tell_outside_optimize(study: optuna.Study, trial: Any, values: Any,
                          state: TrialState) -> None:
    """``study.tell(trial, values, state=state)`` from outside ``Study.optimize``.

    ``GridSampler.after_trial`` calls ``Study.stop`` once every grid point has a trial, and
    ``Study.stop`` raises ``RuntimeError`` outside ``optimize`` (after the trial's end is
    stored), so a searcher that tells trials itself (Ray Tune's) would crash on the last one.
    Here the stop is taken as inside ``optimize`` and then dropped: the caller decides how
    many trials to run.
    """
    local = study._thread_local
    if local.in_optimize_loop:
        study.tell(trial, values, state=state)
        return
    local.in_optimize_loop = True
    try:
        study.tell(trial, values, state=state)
    finally:
        local.in_optimize_loop = False
        study._stop_flag = False


def reload(study: optuna.Study, trial: FrozenTrial) -> FrozenTrial:
    """``trial`` as the storage holds it now."""
    return study._storage.get_trial(trial._trial_id)


def fixed_params(trial: FrozenTrial) -> dict[str, Any]:
    """The params ``Study.enqueue_trial`` fixed for a queued trial (empty for a sampled one)."""
    return dict(trial.system_attrs.get("fixed_params", {}))


def grid_attrs(sampler: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """What ``GridSampler`` marks its own trials with (``grid_id``), for an added trial.

    ``GridSampler`` skips the grid points of finished trials carrying ``grid_id`` and its search
    space; a trial added without them would leave its point to be trained again. Empty for
    another sampler, or params off the grid.
    """
    if not isinstance(sampler, optuna.samplers.GridSampler):
        return {}
    point = tuple(params.get(name) for name in sampler._param_names)
    try:
        grid_id = sampler._all_grids.index(point)
    except ValueError:
        return {}
    return {"grid_id": grid_id, "search_space": sampler._search_space}


def constraint_attrs(names: Sequence[str], values: Sequence[float]) -> dict[str, float]:
    """The system attributes ``Trial.set_constraint(name, value)`` writes, for `create_trial`."""
    from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

    return {f"{_CONSTRAINTS_KEY}:{name}": float(value)
            for name, value in zip(names, values, strict=True)}
