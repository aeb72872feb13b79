"""Ray Tune executor: a `Tuner` with `OptunaSearch` and a trial scheduler, trials in Ray actors.

Search: ``OptunaSearch`` (`StudySearch`, which tells each trial's Optuna state as the Optuna
executor does) drives the same Optuna sampler as the Optuna executor
(`sweep.space.make_sampler`) over the same define-by-run space (`sweep.space.define_by_run`);
the metric is ``val_loss`` (mode ``min``), or the list of ``search.objectives`` with their
directions for a multi-objective study. Trial numbers are the Optuna trial numbers of
``OptunaSearch``'s study (plus the number of trials a resumed study already holds), passed to
the trainable in its config (`sweep.schema.CONFIG_TRIAL_NUMBER`). ``search.parallel`` caps
concurrent trials of a search; PBT members share what the cluster's CPUs/GPUs allow
(``resources``), and members waiting for a slot are paused and resumed from their own
checkpoints. GPUs per trial are requested only when the cluster has GPUs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import ray
from ray import tune

from sweep import space
from sweep.executors.ray.callback import StudyCallback
from sweep.executors.ray.connection import init_ray, trial_resources
from sweep.executors.ray.pbt import initial_population, pbt_trainable, pick
from sweep.executors.ray.schedulers import make_scheduler
from sweep.executors.ray.searcher import StudySearch
from sweep.executors.ray.trainable import search_trainable
from sweep.schema import CONFIG_MEMBER, CONFIG_TRIAL_NUMBER, METRIC_VAL_LOSS
from sweep.spec import StudySpec
from sweep.study.progress import ProgressView
from sweep.study.trial import StudyContext
from sweep.tracking import read_trials

__all__ = ["run"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _quiet_tune():
    """No console output from Ray Tune: the progress view reports the trials.

    Ray's newer console output prints an experiment banner at any verbosity; its classic
    reporter with ``verbose=0`` prints nothing.
    """
    old = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    logger = logging.getLogger("ray.tune")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            # Actor reuse would restart a PBT member's thread in place; Ray cannot stop a
            # function trainable's thread, so members restart in fresh actors.
            warnings.filterwarnings("ignore", message="Consider boosting PBT performance")
            yield
    finally:
        logger.setLevel(level)
        if old is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = old


class _SearchSpace:
    """Define-by-run space for ``OptunaSearch``: `sweep.space.define_by_run` plus the number.

    A class, not a closure: Ray saves the searcher (with its space) with plain pickle.
    """

    def __init__(self, spec: StudySpec, offset: int) -> None:
        self.spec, self.offset = spec, offset

    def __call__(self, trial: Any) -> dict[str, Any]:
        space.define_by_run(self.spec)(trial)
        return {CONFIG_TRIAL_NUMBER: self.offset + trial.number}


def run(ctx: StudyContext, n_trials: int, view: ProgressView, *,
        address: str | None = None) -> optuna.Study | None:
    """Run the study's trials with Ray Tune until the study holds ``n_trials``.

    Args:
        ctx: The study context.
        n_trials: Trials the study should hold at the end (PBT: the population size); a
            resumed study runs the rest, numbered after the trials it holds. With
            ``ctx.points``, exactly those points run (``OptunaSearch``'s points_to_evaluate).
        view: Progress display, updated from Ray's trial events.
        address: Ray cluster address; default ``RAY_ADDRESS``, else a local Ray.

    Returns:
        ``OptunaSearch``'s Optuna study (for plots), or None for PBT.
    """
    spec = ctx.spec
    ctx = dataclasses.replace(ctx, out_dir=Path(ctx.out_dir).resolve())
    held = read_trials(ctx.tracking.tracking_uri, ctx.tracking.experiment_id,
                       ctx.tracking.parent_run_id)
    offset = max((t["trial"] for t in held), default=-1) + 1
    n_trials = len(ctx.points) if ctx.points else max(0, n_trials - len(held))
    tracker = StudyCallback(ctx, view, offset)
    if not n_trials:
        return None
    started = init_ray(address)
    try:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        multi = len(spec.search.objectives) > 1
        searcher = None
        if spec.search.scheduler == "pbt":
            population = initial_population(spec, n_trials)
            keys = sorted({k for member in population for k in member})
            param_space = {CONFIG_MEMBER: tune.grid_search(list(range(n_trials))),
                           **{k: tune.sample_from(pick(population, k)) for k in keys}}
            trainable = pbt_trainable(ctx, offset, population)
            tune_config = tune.TuneConfig(scheduler=make_scheduler(spec, ctx.summary),
                                          num_samples=1,
                                          reuse_actors=False)
        else:
            metric = list(spec.search.objectives) if multi else METRIC_VAL_LOSS
            modes = ["min" if d == "minimize" else "max" for d in spec.search.directions]
            searcher = StudySearch(space=_SearchSpace(spec, offset), metric=metric,
                                    mode=modes if multi else modes[0],
                                    sampler=space.make_sampler(spec),
                                    points_to_evaluate=[dict(p) for p in ctx.points] or None)
            param_space = {}
            trainable = search_trainable(ctx)
            tune_config = tune.TuneConfig(
                search_alg=searcher, scheduler=make_scheduler(spec, ctx.summary),
                num_samples=n_trials,
                max_concurrent_trials=spec.search.parallel,
                time_budget_s=spec.search.timeout_s, reuse_actors=False)
        run_config = tune.RunConfig(
            name=f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str(ctx.out_dir / "ray"), verbose=0, callbacks=[tracker],
            failure_config=tune.FailureConfig(max_failures=0, fail_fast=False))
        tuner = tune.Tuner(tune.with_resources(trainable, trial_resources(spec)),
                           param_space=param_space, tune_config=tune_config,
                           run_config=run_config)
        with _quiet_tune():
            tuner.fit()  # errored trials are in the results, not raised
    finally:
        if started:
            ray.shutdown()
    study = getattr(searcher, "_ot_study", None) if searcher is not None else None
    return study if study is not None and study.trials else None
