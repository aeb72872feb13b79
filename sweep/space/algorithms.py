"""The search algorithms a spec names: Optuna samplers and pruners.

A pruner sees a trial's evaluations by index (1-based, `sweep.executors.optuna.OptunaReporter`)
and may stop it only once it has trained ``search.prune_warmup`` of its budget
(`warmup_step`) and, for the median pruner, enough trials have completed (`pruner_startup_trials`).
Early evaluations favour high learning rates, so a pruner that judges at the first evaluation
of a small study keeps the fast starters and drops the best finisher (issue 23);
docs/search-quality.md measures the defaults against random search, TPE and the earlier ones
at equal training FLOPs (``bench/search_quality.py``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from sweep.space.sampling import InvalidConfig, configs_from_params, corner_params, fixed_values
from sweep.space.summary import grid_search_space
from sweep.spec import StudySpec

#: The fields that set a trial's evaluation schedule; a searched one leaves it per trial.
_SCHEDULE_FIELDS = ("model.seq_len", "train.tokens", "train.steps", "train.batch_size",
                    "train.batch_tokens", "train.grad_accum", "train.eval_every")
#: Evaluations of a trial under the default schedule (`sweep.train.resolve_budget`).
DEFAULT_EVALUATIONS = 10


# ------------------------------------------------------------------- start-up and warm-up
def startup_trials(spec: StudySpec) -> int:
    """The sampler's random draws: ``search.n_startup_trials``, else n_trials / 3 in [2, 10]."""
    s = spec.search
    return s.n_startup_trials if s.n_startup_trials is not None else \
        min(10, max(2, s.n_trials // 3))


def pruner_startup_trials(spec: StudySpec) -> int:
    """Completed trials before the median pruner stops any.

    ``search.n_startup_trials``, else the sampler's start-up count and at least 3: a median
    of fewer trials is one trial's luck.
    """
    s = spec.search
    return s.n_startup_trials if s.n_startup_trials is not None else \
        max(3, startup_trials(spec))


def _schedule(spec: StudySpec) -> tuple[int, int, int] | None:
    """A trial's (tokens a step, eval_every, steps) when the spec fixes them, else None.

    Fixed when the budget is a fixed ``train.tokens`` or ``train.steps`` and nothing that
    sets the schedule (`_SCHEDULE_FIELDS`) is searched; not for a FLOPs or seconds budget.
    """
    from sweep.train.config import resolve_budget

    fixed = fixed_values(spec)
    searched = {p.path for p in spec.params() if p.domain is not None}
    if searched.intersection(_SCHEDULE_FIELDS) or not any(
            k in fixed for k in ("train.tokens", "train.steps")):
        return None
    try:
        model, train = configs_from_params(spec, corner_params(spec)[0])
    except InvalidConfig:
        return None
    budget = resolve_budget(train, model)
    if budget.total_steps is None:
        return None
    return budget.step_tokens, budget.eval_every, budget.total_steps


def _evaluations_by(step: int, every: int, j: int) -> int:
    """Evaluations the trainer makes within its first ``j`` steps, the end's aside.

    It evaluates after a step that crosses a multiple of ``every`` tokens
    (`sweep.train.Trainer.train`): after every step when ``every`` <= ``step``.
    """
    return j if every <= step else j * step // every


def evaluation_count(spec: StudySpec) -> int | None:
    """The evaluations of a trial (the last at the end of its budget), if the spec fixes them."""
    schedule = _schedule(spec)
    if schedule is None:
        return None
    step, every, steps = schedule
    return _evaluations_by(step, every, steps - 1) + 1


def warmup_step(spec: StudySpec) -> int:
    """The first evaluation index at which a trial may be pruned.

    The first evaluation at or past ``search.prune_warmup`` of the trial's tokens, in the
    trainer's schedule when the spec fixes it (`_schedule`); else in the default schedule's,
    an evaluation every tenth of the budget: ceil(10 * prune_warmup).
    """
    warmup = spec.search.prune_warmup
    schedule = _schedule(spec)
    if schedule is None:
        return max(1, math.ceil(DEFAULT_EVALUATIONS * warmup - 1e-9))
    step, every, steps = schedule
    first = max(1, math.ceil(warmup * steps - 1e-9))  # the first step at or past the warm-up
    if first >= steps:
        return _evaluations_by(step, every, steps - 1) + 1  # the evaluation at the end
    if every <= step:
        return first
    # The first evaluation after step `first - 1`: the next multiple of `every` it crosses.
    k = (first - 1) * step // every + 1
    if -(-k * every // step) >= steps:
        return _evaluations_by(step, every, steps - 1) + 1
    return k


def _n_evaluations(spec: StudySpec) -> int | str:
    count = evaluation_count(spec)
    return count if count is not None else "auto"


def make_sampler(spec: StudySpec) -> Any:
    """The Optuna sampler ``search.sampler`` names, seeded with ``search.seed``.

    TPE is multivariate (Falkner et al. 2018) and grouped, Optuna's way of modelling
    conditional define-by-run spaces jointly; with parallel workers it uses the constant liar.
    TPE, GP and NSGA-II honour the constraints `record_constraints` sets on each trial; CMA-ES
    ignores them. NSGA-II's population is ``search.population_size`` or n_trials / 4 (4 to 50).
    """
    import optuna
    from optuna.exceptions import ExperimentalWarning

    s = spec.search
    samplers = optuna.samplers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        if s.sampler == "tpe":
            return samplers.TPESampler(seed=s.seed, multivariate=True, group=True,
                                       n_startup_trials=startup_trials(spec),
                                       constant_liar=s.parallel > 1)
        if s.sampler == "gp":
            return samplers.GPSampler(seed=s.seed, n_startup_trials=startup_trials(spec))
        if s.sampler == "cmaes":
            return samplers.CmaEsSampler(seed=s.seed, n_startup_trials=startup_trials(spec),
                                         warn_independent_sampling=False)
        if s.sampler == "random":
            return samplers.RandomSampler(seed=s.seed)
        if s.sampler == "grid":
            return samplers.GridSampler(grid_search_space(spec), seed=s.seed)
        population = s.population_size or min(50, max(4, s.n_trials // 4))
        return samplers.NSGAIISampler(population_size=population, seed=s.seed)


def make_pruner(spec: StudySpec) -> Any:
    """The Optuna pruner ``search.pruner`` names (module docstring: start-up and warm-up).

    Steps are evaluation indices. ``median``: a trial worse than the median of the completed
    trials at the same evaluation is stopped (Golovin et al. 2017, Google Vizier's median
    stopping rule). Hyperband (Li et al. 2018) and successive halving use reduction factor 3,
    their first rung at the warm-up; successive halving has no start-up count of its own.
    """
    import optuna

    pruners = optuna.pruners
    name, warmup = spec.search.pruner, warmup_step(spec)
    if name == "hyperband":
        return pruners.HyperbandPruner(min_resource=warmup, max_resource=_n_evaluations(spec),
                                       reduction_factor=3)
    if name == "sha":
        return pruners.SuccessiveHalvingPruner(min_resource=warmup, reduction_factor=3)
    if name == "median":
        return pruners.MedianPruner(n_startup_trials=pruner_startup_trials(spec),
                                    n_warmup_steps=warmup)
    return pruners.NopPruner()
