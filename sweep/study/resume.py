"""Crash recovery: trials left running by dead processes are reconciled before a study goes on.

A trial records its owner process (`sweep.tracking.owner`) in its MLflow run (tag
``sweep.owner``) and, under the Optuna executor, in its Optuna trial (user attribute
``sweep_owner``); both keep a heartbeat. When a study resumes (and whenever the Optuna
executor replaces a worker that died), `reconcile` looks at every trial still ``RUNNING``:

- its owner is alive (same host: the process exists with the same start time; another host:
  a heartbeat within `sweep.tracking.owner.GRACE_S`): left alone, and counted as running;
- its owner is dead but its MLflow run had ended (the process died between ending the run and
  telling Optuna): Optuna takes the run's result, and the trial counts as finished;
- its owner is dead otherwise: the trial is ``INTERRUPTED``. In Optuna it becomes ``FAIL``
  with ``sweep_state = INTERRUPTED`` (samplers skip failed trials), and its MLflow run ends
  ``KILLED`` with tag ``sweep.state = INTERRUPTED`` and the reason.

With ``search.retry_interrupted`` (the default), every interrupted trial not retried yet is
queued again with the same parameters (`optuna.Study.enqueue_trial`, user attribute
``sweep_retry_of`` naming it), so the search loses no point it had chosen; a point is queued
again at most `MAX_RETRIES` times (a trial that kills its process each time is given up).
Interrupted trials do not count toward ``n_trials``: a study ends with exactly ``n_trials``
finished trials (`sweep.schema.TrialState.finished`), plus the interrupted ones, none
``RUNNING``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import RunStatus
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from sweep.schema import (
    ATTR_HEARTBEAT,
    ATTR_OWNER,
    ATTR_REASON,
    ATTR_RETRY_OF,
    ATTR_RUN_ID,
    ATTR_STATE,
    METRIC_BEST_VAL_LOSS,
    METRIC_VAL_LOSS,
    TAG_HEARTBEAT,
    TAG_OWNER,
    TAG_TRIAL_NUMBER,
    TrialState,
)
from sweep.tracking.owner import owner_alive
from sweep.tracking.reader import read_trials
from sweep.tracking.trial_run import TrialRun

log = logging.getLogger(__name__)

#: Seconds a trial may lack its owner record before it is taken for a killed one's.
OWNERLESS_S = 10.0
#: Times one point is queued again after interruptions before it is given up.
MAX_RETRIES = 3

__all__ = ["Reconciled", "StudyInterrupted", "interrupt_signals", "reconcile", "reconcile_runs",
           "signal_handlers"]


#: `_Received.name` while signals are held off for a step that must not be cut short.
HOLD = "hold"


class _Received:
    """The signal that stopped the study (``name`` None until one arrives).

    Setting ``name`` to `HOLD` ignores signals until the `interrupt_signals` block ends, then
    restores the previous handlers.
    """

    name: str | None = None


@contextlib.contextmanager
def interrupt_signals():
    """Turn SIGTERM into ``KeyboardInterrupt``, as Ctrl-C (SIGINT) already is, and record which.

    In the main thread only (elsewhere signals cannot be handled); the previous handlers are
    restored on exit. Yields a `_Received` whose ``name`` is ``SIGINT`` or ``SIGTERM``.
    """
    received = _Received()

    def handler(signum: int, frame: Any) -> None:
        if received.name is not None:
            return  # already stopping: a second Ctrl-C must not break the clean stop
        received.name = signal.Signals(signum).name
        raise KeyboardInterrupt(received.name)

    # A stop on a signal keeps them ignored while the process exits; `hold` (the study's
    # summary, once every trial has ended) ignores them only until the block ends.
    with signal_handlers(handler, keep=lambda: received.name not in (None, HOLD)):
        yield received


@contextlib.contextmanager
def signal_handlers(handler: Any, signals: tuple = (signal.SIGINT, signal.SIGTERM), *,
                    keep: Any = None):
    """Install ``handler`` for ``signals`` and restore the previous handlers on exit.

    Only the main thread can handle signals: elsewhere nothing is installed. Yields whether
    the handlers were installed. When ``keep()`` is true on exit (the process is stopping on
    a signal), the signals stay ignored instead, so that one more cannot break the exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    old = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield True
    finally:
        stopping = keep is not None and keep()
        for sig, previous in old.items():
            signal.signal(sig, signal.SIG_IGN if stopping else previous)


class StudyInterrupted(RuntimeError):
    """The study stopped before its end for a reason outside its trials.

    A signal, workers that keep dying, a store or disk that failed; the message says what and
    how to resume.

    Attributes:
        exit_code: The CLI's exit status: 130 for SIGINT, 143 for SIGTERM, 3 otherwise.
    """

    def __init__(self, message: str, exit_code: int = 3) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Reconciled:
    """What `reconcile` found and did.

    Attributes:
        interrupted: Numbers of the trials it marked ``INTERRUPTED`` now.
        retried: Numbers of the interrupted trials it queued again now.
        running: Numbers of the trials still running in live processes.
        runs_ended: MLflow run ids it ended ``INTERRUPTED``.
        adopted: Trials whose run had ended (the process died before telling Optuna): Optuna
            took the run's result, and they count as finished.
        synced: Run ids whose buffered writes (`sweep.tracking.buffer`) it sent first.
    """

    interrupted: list[int] = field(default_factory=list)
    retried: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    runs_ended: list[str] = field(default_factory=list)
    adopted: list[int] = field(default_factory=list)
    synced: list[str] = field(default_factory=list)


def _reason(owner: str | None) -> str:
    return f"interrupted: its process ({owner or 'unknown'}) is gone"


def reconcile(ctx: Any, study: Any = None, *, retry: bool | None = None,
              assume_dead: str | None = None) -> Reconciled:
    """Mark trials whose process died ``INTERRUPTED``, queue them again, end their runs.

    First the trial writes buffered while the tracking store did not answer are sent
    (`sweep.tracking.TrialContext.sync_buffers`), so a trial that ended meanwhile is seen as
    finished.

    Args:
        ctx: The study context (`sweep.study.trial.StudyContext`).
        study: The Optuna study (Optuna executor), or None (Ray: MLflow runs only).
        retry: Queue interrupted trials again; default ``search.retry_interrupted``.
        assume_dead: An owner (`sweep.tracking.owner.current_owner`) known to run no trial now,
            e.g. the calling process between two attempts.

    Returns:
        The `Reconciled` summary.

    Raises:
        Exception: The store's error when buffered writes cannot be sent (an infrastructure
            fault: the driver waits and tries again).
    """
    retry = ctx.spec.search.retry_interrupted if retry is None else retry
    done = Reconciled()
    # Writes kept while the store did not answer go first: a trial they end is finished.
    synced = ctx.tracking.sync_buffers()
    if synced.error is not None:
        raise synced.error
    for run_id, reason in synced.rejected:
        log.warning("buffered writes of run %s not sent: %s", run_id, reason)
    done.synced = synced.runs
    alive: set[int] | None = None
    if study is not None:
        alive = _reconcile_optuna(study, done, ctx.tracking, retry=retry,
                                  objectives=list(ctx.spec.search.objectives),
                                  assume_dead=assume_dead)
    reconcile_runs(ctx.tracking, alive=alive, done=done, assume_dead=assume_dead)
    return done


def _adopt(study: Any, t: Any, run: dict[str, Any], objectives: list[str]) -> None:
    """Tell Optuna the result an ended run recorded for trial ``t``.

    As the objective would have: a complete trial its objective values (``best_val_loss`` for
    ``val_loss``, the cost metrics for the others), a pruned or infeasible one ``PRUNED``, a
    diverged or failed one ``FAIL``.
    """
    from optuna.trial import TrialState as OptunaState

    storage, state, metrics = study._storage, run["state"], run["metrics"]
    storage.set_trial_user_attr(t._trial_id, ATTR_STATE, state.value)
    storage.set_trial_user_attr(t._trial_id, ATTR_RUN_ID, run["run_id"])
    if run.get("fail_reason"):
        storage.set_trial_user_attr(t._trial_id, ATTR_REASON, run["fail_reason"][:500])
    values = [metrics.get(METRIC_BEST_VAL_LOSS if name == METRIC_VAL_LOSS else name)
              for name in objectives]
    if state is TrialState.COMPLETE and all(isinstance(v, float) for v in values):
        storage.set_trial_state_values(t._trial_id, OptunaState.COMPLETE, values)
        return
    pruned = state in (TrialState.PRUNED, TrialState.INFEASIBLE)
    storage.set_trial_state_values(t._trial_id,
                                   OptunaState.PRUNED if pruned else OptunaState.FAIL)


def _reconcile_optuna(study: Any, done: Reconciled, tracking: Any, *, retry: bool,
                      objectives: list[str], assume_dead: str | None = None) -> set[int]:
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState as OptunaState

    storage = study._storage  # user attrs of a trial this process does not run
    alive = set()
    runs = None
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if t.state != OptunaState.RUNNING:
            continue
        owner = t.user_attrs.get(ATTR_OWNER)
        if owner is None:
            # The objective records its owner first thing: a trial without one is a process's
            # for milliseconds, so wait out OWNERLESS_S from its start, then it is dead.
            started = t.datetime_start.timestamp() if t.datetime_start else 0.0
            time.sleep(max(0.0, min(OWNERLESS_S, started + OWNERLESS_S - time.time())))
            t = study._storage.get_trial(t._trial_id)
            if t.state != OptunaState.RUNNING:
                continue
            owner = t.user_attrs.get(ATTR_OWNER)
        beat = t.user_attrs.get(ATTR_HEARTBEAT)
        if beat is None and t.datetime_start is not None:
            beat = t.datetime_start.timestamp()
        if owner is None or owner == assume_dead:
            pass  # dead: see above
        elif owner_alive(owner, beat) is not False:
            alive.add(t.number)
            continue
        if runs is None:
            runs = {r["trial"]: r for r in read_trials(tracking.tracking_uri,
                                                       tracking.experiment_id,
                                                       tracking.parent_run_id)}
        ended = runs.get(t.number)
        if ended is not None and ended["state"].finished:
            # Killed after its run ended, before Optuna heard: Optuna takes the run's result.
            _adopt(study, t, ended, objectives)
            done.adopted.append(t.number)
            continue
        try:
            storage.set_trial_user_attr(t._trial_id, ATTR_STATE, TrialState.INTERRUPTED.value)
            storage.set_trial_user_attr(t._trial_id, ATTR_REASON, _reason(owner))
            storage.set_trial_state_values(t._trial_id, OptunaState.FAIL)
        except UpdateFinishedTrialError:  # it finished meanwhile
            continue
        done.interrupted.append(t.number)
        if ended is None:  # stopped before its run was opened: record it in MLflow too
            with tracking.start_trial(t.number, {k: v for k, v in t.params.items()},
                                     retry_of=t.user_attrs.get(ATTR_RETRY_OF)) as run:
                run.end(TrialState.INTERRUPTED, fail_reason=_reason(owner))
    done.running = sorted(alive)
    if retry:
        trials = study.get_trials(deepcopy=False)
        previous = {t.number: t.user_attrs.get(ATTR_RETRY_OF) for t in trials}
        retried = set(previous.values())
        for t in trials:
            if (t.state == OptunaState.FAIL and t.number not in retried
                    and t.user_attrs.get(ATTR_STATE) == TrialState.INTERRUPTED.value):
                attempts, back = 1, previous.get(t.number)
                while back is not None and attempts <= MAX_RETRIES:
                    attempts, back = attempts + 1, previous.get(back)
                if attempts > MAX_RETRIES:  # interrupted every time: its point is given up
                    continue
                # (a retry dropped before it started has its params only as fixed params)
                params = dict(t.params) or dict(t.system_attrs.get("fixed_params", {}))
                study.enqueue_trial(params, user_attrs={ATTR_RETRY_OF: t.number})
                done.retried.append(t.number)
    return alive


def reconcile_runs(tracking: Any, *, alive: set[int] | None = None,
                   done: Reconciled | None = None, assume_dead: str | None = None
                   ) -> Reconciled:
    """End the study's child runs left ``RUNNING`` by dead processes as ``INTERRUPTED``.

    Args:
        tracking: The study's `sweep.tracking.TrialContext`.
        alive: Trial numbers known to be running (the Optuna executor's view); None: judge
            each run by its own owner tag and heartbeat.
        done: A `Reconciled` to add to (a new one if None).
        assume_dead: An owner known to run no trial now.

    Returns:
        The `Reconciled` summary.
    """
    done = done or Reconciled()
    client = MlflowClient(tracking.tracking_uri)
    running = RunStatus.to_string(RunStatus.RUNNING)
    runs = client.search_runs(
        [tracking.experiment_id],
        filter_string=(f"tags.{MLFLOW_PARENT_RUN_ID} = '{tracking.parent_run_id}' "
                       f"and attributes.status = '{running}'"),
        max_results=10_000)
    for run in runs:
        tags = run.data.tags
        number = int(tags.get(TAG_TRIAL_NUMBER, -1))
        owner = tags.get(TAG_OWNER)
        if alive is not None:
            if number in alive:
                continue
        else:
            beat = tags.get(TAG_HEARTBEAT)
            beat = float(beat) if beat else run.info.start_time / 1000
            if owner != assume_dead and owner_alive(owner, beat) is not False:
                done.running.append(number)
                continue
        TrialRun(client, run.info.run_id, number).end(TrialState.INTERRUPTED,
                                                     fail_reason=_reason(owner))
        done.runs_ended.append(run.info.run_id)
        if alive is None:
            done.interrupted.append(number)
    return done
