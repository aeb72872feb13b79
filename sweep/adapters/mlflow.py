"""MLflow's private parts the service uses, in one place. Checked against MLflow 3.17.

- The tracking store behind an `mlflow.MlflowClient` (``MlflowClient._tracking_client.store``):
  the SQL store reads many runs' metric histories in one query (``get_metric_history_bulk``,
  what MLflow's own UI calls), which the client does not offer.
- A SQL store's tables (``runs``, ``tags``, ``params``, ``latest_metrics``, ``metrics``, as
  ``mlflow.store.tracking.dbmodels.models`` defines them), read through its SQLAlchemy engine
  (``SqlAlchemyStore.engine``) with one query per table for all the child runs of a parent
  (`child_runs`, `child_histories`): ``search_runs`` builds an ORM object for every param,
  tag and metric, which at 1,000 trials is seconds where these queries take a tenth of one.

This module imports no MLflow (MLflow is imported in `sweep.tracking` only): it takes the
client it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["child_histories", "child_runs", "metric_history_bulk"]

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
