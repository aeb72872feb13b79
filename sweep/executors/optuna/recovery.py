"""Reconciling the Optuna executor's trials with the processes that ran them.

Under the Optuna executor a trial lives twice: in the Optuna storage (user attributes
``sweep_owner`` and ``sweep_heartbeat``) and as its MLflow run. `reconcile` looks at every
trial still ``RUNNING`` in the storage:

- its owner is alive (same host: the process exists with the same start time; another host:
  a heartbeat within `sweep.tracking.owner.GRACE_S`): left alone, and counted as running;
- its owner is dead but its MLflow run had ended (the process died between ending the run and
  telling Optuna): Optuna is told the run's result as the objective would have told it
  (`sweep.study.policy.told_from_run`), and the trial counts as finished;
- its owner is dead otherwise: the trial is ``INTERRUPTED``, ``FAIL`` in Optuna with
  ``sweep_state = INTERRUPTED`` (samplers skip failed trials), and its MLflow run ends
  ``KILLED`` (one is recorded for a trial that never opened its run).

An interrupted trial with no MLflow run (a fault while its run was being created) gets one,
ended ``INTERRUPTED`` with its params, number and reason, so every trial number has a run; a
run without params (killed while its opening records waited to be sent with its next write,
`sweep.tracking.trial_run.EVAL_HOLD_S`) gets them from the storage.

With ``search.retry_interrupted`` (the default), the interrupted trials the policy retries
(`sweep.study.policy.to_retry`) are queued again with the same parameters
(`optuna.Study.enqueue_trial`, user attribute ``sweep_retry_of`` naming the trial), so the
search loses no point it had chosen. Then the MLflow runs left ``RUNNING`` are ended
(`sweep.study.resume.reconcile`).
"""

from __future__ import annotations

import time
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState as OptunaState

from sweep import space
from sweep.adapters import optuna as private
from sweep.schema import (
    ATTR_HEARTBEAT,
    ATTR_OWNER,
    ATTR_REASON,
    ATTR_RETRY_OF,
    ATTR_RUN_ID,
    ATTR_STATE,
    TrialState,
)
from sweep.study.policy import Attempt, to_retry, told_from_run
from sweep.study.resume import (
    Reconciled,
    Runless,
    dead_owner,
    record_runless,
    resolved_params,
)
from sweep.study.resume import reconcile as reconcile_study
from sweep.tracking.owner import owner_alive

__all__ = ["OWNERLESS_S", "reconcile"]

#: Seconds a trial may lack its owner record before it is taken for a killed one's.
OWNERLESS_S = 10.0


def reconcile(ctx: Any, study: optuna.Study, *, retry: bool | None = None,
              assume_dead: str | None = None) -> Reconciled:
    """Reconcile ``study``'s trials and the study's MLflow runs (module docstring).

    Args:
        ctx: The study context (`sweep.study.trial.StudyContext`).
        study: The study's Optuna study.
        retry: Queue interrupted trials again; default ``search.retry_interrupted``.
        assume_dead: An owner (`sweep.tracking.owner.current_owner`) known to run no trial now,
            e.g. the calling process between two attempts.

    Returns:
        The `sweep.study.resume.Reconciled` summary.
    """
    retry = ctx.spec.search.retry_interrupted if retry is None else retry

    def trials(done: Reconciled) -> set[int]:
        alive = _reconcile_trials(ctx, study, done, assume_dead)
        _record_runless(ctx, study)
        if retry:
            done.retried += _queue_retries(study)
        return alive

    return reconcile_study(ctx, trials, assume_dead=assume_dead)


def _owner(study: optuna.Study, t: optuna.trial.FrozenTrial) -> tuple[Any, str | None]:
    """The trial as it is now and its owner, once it has had `OWNERLESS_S` to record one.

    The objective records its owner first thing: a trial without one is a process's for
    milliseconds, so wait out `OWNERLESS_S` from its start, then it is dead.
    """
    owner = t.user_attrs.get(ATTR_OWNER)
    if owner is None:
        started = t.datetime_start.timestamp() if t.datetime_start else 0.0
        time.sleep(max(0.0, min(OWNERLESS_S, started + OWNERLESS_S - time.time())))
        t = private.reload(study, t)
        owner = t.user_attrs.get(ATTR_OWNER)
    return t, owner


def _reconcile_trials(ctx: Any, study: optuna.Study, done: Reconciled,
                      assume_dead: str | None) -> set[int]:
    alive: set[int] = set()
    runs = None
    for t in study.get_trials(deepcopy=False, states=(OptunaState.RUNNING,)):
        t, owner = _owner(study, t)
        if t.state != OptunaState.RUNNING:
            continue
        beat = t.user_attrs.get(ATTR_HEARTBEAT)
        if beat is None and t.datetime_start is not None:
            beat = t.datetime_start.timestamp()
        if owner is not None and owner != assume_dead and owner_alive(owner, beat) is not False:
            alive.add(t.number)
            continue
        if runs is None:
            runs = {r["trial"]: r for r in ctx.tracking.read_trials()}
        ended = runs.get(t.number)
        if ended is not None and ended["state"].finished:
            # Killed after its run ended, before Optuna heard: Optuna takes the run's result.
            _adopt(ctx, study, t, ended)
            done.adopted.append(t.number)
            continue
        try:
            trial = private.handle(study, t)
            trial.set_user_attr(ATTR_STATE, TrialState.INTERRUPTED.value)
            trial.set_user_attr(ATTR_REASON, dead_owner(owner))
            private.set_state(study, t, OptunaState.FAIL)
        except UpdateFinishedTrialError:  # it finished meanwhile
            continue
        done.interrupted.append(t.number)
        if ended is None:  # stopped before its run was opened: record it in MLflow too
            with ctx.tracking.start_trial(t.number, dict(t.params),
                                         retry_of=t.user_attrs.get(ATTR_RETRY_OF)) as run:
                run.end(TrialState.INTERRUPTED, fail_reason=dead_owner(owner))
        elif not ended["params"]:  # killed while its opening records waited (EVAL_HOLD_S)
            ctx.tracking.log_params(ended["run_id"], t.number,
                                    resolved_params(ctx.spec, t.params))
    done.running = sorted(alive)
    return alive


def _record_runless(ctx: Any, study: optuna.Study) -> list[int]:
    """Give each interrupted trial without an MLflow run one, ended ``INTERRUPTED``.

    A fault while a trial's run was being created (the store did not answer) interrupts the
    trial before it has a run (`sweep.study.resume.record_runless`). Returns the numbers
    recorded.
    """
    return record_runless(ctx, (
        Runless(t.number, t.params, t.user_attrs.get(ATTR_RETRY_OF),
                t.user_attrs.get(ATTR_REASON) or "interrupted before its run was created")
        for t in study.get_trials(deepcopy=False, states=(OptunaState.FAIL,))
        if t.user_attrs.get(ATTR_STATE) == TrialState.INTERRUPTED.value))


def _adopt(ctx: Any, study: optuna.Study, t: optuna.trial.FrozenTrial,
           run: dict[str, Any]) -> None:
    """Tell Optuna the result an ended run recorded for trial ``t``, as the objective would."""
    told = told_from_run(ctx.spec, run, baseline=ctx.corpus().baseline_unigram_loss,
                         device=ctx.device)
    trial = private.handle(study, t)
    trial.set_user_attr(ATTR_STATE, run["state"].value)
    trial.set_user_attr(ATTR_RUN_ID, run["run_id"])
    if run.get("fail_reason"):
        trial.set_user_attr(ATTR_REASON, run["fail_reason"][:500])
    if told.constraints is not None:
        space.record_constraints(trial, told.constraints)
    private.set_state(study, t, told.state, told.values)


def _queue_retries(study: optuna.Study) -> list[int]:
    """Queue the interrupted trials the policy retries; returns their numbers."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    history = [Attempt(t.number, TrialState(t.user_attrs[ATTR_STATE])
                       if t.state == OptunaState.FAIL and ATTR_STATE in t.user_attrs
                       else TrialState.RUNNING, t.user_attrs.get(ATTR_RETRY_OF))
               for t in trials.values()]
    queued = []
    for number in to_retry(history):
        t = trials[number]
        # (a retry dropped before it started has its params only as fixed params)
        params = dict(t.params) or private.fixed_params(t)
        study.enqueue_trial(params, user_attrs={ATTR_RETRY_OF: number})
        queued.append(number)
    return queued
