"""A study handed to a Ray cluster as a job: checked here first, then shipped and submitted.

`check_submittable` runs before anything touches the network: the spec's corpus URI
(`sweep.data.check_corpus`) and space (`sweep.study.check_space`), as ``sweep run`` checks them,
where they do not depend on the cluster's hardware, and where the results go. The study writes
its trials to MLflow and, with the Optuna executor, to an Optuna storage; after a cluster run
this machine must be able to read both, so a store on the cluster's disk (the default SQLite
file, a journal) is refused with the field and the fix, and the MLflow store must be a
tracking server (``http(s)://``): the spec's ``tracking.uri``, else the cluster's
``MLFLOW_TRACKING_URI`` (`results_uri`, once `sweep.cluster.probe` has asked the cluster).

`job_request` builds the job: the entrypoint is ``sweep run`` on the cluster (``python -m
sweep.cli run``, so a shipped copy of the code runs the same way as an installed one), the
``runtime_env`` ships the spec file (``working_dir``, which is also the job's current folder)
and the code where the cluster lacks it (`sweep.cluster.probe.code_plan`), and the job's
metadata marks it as this service's study. ``RAY_JOB_STOP_WAIT_TIME_S`` gives the driver
`STOP_GRACE_S` between the SIGTERM of ``ray job stop`` and Ray's SIGKILL (3 s by default,
``ray.dashboard.modules.job.job_supervisor``), time to end its running trials
``INTERRUPTED`` and its parent run ``KILLED`` as it does for a SIGTERM anywhere.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sweep.cluster.connection import ClusterError
from sweep.redact import shown_uri
from sweep.schema import (
    JOB_CODE,
    JOB_EXPERIMENT,
    JOB_OUT,
    JOB_SPEC,
    JOB_STUDY,
    JOB_TRACKING_URI,
    KIND_STUDY,
    TAG_EXECUTOR,
    TAG_KIND,
    TAG_SPEC_HASH,
)
from sweep.spec import ChoiceDomain, StudySpec
from sweep.spec.from_study import lr_domain
from sweep.spec.yaml_safe import read_yaml

__all__ = ["STOP_GRACE_S", "JobRequest", "check_submittable", "default_out", "job_request",
           "results_uri", "shipped_spec"]

#: Seconds Ray waits after ``stop_job``'s SIGTERM before it kills the study's driver.
STOP_GRACE_S = 60
_SERVER_SCHEMES = ("http", "https")
_PATH_SCHEMES = ("text", "tokens")


def _devices_priced_here(spec: StudySpec) -> bool:
    """Whether pricing the space here matches the cluster: no device named beyond auto, cpu."""
    value = spec.train.get("device", "auto")
    options = value.options if isinstance(value, ChoiceDomain) else [value]
    return all(v in ("auto", "cpu") for v in options)


def _check_corpus(spec: StudySpec) -> None:
    from sweep.data import check_corpus

    uri = spec.data.uri
    scheme, _, rest = uri.partition(":")
    if scheme in _PATH_SCHEMES:
        path = rest.split("?", 1)[0]
        if not Path(path).is_absolute():
            raise ClusterError(f"data.uri {uri!r}: a relative path, which the job would read "
                               "in its own folder on the cluster; give the corpus's absolute "
                               "path as the cluster's nodes see it")
        return  # read on the cluster; its preflight checks it there
    check_corpus(uri, vocab_size=spec.data.vocab_size)


def _check_stores(spec: StudySpec) -> None:
    uri = spec.tracking.uri
    if uri is not None and urllib.parse.urlsplit(uri).scheme.lower() not in _SERVER_SCHEMES:
        raise ClusterError(
            f"tracking.uri {shown_uri(uri)}: a store on the cluster's disk, which this "
            "machine cannot read once the study has run there; set tracking.uri to an MLflow "
            "tracking server the cluster reaches (http://HOST:5000), or leave it out where "
            "the cluster sets MLFLOW_TRACKING_URI to one")
    if spec.search.executor != "optuna":
        return  # the Ray executor keeps its searcher's state in the driver, trials in MLflow
    storage = spec.search.storage
    if storage is None or "://" not in storage or storage.startswith("sqlite"):
        shown = "the default journal file in the study folder" if storage is None else storage
        raise ClusterError(
            f"search.storage ({shown}): the Optuna executor's storage would be a file on the "
            "cluster's disk, which this machine cannot read and a resubmitted study may not "
            "find; set search.storage to a database the cluster reaches "
            "(postgresql://USER:PASSWORD@HOST/DB), or submit with --executor ray")


def check_submittable(spec: StudySpec) -> None:
    """The checks of a spec that need neither the cluster nor the network.

    The corpus URI: its scheme and parameters (`sweep.data.check_corpus`); a ``text:`` or
    ``tokens:`` path must be absolute and is read on the cluster. The stores: ``tracking.uri``,
    when set, is an MLflow tracking server (``http`` or ``https``); the Optuna executor's
    ``search.storage`` is a database URL (not the default journal, a file or SQLite). The
    space: some configs are valid and within the constraints (`sweep.study.check_space`),
    priced here unless ``train.device`` names an accelerator (then the cluster's preflight
    prices it on that device when the job starts).

    Raises:
        ClusterError: Naming ``data.uri``, ``tracking.uri`` or ``search.storage`` and the fix.
        sweep.data.DataError: A corpus URI ``sweep run`` would refuse.
        sweep.study.PreflightError: No config of the space could train.
    """
    _check_corpus(spec)
    _check_stores(spec)
    if _devices_priced_here(spec):
        from sweep.study.preflight import check_space

        check_space(spec)


def results_uri(spec: StudySpec, cluster_uri: str | None) -> tuple[str, str]:
    """The MLflow tracking server the study's runs go to, and the field or variable naming it.

    The spec's ``tracking.uri`` (`check_submittable` has checked it), else the cluster's
    ``MLFLOW_TRACKING_URI`` (as the probe job read it, password masked), which ``sweep run``
    takes there in the same order.

    Raises:
        ClusterError: Neither is set, or the cluster's is not a tracking server.
    """
    if spec.tracking.uri:
        return shown_uri(spec.tracking.uri), "tracking.uri"
    if not cluster_uri:
        raise ClusterError(
            "tracking.uri is not set and the cluster has no MLFLOW_TRACKING_URI, so the study "
            "would write its runs to a SQLite file on the cluster's disk, which this machine "
            "cannot read; set tracking.uri to an MLflow tracking server the cluster reaches "
            "(http://HOST:5000), or start the cluster's nodes with MLFLOW_TRACKING_URI")
    if urllib.parse.urlsplit(cluster_uri).scheme.lower() not in _SERVER_SCHEMES:
        raise ClusterError(
            f"the cluster's MLFLOW_TRACKING_URI ({cluster_uri}) is not a tracking server, so "
            "this machine could not read the study's runs; set tracking.uri in the spec to an "
            "MLflow tracking server the cluster reaches (http://HOST:5000)")
    return cluster_uri, "the cluster's MLFLOW_TRACKING_URI"


def default_out(spec: StudySpec) -> str:
    """The study folder on the cluster when ``--out`` is not given: ``~/sweep-runs/<name>``.

    Written for the job's shell, which expands ``$HOME`` on the node the driver runs on.
    """
    return f'"$HOME"/sweep-runs/{shlex.quote(spec.name)}'


@dataclass(frozen=True)
class JobRequest:
    """The arguments of `ray.job_submission.JobSubmissionClient.submit_job` for a study."""

    entrypoint: str
    runtime_env: dict[str, Any]
    metadata: dict[str, str]


@contextmanager
def shipped_spec(spec_path: Path, spec: StudySpec | None = None) -> Iterator[Path]:
    """A fresh folder holding only the spec file, for the job's ``working_dir``; removed after.

    Ray uploads the folder at submission (keyed by its content hash), so the job sees the file
    under its own name in its current folder and nothing else of this machine. A ``spec`` whose
    ``train.lr`` holds a resolved ``from_study`` law (`sweep.spec.from_study.resolve_lr`) ships
    with that law written in, as the source study's folder is on this machine.
    """
    folder = Path(tempfile.mkdtemp(prefix="sweep-submit-"))
    domain = lr_domain(spec) if spec is not None else None
    try:
        if domain is not None and domain.law is not None:
            data = read_yaml(spec_path.read_text())
            data["train"]["lr"] = domain.model_dump(mode="json", exclude_none=True)
            (folder / spec_path.name).write_text(yaml.safe_dump(data, sort_keys=False))
        else:
            shutil.copyfile(spec_path, folder / spec_path.name)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def job_request(spec: StudySpec, spec_path: Path, working_dir: Path, *, out: str | None,
                executor: str | None, trials: int | None, name: str | None,
                tracking_uri: str, code_env: dict[str, Any], code: str) -> JobRequest:
    """The job that runs ``sweep run`` of ``spec`` on the cluster.

    Args:
        spec: The study, with ``--executor`` and ``--trials`` applied (for its hash).
        spec_path: The spec file as given (its name is the file the job reads).
        working_dir: The folder from `shipped_spec`.
        out: The study folder on the cluster (``--out``); None: `default_out`.
        executor: ``--executor``, passed on to ``sweep run``.
        trials: ``--trials``, passed on to ``sweep run``.
        name: The job's name (``--name``); None: the study's name.
        tracking_uri: Where the runs go (`results_uri`), for the metadata.
        code_env: The ``runtime_env`` entries for the code (`sweep.cluster.probe.code_plan`).
        code: ``installed`` or ``shipped``.
    """
    from sweep.spec import spec_hash

    args = ["python", "-m", "sweep.cli", "run", spec_path.name]
    if executor:
        args += ["--executor", executor]
    if trials:
        args += ["--trials", str(trials)]
    entrypoint = " ".join(shlex.quote(a) for a in args) + " --out " + (
        shlex.quote(out) if out else default_out(spec))
    runtime_env = {"working_dir": str(working_dir), **code_env,
                   "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(STOP_GRACE_S)}}
    metadata = {
        "job_name": name or spec.name,  # Ray's own key (ray job list, the dashboard)
        TAG_KIND: KIND_STUDY, JOB_STUDY: spec.name, TAG_SPEC_HASH: spec_hash(spec),
        TAG_EXECUTOR: spec.search.executor, JOB_TRACKING_URI: tracking_uri,
        JOB_EXPERIMENT: spec.tracking.experiment or spec.name, JOB_SPEC: spec_path.name,
        JOB_OUT: out or default_out(spec).replace('"', ""), JOB_CODE: code,
    }
    return JobRequest(entrypoint, runtime_env, metadata)
