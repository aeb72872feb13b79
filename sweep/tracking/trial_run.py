"""The MLflow child run of one trial.

`TrialRun` writes params, cost metrics, evaluations and the final state;
`sweep.tracking.trial_context.TrialContext` opens it anywhere.

Every write goes through `mlflow.MlflowClient` with an explicit run id (never the fluent
active-run stack), so trials in threads, processes or Ray workers on other machines do not collide.
Writes go in as few ``log_batch`` calls as MLflow takes (`sweep.tracking.batch`); what comes
within `EVAL_HOLD_S` of the run's last write (an evaluation, the records a trial opens with:
`deferred`) is held for the next write (an evaluation, the end, the heartbeat), so a short
trial is ``create_run``, one ``log_batch`` and ``set_terminated``, and a long one still shows
its configs and curve live. Non-finite values are never written, but for one: a DIVERGED
trial's loss metrics end in a nan at the step where it diverged, and it logs no
``final_val_loss`` or ``best_val_loss``, so MLflow (which orders nan after every number, in
either direction, and runs without the metric after that) never ranks it first by any loss.
"""

from __future__ import annotations

import contextlib
import math
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH

from sweep.params import encode_param, flatten_params
from sweep.redact import redact
from sweep.schema import (
    FAIL_REASON_ARTIFACT,
    LOSS_METRICS,
    METRIC_BEST_VAL_LOSS,
    METRIC_FINAL_VAL_LOSS,
    METRIC_TOKENS,
    METRIC_VAL_LOSS,
    RESULT_METRICS,
    TAG_DEVICE,
    TAG_FAIL_REASON,
    TAG_HEARTBEAT,
    TAG_NOTE,
    TAG_SIMULATED,
    TAG_STATE,
    TAG_TRUNCATED,
    TrialState,
    cost_metrics,
    mutation_key,
)
from sweep.tracking.batch import PendingWrites, finite, finite_float, now_ms
from sweep.tracking.buffer import BufferedClient
from sweep.tracking.faults import infrastructure_fault
from sweep.tracking.notes import trial_note
from sweep.tracking.owner import Heartbeat, call_each

#: An evaluation this soon (seconds) after the run's last write is held for the next one.
EVAL_HOLD_S = 1.0


class TrialRun:
    """The child run of one trial; use as a context manager so every run gets an end state.

    Leaving the ``with`` block normally ends the run ``COMPLETE`` unless `end` or `log_result`
    set a state; an exception ends it ``FAILED`` with the reason and re-raises it, except an
    interruption from outside the trial (``KeyboardInterrupt``: Ctrl-C, or SIGTERM turned into
    one by the driver; ``SystemExit``; an infrastructure fault,
    `sweep.tracking.faults.infrastructure_fault`), which ends it ``INTERRUPTED``. Metric values
    that are not finite are dropped, never logged. While open, the run's heartbeat (tag
    ``sweep.heartbeat``) is rewritten every `sweep.tracking.owner.HEARTBEAT_S` seconds.
    """

    def __init__(self, client: MlflowClient | BufferedClient, run_id: str, number: int) -> None:
        self.client = client
        self.run_id = run_id
        self.number = number
        self.state = TrialState.RUNNING
        self.best_val_loss = math.inf
        self.last_step = -1
        self.simulated: str | None = None  # tag sweep.simulated, for the description
        self._last_loss_step = -1  # the last step a finite val_loss was logged at
        self._diverged_at = -1  # tokens of a DIVERGED result (`log_result`)
        self._losses: set[str] = set()  # loss metrics logged (their last value is finite)
        self._params: dict[str, str] = {}
        self._detached = False
        self._heartbeat: Heartbeat | None = None
        self._pending = PendingWrites(client, run_id)
        self._deferring = 0
        #: Seconds an evaluation may wait for the next write; 0 where the thread can end
        #: without the run's end and nothing sends first (PBT's exploit; `send_held`).
        self.hold_s = EVAL_HOLD_S

    def beat(self) -> None:
        """Write the heartbeat (tag ``sweep.heartbeat``, Unix seconds) now.

        While the run's writes are buffered (`sweep.tracking.buffer`), try to send them instead.
        Evaluations held (`EVAL_HOLD_S`) are sent first.
        """
        if not self._deferring:
            self.send_held()
        value = f"{time.time():.0f}"
        if isinstance(self.client, BufferedClient):
            self.client.beat(TAG_HEARTBEAT, value)
        else:
            self.client.set_tag(self.run_id, TAG_HEARTBEAT, value)

    def start_heartbeat(self, also: Callable[[], None] | None = None) -> None:
        """Rewrite the heartbeat in a daemon thread until the run ends or is detached.

        Args:
            also: Called at each beat too (the executor's record of the trial's liveness), so
                a trial keeps one heartbeat thread; a beat that fails does not stop the other.
        """
        if self._heartbeat is None:
            beats = [self.beat] if also is None else [self.beat, also]
            self._heartbeat = Heartbeat(lambda: call_each(beats)).start()

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None

    def __enter__(self) -> TrialRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if self.state is not TrialState.RUNNING or self._detached:
            return False
        if exc is None:
            self.end(TrialState.COMPLETE)
        elif isinstance(exc, (KeyboardInterrupt, SystemExit)):
            # A signal can land inside a store write and leave the store unwritable for the
            # moment (SQLite: "database is locked"); recording the end must never replace the
            # interrupt, or the study would go on. The next resume ends the run then.
            try:
                self.end(TrialState.INTERRUPTED,
                         fail_reason=f"interrupted ({type(exc).__name__})")
            except Exception:  # noqa: BLE001
                self._stop_heartbeat()
        elif (what := infrastructure_fault(exc)) is not None:
            try:  # the store itself may be what failed: the next resume ends the run then
                self.end(TrialState.INTERRUPTED, fail_reason=f"interrupted: {what}")
            except Exception:  # noqa: BLE001
                self._stop_heartbeat()
        else:
            reason = f"{type(exc).__name__}: {exc}"
            detail = "".join(traceback.format_exception(exc_type, exc, tb))
            self.end(TrialState.FAILED, fail_reason=reason, detail=detail)
        return False

    def _log(self, metrics: Sequence[Metric] = (), params: Sequence[Param] = (),
             tags: Sequence[RunTag] = (), *, hold: bool = False) -> None:
        """Write now, with what is held; or hold inside `deferred`, or ``hold`` if soon."""
        self._pending.add(metrics, params, tags)
        if self._deferring or (
                hold and time.monotonic() - self._pending.sent_at < self.hold_s):
            return
        self.send_held()

    @contextlib.contextmanager
    def deferred(self, *, hold: bool = False) -> Iterator[TrialRun]:
        """Hold the block's writes and send them together when it ends.

        ``hold``: held on past it as an evaluation is. On an exception they wait for `end`.
        """
        self._deferring += 1
        try:
            yield self
        finally:
            self._deferring -= 1
        if not self._deferring and not (
                hold and time.monotonic() - self._pending.sent_at < self.hold_s):
            self.send_held()

    def send_held(self) -> None:
        """Send every write held so far now (a run whose thread may end at any report)."""
        if self._pending:
            self._pending.send()

    def restore(self, params: Mapping[str, str], metrics: Mapping[str, float],
                val_losses: Iterable[Metric]) -> None:
        """Carry on from what the run logged before (a trial restored in another process).

        Args:
            params: The run's params; `log_params` refuses other values for them.
            metrics: The run's latest metric values (the loss metrics it logged so far).
            val_losses: Its ``val_loss`` history: the best value and the last step so far.
        """
        self._params = dict(params)
        history = list(val_losses)
        self.last_step = max((m.step for m in history), default=-1)
        finite_history = [m for m in history if finite(m.value)]
        self.best_val_loss = min((m.value for m in finite_history), default=math.inf)
        self._last_loss_step = max((m.step for m in finite_history), default=-1)
        self._losses = {k for k in LOSS_METRICS if finite(metrics.get(k))}

    def detach(self) -> None:
        """Leave the run open on exit: another worker continues it with `TrialContext.attach_trial`.

        For a trial paused between chunks (population-based training) and restored elsewhere.
        """
        self._detached = True
        self._stop_heartbeat()
        self.send_held()

    def log_params(self, config: Mapping[str, Any]) -> None:
        """Log the resolved config once: nested sections or dotted keys, values stringified.

        A value longer than the store's limit (``MAX_PARAM_VAL_LENGTH``, 6000 characters in
        MLflow 3) is saved whole as artifact ``params/<key>.txt``; the param keeps a truncated
        prefix ending in a marker, and tag ``sweep.truncated_params`` lists such keys.

        Raises:
            ValueError: If a key was logged before with another value (MLflow params are
                immutable; record changes during training with `log_mutation`).
        """
        params, truncated = [], []
        for key, value in flatten_params(config).items():
            text = encode_param(value)
            if key in self._params:
                if self._params[key] != text:
                    raise ValueError(
                        f"param {key!r} was logged as {self._params[key]!r}; params are "
                        f"immutable, record the change {text!r} with log_mutation()"
                    )
                continue
            self._params[key] = text
            if len(text) > MAX_PARAM_VAL_LENGTH:
                artifact = f"params/{key}.txt"
                self.client.log_text(self.run_id, text, artifact)
                marker = f"...[truncated {len(text)} chars; full value in {artifact}]"
                text = text[: MAX_PARAM_VAL_LENGTH - len(marker)] + marker
                truncated.append(key)
            params.append(Param(key, text))
        tags = [RunTag(TAG_TRUNCATED, ",".join(truncated))] if truncated else []
        self._log(params=params, tags=tags)

    def log_searched(self, params: Mapping[str, Any]) -> None:
        """Log the sampled params (dotted spec paths) that no param logged so far holds.

        The resolved config names what the spec derives (``model.n_heads``, ``model.d_ff``);
        the params the user searched keep their own names beside it (``model.d_head``,
        ``model.d_ff_ratio``, ``model.preset``), so the run shows what was searched.
        """
        self.log_params({k: v for k, v in flatten_params(params).items()
                         if k not in self._params})

    def log_initial_params(self, params: Mapping[str, Any]) -> None:
        """`log_params` on a run just created; a refused param ends the run ``FAILED``.

        Raises:
            Exception: What `log_params` raised (the run's reason names it).
        """
        try:
            self.log_params(params)
        except Exception as exc:
            self.end(TrialState.FAILED, fail_reason=f"logging params: {type(exc).__name__}: {exc}")
            raise

    def log_metrics(self, metrics: Mapping[str, float | None], step: int = 0, *,
                    hold: bool = False) -> None:
        """Log finite values of ``metrics`` at ``step`` in one batch (others are dropped).

        ``tokens`` is always logged at step = its value, wherever it comes from (an evaluation
        or the trial's total), so its history pairs with ``val_loss``'s step for step (a chart
        can take it as its x axis) and its latest value is the trial's total. ``hold``: an
        evaluation, held if the run was written less than `EVAL_HOLD_S` ago.
        """
        ts = now_ms()
        batch = [Metric(k, x, ts, int(x) if k == METRIC_TOKENS else int(step))
                 for k, v in metrics.items() if (x := finite_float(v)) is not None]
        self._log(metrics=batch, hold=hold)

    def log_costs(self, estimate: Any) -> None:
        """Log cost metrics (step 0): a `sweep_models.cost.CostEstimate` or a mapping of names."""
        self.log_metrics(estimate if isinstance(estimate, Mapping) else cost_metrics(estimate))

    def report(self, tokens: int, metrics: Mapping[str, float]) -> None:
        """Log one evaluation (``val_loss``, ``train_loss``, ``tokens_per_s``...) at step = tokens.

        Beside a finite ``val_loss`` (the one that is logged), metric ``tokens`` = ``tokens`` at
        the same step. Matches `sweep.train.Reporter.report`; tracks the best finite
        ``val_loss`` seen. Held if the run was written less than `EVAL_HOLD_S` ago.
        """
        value = finite_float(metrics.get(METRIC_VAL_LOSS))
        if value is not None:
            self.best_val_loss = min(self.best_val_loss, value)
            self._last_loss_step = max(self._last_loss_step, int(tokens))
            metrics = {**metrics, METRIC_TOKENS: int(tokens)}
        self._losses.update(k for k in LOSS_METRICS if finite(metrics.get(k)))
        self.last_step = max(self.last_step, int(tokens))
        self.log_metrics(metrics, step=int(tokens), hold=True)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set tags on the run (values cut to the store's tag limit).

        Tag ``sweep.simulated`` also marks the run's description (`end`).
        """
        if TAG_SIMULATED in tags:
            self.simulated = str(tags[TAG_SIMULATED])
        self._log(tags=[RunTag(k, str(v)[:MAX_TAG_VAL_LENGTH]) for k, v in tags.items()])

    def log_mutation(self, tokens: int, changes: Mapping[str, Any]) -> None:
        """Record hyperparameters changed during training (population-based training).

        The param keeps its first value; a numeric new value goes to metric ``pbt.<key>`` at
        step = tokens, and every new value to tag ``pbt.<key>`` (the latest one).
        """
        changes = flatten_params(changes)
        metrics = {
            mutation_key(k): v for k, v in changes.items() if finite(v) and not isinstance(v, bool)
        }
        self.log_metrics(metrics, step=int(tokens))
        self._log(tags=[RunTag(mutation_key(k), encode_param(v)) for k, v in changes.items()])

    def log_result(self, result: Any) -> None:
        """Log a `sweep.train.TrialResult` (or its ``to_dict()``) and end the run in its state.

        A ``RUNNING`` result (training paused between chunks, e.g. for PBT) leaves the run open.
        History points after the last reported step are logged (so a runner that reported live
        is not logged twice); ``best_val_loss`` only for COMPLETE/PRUNED trials with a finite one,
        ``final_val_loss`` for every state but DIVERGED (whose last finite loss must not rank it;
        see `end`). Sent with the end in one ``log_batch`` where MLflow's limits allow.
        """
        data = result.to_dict() if hasattr(result, "to_dict") else dict(result)
        with self.deferred():
            for point in data.get("history") or []:
                tokens = int(point.get(METRIC_TOKENS, -1))
                if tokens > self.last_step:
                    self.report(tokens, {k: v for k, v in point.items() if k != METRIC_TOKENS})
            if finite(data.get(METRIC_BEST_VAL_LOSS)):
                self.best_val_loss = min(float(data[METRIC_BEST_VAL_LOSS]), self.best_val_loss)
            if data.get("device"):
                self.set_tags({TAG_DEVICE: str(data["device"])})
            state = TrialState(data.get("state", TrialState.COMPLETE))
            skip = METRIC_FINAL_VAL_LOSS if state is TrialState.DIVERGED else None
            self.log_metrics({k: data.get(k) for k in RESULT_METRICS if k != skip})
            if state is TrialState.DIVERGED and finite(data.get(METRIC_TOKENS)):
                self._diverged_at = int(data[METRIC_TOKENS])
            if state.is_final:
                self.end(state, fail_reason=data.get("fail_reason"))

    def end(self, state: TrialState | str, fail_reason: str | None = None, *,
            detail: str | None = None) -> None:
        """End the run in ``state`` (a final `TrialState`) and record the reason.

        A reason longer than the tag limit is truncated in the tag; the whole reason and
        ``detail`` (a traceback) go to artifact ``fail_reason.txt``. A DIVERGED run's loss
        metrics (`sweep.schema.LOSS_METRICS` it logged) get one nan at the step it diverged
        (its result's tokens, and after its last finite ``val_loss``), so their latest value,
        the one ``search_runs(order_by=...)`` sorts by, is not its last finite loss. The run's
        description (`sweep.tracking.notes.trial_note`) says the state and the reason. Every
        write held so far goes with these, then ``set_terminated``.

        Raises:
            ValueError: For an unknown state.
        """
        self._stop_heartbeat()
        try:
            state = TrialState(state)
            status = state.run_status
        except ValueError:
            finals = ", ".join(s.value for s in TrialState.final())
            raise ValueError(f"trial state {state!r} is not one of {finals}") from None
        self._deferring += 1
        try:
            self._record_end(state, fail_reason, detail)
        finally:
            self._deferring -= 1
        self.send_held()
        self.client.set_terminated(self.run_id, status)
        self.state = state

    def _record_end(self, state: TrialState, fail_reason: str | None,
                    detail: str | None) -> None:
        metrics = {}
        if state in (TrialState.COMPLETE, TrialState.PRUNED) and finite(self.best_val_loss):
            metrics[METRIC_BEST_VAL_LOSS] = self.best_val_loss
        self.log_metrics(metrics)
        if state is TrialState.DIVERGED and self._losses:
            step = max(self._diverged_at, self._last_loss_step + 1, 0)
            ts = now_ms()
            self._log(metrics=[Metric(k, math.nan, ts, step) for k in sorted(self._losses)])
        tags = [RunTag(TAG_STATE, state.value)]
        reason = fail_reason or (detail.strip().splitlines()[-1] if detail else None)
        if reason:
            reason = redact(reason)
        note = trial_note(state, tokens=self.last_step, reason=reason)
        if self.simulated:
            note = f"SIMULATED ({self.simulated}), no model trained. {note}"
        tags.append(RunTag(TAG_NOTE, note[:MAX_TAG_VAL_LENGTH]))
        if reason:
            if len(reason) > MAX_TAG_VAL_LENGTH or detail:
                full = reason + ("\n\n" + redact(detail) if detail else "")
                self.client.log_text(self.run_id, full, FAIL_REASON_ARTIFACT)
            tags.append(RunTag(TAG_FAIL_REASON, reason[:MAX_TAG_VAL_LENGTH]))
        self._log(tags=tags)
