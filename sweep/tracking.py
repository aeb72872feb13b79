"""The MLflow schema of a study: the one module that knows run names, tags, params and metrics.

Layout (see DESIGN.md, "Tracking"):

- experiment = study name; artifacts of a SQLite store go to ``<out>/mlartifacts``;
- one parent run per study, tags ``sweep.kind=study``, ``sweep.spec_hash``, ``sweep.executor``,
  ``sweep.algorithm``, ``sweep.state``; metrics ``baseline_unigram_loss``, ``best_val_loss``,
  ``trials_<state>``; artifacts ``spec.yaml``, ``trials.csv``, ``best_config.yaml``, ``plots/``;
- one nested child run per trial, named ``trial-<n>`` (tag ``mlflow.parentRunId``), params = the
  resolved model and train config under dotted keys (``model.d_model``, ``train.lr``), cost
  metrics at step 0, ``val_loss``/``train_loss``/``tokens_per_s`` with step = tokens seen,
  ``best_val_loss`` at the end (COMPLETE and PRUNED trials only), tags ``sweep.state``,
  ``sweep.fail_reason``, ``sweep.trial_number``; hyperparameters changed during training
  (population-based training) as metrics and tags ``pbt.<key>``, never as changed params.
  MLflow run status per state: COMPLETE -> FINISHED, PRUNED and INFEASIBLE -> KILLED,
  DIVERGED and FAILED -> FAILED.

Every write goes through `mlflow.MlflowClient` with an explicit run id (never the fluent
active-run stack), so trials in threads, processes or Ray workers on other machines do not
collide; a worker needs only a `TrialContext` (three strings). Values are batched with
``log_batch``. Non-finite losses are never written, so ``ORDER BY metrics.best_val_loss ASC``
never ranks a diverged trial first.
"""

from __future__ import annotations

import json
import logging
import math
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME
from mlflow.utils.validation import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VAL_LENGTH,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_VAL_LENGTH,
)

__all__ = [
    "COST_METRICS",
    "find_study",
    "list_studies",
    "STATES",
    "absolute_uri",
    "ResumeError",
    "StudyTracker",
    "TrialContext",
    "TrialRun",
    "check_resume_compatible",
    "cost_metrics",
    "default_tracking_uri",
    "ensure_store",
    "flatten_params",
    "parse_param_value",
    "read_trials",
    "val_loss_histories",
]

log = logging.getLogger(__name__)

STATES = ("COMPLETE", "PRUNED", "FAILED", "INFEASIBLE", "DIVERGED", "RUNNING")
COST_METRICS = (
    "n_params",
    "n_params_non_embedding",
    "flops_per_token",
    "flops_per_token_dense",
    "flops_per_token_train",
    "mem_estimate_bytes",
)
TAG_KIND = "sweep.kind"
TAG_STATE = "sweep.state"
TAG_FAIL_REASON = "sweep.fail_reason"
TAG_TRIAL_NUMBER = "sweep.trial_number"
TAG_SPEC_HASH = "sweep.spec_hash"
TAG_EXECUTOR = "sweep.executor"
TAG_ALGORITHM = "sweep.algorithm"
TAG_TRUNCATED = "sweep.truncated_params"
SPEC_ARTIFACT = "spec.yaml"
# MLflow run status per trial state: pruned and infeasible trials stopped early on purpose.
_RUN_STATUS = {
    "COMPLETE": "FINISHED",
    "PRUNED": "KILLED",
    "INFEASIBLE": "KILLED",
    "DIVERGED": "FAILED",
    "FAILED": "FAILED",
}
_RESULT_METRICS = ("tokens", "steps", "wall_s", "train_flops", "mfu", "final_val_loss")


class ResumeError(ValueError):
    """A study cannot resume because its spec changed a search domain incompatibly."""


def default_tracking_uri(out_dir: str | Path) -> str:
    """The default store of a study: ``sqlite:///<out_dir>/mlflow.db`` (absolute path)."""
    return f"sqlite:///{Path(out_dir).resolve() / 'mlflow.db'}"


def _sqlite_path(tracking_uri: str) -> Path | None:
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri[len("sqlite:///") :])


def absolute_uri(tracking_uri: str) -> str:
    """A relative ``sqlite:///runs/x/mlflow.db`` made absolute; other URIs unchanged.

    Workers may run in another directory (Ray Tune moves trials into their own folders).
    """
    path = _sqlite_path(tracking_uri)
    return f"sqlite:///{path.resolve()}" if path is not None else tracking_uri


class UnreachableStoreError(ValueError):
    """An MLflow tracking server does not answer."""


def shown_uri(uri: str) -> str:
    """A tracking URI or database URL for messages and stored specs, its passwords as ``***``.

    Masks the userinfo's password (``scheme://user:***@host``) and a ``password`` query
    parameter (libpq's ``?password=...``); a URL too malformed to parse shows its scheme only.
    """
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(uri)
        password = parts.password
    except ValueError:
        return f"{uri.split('://', 1)[0]}://***"
    pairs = parts.query.split("&") if parts.query else []
    if password is None and not any(p.split("=", 1)[0] == "password" for p in pairs):
        return uri  # as written (urlunsplit would turn sqlite:/// into sqlite:/)
    netloc = parts.netloc
    if password is not None:
        netloc = netloc.replace(f":{password}@", ":***@", 1)
    query = "&".join("password=***" if p.split("=", 1)[0] == "password" else p for p in pairs)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def check_reachable(tracking_uri: str, source: str = "tracking URI", *,
                    timeout_s: float = 10.0) -> None:
    """Fail fast when an ``http(s)://`` tracking URI names no MLflow server.

    MLflow's REST client retries a refused or timed-out request with backoff for minutes
    (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``) before it raises, so a mistyped or stopped server
    would look like a hung study. One GET of the server's ``/health`` endpoint with a
    ``timeout_s`` timeout tells first: an MLflow server answers 200, and 401/403 (a proxy that
    wants credentials other than the URL's) also count as reachable; no answer, or any other
    status (another web server, a wrong path prefix), is refused. Credentials in the URL
    (``http://user:password@host``) are sent as HTTP basic auth, as MLflow does, and never
    printed. Other schemes (SQLite, files) are not checked here.

    Args:
        tracking_uri: The MLflow tracking URI.
        source: Where the URI came from, for the message (``tracking.uri``,
            ``MLFLOW_TRACKING_URI``, ``--tracking-uri``).
        timeout_s: Seconds to wait for the connection and the answer.

    Raises:
        UnreachableStoreError: Naming ``source``, the URI (password hidden) and the reason.
    """
    import base64
    import http.client
    import urllib.error
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https"):
        return
    shown = shown_uri(tracking_uri)
    try:
        parts.port  # noqa: B018 (raises ValueError for a port out of range or not a number)
    except ValueError as exc:
        raise UnreachableStoreError(f"{source} {shown}: not a valid URL ({exc})") from None
    if not parts.hostname:
        raise UnreachableStoreError(f"{source} {shown}: not a valid URL (no host)")
    netloc = parts.netloc.rsplit("@", 1)[-1]
    url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health",
                                   "", ""))
    request = urllib.request.Request(url)
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return
        raise UnreachableStoreError(
            f"{source} {shown}: the server there is not an MLflow tracking server (GET "
            f"{parts.path.rstrip('/')}/health answered {exc.code} {exc.reason}); check the "
            "address and any path prefix") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UnreachableStoreError(
            f"{source} {shown}: no MLflow server answers there ({reason}); start it "
            "(mlflow server --host 127.0.0.1 --port PORT) or fix the address") from None


def ensure_store(tracking_uri: str) -> None:
    """Create and migrate the tracking store once, before any worker opens it.

    MLflow creates the tables of a fresh database when a client first opens it; several
    processes doing so at once race in the schema migration (alembic ``CommandError``). Call this
    in the driver before trials start. A no-op beyond a connectivity check for other stores.

    Raises:
        mlflow.exceptions.MlflowException: If the store cannot be reached or migrated.
    """
    path = _sqlite_path(tracking_uri)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    MlflowClient(tracking_uri).search_experiments(max_results=1)


def _get_or_create_experiment(client: MlflowClient, tracking_uri: str, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    path = _sqlite_path(tracking_uri)
    location = (path.parent.resolve() / "mlartifacts").as_uri() if path is not None else None
    return client.create_experiment(name, artifact_location=location)


def _param_str(value: Any) -> str:
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def parse_param_value(text: str) -> Any:
    """Invert the param encoding: ``"128"`` -> 128, ``"True"`` -> True, ``"[0.9]"`` -> list."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten sections to dotted keys: ``{"model": {"d_model": 64}}`` -> ``model.d_model``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, prefix=f"{name}."))
        else:
            flat[name] = value
    return flat


def _digest(spec: Mapping[str, Any]) -> str:
    """SHA-256 (first 16 hex digits) of the spec's canonical JSON form."""
    import hashlib

    canonical = json.dumps(spec, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def cost_metrics(estimate: Any) -> dict[str, float]:
    """Schema metrics from a `models.cost.CostEstimate` (or any object with its field names).

    ``flops_per_token`` is the forward count over the kept query-key pairs,
    ``flops_per_token_dense`` the dense-attention forward count (nanoGPT/PaLM convention),
    ``flops_per_token_train`` forward + backward, ``mem_estimate_bytes`` the training total.
    """
    memory = getattr(estimate, "memory", None)
    return {
        "n_params": float(estimate.n_params),
        "n_params_non_embedding": float(estimate.n_params_non_embedding),
        "flops_per_token": float(estimate.flops_per_token_fwd),
        "flops_per_token_dense": float(estimate.flops_per_token_dense_fwd),
        "flops_per_token_train": float(estimate.flops_per_token_train),
        "mem_estimate_bytes": float(memory.total if memory is not None else math.nan),
    }


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _chunks(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _now_ms() -> int:
    return int(time.time() * 1000)


class TrialRun:
    """The child run of one trial; use as a context manager so every run gets an end state.

    Leaving the ``with`` block normally ends the run ``COMPLETE`` unless `end` or `log_result`
    set a state; an exception ends it ``FAILED`` (``PRUNED`` for `optuna.TrialPruned`) with the
    reason and re-raises it. Metric values that are not finite are dropped, never logged.
    """

    def __init__(self, client: MlflowClient, run_id: str, number: int) -> None:
        self.client = client
        self.run_id = run_id
        self.number = number
        self.state = "RUNNING"
        self.best_val_loss = math.inf
        self.last_step = -1
        self._params: dict[str, str] = {}
        self._detached = False

    def __enter__(self) -> TrialRun:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.state != "RUNNING" or self._detached:
            return False
        if exc is None:
            self.end("COMPLETE")
        elif isinstance(exc, optuna.TrialPruned):
            self.end("PRUNED")
        else:
            reason = f"{exc_type.__name__}: {exc}"
            detail = "".join(traceback.format_exception(exc_type, exc, tb))
            self.end("FAILED", fail_reason=reason, detail=detail)
        return False

    def _log(self, metrics: list = (), params: list = (), tags: list = ()) -> None:
        for batch in _chunks(list(metrics), MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=batch)
        for batch in _chunks(list(params), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, params=batch)
        for batch in _chunks(list(tags), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, tags=batch)

    def detach(self) -> None:
        """Leave the run open on exit: another worker continues it with `TrialContext.attach_trial`.

        For a trial paused between chunks (population-based training) and restored elsewhere.
        """
        self._detached = True

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
            text = _param_str(value)
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

    def log_metrics(self, metrics: Mapping[str, float | None], step: int = 0) -> None:
        """Log finite values of ``metrics`` at ``step`` in one batch (others are dropped)."""
        ts = _now_ms()
        batch = [Metric(k, float(v), ts, int(step)) for k, v in metrics.items() if _finite(v)]
        self._log(metrics=batch)

    def log_costs(self, estimate: Any) -> None:
        """Log cost metrics (step 0): a `models.cost.CostEstimate` or a mapping of metric names."""
        self.log_metrics(estimate if isinstance(estimate, Mapping) else cost_metrics(estimate))

    def report(self, tokens: int, metrics: Mapping[str, float]) -> None:
        """Log one evaluation (``val_loss``, ``train_loss``, ``tokens_per_s``...) at step = tokens.

        Matches `sweep.trial.Reporter.report`; tracks the best finite ``val_loss`` seen.
        """
        value = metrics.get("val_loss")
        if _finite(value) and float(value) < self.best_val_loss:
            self.best_val_loss = float(value)
        self.last_step = max(self.last_step, int(tokens))
        self.log_metrics(metrics, step=int(tokens))

    def log_mutation(self, tokens: int, changes: Mapping[str, Any]) -> None:
        """Record hyperparameters changed during training (population-based training).

        The param keeps its first value; a numeric new value goes to metric ``pbt.<key>`` at
        step = tokens, and every new value to tag ``pbt.<key>`` (the latest one).
        """
        changes = flatten_params(changes)
        metrics = {
            f"pbt.{k}": v for k, v in changes.items() if _finite(v) and not isinstance(v, bool)
        }
        self.log_metrics(metrics, step=int(tokens))
        self._log(tags=[RunTag(f"pbt.{k}", _param_str(v)) for k, v in changes.items()])

    def log_result(self, result: Any) -> None:
        """Log a `sweep.trial.TrialResult` (or its ``to_dict()``) and end the run in its state.

        A ``RUNNING`` result (training paused between chunks, e.g. for PBT) leaves the run open.
        History points after the last reported step are logged (so a runner that reported live
        is not logged twice); ``best_val_loss`` only for COMPLETE/PRUNED trials with a finite one.
        """
        data = result.to_dict() if hasattr(result, "to_dict") else dict(result)
        for point in data.get("history") or []:
            tokens = int(point.get("tokens", -1))
            if tokens > self.last_step:
                self.report(tokens, {k: v for k, v in point.items() if k != "tokens"})
        if _finite(data.get("best_val_loss")):
            self.best_val_loss = min(float(data["best_val_loss"]), self.best_val_loss)
        self.log_metrics({k: data.get(k) for k in _RESULT_METRICS})
        if data.get("state", "COMPLETE") != "RUNNING":
            self.end(data.get("state", "COMPLETE"), fail_reason=data.get("fail_reason"))

    def end(self, state: str, fail_reason: str | None = None, *, detail: str | None = None) -> None:
        """End the run in ``state`` (one of `STATES` but RUNNING) and record the reason.

        A reason longer than the tag limit is truncated in the tag; the whole reason and
        ``detail`` (a traceback) go to artifact ``fail_reason.txt``.

        Raises:
            ValueError: For an unknown state.
        """
        if state not in _RUN_STATUS:
            raise ValueError(f"trial state {state!r} is not one of {sorted(_RUN_STATUS)}")
        metrics = {}
        if state in ("COMPLETE", "PRUNED") and _finite(self.best_val_loss):
            metrics["best_val_loss"] = self.best_val_loss
        self.log_metrics(metrics)
        tags = [RunTag(TAG_STATE, state)]
        if fail_reason or detail:
            reason = fail_reason or detail.strip().splitlines()[-1]
            if len(reason) > MAX_TAG_VAL_LENGTH or detail:
                full = reason + ("\n\n" + detail if detail else "")
                self.client.log_text(self.run_id, full, "fail_reason.txt")
            tags.append(RunTag(TAG_FAIL_REASON, reason[:MAX_TAG_VAL_LENGTH]))
        self._log(tags=tags)
        self.client.set_terminated(self.run_id, _RUN_STATUS[state])
        self.state = state


@dataclass(frozen=True)
class TrialContext:
    """Everything a trial worker needs to log its run; picklable (three strings).

    Attributes:
        tracking_uri: MLflow tracking URI (``sqlite:///...`` or ``http://...``).
        experiment_id: Experiment of the study.
        parent_run_id: Run id of the study's parent run.
    """

    tracking_uri: str
    experiment_id: str
    parent_run_id: str

    def start_trial(self, number: int, params: Mapping[str, Any] | None = None) -> TrialRun:
        """Create child run ``trial-<number>`` and log ``params``; use it as a context manager.

        Args:
            number: Trial number (the executor's), tag ``sweep.trial_number``.
            params: The resolved config, nested (``{"model": {...}, "train": {...}}``) or with
                dotted keys; see `TrialRun.log_params`.

        Raises:
            mlflow.exceptions.MlflowException: If the store rejects the run or a param (the
                run then ends FAILED with the reason).
        """
        client = MlflowClient(self.tracking_uri)
        tags = {
            MLFLOW_PARENT_RUN_ID: self.parent_run_id,
            TAG_TRIAL_NUMBER: str(number),
            TAG_STATE: "RUNNING",
        }
        run = client.create_run(self.experiment_id, tags=tags, run_name=f"trial-{number}")
        trial = TrialRun(client, run.info.run_id, number)
        if params:
            try:
                trial.log_params(params)
            except Exception as exc:
                trial.end("FAILED", fail_reason=f"logging params: {type(exc).__name__}: {exc}")
                raise
        return trial

    def attach_trial(self, run_id: str) -> TrialRun:
        """Continue logging to an existing trial run (a trial restored in another process)."""
        client = MlflowClient(self.tracking_uri)
        run = client.get_run(run_id)
        trial = TrialRun(client, run_id, int(run.data.tags.get(TAG_TRIAL_NUMBER, -1)))
        trial._params = dict(run.data.params)
        history = client.get_metric_history(run_id, "val_loss")
        trial.last_step = max((m.step for m in history), default=-1)
        trial.best_val_loss = min((m.value for m in history), default=math.inf)
        if run.info.status != "RUNNING":
            client.update_run(run_id, status="RUNNING")
        return trial


def _domain(value: Any) -> tuple[str, Any] | None:
    if not isinstance(value, Mapping):
        return None
    for kind in ("choice", "float", "int"):
        if kind in value:
            return kind, value
    return None


def check_resume_compatible(old_spec: Mapping[str, Any], new_spec: Mapping[str, Any]) -> list[str]:
    """Check that a study logged with ``old_spec`` can resume under ``new_spec``.

    Compares the domains of the ``model`` and ``train`` sections the way Optuna's
    ``check_distribution_compatibility`` does: a categorical's choices, a domain's kind and a
    float/int domain's ``log`` flag must not change. Other differences (ranges, fixed values,
    added or removed parameters) are allowed and returned as notes.

    Returns:
        Human-readable notes on the allowed differences (empty when the domains agree).

    Raises:
        ResumeError: Naming the parameter and both domains (for choices, both choice lists).
    """
    notes = []
    for section in ("model", "train"):
        old = {f"{section}.{k}": v for k, v in (old_spec.get(section) or {}).items()}
        new = {f"{section}.{k}": v for k, v in (new_spec.get(section) or {}).items()}
        for name in sorted(set(old) | set(new)):
            if name not in new or name not in old:
                notes.append(f"{name} {'removed' if name not in new else 'added'}")
                continue
            a, b = _domain(old[name]), _domain(new[name])
            if a is None and b is None:
                if old[name] != new[name]:
                    notes.append(f"{name} fixed value {old[name]!r} -> {new[name]!r}")
                continue
            if a is None or b is None or a[0] != b[0]:
                raise ResumeError(
                    f"cannot resume: {name} changed from {old[name]!r} to {new[name]!r}; "
                    "start a new study instead"
                )
            if a[0] == "choice" and list(a[1]["choice"]) != list(b[1]["choice"]):
                raise ResumeError(
                    f"cannot resume: the choices of {name} changed from {list(a[1]['choice'])} "
                    f"to {list(b[1]['choice'])}; start a new study instead"
                )
            if a[0] != "choice" and bool(a[1].get("log")) != bool(b[1].get("log")):
                raise ResumeError(
                    f"cannot resume: {name} changed log={bool(a[1].get('log'))} to "
                    f"log={bool(b[1].get('log'))}; start a new study instead"
                )
            if a[1] != b[1]:
                notes.append(f"{name} domain {dict(a[1])} -> {dict(b[1])}")
    return notes


def _latest_parent(client: MlflowClient, experiment_id: str) -> Any:
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.{TAG_KIND} = 'study'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def find_study(tracking_uri: str, study_name: str) -> tuple[str, str] | None:
    """``(experiment_id, parent_run_id)`` of the latest parent run of ``study_name``, or None."""
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(study_name)
    parent = _latest_parent(client, experiment.experiment_id) if experiment else None
    return (experiment.experiment_id, parent.info.run_id) if parent else None


def list_studies(tracking_uri: str) -> list[str]:
    """Names of the experiments in the store that hold a study parent run."""
    client = MlflowClient(tracking_uri)
    return [
        e.name
        for e in client.search_experiments()
        if _latest_parent(client, e.experiment_id) is not None
    ]


def read_trials(tracking_uri: str, experiment_id: str, parent_run_id: str) -> list[dict]:
    """All trial runs of a study, one dict each, in trial-number order.

    Returns:
        Dicts with ``trial`` (int), ``run_id``, ``state``, ``fail_reason`` (str or None),
        ``params`` (dotted keys, values decoded with `parse_param_value`), ``metrics`` (latest
        value of each metric; ``val_loss`` is the final one), ``start_time``/``end_time`` (ms).
    """
    client = MlflowClient(tracking_uri)
    trials, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=f"tags.{MLFLOW_PARENT_RUN_ID} = '{parent_run_id}'",
            max_results=1000,
            page_token=token,
        )
        for run in page:
            tags = run.data.tags
            trials.append(
                {
                    "trial": int(tags.get(TAG_TRIAL_NUMBER, -1)),
                    "run_id": run.info.run_id,
                    "run_name": tags.get(MLFLOW_RUN_NAME, run.info.run_name),
                    "state": tags.get(TAG_STATE, "RUNNING"),
                    "fail_reason": tags.get(TAG_FAIL_REASON),
                    "params": {k: parse_param_value(v) for k, v in run.data.params.items()},
                    "metrics": dict(run.data.metrics),
                    "start_time": run.info.start_time,
                    "end_time": run.info.end_time,
                }
            )
        token = page.token
        if not token:
            break
    return sorted(trials, key=lambda t: (t["trial"], t["start_time"] or 0))


def val_loss_histories(tracking_uri: str, run_ids: Iterable[str]) -> dict[str, list[tuple]]:
    """``run_id -> [(tokens, val_loss), ...]`` sorted by tokens, from the metric histories."""
    client = MlflowClient(tracking_uri)
    return {
        run_id: sorted((m.step, m.value) for m in client.get_metric_history(run_id, "val_loss"))
        for run_id in run_ids
    }


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *heads, leaf = key.split(".")
        for head in heads:
            node = node.setdefault(head, {})
        node[leaf] = value
    return out


def _plain(spec: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(spec, default=str))


class StudyTracker:
    """The parent run of a study, used by the driver; trials log through `context`.

    Use `start` to create (or resume) it, `start_trial` or ``context.start_trial`` per trial and
    `finish` at the end. As a context manager it calls `finish` on normal exit (if not called)
    and ends the parent ``FAILED`` with the reason on an exception.
    """

    def __init__(self, tracking_uri: str, experiment_id: str, parent_run_id: str) -> None:
        self.context = TrialContext(tracking_uri, experiment_id, parent_run_id)
        self.client = MlflowClient(tracking_uri)
        self.finished = False

    @property
    def parent_run_id(self) -> str:
        return self.context.parent_run_id

    @property
    def experiment_id(self) -> str:
        return self.context.experiment_id

    @classmethod
    def start(
        cls,
        tracking_uri: str,
        study_name: str,
        spec: Mapping[str, Any],
        *,
        executor: str,
        algorithm: str,
        resume: bool = False,
        spec_hash: str | None = None,
    ) -> StudyTracker:
        """Create the study's experiment and parent run, or reopen the latest one to resume.

        Calls `ensure_store` first, so call this in the driver before workers start.

        Args:
            tracking_uri: MLflow tracking URI, e.g. `default_tracking_uri` of the output folder.
            study_name: Experiment name.
            spec: The study spec as a plain dict (saved as ``spec.yaml``).
            executor: ``optuna`` or ``ray`` (tag ``sweep.executor``).
            algorithm: Sampler/scheduler description (tag ``sweep.algorithm``).
            resume: Reopen the latest parent run of the study if there is one.
            spec_hash: Tag ``sweep.spec_hash`` (`sweep.spec.spec_hash`); default: SHA-256 of
                the canonical JSON of ``spec``.

        Raises:
            ResumeError: When resuming and `check_resume_compatible` refuses the new spec.
        """
        import yaml

        tracking_uri = absolute_uri(tracking_uri)
        ensure_store(tracking_uri)
        client = MlflowClient(tracking_uri)
        experiment_id = _get_or_create_experiment(client, tracking_uri, study_name)
        spec = _plain(spec)
        digest = spec_hash or _digest(spec)
        parent = _latest_parent(client, experiment_id) if resume else None
        tags = {TAG_SPEC_HASH: digest, TAG_EXECUTOR: executor, TAG_ALGORITHM: algorithm}
        if parent is None:
            tags.update({TAG_KIND: "study", TAG_STATE: "RUNNING"})
            run = client.create_run(experiment_id, tags=tags, run_name=study_name)
            run_id = run.info.run_id
        else:
            run_id = parent.info.run_id
            old_digest = parent.data.tags.get(TAG_SPEC_HASH, "unknown")
            old_spec = _load_spec(client, run_id)
            for note in check_resume_compatible(old_spec, spec):
                log.warning("resuming %s with a changed spec: %s", study_name, note)
            if old_digest != digest:
                client.log_text(run_id, yaml.safe_dump(old_spec), f"spec_history/{old_digest}.yaml")
            client.update_run(run_id, status="RUNNING")
            tags[TAG_STATE] = "RUNNING"
            client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        client.log_text(run_id, yaml.safe_dump(spec, sort_keys=False), SPEC_ARTIFACT)
        return cls(tracking_uri, experiment_id, run_id)

    def start_trial(self, number: int, params: Mapping[str, Any] | None = None) -> TrialRun:
        """Same as ``self.context.start_trial``."""
        return self.context.start_trial(number, params)

    def log_metrics(self, metrics: Mapping[str, float | None]) -> None:
        """Log finite study-level metrics, e.g. ``baseline_unigram_loss`` (nats/token)."""
        ts = _now_ms()
        batch = [Metric(k, float(v), ts, 0) for k, v in metrics.items() if _finite(v)]
        if batch:
            self.client.log_batch(self.parent_run_id, metrics=batch)

    def log_baseline(self, baseline_unigram_loss: float) -> None:
        """Log the corpus's unigram baseline loss (nats/token, on the val split)."""
        self.log_metrics({"baseline_unigram_loss": baseline_unigram_loss})

    def __enter__(self) -> StudyTracker:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.finished:
            return False
        if exc is None:
            self.finish()
        else:
            reason = f"{exc_type.__name__}: {exc}"[:MAX_TAG_VAL_LENGTH]
            tags = [RunTag(TAG_STATE, "FAILED"), RunTag(TAG_FAIL_REASON, reason)]
            self.client.log_batch(self.parent_run_id, tags=tags)
            self.client.set_terminated(self.parent_run_id, "FAILED")
            self.finished = True
        return False

    def finish(
        self,
        optuna_study: optuna.Study | None = None,
        *,
        objective_names: list[str] | None = None,
    ) -> dict[str, Any]:
        """Summarise the trials into the parent run and end it.

        Logs metrics ``best_val_loss`` (over COMPLETE trials with a finite value) and
        ``trials_<state>`` per state, tags ``sweep.best_trial_number``/``sweep.best_run_id``,
        artifacts ``trials.csv``, ``best_config.yaml`` and ``plots/*.png`` (see
        `sweep.results.study_figures`; a plot that fails is logged and skipped). The parent
        ends FAILED (tag ``sweep.state=FAILED``) when no trial completed.

        Args:
            optuna_study: The executor's study, for Optuna's plots; without it they are drawn
                from an in-memory study rebuilt from the trial runs.
            objective_names: Names of the objectives of a multi-objective study.

        Returns:
            ``{"best_val_loss", "best_trial", "best_run_id", "counts": {state: n}, "state"}``.
        """
        import yaml

        from sweep import results

        trials = read_trials(self.context.tracking_uri, self.experiment_id, self.parent_run_id)
        counts = {state: 0 for state in STATES}
        for trial in trials:
            counts[trial["state"]] = counts.get(trial["state"], 0) + 1
        ranked = [
            t
            for t in trials
            if t["state"] == "COMPLETE" and _finite(t["metrics"].get("best_val_loss"))
        ]
        best = min(ranked, key=lambda t: t["metrics"]["best_val_loss"], default=None)
        metrics = {f"trials_{s.lower()}": n for s, n in counts.items()}
        tags = [RunTag(TAG_STATE, "COMPLETE" if counts["COMPLETE"] else "FAILED")]
        if best is not None:
            metrics["best_val_loss"] = best["metrics"]["best_val_loss"]
            tags += [
                RunTag("sweep.best_trial_number", str(best["trial"])),
                RunTag("sweep.best_run_id", best["run_id"]),
            ]
            config = yaml.safe_dump(_unflatten(best["params"]), sort_keys=False)
            self.client.log_text(self.parent_run_id, config, "best_config.yaml")
        self.log_metrics(metrics)
        self.client.log_batch(self.parent_run_id, tags=tags)
        frame = results.trials_frame(trials)
        self.client.log_text(self.parent_run_id, frame.to_csv(index=False), "trials.csv")
        histories = val_loss_histories(self.context.tracking_uri, [t["run_id"] for t in trials])
        figures = results.study_figures(frame, histories, optuna_study, objective_names)
        for name, figure in figures.items():
            self.client.log_figure(self.parent_run_id, figure, f"plots/{name}.png")
        results.close_figures(figures)
        status = "FINISHED" if counts["COMPLETE"] else "FAILED"
        self.client.set_terminated(self.parent_run_id, status)
        self.finished = True
        return {
            "best_val_loss": best["metrics"]["best_val_loss"] if best else math.nan,
            "best_trial": best["trial"] if best else None,
            "best_run_id": best["run_id"] if best else None,
            "counts": counts,
            "state": "COMPLETE" if counts["COMPLETE"] else "FAILED",
        }


def _load_spec(client: MlflowClient, run_id: str) -> dict[str, Any]:
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        path = client.download_artifacts(run_id, SPEC_ARTIFACT, dst_path=tmp)
        return yaml.safe_load(Path(path).read_text()) or {}
