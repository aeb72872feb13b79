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
checkpoints. GPUs per trial are requested only when the cluster has GPUs; a fraction of one
(``resources.gpus_per_trial: 0.25``) packs that many trials on each GPU, each held to its share
of the GPU's memory by the constraints (`sweep.space.memory_limit`). A search's trials run in
actors Ray keeps for the next trial (``reuse_actors``, `sweep.executors.ray.trainable`); PBT
members restart in fresh ones.

Rerun (a killed driver, then the same study again): the trials the study holds in MLflow are
read first; only finished ones (`sweep.schema.TrialState.finished`) count toward ``n_trials``,
and every held number stays taken. A searched study's new ``StudySearch`` is given the finished
trials (`StudySearch.seed_trials`) and a sampler seed moved on by the next trial number, in a
new Tune experiment; the Tune experiment of the killed run is not restored, since its snapshot
(saved every few seconds) may list trials that finished after it as still to run. With
``search.retry_interrupted`` (the default), the params of each interrupted trial not retried
yet are queued first (`StudySearch.retry_trials`), and the trial that trains them carries tag
``sweep.retry_of``; interrupted trials never count. One line (``ray: resuming ...``) says what
was done.

Interrupts: SIGINT (Ctrl-C) and SIGTERM while Tune runs stop the experiment gracefully (Tune's
own SIGINT handler, which would end it as if it had finished, is off): Tune stops every trial,
the runs still ``RUNNING`` end ``INTERRUPTED`` once their worker processes are gone (`Ended`
keeps a worker from ending its run itself), and `sweep.study.resume.StudyInterrupted` is raised
with exit code 130 or 143; a second signal stops at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import ray
from mlflow import MlflowClient
from mlflow.entities import RunStatus
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from ray import tune

from sweep import space
from sweep.executors.ray import pbt
from sweep.executors.ray.callback import StudyCallback
from sweep.executors.ray.connection import init_ray, trial_resources
from sweep.executors.ray.pbt import initial_population, pbt_trainable, pick
from sweep.executors.ray.schedulers import make_scheduler
from sweep.executors.ray.searcher import StudySearch, optuna_state
from sweep.executors.ray.trainable import search_trainable
from sweep.schema import (
    ATTR_RETRY_OF,
    ATTR_STATE,
    CONFIG_MEMBER,
    CONFIG_RETRY_OF,
    CONFIG_TRIAL_NUMBER,
    METRIC_BEST_VAL_LOSS,
    METRIC_VAL_LOSS,
    TAG_OWNER,
    TAG_TRIAL_NUMBER,
    TrialState,
)
from sweep.space.grid import SCALING_POINT
from sweep.spec import StudySpec
from sweep.study.progress import ProgressView
from sweep.study.resume import StudyInterrupted, signal_handlers
from sweep.study.trial import StudyContext
from sweep.tracking import TrialRun, read_trials
from sweep.tracking.owner import owner_alive

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
    # Its results table warns of every trial without results (stopped before its first report);
    # MLflow has each trial's state.
    analysis = logging.getLogger("ray.tune.analysis.experiment_analysis")
    level, analysis_level = logger.level, analysis.level
    logger.setLevel(logging.WARNING)
    analysis.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            # Actor reuse would restart a PBT member's thread in place; Ray cannot stop a
            # function trainable's thread, so members restart in fresh actors.
            warnings.filterwarnings("ignore", message="Consider boosting PBT performance")
            # PBT's exploits read pinned copies of donors' checkpoints (`pbt.PinnedPBT`), so
            # few kept checkpoints do not break them.
            warnings.filterwarnings("ignore", message="Using `CheckpointConfig.num_to_keep")
            yield
    finally:
        logger.setLevel(level)
        analysis.setLevel(analysis_level)
        if old is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = old


#: Seconds to wait, after an interrupt, for the worker processes of trials still RUNNING to exit
#: (Tune has stopped their actors, killing those that took over 5 s) before their runs end.
WORKER_EXIT_S = 20.0


class _Interrupt(tune.Stopper):
    """Stops the whole Tune experiment once a signal arrived (``signal``: its name)."""

    def __init__(self) -> None:
        self.signal: str | None = None

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.signal is not None

    def error(self) -> StudyInterrupted:
        name = self.signal or "SIGINT"
        return StudyInterrupted(f"interrupted by {name}",
                                exit_code=143 if name == "SIGTERM" else 130)


@contextlib.contextmanager
def _interrupts(stop: _Interrupt):
    """SIGINT and SIGTERM stop the Tune experiment (`_Interrupt`); a second one raises at once.

    Tune's own SIGINT handler is turned off (``TUNE_DISABLE_SIGINT_HANDLER``): it ends the
    experiment as if it had finished. Handlers only in the main thread; restored on exit.
    """
    old_env = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"

    def handler(signum: int, frame: Any) -> None:
        if stop.signal is not None:
            raise stop.error()
        stop.signal = signal.Signals(signum).name

    try:
        with signal_handlers(handler):
            yield stop
    finally:
        if old_env is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = old_env


def _end_interrupted(ctx: StudyContext, offset: int, reason: str,
                     wait_s: float = WORKER_EXIT_S) -> list[int]:
    """End this experiment's trial runs (numbers from ``offset``) still RUNNING ``INTERRUPTED``.

    First waits up to ``wait_s`` for their worker processes on this host to exit, so no worker
    writes to a run after it ended. Returns the numbers of the runs ended.
    """
    tracking = ctx.tracking
    client = MlflowClient(tracking.tracking_uri)
    running = RunStatus.to_string(RunStatus.RUNNING)

    def still_running() -> list[Any]:
        runs = client.search_runs(
            [tracking.experiment_id],
            filter_string=(f"tags.{MLFLOW_PARENT_RUN_ID} = '{tracking.parent_run_id}' "
                           f"and attributes.status = '{running}'"),
            max_results=10_000)
        return [r for r in runs if int(r.data.tags.get(TAG_TRIAL_NUMBER, -1)) >= offset]

    deadline = time.monotonic() + wait_s
    runs = still_running()
    # Only a process on this host is told alive without a heartbeat (`owner_alive`).
    while runs and time.monotonic() < deadline and any(
            owner_alive(r.data.tags.get(TAG_OWNER)) is True for r in runs):
        time.sleep(0.2)
        runs = still_running()
    ended = []
    for r in runs:
        number = int(r.data.tags[TAG_TRIAL_NUMBER])
        if owner_alive(r.data.tags.get(TAG_OWNER)) is True:
            log.warning("trial %s: its worker is still alive; its run ends INTERRUPTED", number)
        TrialRun(client, r.info.run_id, number).end(TrialState.INTERRUPTED, fail_reason=reason)
        ended.append(number)
    return ended


def _to_retry(spec: StudySpec, held: list[dict[str, Any]], n: int) -> list[tuple[int, dict]]:
    """``(number, params)`` of up to ``n`` interrupted trials to train again, oldest first.

    As the Optuna executor's resume (`sweep.study.resume.reconcile`): each interrupted trial
    once, and an interrupted retry is not retried again.
    """
    if not spec.search.retry_interrupted:
        return []
    retried = {t["retry_of"] for t in held if t["retry_of"] is not None}
    return [(t["trial"], t["params"]) for t in held
            if t["state"] is TrialState.INTERRUPTED and t["trial"] not in retried
            and t["retry_of"] is None and t["params"]][:n]


def _split_points(spec: StudySpec, held: list[dict[str, Any]],
                  points: tuple[dict[str, Any], ...], n_trials: int
                  ) -> tuple[list[tuple[int, dict]], list[dict[str, Any]]]:
    """The interrupted trials to retry, and the points to queue as new trials.

    Without ``points``: `_to_retry`'s trials and no points. With them (a scaling study's grid
    points still to train), a point whose last trial was interrupted is trained as that
    trial's retry (tag ``sweep.retry_of``), each other point as a new trial.
    """
    if not points:
        return _to_retry(spec, held, n_trials), []
    wanted = {str(p.get(SCALING_POINT)): dict(p) for p in points}
    to_retry = []
    for number, params in _to_retry(spec, held, len(held)):
        label = str(params.get(SCALING_POINT))
        if label in wanted:
            to_retry.append((number, wanted.pop(label)))
    return to_retry, list(wanted.values())


class _SearchSpace:
    """Define-by-run space for ``OptunaSearch``: `sweep.space.define_by_run` plus the number.

    A class, not a closure: Ray saves the searcher (with its space) with plain pickle.
    """

    def __init__(self, spec: StudySpec, offset: int) -> None:
        self.spec, self.offset = spec, offset

    def __call__(self, trial: Any) -> dict[str, Any]:
        space.define_by_run(self.spec)(trial)
        out = {CONFIG_TRIAL_NUMBER: self.offset + trial.number}
        retry_of = trial.user_attrs.get(ATTR_RETRY_OF)  # a queued retry (`retry_trials`)
        if retry_of is not None:
            out[CONFIG_RETRY_OF] = int(retry_of)
        return out


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
                 seed: int, n_new: int, retried: list[int] = ()) -> str:
    rest = len(held) - len(finished)
    left = f"; {rest} unfinished run(s) not counted" if rest else ""
    again = (f", first the params of interrupted trial(s) {', '.join(map(str, retried))} again"
             if retried else "")
    if not seeded:
        return (f"ray: resuming {spec.name}: {len(finished)} finished trial(s){left}, none given "
                f"to a searcher; {n_new} more from trial {offset}{again}")
    return (f"ray: resuming {spec.name} in a new Tune experiment: the searcher is given "
            f"{seeded} of the {len(finished)} finished trial(s) from MLflow{left}, sampler "
            f"seed {seed}; {n_new} more from trial {offset}{again}")


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
        name = f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        pinned = ctx.out_dir / "ray" / name / "pbt-pinned"  # donors' checkpoints, see pbt.py
        checkpoints = None
        if spec.search.scheduler == "pbt":
            checkpoints = tune.CheckpointConfig(num_to_keep=pbt.CHECKPOINTS_KEPT)
            population = initial_population(spec, n_trials)
            keys = sorted({k for member in population for k in member})
            param_space = {CONFIG_MEMBER: tune.grid_search(list(range(n_trials))),
                           **{k: tune.sample_from(pick(population, k)) for k in keys}}
            trainable = pbt_trainable(ctx, offset, population)
            if held:
                _say(view, f"ray: resuming {spec.name}: {len(finished)} finished trial(s); PBT "
                           f"starts a new population of {n_trials} from trial {offset}")
            tune_config = tune.TuneConfig(
                scheduler=make_scheduler(spec, ctx.summary, pinned_dir=pinned),
                num_samples=1, reuse_actors=False)
        else:
            metric = list(spec.search.objectives) if multi else METRIC_VAL_LOSS
            modes = ["min" if d == "minimize" else "max" for d in spec.search.directions]
            seeded = [] if ctx.points else _told(ctx, finished)
            # A rerun's sampler starts a new stream: the first run's seed would draw its
            # configs again (a random sampler ignores the history it is given).
            sampler_spec = spec if not seeded else spec.model_copy(update={
                "search": spec.search.model_copy(update={"seed": spec.search.seed + offset})})
            numbering = _SearchSpace(spec, offset)
            to_retry, fresh = _split_points(spec, held, ctx.points, n_trials)
            searcher = StudySearch(space=numbering,
                                   metric=metric, mode=modes if multi else modes[0],
                                   sampler=space.make_sampler(sampler_spec),
                                   points_to_evaluate=fresh or None)
            given = searcher.seed_trials(seeded) if seeded else 0
            # Queued after the added trials, so Optuna numbers them next, and asks them first.
            retried = searcher.retry_trials(to_retry)
            # A point whose retry the space does not take is still trained, as a new trial.
            searcher.queue_points(p for n, p in to_retry if n not in retried and ctx.points)
            numbering.offset = offset - given  # Optuna numbers the added trials first
            # (A scaling study's later budget finds the earlier budgets' trials: not a resume.)
            if held and (not ctx.points or to_retry):
                _say(view, _resume_line(spec, held, finished, given, offset,
                                        sampler_spec.search.seed, n_trials, retried))
            param_space = {}
            trainable = search_trainable(ctx)
            tune_config = tune.TuneConfig(
                search_alg=searcher, scheduler=make_scheduler(spec, ctx.summary),
                num_samples=n_trials,
                max_concurrent_trials=spec.search.parallel,
                time_budget_s=spec.search.timeout_s, reuse_actors=True)
        stop = _Interrupt()
        run_config = tune.RunConfig(
            name=name, storage_path=str(ctx.out_dir / "ray"), verbose=0, callbacks=[tracker],
            stop=stop, checkpoint_config=checkpoints,
            failure_config=tune.FailureConfig(max_failures=0, fail_fast=False))
        tuner = tune.Tuner(tune.with_resources(trainable, trial_resources(spec)),
                           param_space=param_space, tune_config=tune_config,
                           run_config=run_config)
        try:
            with _quiet_tune(), _interrupts(stop):
                tuner.fit()  # errored trials are in the results, not raised
        finally:
            shutil.rmtree(pinned, ignore_errors=True)
            if stop.signal is not None:  # Tune stopped every trial (or a second signal came)
                _end_interrupted(ctx, offset, f"interrupted by {stop.signal}")
    finally:
        if started:
            ray.shutdown()
    if stop.signal is not None:
        raise stop.error()
    study = getattr(searcher, "_ot_study", None) if searcher is not None else None
    return study if study is not None and study.trials else None
