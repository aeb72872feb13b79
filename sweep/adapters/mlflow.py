"""MLflow's private parts the service uses, in one place. Checked against MLflow 3.17.

- The tracking store behind an `mlflow.MlflowClient` (``MlflowClient._tracking_client.store``):
  the SQL store reads many runs' metric histories in one query (``get_metric_history_bulk``,
  what MLflow's own UI calls), which the client does not offer.

This module imports no MLflow (MLflow is imported in `sweep.tracking` only): it takes the
client it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["metric_history_bulk"]


def metric_history_bulk(client: Any) -> Callable[..., Any] | None:
    """The client's store's ``get_metric_history_bulk(run_ids, metric_key, max_results)``.

    Returns:
        The bound method (a SQL store's), or None for a store without one (a server's REST
        store): read each run's history with ``client.get_metric_history`` then.
    """
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    return getattr(store, "get_metric_history_bulk", None)
