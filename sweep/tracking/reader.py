"""Reading a study back from MLflow.

Which studies a store holds, a study's trial runs, their val-loss curves, one trial's run. A
SQLite store is read through a read-only connection (`sweep.tracking.stores.reading_uri`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

from sweep.adapters.mlflow import child_histories, child_runs, metric_history_bulk
from sweep.params import decode_param
from sweep.schema import (
    KIND_STUDY,
    METRIC_VAL_LOSS,
    TAG_BRANCH_FROM,
    TAG_FAIL_REASON,
    TAG_KIND,
    TAG_RETRY_OF,
    TAG_STATE,
    TAG_TRIAL_NUMBER,
    TrialState,
    mutation_key,
)
from sweep.tracking.stores import reading_uri

if TYPE_CHECKING:
    from sweep.tracking.trial_context import TrialContext


def latest_parent(client: MlflowClient, experiment_id: str) -> Any:
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{TAG_KIND}` = '{KIND_STUDY}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def find_study(tracking_uri: str, study_name: str) -> tuple[str, str] | None:
    """``(experiment_id, parent_run_id)`` of the latest parent run of ``study_name``, or None."""
    client = MlflowClient(reading_uri(tracking_uri))
    experiment = client.get_experiment_by_name(study_name)
    if experiment is None:
        return None
    parent = latest_parent(client, experiment.experiment_id)
    return (experiment.experiment_id, parent.info.run_id) if parent else None


def list_studies(tracking_uri: str) -> list[str]:
    """Names of the experiments in the store that hold a study parent run."""
    client = MlflowClient(reading_uri(tracking_uri))
    return [
        e.name
        for e in client.search_experiments()
        if latest_parent(client, e.experiment_id) is not None
    ]


def _trial(run: dict[str, Any]) -> dict[str, Any]:
    """One `read_trials` record from a run's fields (`sweep.adapters.mlflow.child_runs`)."""
    tags = run["tags"]
    return {
        "trial": int(tags.get(TAG_TRIAL_NUMBER, -1)),
        "run_id": run["run_id"],
        "run_name": tags.get(MLFLOW_RUN_NAME, run["run_name"]),
        "state": TrialState(tags.get(TAG_STATE, TrialState.RUNNING)),
        "fail_reason": tags.get(TAG_FAIL_REASON),
        "branch_from": tags.get(TAG_BRANCH_FROM),
        "retry_of": int(tags[TAG_RETRY_OF]) if TAG_RETRY_OF in tags else None,
        "params": {k: decode_param(v) for k, v in run["params"].items()},
        "metrics": dict(run["metrics"]),
        "start_time": run["start_time"],
        "end_time": run["end_time"],
    }


def _searched_runs(client: MlflowClient, experiment_id: str,
                   parent_run_id: str) -> list[dict[str, Any]]:
    """The child runs through ``search_runs``, page by page (a server's store)."""
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=f"tags.{MLFLOW_PARENT_RUN_ID} = '{parent_run_id}'",
            max_results=1000,
            page_token=token,
        )
        runs += [{"run_id": run.info.run_id, "run_name": run.info.run_name,
                  "start_time": run.info.start_time, "end_time": run.info.end_time,
                  "tags": run.data.tags, "params": run.data.params,
                  "metrics": run.data.metrics} for run in page]
        token = page.token
        if not token:
            return runs


def read_trials(tracking_uri: str, experiment_id: str, parent_run_id: str) -> list[dict]:
    """All trial runs of a study, one dict each, in trial-number order.

    A SQL store is read in four queries at any study size (`sweep.adapters.mlflow.child_runs`),
    a server page by page (``search_runs``).

    Returns:
        Dicts with ``trial`` (int), ``run_id``, ``state``, ``fail_reason`` (str or None),
        ``branch_from`` (the run whose WSD trunk it continued, or None), ``retry_of`` (the
        number of the interrupted trial it retries, or None),
        ``params`` (dotted keys, values decoded with `sweep.params.decode_param`),
        ``metrics`` (latest
        value of each metric; ``val_loss`` is the final one), ``start_time``/``end_time`` (ms).
    """
    client = MlflowClient(reading_uri(tracking_uri))
    runs = child_runs(client, experiment_id, MLFLOW_PARENT_RUN_ID, parent_run_id)
    if runs is None:
        runs = _searched_runs(client, experiment_id, parent_run_id)
    trials = [_trial(run) for run in runs]
    return sorted(trials, key=lambda t: (t["trial"], t["start_time"] or 0))


#: Runs per bulk history query (SQLite before 3.32 takes at most 999 values in one query).
HISTORY_CHUNK = 500


def val_loss_histories(tracking_uri: str, run_ids: Iterable[str],
                       parent_run_id: str | None = None) -> dict[str, list[tuple]]:
    """``run_id -> [(tokens, val_loss), ...]`` sorted by tokens, from the metric histories.

    With ``parent_run_id`` (the runs are its children), a SQL store reads them in one query
    (`sweep.adapters.mlflow.child_histories`); without, `HISTORY_CHUNK` runs per query (its
    ``get_metric_history_bulk``, which MLflow's UI uses:
    `sweep.adapters.mlflow.metric_history_bulk`); a server, one request a run.
    """
    client = MlflowClient(reading_uri(tracking_uri))
    ids = list(dict.fromkeys(run_ids))
    out: dict[str, list[tuple]] = {run_id: [] for run_id in ids}
    found = None if parent_run_id is None else child_histories(
        client, METRIC_VAL_LOSS, MLFLOW_PARENT_RUN_ID, parent_run_id)
    if found is not None:
        for run_id, points in found.items():
            if run_id in out:
                out[run_id] = points
        return {run_id: sorted(points) for run_id, points in out.items()}
    bulk = metric_history_bulk(client)
    if bulk is None:
        return {run_id: sorted((m.step, m.value)
                               for m in client.get_metric_history(run_id, METRIC_VAL_LOSS))
                for run_id in ids}
    for start in range(0, len(ids), HISTORY_CHUNK):
        for row in bulk(ids[start:start + HISTORY_CHUNK], METRIC_VAL_LOSS, max_results=2**62):
            out[row.run_id].append((row.step, row.value))
    return {run_id: sorted(points) for run_id, points in out.items()}


def find_trial_run(tracking: TrialContext, number: int) -> str | None:
    """Run id of trial ``number``'s child run in the study of ``tracking`` (the latest), or None."""
    runs = MlflowClient(reading_uri(tracking.tracking_uri)).search_runs(
        [tracking.experiment_id],
        filter_string=(f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{tracking.parent_run_id}' and "
                       f"tags.`{TAG_TRIAL_NUMBER}` = '{number}'"),
        order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def mutated_params(tracking_uri: str, run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``run_id -> {param: latest value}`` of the params changed during training.

    Those population-based training changed (tags ``pbt.<param>``,
    `sweep.tracking.TrialRun.log_mutation`); a run that changed none maps to an empty dict.
    """
    client = MlflowClient(reading_uri(tracking_uri))
    prefix, out = mutation_key(""), {}
    for run_id in run_ids:
        tags = client.get_run(run_id).data.tags
        out[run_id] = {k[len(prefix):]: decode_param(v) for k, v in tags.items()
                       if k.startswith(prefix)
                       and k[len(prefix):].startswith(("model.", "train."))}
    return out
