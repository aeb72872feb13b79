"""Ray Tune schedulers by name.

All use time attribute ``tokens`` (training tokens seen; ``time_total_s`` for a seconds budget):

- ``asha``: asynchronous successive halving (Li et al. 2020, "A System for Massively Parallel
  Hyperparameter Tuning"), reduction factor 3;
- ``hyperband``: its asynchronous Hyperband form (same paper), 3 brackets; the synchronous
  ``HyperBandScheduler`` pauses trials, which would restart these checkpoint-less trials;
- ``median``: the median stopping rule (Golovin et al. 2017, Google Vizier);
- ``none``: every trial trains its whole budget.

``pbt`` is a study kind of its own, whose scheduler is `sweep.kinds.pbt.tune.make_pbt_scheduler`.
"""

from __future__ import annotations

from typing import Any

from ray.tune import schedulers

from sweep import space
from sweep.schema import METRIC_TOKENS, METRIC_VAL_LOSS
from sweep.space import SpaceSummary
from sweep.spec import ChoiceDomain, StudySpec

__all__ = ["make_scheduler"]

_REDUCTION = 3


def make_scheduler(spec: StudySpec, summary: SpaceSummary | None = None) -> Any:
    """The Ray Tune scheduler ``search.scheduler`` names (time attribute: tokens trained).

    ASHA and async Hyperband get ``max_t`` above the largest budget (trials end on their own
    budget, never at ``max_t``) and a grace period of ``search.prune_warmup`` of the smallest
    budget (of the largest for a seconds budget); the median rule starts judging after that
    grace period with the pruner's start-up count of trials
    (`sweep.space.algorithms.pruner_startup_trials`). A seconds budget is measured in Ray's
    ``time_total_s`` (wall time of the trial, startup included).

    Args:
        spec: The study spec.
        summary: The space's `sweep.space.SpaceSummary` (its ``budget_tokens``), priced by
            preflight; priced here (``sweep.space.summarize``, 32 draws) when None.
    """
    s = spec.search
    if s.scheduler == "none":
        return schedulers.FIFOScheduler()
    if summary is None:
        summary = space.summarize(spec, n_samples=32)
    bounds = summary.budget_tokens
    kind, budget = spec.budget()
    if kind == "seconds":
        top = max(budget.options) if isinstance(budget, ChoiceDomain) else \
            budget.bounds[1] if hasattr(budget, "bounds") else budget
        time_attr, max_t = "time_total_s", float(top) * 1.5
        grace = max(float(top) * s.prune_warmup, 1e-3)
    elif bounds is None:  # no valid config in the space: every trial is infeasible anyway
        time_attr, max_t, grace = METRIC_TOKENS, 2**62, 1
    else:
        time_attr, max_t = METRIC_TOKENS, int(bounds[1] * 1.5) + 1
        grace = max(1, int(bounds[0] * s.prune_warmup))
    if s.scheduler == "median":
        return schedulers.MedianStoppingRule(time_attr=time_attr, metric=METRIC_VAL_LOSS,
                                             mode="min",
                                             grace_period=grace,
                                             min_samples_required=space.pruner_startup_trials(spec))
    # Ray 2.60 annotates max_t and grace_period as int, but its brackets take any number of
    # time_attr units: a seconds budget's are fractional seconds (time_total_s).
    return schedulers.AsyncHyperBandScheduler(
        max_t=max_t, grace_period=grace,  # type: ignore[arg-type]
        time_attr=time_attr, metric=METRIC_VAL_LOSS, mode="min",
        reduction_factor=_REDUCTION, brackets=3 if s.scheduler == "hyperband" else 1)
