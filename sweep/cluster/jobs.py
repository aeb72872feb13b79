"""This service's jobs on a Ray cluster: found, listed, followed, stopped.

A job is a study of this service when its metadata carries `sweep.schema.TAG_KIND` =
`sweep.schema.KIND_STUDY` (`sweep.cluster.job_request` sets it); every other job on the
cluster, another tool's or this service's probe, is left alone: `study_job` refuses it by id,
`study_jobs` does not list it.

`submission_id` names a study's next job (``sweep-<study>-<attempt>``) so that two submits of
one study at once cannot both start a driver: both ask for the same id, and Ray's Jobs API
accepts a new id only once (``JobManager.submit_job`` stores the job with ``overwrite=False``
and refuses an id it holds, ``ray.dashboard.modules.job.job_manager``).

`stop` asks Ray to stop the job (``JobSubmissionClient.stop_job``: SIGTERM to the entrypoint
and its child processes, SIGKILL after ``RAY_JOB_STOP_WAIT_TIME_S``, which the job sets to
`sweep.cluster.STOP_GRACE_S`) and waits until Ray records it ``STOPPED``: by then the driver
has ended its running trials ``INTERRUPTED`` and its parent run ``KILLED``.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from sweep import schema
from sweep.cluster.connection import ClusterError

__all__ = ["already_runs", "describe", "ended", "exit_code", "follow_logs", "is_study", "stop",
           "study_job", "study_jobs", "submission_id", "wait_ended"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

def _status(details: Any) -> str:
    return str(getattr(details.status, "value", details.status))


def ended(details: Any) -> bool:
    """Whether the job has reached one of Ray's terminal states (succeeded, failed, stopped)."""
    from ray.job_submission import JobStatus

    return JobStatus(details.status).is_terminal()


def is_study(details: Any) -> bool:
    """Whether a `ray.job_submission.JobDetails` is a study this service submitted."""
    return (details.metadata or {}).get(schema.TAG_KIND) == schema.KIND_STUDY


def study_jobs(client: Any) -> list[Any]:
    """This service's study jobs on the cluster, oldest first (`ray.job_submission.JobDetails`)."""
    jobs = [j for j in client.list_jobs() if j.submission_id and is_study(j)]
    return sorted(jobs, key=lambda j: (j.start_time or 0, j.submission_id))


def submission_id(study: str, jobs: Iterable[Any]) -> str:
    """The submission id of study ``study``'s next job: ``sweep-<study>-<attempt>``.

    ``attempt`` is one more than the highest attempt among ``jobs`` (the cluster's jobs; those
    of other studies and ids of another form count for nothing), 1 for the first, so two
    submits that read the same jobs ask for the same id and the cluster takes one of them. A
    name with characters other than letters, digits and ``_.-`` has them replaced by ``_``
    and the first 8 hex digits of its SHA-256 added, so that two names never share ids.
    """
    slug = _UNSAFE.sub("_", study)
    if slug != study:
        slug = f"{slug[:60]}-{hashlib.sha256(study.encode()).hexdigest()[:8]}"
    prefix = f"sweep-{slug}-"
    attempts = [int(m.group(1)) for j in jobs
                if (j.metadata or {}).get(schema.JOB_STUDY) == study
                and (m := re.fullmatch(re.escape(prefix) + r"(\d+)", j.submission_id or ""))]
    return f"{prefix}{max(attempts, default=0) + 1}"


def already_runs(study: str, job_id: str, state: str) -> ClusterError:
    """The refusal of a second driver for ``study``, naming the job ``job_id`` that has it."""
    return ClusterError(f"study {study} already runs on the cluster as job {job_id} ({state}); "
                        f"two drivers of one study would fight: wait for it, or sweep stop "
                        f"{job_id} first")


def study_job(client: Any, job_id: str) -> Any:
    """The study job ``job_id`` (its submission id), as `ray.job_submission.JobDetails`.

    Raises:
        ClusterError: No job has that id on the cluster, or it is not a study of this service
            (another tool's job): naming the id.
    """
    try:
        details = client.get_job_info(job_id)
    except RuntimeError as exc:
        if "404" in str(exc) or "does not exist" in str(exc):
            raise ClusterError(f"JOB {job_id}: no job with that id on the cluster at "
                               f"{client.get_address()} (sweep jobs lists this service's "
                               "jobs)") from None
        raise ClusterError(f"JOB {job_id}: the Jobs API failed ({exc})") from None
    if not is_study(details):
        raise ClusterError(f"JOB {job_id}: not a transformer-sweep study (entrypoint "
                           f"{details.entrypoint!r}); sweep shows and stops only the studies "
                           "it submitted, use ray job for other jobs")
    return details


def describe(details: Any, now: float | None = None) -> dict[str, Any]:
    """One study job as plain data: id, state, study, spec hash, times, where its runs are.

    Times are Unix seconds; ``duration_s`` runs to the end, or to ``now`` while it runs.
    """
    meta = details.metadata or {}
    start = details.start_time / 1000 if details.start_time else None
    end = details.end_time / 1000 if details.end_time else None
    running_to = end or (now if now is not None else time.time())
    return {
        "job": details.submission_id, "state": _status(details),
        "study": meta.get(schema.JOB_STUDY), "name": meta.get("job_name"),
        "spec_hash": meta.get(schema.TAG_SPEC_HASH),
        "executor": meta.get(schema.TAG_EXECUTOR), "start": start, "end": end,
        "duration_s": running_to - start if start else None,
        "tracking_uri": meta.get(schema.JOB_TRACKING_URI),
        "experiment": meta.get(schema.JOB_EXPERIMENT),
        "out": meta.get(schema.JOB_OUT), "code": meta.get(schema.JOB_CODE),
        "exit_code": details.driver_exit_code, "message": details.message,
    }


def wait_ended(client: Any, job_id: str, timeout_s: float, poll_s: float = 0.5) -> Any:
    """The job's details once it has ended, or its last details after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        details = client.get_job_info(job_id)
        if ended(details) or time.monotonic() > deadline:
            return details
        time.sleep(poll_s)


def follow_logs(client: Any, job_id: str, write: Callable[[str], None]) -> None:
    """Write the job's log from its start, as it grows, until the job ends (the stream closes)."""
    async def tail() -> None:
        async for chunk in client.tail_job_logs(job_id):
            write(chunk)

    asyncio.run(tail())


def stop(client: Any, job_id: str, timeout_s: float) -> Any:
    """Stop a running study job and wait up to ``timeout_s`` seconds for it to end.

    Returns:
        The job's details after the wait (``STOPPED`` unless it had ended already, or the
        wait ran out).
    """
    client.stop_job(job_id)
    return wait_ended(client, job_id, timeout_s)


def exit_code(details: Any) -> int:
    """The exit status ``sweep submit`` ends with for an ended job.

    0 for ``SUCCEEDED``; 143 for ``STOPPED`` (the SIGTERM ``sweep stop`` sends, as ``sweep
    run`` exits after one); for ``FAILED`` the driver's own status where Ray has it (1 no
    trial completed, 2 bad input found on the cluster, 3 stopped outside its trials), else 1.
    """
    from ray.job_submission import JobStatus

    status = JobStatus(details.status)
    if status is JobStatus.SUCCEEDED:
        return 0
    if status is JobStatus.STOPPED:
        return 143
    return details.driver_exit_code or 1
