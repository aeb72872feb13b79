"""MLflow's private parts the service uses, in one place. Checked against MLflow 3.17.

- The tracking store behind an `mlflow.MlflowClient` (``MlflowClient._tracking_client.store``):
  the SQL store reads many runs' metric histories in one query (``get_metric_history_bulk``,
  what MLflow's own UI calls), which the client does not offer.
- A SQL store's tables (``runs``, ``tags``, ``params``, ``latest_metrics``, ``metrics``, as
  ``mlflow.store.tracking.dbmodels.models`` defines them), read through its SQLAlchemy engine
  (``SqlAlchemyStore.engine``) with one query per table for all the child runs of a parent
  (`child_runs`, `child_histories`): ``search_runs`` builds an ORM object for every param,
  tag and metric, which at 1,000 trials is seconds where these queries take a tenth of one.
- The same tables written (`sql_log_batch`): a SQLite store's ``log_batch`` opens four
  sessions, loads the run three times and commits three times (params, metrics, tags), about
  20 ms of a short trial; one transaction of a few statements writes the same rows, checked
  first by MLflow's own validation (``mlflow.utils.validation``'s private ``_validate_*``) and
  inside MLflow's managed session (``SqlAlchemyStore.ManagedSessionMaker``: its pragmas, its
  errors). The rows are MLflow's: a param logged again with another value is refused, a
  metric row written once, the latest value by (step, timestamp, value), NaN stored as 0 with
  ``is_nan`` and infinities as the largest float, a tag replaced. A run's end
  (`sql_set_terminated`) is ``update_run_info``'s one row update, without loading the run;
  a run's start (`sql_create_run`) is ``create_run``'s row and tags, without loading the
  experiment's tags or the run's dataset inputs.

This module imports MLflow only inside `sql_log_batch`: it takes the client it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["child_histories", "child_runs", "metric_history_bulk", "sql_create_run",
           "sql_log_batch", "sql_set_terminated"]

#: The runs whose tag ``key`` (MLflow's parent-run tag) is the parent's id.
_CHILDREN = "SELECT run_uuid FROM tags WHERE key = :tag AND value = :parent"


def _store(client: Any) -> Any:
    return getattr(getattr(client, "_tracking_client", None), "store", None)


def metric_history_bulk(client: Any) -> Callable[..., Any] | None:
    """The client's store's ``get_metric_history_bulk(run_ids, metric_key, max_results)``.

    Returns:
        The bound method (a SQL store's), or None for a store without one (a server's REST
        store): read each run's history with ``client.get_metric_history`` then.
    """
    return getattr(_store(client), "get_metric_history_bulk", None)


def _engine(client: Any) -> Any:
    """The SQL store's SQLAlchemy engine, or None (a server's REST store)."""
    store = _store(client)
    return getattr(store, "engine", None) if hasattr(store, "get_metric_history_bulk") else None


def _value(value: float | None, is_nan: Any) -> float:
    return float("nan") if is_nan or value is None else float(value)


def child_runs(client: Any, experiment_id: str, parent_tag: str,
               parent_run_id: str) -> list[dict[str, Any]] | None:
    """The active runs of ``experiment_id`` tagged ``parent_tag = parent_run_id``, in 4 queries.

    What ``search_runs`` gives of each run: ``run_id``, ``run_name``, ``start_time`` and
    ``end_time`` (ms), ``tags``, ``params`` and ``metrics`` (each metric's latest value, NaN
    where MLflow stored one) as dicts.

    Returns:
        The runs in no order, or None where the client's store is not a SQL store.
    """
    engine = _engine(client)
    if engine is None:
        return None
    from sqlalchemy import text

    args = {"tag": parent_tag, "parent": parent_run_id, "experiment": int(experiment_id)}
    runs: dict[str, dict[str, Any]] = {}
    with engine.connect() as conn:
        for run_id, name, start, end in conn.execute(text(
                "SELECT run_uuid, name, start_time, end_time FROM runs WHERE experiment_id = "
                f":experiment AND lifecycle_stage = 'active' AND run_uuid IN ({_CHILDREN})"),
                args):
            runs[run_id] = {"run_id": run_id, "run_name": name, "start_time": start,
                            "end_time": end, "tags": {}, "params": {}, "metrics": {}}
        for table, field in (("tags", "tags"), ("params", "params")):
            for run_id, key, value in conn.execute(text(
                    f"SELECT run_uuid, key, value FROM {table} WHERE run_uuid IN ({_CHILDREN})"),
                    args):
                if run_id in runs:
                    runs[run_id][field][key] = value
        for run_id, key, value, is_nan in conn.execute(text(
                "SELECT run_uuid, key, value, is_nan FROM latest_metrics "
                f"WHERE run_uuid IN ({_CHILDREN})"), args):
            if run_id in runs:
                runs[run_id]["metrics"][key] = _value(value, is_nan)
    return list(runs.values())


def child_histories(client: Any, metric_key: str, parent_tag: str,
                    parent_run_id: str) -> dict[str, list[tuple[int, float]]] | None:
    """``run_id -> [(step, value), ...]`` of ``metric_key`` for a parent's child runs, one query.

    Every logged value (as ``get_metric_history``), unsorted; runs without one are left out.

    Returns:
        The histories, or None where the client's store is not a SQL store.
    """
    engine = _engine(client)
    if engine is None:
        return None
    from sqlalchemy import text

    out: dict[str, list[tuple[int, float]]] = {}
    with engine.connect() as conn:
        for run_id, step, value, is_nan in conn.execute(text(
                "SELECT run_uuid, step, value, is_nan FROM metrics WHERE key = :key AND "
                f"run_uuid IN ({_CHILDREN})"),
                {"key": metric_key, "tag": parent_tag, "parent": parent_run_id}):
            out.setdefault(run_id, []).append((step, _value(value, is_nan)))
    return out


#: The statements of `sql_log_batch`, in MLflow's tables' columns (3.17).
_PARAMS = "SELECT key, value FROM params WHERE run_uuid = :run"
_INSERT_PARAM = "INSERT INTO params (key, value, run_uuid) VALUES (:key, :value, :run)"
_INSERT_METRIC = ("INSERT INTO metrics (key, value, timestamp, step, is_nan, run_uuid) "
                  "VALUES (:key, :value, :timestamp, :step, :is_nan, :run) ON CONFLICT DO NOTHING")
_LATEST = ("INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) "
           "VALUES (:key, :value, :timestamp, :step, :is_nan, :run) "
           "ON CONFLICT (key, run_uuid) DO UPDATE SET value = excluded.value, "
           "timestamp = excluded.timestamp, step = excluded.step, is_nan = excluded.is_nan "
           "WHERE (excluded.step, excluded.timestamp, excluded.value) "
           "> (latest_metrics.step, latest_metrics.timestamp, latest_metrics.value)")
_TAG = ("INSERT INTO tags (key, value, run_uuid) VALUES (:key, :value, :run) "
        "ON CONFLICT (key, run_uuid) DO UPDATE SET value = excluded.value")
#: The tag MLflow keeps in the run's row too (``mlflow.runName``): left to MLflow's log_batch.
_RUN_NAME = "mlflow.runName"


def _sqlite_store(client: Any) -> Any:
    """The SQL store of an `mlflow.MlflowClient` on SQLite, or None (module docstring)."""
    from mlflow import MlflowClient

    if not isinstance(client, MlflowClient):
        return None
    store = _store(client)
    engine = getattr(store, "engine", None)
    if (engine is None or not hasattr(store, "ManagedSessionMaker")
            or engine.dialect.name != "sqlite"):
        return None
    return store


def sql_log_batch(client: Any) -> Callable[..., None] | None:
    """``log_batch(run_id, metrics, params, tags)`` in one transaction, for a SQLite store.

    Returns:
        The function, or None where the client is not an `mlflow.MlflowClient` (a wrapper
        of one keeps its own ``log_batch``) or its store is not MLflow's SQL store on SQLite
        (a server, PostgreSQL): use ``client.log_batch`` there.
    """
    store = _sqlite_store(client)
    if store is None:
        return None

    def log_batch(run_id: str, metrics: Any = (), params: Any = (), tags: Any = ()) -> None:
        _log_batch(store, run_id, list(metrics), list(params), list(tags))

    return log_batch


def sql_create_run(client: Any) -> Callable[..., str] | None:
    """``create_run(experiment_id, tags, run_name)`` in one transaction, for a SQLite store.

    What MLflow's ``MlflowClient.create_run`` writes: the run's row (``RUNNING``, started now,
    its artifact URI under the experiment's artifact location, user from tag ``mlflow.user``
    or ``unknown``, source ``UNKNOWN``) and its tags, with ``mlflow.runName`` added.

    Returns:
        The function, which returns the new run's id, or None where `sql_log_batch` is None.
    """
    store = _sqlite_store(client)
    if store is None:
        return None

    def create_run(experiment_id: str, tags: Any, run_name: str) -> str:
        return _create_run(store, experiment_id, dict(tags), run_name)

    return create_run


def _create_run(store: Any, experiment_id: str, tags: dict[str, str], run_name: str) -> str:
    import time
    import uuid

    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, RESOURCE_DOES_NOT_EXIST
    from mlflow.utils.uri import append_to_uri_path

    name_tag = tags.get(_RUN_NAME)
    if not run_name or (name_tag and name_tag != run_name):
        raise ValueError(f"a run name and a matching {_RUN_NAME} tag, not {run_name!r} and "
                         f"{name_tag!r}")
    tags = {**tags, _RUN_NAME: run_name}
    run_id = uuid.uuid4().hex
    with store.ManagedSessionMaker(read_only=False) as session:
        row = session.execute(_text("SELECT artifact_location, lifecycle_stage FROM experiments "
                                    "WHERE experiment_id = :e"), {"e": int(experiment_id)}).first()
        if row is None:
            raise MlflowException(f"No Experiment with id={experiment_id} exists",
                                  RESOURCE_DOES_NOT_EXIST)
        if row[1] != "active":
            raise MlflowException(f"The experiment {experiment_id} must be in the 'active' "
                                  f"state. Current state is {row[1]}.", INVALID_PARAMETER_VALUE)
        session.execute(_text(
            "INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, "
            "user_id, status, start_time, end_time, deleted_time, source_version, "
            "lifecycle_stage, artifact_uri, experiment_id) VALUES (:run, :name, 'UNKNOWN', '', "
            "'', :user, 'RUNNING', :start, NULL, NULL, '', 'active', :artifacts, :e)"),
            {"run": run_id, "name": run_name, "user": tags.get("mlflow.user", "unknown"),
             "start": int(time.time() * 1000), "e": int(experiment_id),
             "artifacts": append_to_uri_path(row[0], run_id, "artifacts")})
        session.execute(_text(_TAG), [{"key": k, "value": v, "run": run_id}
                                      for k, v in tags.items()])
    return run_id


def sql_set_terminated(client: Any) -> Callable[..., None] | None:
    """``set_terminated(run_id, status, end_time)`` in one statement, for a SQLite store.

    ``status`` is a `mlflow.entities.RunStatus` name (None: ``FINISHED``, as MLflow's), and
    ``end_time`` milliseconds (None: now).

    Returns:
        The function, or None where `sql_log_batch` is None.
    """
    store = _sqlite_store(client)
    if store is None:
        return None

    def set_terminated(run_id: str, status: str | None = None,
                       end_time: int | None = None) -> None:
        _set_terminated(store, run_id, status, end_time)

    return set_terminated


def _set_terminated(store: Any, run_id: str, status: str | None, end_time: int | None) -> None:
    import time

    from mlflow.entities import RunStatus

    status = RunStatus.to_string(RunStatus.from_string(status or "FINISHED"))
    end = end_time or int(time.time() * 1000)
    with store.ManagedSessionMaker(read_only=False) as session:
        _check_active(session, run_id)
        session.execute(_text("UPDATE runs SET status = :status, end_time = :end "
                              "WHERE run_uuid = :run"),
                        {"status": status, "end": end, "run": run_id})


def _text(sql: str) -> Any:
    from sqlalchemy import text

    return text(sql)


def _check_active(session: Any, run_id: str) -> None:
    """MLflow's ``_get_run`` and ``_check_run_is_active``, on the run's row alone."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, RESOURCE_DOES_NOT_EXIST

    row = session.execute(_text("SELECT lifecycle_stage FROM runs WHERE run_uuid = :run"),
                          {"run": run_id}).first()
    if row is None:
        raise MlflowException(f"Run with id={run_id} not found", RESOURCE_DOES_NOT_EXIST)
    if row[0] != "active":
        raise MlflowException(f"The run {run_id} must be in the 'active' state. Current "
                              f"state is {row[0]}.", INVALID_PARAMETER_VALUE)


def _log_batch(store: Any, run_id: str, metrics: list[Any], params: list[Any],
               tags: list[Any]) -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
    from mlflow.utils.validation import (
        _validate_batch_log_data,
        _validate_batch_log_limits,
        _validate_param_keys_unique,
        _validate_run_id,
    )

    if any(getattr(m, "model_id", None) for m in metrics) or any(
            t.key == _RUN_NAME for t in tags):
        store.log_batch(run_id, metrics, params, tags)  # what MLflow keeps elsewhere too
        return
    _validate_run_id(run_id)
    metrics, params, tags = _validate_batch_log_data(metrics, params, tags)
    _validate_batch_log_limits(metrics, params, tags)
    _validate_param_keys_unique(params)
    with store.ManagedSessionMaker(read_only=False) as session:
        _check_active(session, run_id)
        if params:
            existing = dict(session.execute(_text(_PARAMS), {"run": run_id}).all())
            changed = [{"key": p.key, "old_value": existing[p.key], "new_value": p.value}
                       for p in params if p.key in existing and existing[p.key] != p.value]
            if changed:
                raise MlflowException("Changing param values is not allowed. Params were "
                                      f"already logged='{changed}' for run ID='{run_id}'.",
                                      INVALID_PARAMETER_VALUE)
            new = [{"key": p.key, "value": p.value, "run": run_id}
                   for p in params if p.key not in existing]
            if new:
                session.execute(_text(_INSERT_PARAM), new)
        if metrics:
            rows = []
            for m in metrics:
                is_nan, value = store.sanitize_metric_value(m.value)
                rows.append({"key": m.key, "value": value, "timestamp": m.timestamp,
                             "step": m.step, "is_nan": is_nan, "run": run_id})
            session.execute(_text(_INSERT_METRIC), rows)
            session.execute(_text(_LATEST), rows)
        if tags:
            session.execute(_text(_TAG), [{"key": t.key, "value": t.value, "run": run_id}
                                         for t in tags])
