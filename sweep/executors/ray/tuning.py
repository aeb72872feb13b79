"""Running one Ray Tune experiment of a study: what every kind's Tune run shares.

`fit` gives every trial of the study's Tune experiments that has no MLflow run one
(`sweep.executors.ray.runless`), before its experiment and after it; reads what the study holds
in MLflow (a rerun's trials keep their numbers, and only finished ones count toward
``n_trials``), connects to Ray, lets a `TunePlan` factory (a search,
`sweep.executors.ray.search`; a PBT population, `sweep.kinds.pbt.tune`) say what to run, and
runs it with the study's callback (progress rows, runs Ray ended), quiet, under the study's
signal handlers.

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
import os
import shutil
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import ray
from ray import tune

from sweep.executors.ray.callback import StudyCallback, config_number
from sweep.executors.ray.connection import init_ray, trial_resources
from sweep.executors.ray.runless import record_experiments
from sweep.schema import TrialState
from sweep.study.progress import ProgressView
from sweep.study.resume import StudyInterrupted, signal_handlers
from sweep.study.trial import StudyContext
from sweep.tracking.owner import owner_alive
from sweep.tracking.uris import split_credentials

__all__ = ["Held", "TunePlan", "fit", "say"]

log = logging.getLogger(__name__)

#: Seconds to wait, after an interrupt, for the worker processes of trials still RUNNING to exit
#: (Tune has stopped their actors, killing those that took over 5 s) before their runs end.
WORKER_EXIT_S = 20.0


@dataclass
class Held:
    """What the study holds in MLflow before this experiment.

    Attributes:
        trials: Every trial run (`sweep.tracking.read_trials`' dicts).
        finished: Those in a final state (they count toward ``n_trials``).
        offset: The number of this experiment's first new trial (after every held number).
    """

    trials: list[dict[str, Any]]
    finished: list[dict[str, Any]]
    offset: int

    @classmethod
    def read(cls, ctx: StudyContext) -> Held:
        trials = ctx.tracking.read_trials()
        # Runs left RUNNING or INTERRUPTED by a killed driver keep their numbers, but only
        # finished trials count toward n_trials.
        finished = [t for t in trials if TrialState(t["state"]).finished]
        return cls(trials, finished, max((t["trial"] for t in trials), default=-1) + 1)


@dataclass
class TunePlan:
    """What one Tune experiment runs.

    Attributes:
        trainable: The function trainable (resources are added by `fit`).
        tune_config: Its ``tune.TuneConfig`` (search algorithm, scheduler, samples).
        param_space: Its ``param_space``.
        checkpoint_config: Its ``tune.CheckpointConfig``, or None.
        number: A Ray trial's trial number (default: its config's `CONFIG_TRIAL_NUMBER`).
        study: The Optuna study that feeds Optuna's plots afterwards, or None.
        scratch: Folders the experiment may leave behind, removed at its end.
    """

    trainable: Callable[[dict[str, Any]], None]
    tune_config: tune.TuneConfig
    param_space: dict[str, Any] = field(default_factory=dict)
    checkpoint_config: tune.CheckpointConfig | None = None
    number: Callable[[Any], int] = config_number
    study: Callable[[], optuna.Study | None] = lambda: None
    scratch: list[Path] = field(default_factory=list)


#: Makes the plan of one experiment: (ctx, held, trials to run, the experiment's folder, view).
Planner = Callable[[StudyContext, Held, int, Path, ProgressView], TunePlan]


def say(view: ProgressView | None, line: str) -> None:
    """One line to the console the progress view draws on (to the log when it is quiet)."""
    if view is not None and not view.quiet:
        view.console.print(line, highlight=False, soft_wrap=True)
    else:
        log.warning(line)


@contextlib.contextmanager
def _quiet_tune():
    """No console output from Ray Tune: the progress view reports the trials.

    Ray's newer console output prints an experiment banner at any verbosity; its classic
    reporter with ``verbose=0`` prints nothing.
    """
    logger = logging.getLogger("ray.tune")
    # Its results table warns of every trial without results (stopped before its first report);
    # MLflow has each trial's state.
    analysis = logging.getLogger("ray.tune.analysis.experiment_analysis")
    level, analysis_level = logger.level, analysis.level
    logger.setLevel(logging.WARNING)
    analysis.setLevel(logging.ERROR)
    try:
        with _environment({"RAY_AIR_NEW_OUTPUT": "0"}), warnings.catch_warnings():
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
    def handler(signum: int, frame: Any) -> None:
        if stop.signal is not None:
            raise stop.error()
        stop.signal = signal.Signals(signum).name

    with _environment({"TUNE_DISABLE_SIGINT_HANDLER": "1"}), signal_handlers(handler):
        yield stop


def _end_interrupted(ctx: StudyContext, offset: int, reason: str,
                     wait_s: float = WORKER_EXIT_S) -> list[int]:
    """End this experiment's trial runs (numbers from ``offset``) still RUNNING ``INTERRUPTED``.

    First waits up to ``wait_s`` for their worker processes on this host to exit, so no worker
    writes to a run after it ended. Returns the numbers of the runs ended.
    """
    def still_running() -> list[Any]:
        return [r for r in ctx.tracking.running_trials() if r.number >= offset]

    deadline = time.monotonic() + wait_s
    runs = still_running()
    # Only a process on this host is told alive without a heartbeat (`owner_alive`).
    while runs and time.monotonic() < deadline and any(
            owner_alive(r.owner) is True for r in runs):
        time.sleep(0.2)
        runs = still_running()
    for r in runs:
        if owner_alive(r.owner) is True:
            log.warning("trial %s: its worker is still alive; its run ends INTERRUPTED",
                        r.number)
    ctx.tracking.end_interrupted(runs, lambda _: reason)
    return [r.number for r in runs]


def fit(ctx: StudyContext, n_trials: int, view: ProgressView, planner: Planner, *,
        address: str | None = None) -> optuna.Study | None:
    """Run the study's next Tune experiment until the study holds ``n_trials`` trials.

    Args:
        ctx: The study context.
        n_trials: Finished trials the study should hold at the end (a PBT population: its
            size); a rerun runs the rest, numbered after the trials it holds. With
            ``ctx.points``, exactly those points run.
        view: Progress display, updated from Ray's trial events.
        planner: Makes the experiment's `TunePlan`.
        address: Ray cluster address; default ``RAY_ADDRESS``, else a local Ray.

    Returns:
        The plan's Optuna study (for plots) when it holds trials, else None.

    Raises:
        StudyInterrupted: A signal stopped the experiment (exit code 130 or 143).
    """
    ctx = dataclasses.replace(ctx, out_dir=Path(ctx.out_dir).resolve())
    ctx, creds = _without_credentials(ctx)
    _record_runless(ctx, view)  # earlier experiments' trials the store missed
    held = Held.read(ctx)
    n = len(ctx.points) if ctx.points else max(0, n_trials - len(held.finished))
    if not n:
        return None
    with _environment(creds):
        return _fit(ctx, held, n, view, planner, address, creds)


def _record_runless(ctx: StudyContext, view: ProgressView | None,
                    stopped_by: str | None = None) -> None:
    """Give the study's Ray trials that have no MLflow run one (`sweep.executors.ray.runless`).

    Said on the console when an earlier experiment left them; after a signal the log has it.

    Raises:
        Exception: The store's error when it does not answer.
    """
    recorded = record_experiments(ctx, stopped_by)
    if not recorded:
        return
    line = (f"ray: trial(s) {', '.join(map(str, recorded))} had no MLflow run (stopped before "
            "it was created): recorded INTERRUPTED with their params")
    if stopped_by is None:
        say(view, line)
    else:  # the signal's "stopped:" line counts them among the INTERRUPTED trials
        log.info(line)


def _without_credentials(ctx: StudyContext) -> tuple[StudyContext, dict[str, str]]:
    """``ctx`` with its tracking URI's password moved to MLflow's credential variables.

    Tune pickles the trainable, the searcher and the callbacks into the study's ``ray/``
    folder; a context without the password keeps it out of those files, and the variables
    give it to every process that talks to the server (`split_credentials`).
    """
    uri, creds = split_credentials(ctx.tracking.tracking_uri)
    if not creds:
        return ctx, {}
    tracking = ctx.spec.tracking
    if tracking.uri:
        tracking = tracking.model_copy(update={"uri": split_credentials(tracking.uri)[0]})
    spec = ctx.spec.model_copy(update={"tracking": tracking})
    return dataclasses.replace(ctx, spec=spec, tracking=dataclasses.replace(
        ctx.tracking, tracking_uri=uri)), creds


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` (read by Tune, inherited by a local Ray), then restore."""
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _fit(ctx: StudyContext, held: Held, n: int, view: ProgressView, planner: Planner,
         address: str | None, creds: dict[str, str]) -> optuna.Study | None:
    started = init_ray(address, env_vars=creds)
    try:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        name = f"{ctx.spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        plan = planner(ctx, held, n, ctx.out_dir / "ray" / name, view)
        stop = _Interrupt()
        run_config = tune.RunConfig(
            name=name, storage_path=str(ctx.out_dir / "ray"), verbose=0,
            callbacks=[StudyCallback(ctx, view, plan.number)], stop=stop,
            checkpoint_config=plan.checkpoint_config,
            failure_config=tune.FailureConfig(max_failures=0, fail_fast=False))
        tuner = tune.Tuner(tune.with_resources(plan.trainable, trial_resources(ctx.spec)),
                           param_space=plan.param_space, tune_config=plan.tune_config,
                           run_config=run_config)
        try:
            with _quiet_tune(), _interrupts(stop):
                tuner.fit()  # errored trials are in the results, not raised
        finally:
            for folder in plan.scratch:
                shutil.rmtree(folder, ignore_errors=True)
            if stop.signal is not None:  # Tune stopped every trial (or a second signal came)
                _end_interrupted(ctx, held.offset, f"interrupted by {stop.signal}")
        try:
            _record_runless(ctx, view, stop.signal)
        except Exception:  # the store is down: the resume records them
            if stop.signal is None:
                raise
    finally:
        if started:
            ray.shutdown()
    if stop.signal is not None:
        raise stop.error()
    study = plan.study()
    return study if study is not None and study.trials else None
