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

A trial the executor knows of but MLflow does not (a fault while its run was being created, a
driver stopped before the trial started) gets its run from `record_runless`, ended
``INTERRUPTED`` with its params, so the store holds exactly one run per trial number.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sweep.schema import TrialState
from sweep.tracking.owner import owner_alive

log = logging.getLogger(__name__)

#: Seconds a trial may lack its owner record before it is taken for a killed one's.
OWNERLESS_S = 10.0
#: Times one point is queued again after interruptions before it is given up.
MAX_RETRIES = 3

__all__ = ["Reconciled", "Runless", "StudyInterrupted", "interrupt_signals", "reconcile",
           "reconcile_runs", "record_runless", "resolved_params", "signal_handlers"]


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


def dead_owner(owner: str | None) -> str:
    """The reason a trial of a process that is gone ends ``INTERRUPTED``."""
    return f"interrupted: its process ({owner or 'unknown'}) is gone"


def reconcile(ctx: Any, trials: Any = None, *, assume_dead: str | None = None) -> Reconciled:
    """Mark trials whose process died ``INTERRUPTED`` and end their runs.

    First the trial writes buffered while the tracking store did not answer are sent
    (`sweep.tracking.TrialContext.sync_buffers`), so a trial that ended meanwhile is seen as
    finished. Then ``trials(done)`` reconciles the executor's own record of its trials (the
    Optuna executor's storage: marked, adopted, queued again) and returns the numbers it
    knows to be running; without it (Ray) each run is judged by its own owner and heartbeat.
    Last, the runs still ``RUNNING`` whose trials are not end ``INTERRUPTED``.

    Args:
        ctx: The study context (`sweep.study.trial.StudyContext`).
        trials: The executor's reconcile of its own trials, or None.
        assume_dead: An owner (`sweep.tracking.owner.current_owner`) known to run no trial now,
            e.g. the calling process between two attempts.

    Returns:
        The `Reconciled` summary.

    Raises:
        Exception: The store's error when buffered writes cannot be sent (an infrastructure
            fault: the driver waits and tries again).
    """
    done = Reconciled()
    # Writes kept while the store did not answer go first: a trial they end is finished.
    synced = ctx.tracking.sync_buffers()
    if synced.error is not None:
        raise synced.error
    for run_id, reason in synced.rejected:
        log.warning("buffered writes of run %s not sent: %s", run_id, reason)
    for path, reason in synced.refused:
        log.warning("%s not sent: %s; left as it is", path, reason)
    done.synced = synced.runs
    alive = trials(done) if trials is not None else None
    reconcile_runs(ctx.tracking, alive=alive, done=done, assume_dead=assume_dead)
    return done


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
    ended = []
    for run in tracking.running_trials():
        if alive is not None:
            if run.number in alive:
                continue
        elif run.owner != assume_dead and owner_alive(run.owner, run.heartbeat) is not False:
            done.running.append(run.number)
            continue
        ended.append(run)
    done.runs_ended += tracking.end_interrupted(ended, lambda run: dead_owner(run.owner))
    if alive is None:
        done.interrupted += [run.number for run in ended]
    return done


@dataclass(frozen=True)
class Runless:
    """A trial the executor holds that may have no MLflow run.

    Attributes:
        number: Its trial number.
        params: Its sampled params under dotted keys (``train.lr``).
        retry_of: The trial it retries (tag ``sweep.retry_of``), or None.
        reason: Why it ended, for tag ``sweep.fail_reason``.
    """

    number: int
    params: Mapping[str, Any]
    retry_of: int | None
    reason: str


def resolved_params(spec: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's sampled params as its run logs them: the resolved configs where they resolve."""
    from sweep import space  # the search space: only when a trial is recorded

    try:
        model, train = space.configs_from_params(spec, dict(params))
    except space.InvalidConfig:
        return dict(params)
    return {"model": model.to_dict(), "train": train.to_dict()}


def record_runless(ctx: Any, trials: Iterable[Runless]) -> list[int]:
    """Give each of ``trials`` whose number has no MLflow run one, ended ``INTERRUPTED``.

    The run holds the resolved configs, as the trial would have logged them (its sampled
    params where the space cannot resolve them), its number, ``retry_of`` and reason. A number
    that has a run is left alone, so calling this again records nothing twice.

    Args:
        ctx: The study context (`sweep.study.trial.StudyContext`).
        trials: The executor's trials (any state).

    Returns:
        The numbers recorded now.

    Raises:
        Exception: The store's error when it does not answer (an infrastructure fault).
    """
    trials = list(trials)
    if not trials:
        return []
    numbers = {r["trial"] for r in ctx.tracking.read_trials()}
    recorded = []
    for t in trials:
        if t.number in numbers:
            continue
        params = resolved_params(ctx.spec, t.params)
        with ctx.tracking.start_trial(t.number, params, retry_of=t.retry_of) as run:
            run.end(TrialState.INTERRUPTED, fail_reason=t.reason)
        numbers.add(t.number)
        recorded.append(t.number)
    return recorded
