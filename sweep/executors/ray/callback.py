"""The driver-side Ray Tune callback.

Progress rows from Ray's trial events, and the end state of trials Ray stopped before they could
record it (a scheduler's stop ends them ``PRUNED``, with the tokens they had trained). A trial
an infrastructure fault stopped (`sweep.tracking.faults`) ends ``INTERRUPTED``, not
``FAILED``; when the store does not answer at that moment either, the trial is left to
`sweep.executors.ray.runless`, which records it once the store answers.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray import tune

from sweep.executors.ray.reporting import trial_params
from sweep.schema import (
    ATTR_REASON,
    ATTR_RUN_ID,
    ATTR_STATE,
    CONFIG_TRIAL_NUMBER,
    METRIC_BEST_VAL_LOSS,
    METRIC_TOKENS,
    METRIC_VAL_LOSS,
    TrialState,
)
from sweep.study.progress import ProgressView, TrialRow
from sweep.study.trial import StudyContext
from sweep.tracking import find_trial_run
from sweep.tracking.faults import infrastructure_fault

__all__ = ["StudyCallback", "config_number", "error_state", "trial_error"]

log = logging.getLogger(__name__)


def config_number(trial: Any) -> int:
    """A searched Ray trial's trial number, from its config (`CONFIG_TRIAL_NUMBER`)."""
    return int(trial.config[CONFIG_TRIAL_NUMBER])


def error_state(trial: Any) -> tuple[TrialState, str, str | None]:
    """How an errored Ray trial ends: its state, reason and detail (`trial_error`).

    ``INTERRUPTED`` with reason ``interrupted: <what failed>`` when an infrastructure fault
    (`sweep.tracking.faults.infrastructure_fault`) stopped it, else ``FAILED``.
    """
    reason, detail = trial_error(trial)
    what = infrastructure_fault(_trial_exception(trial) or Exception(reason))
    if what is not None:
        return TrialState.INTERRUPTED, f"interrupted: {what}", detail
    return TrialState.FAILED, reason, detail


def _pickled_error(trial: Any) -> BaseException | None:
    """The exception Ray pickled for an errored trial (a ``RayTaskError``), or None.

    Read from the trial's folder on the driver, where Ray writes it before it calls the
    callbacks (it reaches the storage path only later).
    """
    import cloudpickle

    exc = None
    with contextlib.suppress(Exception):  # no file, or an error that does not unpickle
        path = trial.pickled_error_file
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                exc = cloudpickle.load(f)
    return exc if isinstance(exc, BaseException) else None


def _trial_exception(trial: Any) -> BaseException | None:
    """The exception the trainable raised, unwrapped from Ray's ``RayTaskError``."""
    exc = _pickled_error(trial)
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def trial_error(trial: Any) -> tuple[str, str | None]:
    """Why a Ray trial errored: ``("<ExceptionType>: <message>", traceback text or None)``.

    The exception the trainable raised, unwrapped from Ray's ``RayTaskError`` (whose text holds
    the remote traceback); a worker that died (``RayActorError``: killed, out of memory) is
    named as such. Read from the files Ray writes into the trial's folder on the driver before
    it calls the callbacks (the pickled error, else the error text), which reach the storage
    path only later.
    """
    exc = _pickled_error(trial)
    if exc is not None:
        detail = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # Ray colours the worker name
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException):
            exc = cause
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return (f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__), detail
    text = None
    with contextlib.suppress(Exception):
        path = trial.error_file
        if path and os.path.exists(path):
            text = Path(path).read_text()
    lines = [ln.strip() for ln in (text or "").splitlines()
             if ln.strip() and not ln.startswith("Failure # ")]
    if lines:
        return lines[-1], text
    return "the trial errored and Ray kept no error", None


class StudyCallback(tune.Callback):
    """Progress rows from Ray's trial events; ends runs of trials Ray stopped.

    Args:
        ctx: The study context.
        view: The progress view (not pickled with the experiment).
        number: A Ray trial's trial number (picklable: Ray saves the callback); default its
            config's `sweep.schema.CONFIG_TRIAL_NUMBER`.
    """

    def __init__(self, ctx: StudyContext, view: ProgressView | None,
                 number: Callable[[Any], int] | None = None) -> None:
        number = number or config_number
        self.ctx, self.view, self._number = ctx, view, number
        self.rows: dict[str, TrialRow] = {}
        self._best = math.nan  # best val loss of the run `_end_run` ended last

    def _row(self, trial: Any) -> TrialRow:
        row = self.rows.get(trial.trial_id)
        if row is None:
            row = TrialRow(self._number(trial), TrialState.RUNNING, trial_params(trial.config))
            self.rows[trial.trial_id] = row
        return row

    def __getstate__(self) -> dict[str, Any]:
        # Ray saves the run config with the experiment; the live view stays here.
        return {**self.__dict__, "view": None}

    def _show(self) -> None:
        if self.view is not None:
            self.view.update(list(self.rows.values()))

    @staticmethod
    def _mutated(row: TrialRow, trial: Any) -> None:
        """Keep the params a row started with; PBT's changes go to ``row.mutated``."""
        current = trial_params(trial.config)
        row.mutated = {k: v for k, v in current.items() if row.params.get(k, v) != v}

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        self._mutated(self._row(trial), trial)
        self._show()

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        row = self._row(trial)
        self._mutated(row, trial)
        row.tokens = int(result.get(METRIC_TOKENS, row.tokens))
        if ATTR_STATE in result:
            row.best_val_loss = float(result.get(METRIC_BEST_VAL_LOSS, math.nan))
            row.reason = result.get(ATTR_REASON)
        else:
            row.val_loss = float(result.get(METRIC_VAL_LOSS, math.nan))
        self._show()

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        row = self._row(trial)
        last = trial.last_result or {}
        if ATTR_STATE in last:
            row.state = TrialState(last[ATTR_STATE])
        else:  # stopped by the scheduler: Ray ended the trial before it could say so
            row.state = TrialState.PRUNED
            self._end_run(trial, TrialState.PRUNED, None, last)
            row.best_val_loss = self._best
        self._show()

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        row = self._row(trial)
        row.state, reason, detail = error_state(trial)
        row.reason = reason[:300]
        self._end_run(trial, row.state, reason, trial.last_result or {}, detail=detail)
        self._show()

    def _end_run(self, trial: Any, state: str, reason: str | None,
                 last: dict[str, Any], *, detail: str | None = None) -> None:
        """End the trial's MLflow run in ``state`` unless the trial already ended it.

        When the store does not answer, the run is left as it is: a run left ``RUNNING`` is
        ended by the next reconcile (`sweep.study.resume`), a missing one created by
        `sweep.executors.ray.runless`.
        """
        self._best = math.nan
        try:
            self._end_run_now(trial, state, reason, last, detail=detail)
        except Exception as exc:
            what = infrastructure_fault(exc)
            if what is None:
                raise
            log.warning("trial %s: its run not ended %s (%s); recorded once the store answers",
                        self._number(trial), state, what)

    def _end_run_now(self, trial: Any, state: str, reason: str | None,
                     last: dict[str, Any], *, detail: str | None = None) -> None:
        number = self._number(trial)
        run_id = last.get(ATTR_RUN_ID) or find_trial_run(self.ctx.tracking, number)
        if run_id is None:  # failed before its run was created
            with self.ctx.tracking.start_trial(number, trial_params(trial.config)) as run:
                run.end(state, fail_reason=reason, detail=detail)
            return
        if self.ctx.tracking.trial_state(run_id) is not TrialState.RUNNING:
            return
        run = self.ctx.tracking.attach_trial(run_id)
        if METRIC_TOKENS in last:
            run.log_metrics({METRIC_TOKENS: last[METRIC_TOKENS]})
        run.end(state, fail_reason=reason, detail=detail)
        if math.isfinite(run.best_val_loss):
            self._best = run.best_val_loss
