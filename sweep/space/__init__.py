"""Search spaces: the one place a `StudySpec` becomes sampler calls, configs and cost checks.

Optuna samples define-by-run (`suggest`); Ray Tune reuses the same function through
``OptunaSearch(space=define_by_run(spec))`` and rebuilds configs from its flat ``config`` dict
with `configs_from_params`. Before a trial trains, `check_constraints` prices it with
`sweep_models.cost.estimate` so an infeasible config costs no training; `summarize` prices a sample
of the space once for preflight, ``sweep validate`` and the Ray schedulers.
"""

from sweep.space.algorithms import (
    make_pruner,
    make_sampler,
    pruner_startup_trials,
    startup_trials,
    warmup_step,
)
from sweep.space.constraints import (
    CONSTRAINT_NAMES,
    N_CONSTRAINTS,
    check_constraints,
    constraint_values,
    constraints_func,
    device_memory_bytes,
    gpu_share,
    memory_limit,
    memory_limit_bytes,
    record_constraints,
    training_cost,
)
from sweep.space.sampling import (
    InvalidConfig,
    configs_from_params,
    corner_params,
    define_by_run,
    sample_params,
    suggest,
)
from sweep.space.summary import SpaceSummary, describe_space, grid_search_space, summarize

__all__ = [
    "CONSTRAINT_NAMES",
    "N_CONSTRAINTS",
    "InvalidConfig",
    "SpaceSummary",
    "check_constraints",
    "configs_from_params",
    "constraint_values",
    "constraints_func",
    "corner_params",
    "define_by_run",
    "describe_space",
    "device_memory_bytes",
    "gpu_share",
    "grid_search_space",
    "make_pruner",
    "make_sampler",
    "memory_limit",
    "memory_limit_bytes",
    "pruner_startup_trials",
    "record_constraints",
    "sample_params",
    "startup_trials",
    "suggest",
    "summarize",
    "training_cost",
    "warmup_step",
]
