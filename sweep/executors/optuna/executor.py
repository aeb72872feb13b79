"""Optuna executor: the study lives in Optuna storage, trials run through `sweep.study.trial`.

With ``search.parallel: N`` the driver starts N worker processes that share the storage;
``sweep worker SPEC`` joins the same study from another machine. Intermediate val losses go to
the pruner at each evaluation (step = evaluation index). Infeasible configs are told to samplers
that take ``constraints_func`` (TPE, GP, NSGA-II) as constraint violations, and to the others
as pruned trials.

Nothing lost (`sweep.study.resume`): each trial records its owner process and a heartbeat;
before trials run, trials of dead processes are reconciled (``INTERRUPTED``, queued again), and
only finished trials count toward ``n_trials``. A resumed study's sampler is seeded with the
spec's seed plus the number of trials already stored, so it does not replay its first draws.
Worker processes die with the driver (``PR_SET_PDEATHSIG`` on Linux, and a parent check), a
worker that dies is replaced (its trial reconciled) until more than `MAX_WORKER_DEATHS` have
died, and Ctrl-C or SIGTERM ends the running trials ``INTERRUPTED``.
"""

from __future__ import annotations

import ctypes
import logging
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Any

import optuna
import torch
from optuna.trial import TrialState as OptunaState

from sweep import space
from sweep.executors.optuna.storage import make_storage
from sweep.schema import (
    ATTR_BEST_VAL_LOSS,
    ATTR_HEARTBEAT,
    ATTR_OWNER,
    ATTR_PROGRESS,
    ATTR_REASON,
    ATTR_RETRY_OF,
    ATTR_RUN_ID,
    ATTR_STATE,
    METRIC_VAL_LOSS,
    TrialState,
)
from sweep.study.progress import ProgressView, TrialRow
from sweep.study.resume import Reconciled, StudyInterrupted
from sweep.study.resume import reconcile as reconcile_trials
from sweep.study.trial import StudyContext, evaluate, objective_values
from sweep.tracking.faults import InfrastructureError, infrastructure_fault
from sweep.tracking.owner import Heartbeat, current_owner, owner_pid

#: Worker processes that may die (killed, out of memory) and be replaced before the study stops.
MAX_WORKER_DEATHS = 3

_CONSTRAINED_SAMPLERS = ("tpe", "gp", "nsga2")


class OptunaReporter:
    """`sweep.train.Reporter` for an Optuna trial.

    Each evaluation's ``val_loss`` goes to ``trial.report`` (step = evaluation index, 1-based;
    single-objective studies only) and, with the tokens seen, to user attrs for the progress
    view. ``should_stop`` asks the pruner.
    """

    def __init__(self, trial: optuna.Trial, *, prune: bool) -> None:
        self.trial, self.prune, self.n_evals = trial, prune, 0

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        self.n_evals += 1
        value = metrics.get(METRIC_VAL_LOSS)
        if value is None or not math.isfinite(value):
            return
        if self.prune:
            self.trial.report(float(value), step=self.n_evals)
        self.trial.set_user_attr(ATTR_PROGRESS, [int(tokens), float(value)])

    def should_stop(self) -> bool:
        return self.prune and self.trial.should_prune()


class _Interrupted(KeyboardInterrupt):
    """Carries an `InfrastructureError` through Optuna, which records the trial ``FAIL``."""


def _mark_interrupted(trial: optuna.Trial, reason: str) -> None:
    try:  # the storage may be what failed: then the next reconcile marks it
        trial.set_user_attr(ATTR_STATE, TrialState.INTERRUPTED.value)
        trial.set_user_attr(ATTR_REASON, reason[:500])
    except Exception:  # noqa: BLE001
        pass


def _objective(ctx: StudyContext):
    spec = ctx.spec
    multi = len(spec.search.objectives) > 1
    prune = not multi and spec.search.pruner != "none"

    def objective(trial: optuna.Trial):
        trial.set_user_attr(ATTR_OWNER, current_owner())
        with Heartbeat(lambda: trial.set_user_attr(ATTR_HEARTBEAT, time.time())):
            try:
                return _run(trial)
            except (KeyboardInterrupt, SystemExit):
                _mark_interrupted(trial, "interrupted (Ctrl-C or SIGTERM)")
                raise
            except InfrastructureError as err:
                _mark_interrupted(trial, f"interrupted: {err.what}")
                # Optuna records the trial FAIL for a KeyboardInterrupt only; `_optimize`
                # raises the fault itself again.
                raise _Interrupted() from err

    def _run(trial: optuna.Trial):
        try:
            configs = space.suggest(trial, spec)
        except space.InvalidConfig as err:
            configs = err
        outcome = evaluate(ctx, trial.number, configs, OptunaReporter(trial, prune=prune),
                           raw_params=dict(trial.params),
                           retry_of=trial.user_attrs.get(ATTR_RETRY_OF))
        trial.set_user_attr(ATTR_STATE, outcome.state.value)
        trial.set_user_attr(ATTR_RUN_ID, outcome.run_id)
        if outcome.reason:
            trial.set_user_attr(ATTR_REASON, outcome.reason[:500])
        if math.isfinite(outcome.best_val_loss):
            trial.set_user_attr(ATTR_BEST_VAL_LOSS, outcome.best_val_loss)
        if outcome.constraints is not None:
            space.record_constraints(trial, outcome.constraints)
        if outcome.state == TrialState.INFEASIBLE:
            if spec.search.sampler in _CONSTRAINED_SAMPLERS and outcome.constraints is not None:
                # Told as a constraint violation; val_loss no better than the unigram baseline.
                penalty = ctx.corpus().baseline_unigram_loss
                values = [penalty if name == METRIC_VAL_LOSS else v for name, v in
                          zip(spec.search.objectives, objective_values(spec, outcome),
                              strict=True)]
                return values if multi else values[0]
            raise optuna.TrialPruned(outcome.reason)
        if outcome.state == TrialState.PRUNED:
            raise optuna.TrialPruned()
        if outcome.state in (TrialState.DIVERGED, TrialState.FAILED):
            # nan makes Optuna record the trial FAIL: it never ranks as best.
            return [math.nan] * len(spec.search.objectives) if multi else math.nan
        values = objective_values(spec, outcome)
        return values if multi else values[0]

    return objective


class _NoInterruptTracebacks(logging.Filter):
    """Drop Optuna's two warnings of an interrupted trial.

    They are "failed because of ... KeyboardInterrupt" with its traceback, then "failed with
    value None" (this objective returns None for no other trial). The driver reports an
    interrupt once, and the trial is recorded ``INTERRUPTED``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            return False
        return not str(record.msg).endswith("failed with value None.")


logging.getLogger("optuna.study._optimize").addFilter(_NoInterruptTracebacks())


def create_study(ctx: StudyContext, *, seed_offset: int = 0) -> optuna.Study:
    """Create or load the study in its storage, with the spec's sampler and pruner."""
    spec = ctx.spec
    if seed_offset:
        spec = spec.model_copy(
            update={"search": spec.search.model_copy(update={"seed": spec.search.seed
                                                              + seed_offset})})
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=ctx.spec.name,
        storage=make_storage(ctx.spec.storage_url(ctx.out_dir)),
        sampler=space.make_sampler(spec),
        pruner=space.make_pruner(spec),
        directions=list(spec.search.directions),
        load_if_exists=True,
    )


def _optimize(study: optuna.Study, ctx: StudyContext, n_trials: int) -> None:
    # A trial that raises is recorded FAILED (run and Optuna trial); the study goes on. An
    # infrastructure fault stops it here, its trial INTERRUPTED.
    try:
        study.optimize(_objective(ctx), n_trials=n_trials, catch=(Exception,),
                       timeout=ctx.spec.search.timeout_s)
    except _Interrupted as carried:
        raise carried.__cause__ from None
    except Exception as exc:  # the storage, outside any trial
        what = infrastructure_fault(exc)
        if what is None:
            raise
        raise InfrastructureError(what, exc) from exc


def _die_with_parent(parent_pid: int) -> None:
    """Exit when the driver ``parent_pid`` dies.

    On Linux the kernel sends SIGKILL (``prctl(PR_SET_PDEATHSIG)``); elsewhere, and as a
    fallback, a thread checks the parent every second.
    """
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # it died before the prctl took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _sigterm_as_interrupt(signum: int, frame: Any) -> None:
    """A worker's SIGTERM (from the driver) or SIGINT: stop once, ignore any that follow."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _quiet_interrupts(unraisable: Any) -> None:
    """Drop an interrupt raised inside a finaliser, which Python can only print and ignore.

    The driver kills a worker that did not stop, and reconciles its trial.
    """
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def _worker_main(ctx: StudyContext, n_trials: int, seed_offset: int, threads: int,
                 parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    signal.signal(signal.SIGINT, _sigterm_as_interrupt)
    sys.unraisablehook = _quiet_interrupts
    torch.set_num_threads(threads)
    try:
        _optimize(create_study(ctx, seed_offset=seed_offset), ctx, n_trials)
    except KeyboardInterrupt:
        sys.exit(130)  # the trial is recorded INTERRUPTED; no traceback
    except InfrastructureError as err:
        print(f"worker {os.getpid()}: {err}", file=sys.stderr)
        sys.exit(3)


def reconcile(ctx: StudyContext, *, retry: bool | None = None,
              assume_dead: str | None = None) -> Reconciled:
    """Reconcile the study's trials (`sweep.study.resume.reconcile`)."""
    return reconcile_trials(ctx, create_study(ctx), retry=retry, assume_dead=assume_dead)


def run_worker(ctx: StudyContext, n_trials: int) -> None:
    """Join the study from this process (``sweep worker``) and run ``n_trials`` trials.

    Trials of dead processes are reconciled first (`sweep.study.resume`).
    """
    study = create_study(ctx, seed_offset=os.getpid())
    reconcile_trials(ctx, study)
    _optimize(study, ctx, n_trials)


# What a trial the objective never finished (no ATTR_STATE) is, from Optuna's own state.
_FROM_OPTUNA = {OptunaState.RUNNING: TrialState.RUNNING, OptunaState.WAITING: TrialState.RUNNING,
                OptunaState.PRUNED: TrialState.PRUNED, OptunaState.COMPLETE: TrialState.COMPLETE}


def trial_state(trial: optuna.trial.FrozenTrial) -> TrialState:
    """The `TrialState` of an Optuna trial: the objective's record, else Optuna's state.

    A trial still running in Optuna is ``RUNNING`` whatever it recorded; one that raised before
    recording its state is ``FAILED``.
    """
    if trial.state == OptunaState.RUNNING:
        return TrialState.RUNNING
    recorded = trial.user_attrs.get(ATTR_STATE)
    if recorded is not None:
        return TrialState(recorded)
    return _FROM_OPTUNA.get(trial.state, TrialState.FAILED)


def _rows(study: optuna.Study) -> list[TrialRow]:
    """The progress rows: every trial that started (a queued WAITING one is not running)."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state == OptunaState.WAITING:
            continue
        tokens, val_loss = t.user_attrs.get(ATTR_PROGRESS, [0, math.nan])
        best = t.user_attrs.get(ATTR_BEST_VAL_LOSS, math.nan)
        rows.append(TrialRow(t.number, trial_state(t), dict(t.params), int(tokens), val_loss,
                             best, t.user_attrs.get(ATTR_REASON)))
    return rows


def enqueue(study: optuna.Study, points: tuple[dict[str, Any], ...]) -> int:
    """Queue ``points`` (flat params) as the study's next trials; returns how many to run.

    A point already waiting in the storage (queued by a run that stopped before it started)
    is not queued twice; it still counts.
    """
    waiting = [t.params or t.system_attrs.get("fixed_params", {})
               for t in study.get_trials(deepcopy=False, states=(OptunaState.WAITING,))]
    for point in points:
        if dict(point) in waiting:
            waiting.remove(dict(point))
        else:
            study.enqueue_trial(dict(point))
    return len(points)


def _still_to_run(study: optuna.Study, goal: int, reconciled: Reconciled) -> int:
    """Trials to start so the study reaches ``goal`` finished ones, counting those running."""
    finished = sum(trial_state(t).finished for t in study.get_trials(deepcopy=False))
    return max(0, goal - finished - len(reconciled.running))


def drop_unstarted_retries(study: optuna.Study, goal: int) -> list[int]:
    """End the retries still queued once the study holds ``goal`` finished trials.

    Interrupted trials are queued again as they are found (`sweep.study.resume.reconcile`), and
    the trials already running may reach the goal before a queued retry starts (a ``sweep
    worker`` elsewhere died near the end). Such a retry would stay ``WAITING`` for ever, or
    make the study one trial too many: it is ended ``FAIL`` with ``sweep_state =
    INTERRUPTED`` and a reason instead, keeping its parameters (as Optuna's fixed params), so a
    resume with a larger ``n_trials`` queues them first.

    Returns:
        The numbers of the retries ended.
    """
    trials = study.get_trials(deepcopy=False)
    if sum(trial_state(t).finished for t in trials) < goal:
        return []
    storage, dropped = study._storage, []
    for t in trials:
        if t.state == OptunaState.WAITING and ATTR_RETRY_OF in t.user_attrs:
            storage.set_trial_user_attr(t._trial_id, ATTR_STATE, TrialState.INTERRUPTED.value)
            storage.set_trial_user_attr(t._trial_id, ATTR_REASON, "not retried: the study "
                                        f"reached {goal} finished trials first")
            storage.set_trial_state_values(t._trial_id, OptunaState.FAIL)
            dropped.append(t.number)
    return dropped


def _finished_by(study: optuna.Study, pid: int) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False)
               if owner_pid(t.user_attrs.get(ATTR_OWNER)) == pid and trial_state(t).finished)


def _supervise(study: optuna.Study, ctx: StudyContext, n_trials: int, parallel: int, *,
               seed_base: int) -> None:
    """Run ``n_trials`` in ``parallel`` worker processes, replacing workers that die.

    A worker that exits with a non-zero code is reconciled (its trial ``INTERRUPTED`` and
    queued again) and replaced by one that runs what it had left. Ctrl-C or SIGTERM stops the
    workers (they end their trials ``INTERRUPTED``) and is raised again.

    Raises:
        StudyInterrupted: More than `MAX_WORKER_DEATHS` workers died.
    """
    mp = multiprocessing.get_context("spawn")  # no forked torch/MLflow state
    threads = max(1, (os.cpu_count() or 1) // parallel)
    procs: dict[Any, int] = {}
    started = 0

    def launch(share: int) -> None:
        nonlocal started
        offset = seed_base + 100_003 * (started + 1)  # each worker its own draws
        proc = mp.Process(target=_worker_main,
                          args=(ctx, share, offset, threads, os.getpid()), daemon=False)
        proc.start()
        procs[proc] = share
        started += 1

    for i in range(parallel):
        launch(n_trials // parallel + (1 if i < n_trials % parallel else 0))
    deaths: list[int] = []
    try:
        while procs:
            for proc in list(procs):
                proc.join(timeout=0.2)
                if proc.is_alive():
                    continue
                share = procs.pop(proc)
                if proc.exitcode == 0:
                    continue
                if proc.exitcode == 3:  # it stopped on an infrastructure fault, said on stderr
                    raise InfrastructureError(
                        "a worker process stopped on an infrastructure fault",
                        RuntimeError(f"worker {proc.pid} exited with code 3"))
                deaths.append(proc.exitcode)
                reconcile_trials(ctx, study)
                left = share - _finished_by(study, proc.pid)
                if left <= 0:
                    continue
                if len(deaths) > MAX_WORKER_DEATHS:
                    raise StudyInterrupted(
                        f"{len(deaths)} worker processes died (exit codes {deaths}); the "
                        "study stopped with their trials interrupted; check memory and the "
                        "logs, then run the same command again to resume")
                launch(left)
    except BaseException:
        _stop_workers(procs)
        raise


def _stop_workers(procs: dict[Any, int], grace_s: float = 15.0) -> None:
    """SIGTERM every live worker (it ends its trial ``INTERRUPTED``), then SIGKILL stragglers."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()


def run(ctx: StudyContext, n_trials: int, view: ProgressView, *,
        address: str | None = None) -> optuna.Study:
    """Run trials until the study holds ``n_trials`` (``search.parallel`` processes).

    Args:
        ctx: The study context.
        n_trials: Finished trials the study should hold at the end; a resumed study runs
            the rest, after reconciling trials of dead processes (`sweep.study.resume`).
            With ``ctx.points``, exactly those points run instead (queued, `enqueue`).
        view: Progress display, polled from the storage every second.
        address: Not used: Optuna workers are processes on this machine; other machines join
            through shared storage with ``sweep worker``.

    Returns:
        The Optuna study.
    """
    stored = len(create_study(ctx).get_trials(deepcopy=False))
    study = create_study(ctx, seed_offset=stored)  # a resumed study draws anew
    # Nothing of this process runs a trial now: its own RUNNING trials (left by a fault it is
    # retrying after) are as dead as a killed process's.
    reconciled = reconcile_trials(ctx, study, assume_dead=current_owner())
    if reconciled.interrupted:
        retried = f", {len(reconciled.retried)} queued again" if reconciled.retried else ""
        view.note(f"resuming: trial(s) {', '.join(map(str, reconciled.interrupted))} of a "
                  f"process that is gone marked INTERRUPTED{retried}")
    goal = None if ctx.points else n_trials
    if ctx.points:
        n_trials = enqueue(study, ctx.points)
    else:
        n_trials = _still_to_run(study, goal, reconciled)
    parallel = max(1, min(ctx.spec.search.parallel, n_trials))
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(1.0):
            view.update(_rows(study))

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        waiting_said = False
        while True:
            if n_trials and parallel == 1:
                _optimize(study, ctx, n_trials)
            elif n_trials:
                _supervise(study, ctx, n_trials, parallel, seed_base=stored)
            # Trials of `sweep worker` processes may still run: wait for them, and run what a
            # worker that died leaves undone, so the study ends with all its trials.
            reconciled = reconcile_trials(ctx, study, assume_dead=current_owner())
            n_trials = 0
            if goal is not None and reconciled.interrupted:  # a worker elsewhere died
                n_trials = _still_to_run(study, goal, reconciled)
                parallel = max(1, min(ctx.spec.search.parallel, n_trials))
            if n_trials:
                continue
            if not reconciled.running:  # (a sampler that stopped the study stays stopped)
                break
            if not waiting_said:
                view.note(f"waiting for trial(s) {', '.join(map(str, reconciled.running))} "
                          "of other workers")
                waiting_said = True
            time.sleep(2.0)
        if goal is not None:
            drop_unstarted_retries(study, goal)
    finally:
        stop.set()
        poller.join(timeout=5)
        view.update(_rows(study))
    return study
