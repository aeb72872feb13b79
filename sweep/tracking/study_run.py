"""The parent run of a study.

Created or reopened (with a resume-compatibility check of the spec) by the driver, summarised at the
end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import yaml
from mlflow import MlflowClient
from mlflow.artifacts import download_artifacts
from mlflow.entities import Metric, Run, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

from sweep.params import config_params, unflatten_params
from sweep.redact import redact, remember
from sweep.schema import (
    BEST_CONFIG_ARTIFACT,
    KIND_MODEL_TRAINING,
    KIND_STUDY,
    METRIC_BASELINE,
    METRIC_BEST_OVER_BASELINE,
    METRIC_BEST_VAL_LOSS,
    METRIC_TRIALS_RETRIED,
    SPEC_ARTIFACT,
    TAG_ALGORITHM,
    TAG_BEST_RUN_ID,
    TAG_BEST_TRIAL,
    TAG_COMMAND,
    TAG_CORPUS,
    TAG_EXECUTOR,
    TAG_EXPERIMENT_KIND,
    TAG_FAIL_REASON,
    TAG_KIND,
    TAG_NOTE,
    TAG_SEARCHED,
    TAG_SPEC_HASH,
    TAG_STATE,
    TRIALS_ARTIFACT,
    UI_MODEL_TRAINING,
    TrialState,
    count_metric,
)
from sweep.spec.resume import ResumeError, check_resume_compatible
from sweep.tracking.notes import experiment_note, parent_note
from sweep.tracking.reader import latest_parent, read_trials
from sweep.tracking.stores import artifact_root, ensure_store, relocate_artifacts
from sweep.tracking.trial_context import TrialContext
from sweep.tracking.trial_run import TrialRun, finite, finite_float, now_ms
from sweep.tracking.uris import absolute_uri, sqlite_path
from sweep.tracking.view import save_view

log = logging.getLogger(__name__)


def get_or_create_experiment(client: MlflowClient, tracking_uri: str, name: str) -> str:
    """The id of experiment ``name``, created if missing (artifacts beside a SQLite store)."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    path = sqlite_path(tracking_uri)
    location = (path.parent.resolve() / "mlartifacts").as_uri() if path is not None else None
    return client.create_experiment(name, artifact_location=location)


def _digest(spec: Mapping[str, Any]) -> str:
    """SHA-256 (first 16 hex digits) of the spec's canonical JSON form."""
    canonical = json.dumps(spec, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _plain(spec: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(spec, default=str))


def _corpus_uri(spec: Mapping[str, Any]) -> str | None:
    data = spec.get("data")
    return data if isinstance(data, str) else (data or {}).get("uri")


def _describe_experiment(client: MlflowClient, experiment_id: str, study_name: str,
                         digest: str, command: str | None,
                         view: tuple[str, Sequence[str]]) -> None:
    """Write the experiment's description, its kind and its saved view (`save_view` of ``view``).

    The command that created it is kept across resumes.
    """
    tags = client.get_experiment(experiment_id).tags
    made_by = tags.get(TAG_COMMAND)
    command = redact(command) if command else command
    if made_by is None and command:
        client.set_experiment_tag(experiment_id, TAG_COMMAND, command[:MAX_TAG_VAL_LENGTH])
    note = experiment_note(study_name, digest, made_by or command,
                           resumed_by=command if made_by else None)
    client.set_experiment_tag(experiment_id, TAG_NOTE, note)
    if TAG_EXPERIMENT_KIND not in tags:  # the UI's pages open in its model-training layout
        client.set_experiment_tag(experiment_id, TAG_EXPERIMENT_KIND, KIND_MODEL_TRAINING)
    save_view(client, experiment_id, *view)


def _check_resume(client: MlflowClient, parent: Run, spec: dict[str, Any], digest: str,
                  tracking_uri: str, experiment_id: str, study_name: str) -> None:
    """Reopen ``parent`` to resume: the spec checked, the run RUNNING again.

    The stored spec is kept in ``spec_history/`` when it changed; a stale reason is removed.

    Raises:
        ResumeError: `check_resume_compatible` refuses the new spec, or the parent holds trials
            but no stored spec.
    """
    run_id = parent.info.run_id
    old_digest = parent.data.tags.get(TAG_SPEC_HASH, "unknown")
    try:
        old_spec = load_stored_spec(client, run_id, tracking_uri)
    except MlflowException:
        old_spec = None
    if old_spec is None:  # killed between creating the parent and logging its spec
        if read_trials(tracking_uri, experiment_id, run_id):
            raise ResumeError(f"cannot resume {study_name}: its parent run {run_id} "
                              f"holds trials but no {SPEC_ARTIFACT} to compare the "
                              "spec with; start a new study (another name or --out)")
    for note in check_resume_compatible(old_spec or spec, spec):
        log.warning("resuming %s with a changed spec: %s", study_name, note)
    if old_spec is not None and old_digest != digest:
        client.log_text(run_id, yaml.safe_dump(old_spec), f"spec_history/{old_digest}.yaml")
    client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
    if TAG_FAIL_REASON in parent.data.tags:  # why the last run stopped, now stale
        client.delete_tag(run_id, TAG_FAIL_REASON)


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
        self.corpus_lines: list[str] = []  # `log_corpus`, for the parent run's description

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
        command: str | None = None,
        searched: Sequence[str] = (),
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
            command: The command line that started the study (tag ``sweep.command``; the
                experiment's description names the one that created it), or None.
            searched: The searched params as the spec names them (tag ``sweep.searched``).

        The experiment gets its description and its saved view of the trials
        (`_describe_experiment`), the parent run tag ``sweep.corpus`` (``spec``'s ``data``
        URI) and a description that `finish` replaces with the summary.

        Raises:
            ResumeError: When resuming and `check_resume_compatible` refuses the new spec.
        """
        tracking_uri = absolute_uri(tracking_uri)
        remember(tracking_uri)
        command = redact(command) if command else command
        ensure_store(tracking_uri)
        client = MlflowClient(tracking_uri)
        experiment_id = get_or_create_experiment(client, tracking_uri, study_name)
        relocate_artifacts(tracking_uri, experiment_id)  # a study folder moved since
        spec = _plain(spec)
        digest = spec_hash or _digest(spec)
        parent = latest_parent(client, experiment_id) if resume else None
        tags = {TAG_SPEC_HASH: digest, TAG_EXECUTOR: executor, TAG_ALGORITHM: algorithm,
                TAG_NOTE: parent_note(study_name, state=TrialState.RUNNING, counts={},
                                      executor=executor, algorithm=algorithm)}
        if (corpus := _corpus_uri(spec)) is not None:
            tags[TAG_CORPUS] = corpus[:MAX_TAG_VAL_LENGTH]
        if command:
            tags[TAG_COMMAND] = command[:MAX_TAG_VAL_LENGTH]
        tags[TAG_SEARCHED] = ",".join(searched)[:MAX_TAG_VAL_LENGTH]
        if parent is None:
            tags.update({TAG_KIND: KIND_STUDY, TAG_STATE: TrialState.RUNNING.value})
            run = client.create_run(experiment_id, tags=tags, run_name=study_name)
            run_id = run.info.run_id
        else:
            run_id = parent.info.run_id
            _check_resume(client, parent, spec, digest, tracking_uri, experiment_id, study_name)
            tags[TAG_STATE] = TrialState.RUNNING.value
            client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        client.log_text(run_id, yaml.safe_dump(spec, sort_keys=False), SPEC_ARTIFACT)
        _describe_experiment(client, experiment_id, study_name, digest, command,
                             (run_id, searched))
        return cls(tracking_uri, experiment_id, run_id)

    def start_trial(self, number: int, params: Mapping[str, Any] | None = None) -> TrialRun:
        """Same as ``self.context.start_trial``."""
        return self.context.start_trial(number, params)

    def log_metrics(self, metrics: Mapping[str, float | None]) -> None:
        """Log finite study-level metrics, e.g. ``baseline_unigram_loss`` (nats/token)."""
        ts = now_ms()
        batch = [Metric(k, x, ts, 0) for k, v in metrics.items()
                 if (x := finite_float(v)) is not None]
        if batch:
            self.client.log_batch(self.parent_run_id, metrics=batch)

    def log_baseline(self, baseline_unigram_loss: float) -> None:
        """Log the corpus's unigram baseline loss (nats/token, on the val split)."""
        self.log_metrics({METRIC_BASELINE: baseline_unigram_loss})

    def log_corpus(self, description: list[str], baseline_unigram_loss: float) -> None:
        """Log the corpus's baseline and keep its description for the parent's summary.

        Args:
            description: `sweep.data.Corpus.describe`'s lines (size, split, baseline).
            baseline_unigram_loss: Nats/token on the val split (`log_baseline`).
        """
        self.corpus_lines = list(description)
        self.log_baseline(baseline_unigram_loss)

    def __enter__(self) -> StudyTracker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if self.finished:
            return False
        if exc is None:
            self.finish()
        else:
            reason = redact(f"{type(exc).__name__}: {exc}")[:MAX_TAG_VAL_LENGTH]
            tags = [RunTag(TAG_STATE, TrialState.FAILED.value), RunTag(TAG_FAIL_REASON, reason)]
            self.client.log_batch(self.parent_run_id, tags=tags)
            self.client.set_terminated(self.parent_run_id, RunStatus.to_string(RunStatus.FAILED))
            self.finished = True
        return False

    def finish(self, trials: list[dict[str, Any]] | None = None, *, trials_csv: str | None = None,
               figures: Mapping[str, Any] | None = None,
               interrupted: str | None = None,
               data: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Summarise the trials into the parent run and end it.

        Logs metrics ``best_val_loss`` (over COMPLETE trials with a finite value),
        ``best_loss_over_baseline`` (when the baseline was logged) and ``trials_<state>`` per
        state, tags ``sweep.best_trial_number``/``sweep.best_run_id``, the run's description
        (`sweep.tracking.notes.parent_note`: the best trial against the baseline, the counts,
        the corpus, the search),
        artifacts ``best_config.yaml``, ``trials.csv`` (``trials_csv``) and
        ``plots/<name>.png`` (``figures``). The parent ends FAILED (tag ``sweep.state=FAILED``)
        when no trial completed, and ``KILLED`` (tag ``sweep.state=INTERRUPTED``, the reason in
        ``sweep.fail_reason``) when ``interrupted`` says why the study stopped early. Metric
        ``trials_retried`` counts the trials that retry an interrupted one.
        `sweep.study.summary.finish_study` draws the table and plots.

        Args:
            trials: The study's trials as `sweep.tracking.read_trials` gives them (read now
                if None).
            trials_csv: The trials table as CSV text, or None to log none.
            figures: Matplotlib figures by name, or None to log none.
            interrupted: Why the study stopped before its end (a signal, workers that kept
                dying), or None.
            data: The spec's ``data`` section, written first in ``best_config.yaml`` so the
                file trains again as it is (``sweep train --config``).

        Returns:
            ``{"best_val_loss", "best_trial", "best_run_id", "counts": {state: n}, "state"}``.
        """
        if trials is None:
            trials = read_trials(self.context.tracking_uri, self.experiment_id,
                                 self.parent_run_id)
        counts = {state: 0 for state in TrialState}
        for trial in trials:
            counts[trial["state"]] += 1
        best = _best_trial(trials)
        state = TrialState.COMPLETE if counts[TrialState.COMPLETE] else TrialState.FAILED
        if interrupted is not None:
            state = TrialState.INTERRUPTED
        metrics: dict[str, float] = {count_metric(s): n for s, n in counts.items()}
        metrics[METRIC_TRIALS_RETRIED] = sum(1 for t in trials if t.get("retry_of") is not None)
        tags = [RunTag(TAG_STATE, state.value)]
        if interrupted is not None:
            tags.append(RunTag(TAG_FAIL_REASON, redact(interrupted)[:MAX_TAG_VAL_LENGTH]))
        parent_run = self.client.get_run(self.parent_run_id)
        baseline = parent_run.data.metrics.get(METRIC_BASELINE, math.nan)
        if best is not None:
            metrics[METRIC_BEST_VAL_LOSS] = best["metrics"][METRIC_BEST_VAL_LOSS]
            if finite(baseline) and baseline > 0:
                metrics[METRIC_BEST_OVER_BASELINE] = metrics[METRIC_BEST_VAL_LOSS] / baseline
            tags += [RunTag(TAG_BEST_TRIAL, str(best["trial"])),
                     RunTag(TAG_BEST_RUN_ID, best["run_id"])]
            self._log_best_config(best, data)
        note = self._note(parent_run, state, counts, best, baseline, interrupted)
        tags.append(RunTag(TAG_NOTE, note[:MAX_TAG_VAL_LENGTH]))
        self.log_metrics(metrics)
        self.client.log_batch(self.parent_run_id, tags=tags)
        if trials_csv is not None:
            self.client.log_text(self.parent_run_id, trials_csv, TRIALS_ARTIFACT)
        for name, figure in (figures or {}).items():
            self.client.log_figure(self.parent_run_id, figure, f"plots/{name}.png")
        self.client.set_terminated(self.parent_run_id, state.run_status)
        self.finished = True
        return {
            METRIC_BEST_VAL_LOSS: best["metrics"][METRIC_BEST_VAL_LOSS] if best else math.nan,
            "best_trial": best["trial"] if best else None,
            "best_run_id": best["run_id"] if best else None,
            "counts": {s.value: n for s, n in counts.items()},
            "retried": metrics[METRIC_TRIALS_RETRIED],
            "state": state,
        }

    def _log_best_config(self, best: Mapping[str, Any], data: Mapping[str, Any] | None) -> None:
        """Save the best trial's config (``data`` first) as ``best_config.yaml``."""
        best_config = {**({"data": dict(data)} if data else {}),
                       **unflatten_params(config_params(best["params"]))}
        config = yaml.safe_dump(best_config, sort_keys=False)
        self.client.log_text(self.parent_run_id, config, BEST_CONFIG_ARTIFACT)

    def _note(self, parent_run: Run, state: TrialState, counts: Mapping[TrialState, int],
              best: Mapping[str, Any] | None, baseline: float, reason: str | None) -> str:
        """The parent run's description at the end (`sweep.tracking.notes.parent_note`)."""
        parent = parent_run.data
        corpus = self.corpus_lines or ([f"corpus {parent.tags[TAG_CORPUS]}"]
                                       if TAG_CORPUS in parent.tags else [])
        return parent_note(
            parent_run.info.run_name, state=state,
            counts={s.value: n for s, n in counts.items()},
            best_trial=best["trial"] if best else None,
            best_run_url=f"#/experiments/{self.experiment_id}/runs/{best['run_id']}"
                         f"?{UI_MODEL_TRAINING}" if best else None,
            best_val_loss=best["metrics"][METRIC_BEST_VAL_LOSS] if best else math.nan,
            baseline=baseline, corpus=corpus, executor=parent.tags.get(TAG_EXECUTOR),
            algorithm=parent.tags.get(TAG_ALGORITHM), reason=reason)


def _best_trial(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The COMPLETE trial with the lowest finite ``best_val_loss``, or None."""
    ranked = [t for t in trials if t["state"] is TrialState.COMPLETE
              and finite(t["metrics"].get(METRIC_BEST_VAL_LOSS))]
    return min(ranked, key=lambda t: t["metrics"][METRIC_BEST_VAL_LOSS], default=None)


def load_stored_spec(client: MlflowClient, run_id: str, tracking_uri: str) -> dict[str, Any]:
    """The plain spec a study's parent run ``run_id`` stored as ``spec.yaml`` ({} if empty).

    Read where the run's artifacts are now (`sweep.tracking.stores.artifact_root`), so a
    study folder that was moved still finds it.

    Raises:
        mlflow.exceptions.MlflowException, OSError: The artifact cannot be downloaded.
        yaml.YAMLError: It is not YAML.
    """
    stored = client.get_run(run_id).info.artifact_uri
    root = artifact_root(tracking_uri, stored)
    with tempfile.TemporaryDirectory() as tmp:
        if root == stored:  # where MLflow says (a server's proxied artifacts, say)
            path = client.download_artifacts(run_id, SPEC_ARTIFACT, dst_path=tmp)
        else:
            path = download_artifacts(artifact_uri=f"{root.rstrip('/')}/{SPEC_ARTIFACT}",
                                      dst_path=tmp)
        return yaml.safe_load(Path(path).read_text()) or {}
