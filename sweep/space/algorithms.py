"""The search algorithms a spec names: Optuna samplers and pruners."""

from __future__ import annotations

import warnings
from typing import Any

from sweep.space.summary import grid_search_space
from sweep.spec import StudySpec


# ----------------------------------------------------------------------- samplers, pruners
def _n_startup(spec: StudySpec) -> int:
    s = spec.search
    return s.n_startup_trials if s.n_startup_trials is not None else \
        min(10, max(2, s.n_trials // 3))


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
                                       n_startup_trials=_n_startup(spec),
                                       constant_liar=s.parallel > 1)
        if s.sampler == "gp":
            return samplers.GPSampler(seed=s.seed, n_startup_trials=_n_startup(spec))
        if s.sampler == "cmaes":
            return samplers.CmaEsSampler(seed=s.seed, n_startup_trials=_n_startup(spec),
                                         warn_independent_sampling=False)
        if s.sampler == "random":
            return samplers.RandomSampler(seed=s.seed)
        if s.sampler == "grid":
            return samplers.GridSampler(grid_search_space(spec), seed=s.seed)
        population = s.population_size or min(50, max(4, s.n_trials // 4))
        return samplers.NSGAIISampler(population_size=population, seed=s.seed)


def make_pruner(spec: StudySpec, *, min_resource: int = 1,
                max_resource: int | str = "auto") -> Any:
    """The Optuna pruner ``search.pruner`` names.

    Resources are the step numbers trials report at (evaluation index, 1-based); Hyperband
    (Li et al. 2018) and successive halving use reduction factor 3.
    """
    import optuna

    pruners = optuna.pruners
    name = spec.search.pruner
    if name == "hyperband":
        return pruners.HyperbandPruner(min_resource=min_resource, max_resource=max_resource,
                                       reduction_factor=3)
    if name == "sha":
        return pruners.SuccessiveHalvingPruner(min_resource=min_resource, reduction_factor=3)
    if name == "median":
        return pruners.MedianPruner(n_startup_trials=max(1, min(5, spec.search.n_trials // 4)),
                                    n_warmup_steps=min_resource)
    return pruners.NopPruner()
