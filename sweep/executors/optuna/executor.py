"""Optuna executor: the study lives in Optuna storage, trials run through `sweep.study.trial`.

With ``search.parallel: N`` the driver starts N worker processes that share the storage
(`sweep.executors.optuna.workers`); ``sweep worker SPEC`` joins the same study from another
machine. The objective and the study are `sweep.executors.optuna.objective`'s.

Nothing lost: before trials run, trials of dead processes are reconciled
(`sweep.executors.optuna.recovery`: ``INTERRUPTED``, queued again), and only finished trials
count toward ``n_trials``; the driver waits for the trials of joined ``sweep worker``
processes, and runs what a worker that died left undone, before it summarises.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

import optuna
from optuna.trial import TrialState as OptunaState

from sweep.adapters import optuna as private
from sweep.executors.optuna.objective import create_study, optimize, trial_state
from sweep.executors.optuna.recovery import reconcile as reconcile_trials
from sweep.executors.optuna.workers import supervise
from sweep.schema import (
    ATTR_BEST_VAL_LOSS,
    ATTR_PROGRESS,
    ATTR_REASON,
    ATTR_RETRY_OF,
    ATTR_STATE,
    TrialState,
)
from sweep.study.progress import ProgressView, TrialRow
from sweep.study.resume import Reconciled
from sweep.study.trial import StudyContext
from sweep.tracking.owner import current_owner

__all__ = ["drop_unstarted_retries", "enqueue", "reconcile", "run", "run_worker"]


def reconcile(ctx: StudyContext, *, retry: bool | None = None,
              assume_dead: str | None = None) -> Reconciled:
    """Reconcile the study's trials (`sweep.executors.optuna.recovery.reconcile`)."""
    return reconcile_trials(ctx, create_study(ctx), retry=retry, assume_dead=assume_dead)


def run_worker(ctx: StudyContext, n_trials: int) -> None:
    """Join the study from this process (``sweep worker``) and run ``n_trials`` trials.

    Trials of dead processes are reconciled first (`sweep.study.resume`).
    """
    study = create_study(ctx, seed_offset=os.getpid())
    reconcile_trials(ctx, study)
    optimize(study, ctx, n_trials)


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
    waiting = [t.params or private.fixed_params(t)
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
    dropped = []
    for t in trials:
        if t.state == OptunaState.WAITING and ATTR_RETRY_OF in t.user_attrs:
            queued = private.handle(study, t)
            queued.set_user_attr(ATTR_STATE, TrialState.INTERRUPTED.value)
            queued.set_user_attr(ATTR_REASON, f"not retried: the study reached {goal} "
                                 "finished trials first")
            private.set_state(study, t, OptunaState.FAIL)
            dropped.append(t.number)
    return dropped



def run(ctx: StudyContext, n_trials: int, view: ProgressView, *,
        address: str | None = None) -> optuna.Study:
    """Run trials until the study holds ``n_trials`` (``search.parallel`` processes).

    Args:
        ctx: The study context.
        n_trials: Finished trials the study should hold at the end; a resumed study runs
            the rest, after reconciling trials of dead processes (`sweep.study.resume`).
            With ``ctx.points``, exactly those points run instead (queued, `enqueue`).
        view: Progress display, polled from the storage every second unless quiet.
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
    if goal is None:
        n_trials = enqueue(study, ctx.points)
    else:
        n_trials = _still_to_run(study, goal, reconciled)
    parallel = max(1, min(ctx.spec.search.parallel, n_trials))
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(1.0):
            view.update(_rows(study))

    poller = threading.Thread(target=poll, daemon=True)
    if not view.quiet:  # a quiet view shows nothing: no reading every trial every second
        poller.start()
    try:
        waiting_said = False
        while True:
            if n_trials and parallel == 1:
                optimize(study, ctx, n_trials)
            elif n_trials:
                supervise(study, ctx, n_trials, parallel, seed_base=stored)
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
        if poller.is_alive():
            poller.join(timeout=5)
        view.update(_rows(study))
    return study
