"""A study's trial runs as a trial worker sees them: opened, attached, read and ended.

`TrialContext` is picklable (strings only), so a worker in another thread,
process or machine opens its trial's child run with it; `sweep.tracking.trial_run.TrialRun`
writes the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import RunStatus
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

from sweep.adapters.mlflow import sql_create_run
from sweep.redact import remember, shown_uri
from sweep.schema import (
    METRIC_VAL_LOSS,
    TAG_CUDA_VISIBLE_DEVICES,
    TAG_HEARTBEAT,
    TAG_OWNER,
    TAG_RETRY_OF,
    TAG_STATE,
    TAG_TRIAL_NUMBER,
    TrialState,
    run_name,
)
from sweep.tracking.buffer import BufferedClient, SyncResult, sync_folder
from sweep.tracking.owner import current_owner
from sweep.tracking.trial_run import TrialRun


def process_tags() -> dict[str, str]:
    """Tags of the process running a trial: its owner and the GPUs it is shown, if set."""
    tags = {TAG_OWNER: current_owner()}
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    if gpus is not None:
        tags[TAG_CUDA_VISIBLE_DEVICES] = gpus
    return tags


@dataclass(frozen=True)
class RunningTrial:
    """A trial run MLflow holds as ``RUNNING``.

    Attributes:
        number: Its trial number.
        run_id: Its run.
        owner: The process that runs it (tag ``sweep.owner``), or None.
        heartbeat: Its last heartbeat (Unix seconds), else its start time.
    """

    number: int
    run_id: str
    owner: str | None
    heartbeat: float


@dataclass(frozen=True)
class TrialContext:
    """Everything a trial worker needs to log its run; picklable (three strings).

    Attributes:
        tracking_uri: MLflow tracking URI (``sqlite:///...`` or ``http://...``).
        experiment_id: Experiment of the study.
        parent_run_id: Run id of the study's parent run.
        buffer_dir: Where a trial keeps its run's writes while the store does not answer
            (``<study>/mlflow-buffer``, `sweep.tracking.buffer`); None: a failing write
            interrupts the trial.
    """

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    buffer_dir: str | None = None

    def _client(self, client: MlflowClient, run_id: str, number: int) -> BufferedClient:
        remember(self.tracking_uri)  # a worker process's messages mask its password too
        return BufferedClient(client, run_id, self.buffer_dir, {
            "tracking_uri": shown_uri(self.tracking_uri), "experiment_id": self.experiment_id,
            "parent_run_id": self.parent_run_id, "trial": number})

    def sync_buffers(self) -> SyncResult:
        """Send the study's buffered trial writes (`sweep.tracking.buffer.sync_folder`).

        Returns:
            The `sweep.tracking.buffer.SyncResult` (its ``error`` set, and the files kept, when
            the store still does not answer).
        """
        if self.buffer_dir is None:
            return SyncResult([], 0, [])
        client = MlflowClient(self.tracking_uri)
        return sync_folder(self.buffer_dir, lambda header: client)

    def start_trial(self, number: int, params: Mapping[str, Any] | None = None, *,
                    retry_of: int | None = None,
                    heartbeat: Callable[[], None] | None = None) -> TrialRun:
        """Create child run ``trial-<number>`` and log ``params``; use it as a context manager.

        The run records its owner (tag ``sweep.owner``, `sweep.tracking.owner.current_owner`)
        and keeps a heartbeat while open (`TrialRun.start_heartbeat`).

        Args:
            number: Trial number (the executor's), tag ``sweep.trial_number``.
            params: The resolved config, nested (``{"model": {...}, "train": {...}}``) or with
                dotted keys; see `TrialRun.log_params`.
            retry_of: The number of the interrupted trial this one retries (tag
                ``sweep.retry_of``).
            heartbeat: Called at each beat of the run's heartbeat too (`TrialRun.start_heartbeat`).

        Raises:
            mlflow.exceptions.MlflowException: If the store rejects the run or a param (the
                run then ends FAILED with the reason).
        """
        client = MlflowClient(self.tracking_uri)
        tags = {
            MLFLOW_PARENT_RUN_ID: self.parent_run_id,
            TAG_TRIAL_NUMBER: str(number),
            TAG_STATE: TrialState.RUNNING.value,
            **process_tags(),
            TAG_HEARTBEAT: f"{time.time():.0f}",
            **({TAG_RETRY_OF: str(retry_of)} if retry_of is not None else {}),
        }
        create = sql_create_run(client)  # a SQLite store's run in one transaction
        run_id = (create(self.experiment_id, tags, run_name(number)) if create is not None else
                  client.create_run(self.experiment_id, tags=tags,
                                    run_name=run_name(number)).info.run_id)
        trial = TrialRun(self._client(client, run_id, number), run_id, number)
        trial.start_heartbeat(also=heartbeat)
        if params:
            trial.log_initial_params(params)
        return trial

    def read_trials(self) -> list[dict[str, Any]]:
        """The study's trial runs (`sweep.tracking.reader.read_trials`)."""
        from sweep.tracking.reader import read_trials

        return read_trials(self.tracking_uri, self.experiment_id, self.parent_run_id)

    def trial_state(self, run_id: str) -> TrialState:
        """The state trial run ``run_id`` recorded (tag ``sweep.state``)."""
        tags = MlflowClient(self.tracking_uri).get_run(run_id).data.tags
        return TrialState(tags.get(TAG_STATE, TrialState.RUNNING))

    def set_parent_tags(self, tags: Mapping[str, str]) -> None:
        """Set tags on the study's parent run (values cut to the store's tag limit)."""
        client = MlflowClient(self.tracking_uri)
        for key, value in tags.items():
            client.set_tag(self.parent_run_id, key, str(value)[:MAX_TAG_VAL_LENGTH])

    def log_parent_metrics(self, metrics: Mapping[str, float]) -> None:
        """Log ``metrics`` (step 0) on the study's parent run."""
        client = MlflowClient(self.tracking_uri)
        for key, value in metrics.items():
            client.log_metric(self.parent_run_id, key, float(value))

    def set_trial_tags(self, tags: Mapping[str, Mapping[str, str]]) -> None:
        """Set tags on trial runs, ``{run_id: {key: value}}`` (values cut to the tag limit)."""
        client = MlflowClient(self.tracking_uri)
        for run_id, run_tags in tags.items():
            for key, value in run_tags.items():
                client.set_tag(run_id, key, str(value)[:MAX_TAG_VAL_LENGTH])

    def log_parent_text(self, text: str, artifact: str) -> None:
        """Save ``text`` as artifact ``artifact`` of the study's parent run."""
        MlflowClient(self.tracking_uri).log_text(self.parent_run_id, text, artifact)

    def running_trials(self) -> list[RunningTrial]:
        """The study's trial runs still ``RUNNING`` in MLflow, with their owners and beats."""
        runs = MlflowClient(self.tracking_uri).search_runs(
            [self.experiment_id],
            filter_string=(f"tags.{MLFLOW_PARENT_RUN_ID} = '{self.parent_run_id}' "
                           f"and attributes.status = '{RunStatus.to_string(RunStatus.RUNNING)}'"),
            max_results=10_000)
        out = []
        for run in runs:
            tags = run.data.tags
            beat = tags.get(TAG_HEARTBEAT)
            out.append(RunningTrial(int(tags.get(TAG_TRIAL_NUMBER, -1)), run.info.run_id,
                                    tags.get(TAG_OWNER),
                                    float(beat) if beat else run.info.start_time / 1000))
        return out

    def end_interrupted(self, trials: Iterable[RunningTrial], reason: Any) -> list[str]:
        """End each of ``trials`` ``INTERRUPTED``, with ``reason(trial)`` as its reason.

        Returns:
            The run ids ended.
        """
        client = MlflowClient(self.tracking_uri)
        ended = []
        for trial in trials:
            TrialRun(client, trial.run_id, trial.number).end(TrialState.INTERRUPTED,
                                                            fail_reason=reason(trial))
            ended.append(trial.run_id)
        return ended

    def log_params(self, run_id: str, number: int, params: Mapping[str, Any]) -> None:
        """Log ``params`` to trial ``number``'s run now (`TrialRun.log_params`), open or ended."""
        client = MlflowClient(self.tracking_uri)
        TrialRun(client, run_id, number).log_params(params)

    def attach_trial(self, run_id: str) -> TrialRun:
        """Continue logging to an existing trial run (a trial restored in another process)."""
        client = MlflowClient(self.tracking_uri)
        run = client.get_run(run_id)
        number = int(run.data.tags.get(TAG_TRIAL_NUMBER, -1))
        trial = TrialRun(self._client(client, run_id, number), run_id, number)
        trial.restore(run.data.params, run.data.metrics,
                      client.get_metric_history(run_id, METRIC_VAL_LOSS))
        running = RunStatus.to_string(RunStatus.RUNNING)
        if run.info.status != running:
            client.update_run(run_id, status=running)
        for key, value in process_tags().items():
            client.set_tag(run_id, key, value)
        trial.start_heartbeat()
        return trial
