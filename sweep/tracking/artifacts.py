"""A run's artifacts written and read by store URI, for analyses run after a study.

An analysis (`sweep analyze`) adds its JSON and figures to a study's parent run (`log_json`,
`log_files`) and reads the spec the study stored there (`read_stored_spec`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from sweep.errors import InputError
from sweep.schema import TAG_SEARCHED, TAG_SIMULATED
from sweep.tracking.stores import reading_uri, relocate_artifacts
from sweep.tracking.study_run import load_stored_spec

__all__ = ["StoredSpecError", "log_files", "log_json", "read_parent_metrics", "read_searched",
           "read_simulated", "read_stored_spec"]


def _writing_client(tracking_uri: str, run_id: str) -> MlflowClient:
    """A client for adding artifacts to run ``run_id``, its study's folder moved or not.

    The run's experiment is pointed at ``<store's folder>/mlartifacts`` first
    (`sweep.tracking.stores.relocate_artifacts`), so nothing is written at the old place.
    """
    client = MlflowClient(tracking_uri)
    relocate_artifacts(tracking_uri, client.get_run(run_id).info.experiment_id)
    return client


def log_json(tracking_uri: str, run_id: str, data: Any, artifact_file: str) -> None:
    """Log ``data`` as indented JSON to run ``run_id`` as ``artifact_file`` (a path in the run).

    Raises:
        mlflow.exceptions.MlflowException, OSError: The store refuses the artifact.
    """
    client = _writing_client(tracking_uri, run_id)
    client.log_text(run_id, json.dumps(data, indent=2), artifact_file)


def log_files(tracking_uri: str, run_id: str, paths: Iterable[str | Path],
              artifact_dir: str) -> None:
    """Log each file of ``paths`` to run ``run_id`` under ``artifact_dir``, in order.

    Raises:
        mlflow.exceptions.MlflowException, OSError: The store refuses a file.
    """
    client = _writing_client(tracking_uri, run_id)
    for path in paths:
        client.log_artifact(run_id, str(path), artifact_dir)


class StoredSpecError(InputError, RuntimeError):
    """A study's stored ``spec.yaml`` cannot be read (the message says why)."""


def read_stored_spec(tracking_uri: str, run_id: str) -> dict[str, Any]:
    """The plain spec a study's parent run ``run_id`` stored as ``spec.yaml`` ({} if empty).

    Raises:
        StoredSpecError: The artifact cannot be downloaded, or is not YAML.
    """
    try:
        return load_stored_spec(MlflowClient(reading_uri(tracking_uri)), run_id, tracking_uri)
    except (MlflowException, OSError, yaml.YAMLError) as exc:
        raise StoredSpecError(f"{type(exc).__name__}: {exc}") from exc


def read_parent_metrics(tracking_uri: str, run_id: str) -> dict[str, float]:
    """The latest value of each metric a study's parent run ``run_id`` logged."""
    return dict(MlflowClient(reading_uri(tracking_uri)).get_run(run_id).data.metrics)


def read_searched(tracking_uri: str, run_id: str) -> list[str] | None:
    """The params a study searched (tag ``sweep.searched`` of its parent run ``run_id``).

    None for a study from before the tag.
    """
    tags = MlflowClient(reading_uri(tracking_uri)).get_run(run_id).data.tags
    text = tags.get(TAG_SEARCHED)
    return None if text is None else [name for name in text.split(",") if name]


def read_simulated(tracking_uri: str, run_id: str) -> str | None:
    """The law a simulated study's losses were drawn from, or None for a trained study.

    Tag ``sweep.simulated`` of the study's parent run ``run_id``.
    """
    return MlflowClient(reading_uri(tracking_uri)).get_run(run_id).data.tags.get(TAG_SIMULATED)
