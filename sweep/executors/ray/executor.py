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

Rerun (a killed driver, then the same study again): the trials the study holds in MLflow are
read first; only finished ones (`sweep.schema.TrialState.finished`) count toward ``n_trials``,
and every held number stays taken. A searched study's new ``StudySearch`` is given the finished
trials (`StudySearch.seed_trials`) and a sampler seed moved on by the next trial number, in a
new Tune experiment; the Tune experiment of the killed run is not restored, since its snapshot
(saved every few seconds) may list trials that finished after it as still to run. One line
(``ray: resuming ...``) says what was done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
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
from sweep.executors.ray.searcher import StudySearch, optuna_state
from sweep.executors.ray.trainable import search_trainable
from sweep.schema import (
    ATTR_STATE,
    CONFIG_MEMBER,
    CONFIG_TRIAL_NUMBER,
    METRIC_BEST_VAL_LOSS,
    METRIC_VAL_LOSS,
    TrialState,
)
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


def _told(ctx: StudyContext, finished: list[dict[str, Any]]) -> list[tuple]:
    """What the searcher was told of each finished trial of an earlier run, from MLflow.

    ``(params, Optuna state, value)``: the value is what `StudySearch` tells for a COMPLETE
    trial (its best val loss, with the cost objectives of a multi-objective study; the corpus's
    unigram baseline for an infeasible one); PRUNED, DIVERGED and FAILED trials carry none.
    """
    spec = ctx.spec
    multi = len(spec.search.objectives) > 1
    out = []
    for t in finished:
        state = TrialState(t["state"])
        metrics = t["metrics"]
        values = None
        if state in (TrialState.COMPLETE, TrialState.INFEASIBLE):
            loss = (ctx.corpus().baseline_unigram_loss if state is TrialState.INFEASIBLE
                    else metrics.get(METRIC_BEST_VAL_LOSS, math.nan))
            values = [loss if name == METRIC_VAL_LOSS else metrics.get(name, math.nan)
                      for name in spec.search.objectives]
            values = None if not all(math.isfinite(v) for v in values) else \
                values if multi else values[0]
        result = {ATTR_STATE: state.value} if state is not TrialState.FAILED else None
        out.append((t["params"], optuna_state(result, error=state is TrialState.FAILED),
                    values))
    return out


def _resume_line(spec: StudySpec, held: list, finished: list, seeded: int, offset: int,
                 seed: int, n_new: int) -> str:
    rest = len(held) - len(finished)
    left = f"; {rest} unfinished run(s) not counted" if rest else ""
    if not seeded:
        return (f"ray: resuming {spec.name}: {len(finished)} finished trial(s){left}, none given "
                f"to a searcher; {n_new} more from trial {offset}")
    return (f"ray: resuming {spec.name} in a new Tune experiment: the searcher is given "
            f"{seeded} of the {len(finished)} finished trial(s) from MLflow{left}, sampler "
            f"seed {seed}; {n_new} more from trial {offset}")


def _say(view: ProgressView, line: str) -> None:
    """One line to the console the progress view draws on (to the log when it is quiet)."""
    if view is not None and not view.quiet:
        view.console.print(line, highlight=False, soft_wrap=True)
    else:
        log.warning(line)


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
    # Runs left RUNNING or INTERRUPTED by a killed driver keep their numbers, but only
    # finished trials count toward n_trials.
    finished = [t for t in held if TrialState(t["state"]).finished]
    offset = max((t["trial"] for t in held), default=-1) + 1
    n_trials = len(ctx.points) if ctx.points else max(0, n_trials - len(finished))
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
            if held:
                _say(view, f"ray: resuming {spec.name}: {len(finished)} finished trial(s); PBT "
                           f"starts a new population of {n_trials} from trial {offset}")
            tune_config = tune.TuneConfig(scheduler=make_scheduler(spec, ctx.summary),
                                          num_samples=1,
                                          reuse_actors=False)
        else:
            metric = list(spec.search.objectives) if multi else METRIC_VAL_LOSS
            modes = ["min" if d == "minimize" else "max" for d in spec.search.directions]
            seeded = [] if ctx.points else _told(ctx, finished)
            # A rerun's sampler starts a new stream: the first run's seed would draw its
            # configs again (a random sampler ignores the history it is given).
            sampler_spec = spec if not seeded else spec.model_copy(update={
                "search": spec.search.model_copy(update={"seed": spec.search.seed + offset})})
            numbering = _SearchSpace(spec, offset)
            searcher = StudySearch(space=numbering,
                                   metric=metric, mode=modes if multi else modes[0],
                                   sampler=space.make_sampler(sampler_spec),
                                   points_to_evaluate=[dict(p) for p in ctx.points] or None)
            given = searcher.seed_trials(seeded) if seeded else 0
            numbering.offset = offset - given  # Optuna numbers the added trials first
            if held:
                _say(view, _resume_line(spec, held, finished, given, offset,
                                        sampler_spec.search.seed, n_trials))
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
