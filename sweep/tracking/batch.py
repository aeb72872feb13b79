"""A run's writes held and sent together, in as few ``log_batch`` calls as MLflow accepts.

Each ``log_batch`` is one store transaction (SQLite commits, or one HTTP request to a server),
and a short trial's cost beside its training is mostly their number: `sweep.tracking.TrialRun`
holds the writes of one step of a trial (opening it, ending it) here and sends them at once.
MLflow's limits per call (`mlflow.utils.validation`): ``MAX_METRICS_PER_BATCH`` metrics,
``MAX_PARAMS_TAGS_PER_BATCH`` params and tags together, ``MAX_ENTITIES_PER_BATCH`` in all.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.utils.validation import (
    MAX_ENTITIES_PER_BATCH,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_TAGS_PER_BATCH,
)

__all__ = ["PendingWrites", "batches", "finite", "finite_float", "now_ms"]


def finite_float(value: Any) -> float | None:
    """``value`` as a float if it is a finite number, else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def finite(value: Any) -> bool:
    """Whether ``value`` is a finite number (`finite_float`)."""
    return finite_float(value) is not None


def now_ms() -> int:
    """Now as MLflow stamps a metric: Unix time, milliseconds."""
    return int(time.time() * 1000)


def batches(metrics: Sequence[Metric], params: Sequence[Param], tags: Sequence[RunTag],
            ) -> Iterator[tuple[list[Metric], list[Param], list[RunTag]]]:
    """Split writes into the fewest ``log_batch`` calls within MLflow's limits, in order.

    Params come before tags and tags in their order, so a tag set twice keeps its last value.
    """
    metrics, params, tags = list(metrics), list(params), list(tags)
    while metrics or params or tags:
        n_params = min(len(params), MAX_PARAMS_TAGS_PER_BATCH)
        n_tags = min(len(tags), MAX_PARAMS_TAGS_PER_BATCH - n_params)
        n_metrics = min(len(metrics), MAX_METRICS_PER_BATCH,
                        MAX_ENTITIES_PER_BATCH - n_params - n_tags)
        yield metrics[:n_metrics], params[:n_params], tags[:n_tags]
        metrics, params, tags = metrics[n_metrics:], params[n_params:], tags[n_tags:]


class PendingWrites:
    """The metrics, params and tags of one run not sent yet; thread-safe.

    Args:
        client: An `mlflow.MlflowClient` (or `sweep.tracking.buffer.BufferedClient`).
        run_id: The run written.

    Attributes:
        sent_at: `time.monotonic` of the last send (or of creation), seconds.
    """

    def __init__(self, client: Any, run_id: str) -> None:
        self.client, self.run_id = client, run_id
        self._lock = threading.RLock()
        self._metrics: list[Metric] = []
        self._params: list[Param] = []
        self._tags: dict[str, RunTag] = {}
        self.sent_at = time.monotonic()

    def add(self, metrics: Sequence[Metric] = (), params: Sequence[Param] = (),
            tags: Sequence[RunTag] = ()) -> None:
        """Hold writes; a tag held twice is sent once, with its last value."""
        with self._lock:
            self._metrics.extend(metrics)
            self._params.extend(params)
            for tag in tags:
                self._tags.pop(tag.key, None)
                self._tags[tag.key] = tag

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._metrics or self._params or self._tags)

    def send(self) -> None:
        """Send every held write (`batches`); none is held after, even if a call raised.

        Raises:
            Exception: What the client's ``log_batch`` raised.
        """
        with self._lock:
            metrics, params, tags = self._metrics, self._params, list(self._tags.values())
            self._metrics, self._params, self._tags = [], [], {}
            self.sent_at = time.monotonic()
            for m, p, t in batches(metrics, params, tags):
                self.client.log_batch(self.run_id, metrics=m, params=p, tags=t)
