"""Studies on a Ray cluster: ``sweep submit``, ``status``, ``jobs``, ``logs``, ``stop``.

They talk to the cluster's Jobs API (`sweep.cluster`); the address is ``--address`` (the
dashboard's ``http://HEAD:8265``), else ``RAY_API_SERVER_ADDRESS``, and the token is Ray's
(``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``), never printed. Bad input
(a spec, a flag, an address where no cluster answers, a token the cluster refuses, a job id
that is unknown or another tool's) exits 2 with one message and submits nothing.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import typer

from sweep.cli import common
from sweep.cli.common import app, bad_input
from sweep.cli.inputs import load_study_spec
from sweep.folder import system_folder
from sweep.schema import JOB_EXPERIMENT, JOB_OUT, JOB_STUDY, TAG_SPEC_HASH

_ADDRESS_HELP = ("The Ray dashboard's address, http://HEAD:8265 (default: "
                 "RAY_API_SERVER_ADDRESS).")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


def _connect(address: str | None) -> Any:
    from sweep.cluster import connect

    return connect(address)


def _study_job(client: Any, job: str) -> Any:
    from sweep.cluster import study_job

    return study_job(client, job)


def _check_job_id(job: str) -> None:
    if not _JOB_ID.fullmatch(job):
        bad_input(f"JOB {job!r}: not a job id (sweep jobs lists them, e.g. raysubmit_...)")


def _when(seconds: float | None, short: bool = False) -> str:
    shown = "%m-%d %H:%M" if short else "%Y-%m-%d %H:%M:%S"
    return time.strftime(shown, time.localtime(seconds)) if seconds else "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _driver_line(client: Any, job_id: str, prefix: str) -> str | None:
    """The last line of the job's log that starts with ``prefix`` (the driver's own words)."""
    lines = [ln for ln in client.get_job_logs(job_id).splitlines() if ln.startswith(prefix)]
    return lines[-1] if lines else None


@app.command()
def submit(
    spec_path: str = typer.Argument(..., metavar="SPEC", help="Study spec YAML."),
    address: str = typer.Option(None, help=_ADDRESS_HELP),
    name: str = typer.Option(None, help="The job's name (default: the study's name)."),
    executor: str = typer.Option(None, help="Override search.executor: optuna or ray."),
    trials: int = typer.Option(None, min=1, help="Override search.n_trials."),
    out: str = typer.Option(None, help="The study folder on the cluster (default: "
                            "~/sweep-runs/<name> on the node the driver runs on)."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Print the job id and return; do "
                                 "not stream the job's log."),
) -> None:
    """Run a study on a Ray cluster as a job (``sweep run`` there) and follow it.

    The spec is checked here first (fields, corpus URI, space; results must go to an MLflow
    tracking server: the spec's ``tracking.uri`` or the cluster's ``MLFLOW_TRACKING_URI``, and
    the Optuna executor needs a database ``search.storage``). The job ships the spec, and this
    project's code where the cluster does not have this source installed (it says which).
    Submitting the same spec again resumes the study, as ``sweep run`` does.

    Exits 2 for bad input (nothing submitted); else, without ``--no-wait``, with the job's
    outcome: 0 when it succeeded, 143 when ``sweep stop`` stopped it, the driver's exit status
    when it failed (1 when no trial completed); 130 when Ctrl-C stops the wait (the job runs
    on).
    """
    from sweep.spec.from_study import resolve_lr

    spec, _ = resolve_lr(load_study_spec(spec_path, executor, trials))  # the law ships with it
    reason = system_folder(out, resolve=False) if out else None  # a folder on the cluster
    if reason is not None:
        bad_input(f"--out {out}: {reason}")
    from sweep.cluster import check_submittable

    check_submittable(spec)
    client = _connect(address)
    job_id = _submit(client, spec, Path(spec_path), name=name, executor=executor,
                     trials=trials, out=out)
    if no_wait:
        return
    from sweep.cluster import exit_code, follow_logs, wait_ended

    try:
        follow_logs(client, job_id, _write)
    except KeyboardInterrupt:
        common.stopped(f"no longer following job {job_id}; it runs on (sweep logs {job_id} "
                       f"--follow, sweep stop {job_id})", 130)
    except (RuntimeError, OSError) as exc:  # the stream broke: the head went away, or the net
        common.stopped(f"lost the log stream of job {job_id} ({exc}); sweep status {job_id} "
                       "tells how it went", 1)
    details = wait_ended(client, job_id, timeout_s=30)
    code = exit_code(details)
    state = str(details.status.value)
    if code == 0:
        common.console.print(f"job {job_id}: {state}", highlight=False)
        return
    last = next(iter(reversed((details.message or "").strip().splitlines())), "")
    common.err_console.print(f"job {job_id}: {state} (exit {code}): {last}", highlight=False,
                             soft_wrap=True, markup=False)
    raise typer.Exit(code=code)


def _write(chunk: str) -> None:
    sys.stdout.write(chunk)
    sys.stdout.flush()


def _submit(client: Any, spec: Any, spec_path: Path, *, name: str | None,
            executor: str | None, trials: int | None, out: str | None) -> str:
    """Probe the cluster, check where the results go, submit; print what was submitted."""
    from sweep.cluster import (
        already_runs,
        code_plan,
        job_request,
        probe_cluster,
        results_uri,
        shipped_spec,
        study_jobs,
        submission_id,
    )
    from sweep.schema import KIND_PROBE, TAG_KIND

    try:
        jobs = study_jobs(client)
        running = [j for j in jobs if (j.metadata or {}).get(JOB_STUDY) == spec.name
                   and not j.status.is_terminal()]
        if running:
            raise already_runs(spec.name, running[0].submission_id, running[0].status.value)
        # One id per study and attempt: of two submits at once, the cluster takes one.
        job_id = submission_id(spec.name, jobs)
        facts = probe_cluster(client, {TAG_KIND: KIND_PROBE, JOB_STUDY: spec.name})
        tracking_uri, source = results_uri(spec, facts.mlflow_tracking_uri)
        code_env, code_line = code_plan(facts)
        with shipped_spec(spec_path, spec) as folder:
            request = job_request(spec, spec_path, folder, out=out, executor=executor,
                                  trials=trials, name=name, tracking_uri=tracking_uri,
                                  code_env=code_env, code="shipped" if code_env else "installed")
            _submit_once(client, request, job_id, spec.name)
    except RuntimeError as exc:  # the Jobs API refused the submission
        bad_input(f"the cluster refused the job: {exc}")
    meta = request.metadata
    say = common.console.print
    say(f"submitted job {job_id}: study {spec.name} ({meta[TAG_SPEC_HASH]}), executor "
        f"{spec.search.executor}", highlight=False, soft_wrap=True)
    say(code_line, highlight=False, soft_wrap=True, markup=False)
    say(f"runs: MLflow {tracking_uri} ({source}), experiment {meta[JOB_EXPERIMENT]}; "
        f"from here: sweep results {meta[JOB_EXPERIMENT]} --tracking-uri {tracking_uri}",
        highlight=False, soft_wrap=True, markup=False)
    say(f"study folder on the cluster: {meta[JOB_OUT]}; follow: sweep logs {job_id} "
        f"--follow; stop: sweep stop {job_id}", highlight=False, soft_wrap=True, markup=False)
    return job_id


def _submit_once(client: Any, request: Any, job_id: str, study: str) -> None:
    """Submit ``request`` as job ``job_id``; a job of that id already there: the study runs.

    Raises:
        ClusterError: Another submit of the study took ``job_id`` first.
        RuntimeError: The Jobs API refused the job for another reason.
    """
    from sweep.cluster import already_runs

    try:
        client.submit_job(entrypoint=request.entrypoint, runtime_env=request.runtime_env,
                          metadata=request.metadata, submission_id=job_id)
    except RuntimeError as exc:
        if f"submission_id {job_id} already exists" not in str(exc):
            raise
        try:
            state = str(client.get_job_status(job_id).value)
        except RuntimeError:
            state = "submitted at the same time"
        raise already_runs(study, job_id, state) from None


def _print_jobs(client: Any, as_json: bool) -> None:
    from rich.table import Table

    from sweep.cluster import describe, study_jobs

    rows = [describe(j) for j in study_jobs(client)]
    if as_json:
        print(json.dumps(rows))
        return
    if not rows:
        common.console.print(f"no studies submitted to {client.get_address()}", highlight=False)
        return
    table = Table(title=f"studies on {client.get_address()}")
    for column in ("job", "state", "study", "executor", "start", "duration"):
        table.add_column(column, no_wrap=True)
    for r in rows:
        table.add_row(r["job"], r["state"], r["study"] or "-", r["executor"] or "-",
                      _when(r["start"], short=True), _duration(r["duration_s"]))
    common.console.print(table, width=max(common.console.width, 110))  # ids stay whole


@app.command()
def status(
    job: str = typer.Argument(None, metavar="[JOB]", help="A job id (default: all studies)."),
    address: str = typer.Option(None, help=_ADDRESS_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """One study job's state, or a table of this service's jobs on the cluster.

    Exits 2 for an unknown job id or a job that is not a study of this service.
    """
    if job is not None:
        _check_job_id(job)
    client = _connect(address)
    if job is None:
        _print_jobs(client, as_json)
        return
    from sweep.cluster import describe

    row = describe(_study_job(client, job))
    if as_json:
        print(json.dumps(row))
        return
    say = common.console.print
    say(f"job {row['job']}: {row['state']}, study {row['study']} ({row['spec_hash']}), "
        f"executor {row['executor']}, started {_when(row['start'])}, "
        f"{_duration(row['duration_s'])}", highlight=False, soft_wrap=True)
    say(f"runs: MLflow {row['tracking_uri']}, experiment {row['experiment']}; study folder "
        f"on the cluster: {row['out']}; code: {row['code']}", highlight=False, soft_wrap=True,
        markup=False)
    if row["message"]:
        last = row["message"].strip().splitlines()[0]
        say(f"ray: {last}", highlight=False, soft_wrap=True, markup=False)


@app.command()
def jobs(
    address: str = typer.Option(None, help=_ADDRESS_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON records."),
) -> None:
    """This service's study jobs on the cluster: state, study, start, duration."""
    _print_jobs(_connect(address), as_json)


@app.command()
def logs(
    job: str = typer.Argument(..., metavar="JOB", help="A job id."),
    address: str = typer.Option(None, help=_ADDRESS_HELP),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing the log as it "
                                "grows, until the job ends."),
) -> None:
    """Print a study job's log (its ``sweep run`` output on the cluster).

    Exits 2 for an unknown job id or a job that is not a study of this service.
    """
    _check_job_id(job)
    client = _connect(address)
    _study_job(client, job)
    if not follow:
        _write(client.get_job_logs(job))
        return
    from sweep.cluster import follow_logs

    try:
        follow_logs(client, job, _write)
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None
    except (RuntimeError, OSError) as exc:
        common.stopped(f"lost the log stream of job {job} ({exc})", 1)


@app.command()
def stop(
    job: str = typer.Argument(..., metavar="JOB", help="A job id."),
    address: str = typer.Option(None, help=_ADDRESS_HELP),
) -> None:
    """Stop a study job: its running trials end INTERRUPTED, its parent run KILLED.

    Ray sends the job's driver SIGTERM and, if it has not ended after a grace period, SIGKILL;
    this command waits as long. ``sweep submit`` of the same spec resumes the study. Exits 0
    once the job has ended (also when it had ended before), 1 when it has not ended after the
    wait, 2 for an unknown job id or another tool's job.
    """
    _check_job_id(job)
    client = _connect(address)
    details = _study_job(client, job)
    from sweep.cluster import STOP_GRACE_S, describe, ended
    from sweep.cluster import stop as stop_job

    study = (details.metadata or {}).get(JOB_STUDY)
    if ended(details):
        common.console.print(f"job {job} (study {study}) had already ended: "
                             f"{details.status.value}", highlight=False)
        return
    start = time.monotonic()
    details = stop_job(client, job, timeout_s=STOP_GRACE_S + 30)
    waited = time.monotonic() - start
    if not ended(details):
        common.err_console.print(f"job {job} (study {study}) has not ended {waited:.0f} s "
                                 f"after the stop request ({details.status.value})",
                                 highlight=False, markup=False)
        raise typer.Exit(code=1)
    row = describe(details)
    driver = _driver_line(client, job, "stopped:")
    common.console.print(f"job {job} (study {study}): {row['state']} {waited:.1f} s after the "
                         f"stop request; sweep submit the same spec to resume it",
                         highlight=False, soft_wrap=True)
    if driver:
        common.console.print(f"driver: {driver}", highlight=False, soft_wrap=True, markup=False)
