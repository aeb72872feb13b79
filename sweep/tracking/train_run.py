"""The MLflow run of ``sweep train``: one run, laid out like a trial's.

It has a trial's params (the resolved model and train config under dotted keys, and
``data.uri``), cost metrics at step 0, evaluations with step = tokens seen and the totals at
the end, written through `TrialRun`, so the MLflow UI and `sweep.results` read it like a trial.
It is a top-level run (tag ``sweep.kind=train``), never a child of a study's parent run, so a
study's trials, counts and best trial are the same before and after it.

Where it goes: a retrain of a study's trial (``sweep train --from-study``) goes into the
study's own store and experiment, named ``retrain-trial-<n>`` and tagged with the trial's
number and run id; any other ``sweep train`` into experiment ``sweep-train`` of its store
(``sqlite:///<out>/mlflow.db`` by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlflow import MlflowClient

from sweep.schema import (
    KIND_TRAIN,
    TAG_KIND,
    TAG_OWNER,
    TAG_RETRAIN_OF,
    TAG_RETRAIN_OF_RUN,
    TAG_STATE,
    TRAIN_EXPERIMENT,
    TRAIN_RUN_NAME,
    TrialState,
    retrain_run_name,
)
from sweep.tracking.owner import current_owner
from sweep.tracking.stores import ensure_store, relocate_artifacts
from sweep.tracking.study_run import get_or_create_experiment
from sweep.tracking.trial_run import TrialRun
from sweep.tracking.uris import absolute_uri

__all__ = ["RetrainOf", "start_train_run"]


class RetrainOf:
    """The trial a ``sweep train`` retrains: its study's experiment, number and run id."""

    def __init__(self, experiment_id: str, trial: int, run_id: str) -> None:
        self.experiment_id, self.trial, self.run_id = experiment_id, trial, run_id


def start_train_run(tracking_uri: str, params: Mapping[str, Any],
                    retrain_of: RetrainOf | None = None) -> TrialRun:
    """Create the run of one ``sweep train`` and log ``params``; use it as a context manager.

    Args:
        tracking_uri: The MLflow store (created if it is a new SQLite file).
        params: The resolved config, nested (``{"model": ..., "train": ..., "data": ...}``).
        retrain_of: The study trial this trains again (its experiment is used), or None
            (experiment ``sweep-train``).

    Returns:
        A `TrialRun` (number: the retrained trial's, or -1) whose `TrialRun.log_result` ends
        the run in the training result's state.

    Raises:
        mlflow.exceptions.MlflowException: The store refuses the run.
    """
    tracking_uri = absolute_uri(tracking_uri)
    ensure_store(tracking_uri)
    client = MlflowClient(tracking_uri)
    tags = {TAG_KIND: KIND_TRAIN, TAG_STATE: TrialState.RUNNING.value,
            TAG_OWNER: current_owner()}
    if retrain_of is not None:
        experiment_id, name = retrain_of.experiment_id, retrain_run_name(retrain_of.trial)
        relocate_artifacts(tracking_uri, experiment_id)  # the study's folder moved since
        tags.update({TAG_RETRAIN_OF: str(retrain_of.trial), TAG_RETRAIN_OF_RUN: retrain_of.run_id})
    else:
        experiment_id = get_or_create_experiment(client, tracking_uri, TRAIN_EXPERIMENT)
        name = TRAIN_RUN_NAME
    run = client.create_run(experiment_id, tags=tags, run_name=name)
    number = retrain_of.trial if retrain_of is not None else -1
    train_run = TrialRun(client, run.info.run_id, number)
    train_run.log_initial_params(params)
    return train_run
