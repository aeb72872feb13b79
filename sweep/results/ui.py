"""The MLflow UI for a study's store: ``mlflow server`` on 127.0.0.1, stopped on any stop signal."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from sweep.schema import UI_MODEL_TRAINING

#: The signals that stop a server this service runs in the foreground: Ctrl-C, ``kill`` or
#: ``timeout`` (SIGTERM) and a closed terminal or SSH session (SIGHUP).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def runs_view_url(base_url: str, experiment_id: str, query: str = UI_MODEL_TRAINING) -> str:
    """The MLflow UI's runs table of an experiment, with ``query`` after it.

    MLflow 3 opens ``#/experiments/<id>`` on its GenAI overview (traces, no runs); the runs
    table needs ``workflowType=machine_learning`` (checked in a fresh Chromium profile on
    MLflow 3.17). ``query``: `sweep.tracking.view.landing_query`'s, a study's trials.
    """
    base = base_url.rstrip("/")
    return f"{base}/#/experiments/{experiment_id}/runs?{query}"


class Stopped(BaseException):
    """A stop signal arrived (`stop_signals`); ``name`` is its name, e.g. ``SIGTERM``.

    A `BaseException`, as `KeyboardInterrupt` is: the signal may land while the server's main
    thread handles a request, where ``socketserver`` catches every `Exception` (and prints
    it) and serves on.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Raise `Stopped` in the main thread at SIGINT, SIGTERM or SIGHUP inside the block.

    Python turns only SIGINT into an exception; a SIGTERM or SIGHUP would end the process at
    once, without the ``finally`` that stops a server's child processes. Signals after the
    first are ignored, so that a second one does not cut that stop short. The previous handlers
    come back on exit.
    """
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if not received:
            received.append(signum)
            raise Stopped(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: The ``mlflow.app`` entry point of `sweep.tracking.ui_app` (pyproject.toml).
UI_APP = "sweep-ui"


def ui_command(tracking_uri: str, *, host: str = "127.0.0.1", port: int = 5000,
               read_only: bool = False) -> list[str]:
    """The ``mlflow server`` command serving ``tracking_uri`` (one worker; local artifacts).

    With ``read_only``, a SQLite store is opened read-only
    (`sweep.tracking.stores.reading_uri`): the UI shows it, and an edit made there fails.
    """
    backend = tracking_uri
    if read_only:
        from sweep.tracking.stores import reading_uri

        backend = reading_uri(tracking_uri)
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend]
    cmd += ["--host", host, "--port", str(port), "--workers", "1", "--app-name", UI_APP]
    if tracking_uri.startswith("sqlite:///"):
        store_dir = Path(tracking_uri[len("sqlite:///") :]).resolve().parent
        cmd += ["--artifacts-destination", (store_dir / "mlartifacts").as_uri()]
    return cmd


#: MLflow's GenAI job runner (judges, trace roll-ups; ``mlflow.server.jobs``), a second process
#: importing all of MLflow beside the server, with workers of its own: nothing of a training
#: study uses it. Without it the server answers in about 60% of the time (11.7 s against 20.2 s
#: on a loaded 2-core machine); the issue measured 2 processes and 490 MB against 10 and 2.4 GB.
JOB_EXECUTION = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"


def ui_env(job_execution: bool = False) -> dict[str, str]:
    """The environment of ``mlflow server``: this process's, with `JOB_EXECUTION` set.

    Off unless ``job_execution``; a value already in the environment is kept.
    """
    return {JOB_EXECUTION: "true" if job_execution else "false", **os.environ}


def start_ui(
    tracking_uri: str,
    *,
    host: str = "127.0.0.1",
    port: int = 5000,
    timeout_s: float = 90.0,
    log_path: Path | None = None,
    read_only: bool = False,
    job_execution: bool = False,
) -> subprocess.Popen:
    """Start the MLflow UI for a store in its own process group and wait until it answers.

    MLflow's job runner stays off unless ``job_execution`` (`JOB_EXECUTION`).

    Args:
        tracking_uri: Store to serve.
        host: Interface to bind; keep 127.0.0.1 unless the network is trusted.
        port: TCP port.
        timeout_s: Seconds to wait for ``GET /health``.
        log_path: File for the server's output (default: discarded).
        read_only: Serve a SQLite store read-only (`ui_command`).
        job_execution: Start MLflow's GenAI job runner too (`ui_env`).

    Returns:
        The server process; stop it with `stop_ui`.

    Raises:
        RuntimeError: If the server exits or does not answer within ``timeout_s``.
    """
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        ui_command(tracking_uri, host=host, port=port, read_only=read_only),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=ui_env(job_execution),
    )
    url = f"http://{host}:{port}/health"
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with status {proc.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return proc
            except (urllib.error.URLError, OSError):
                time.sleep(0.25)
    except BaseException:  # a stop signal or Ctrl-C while it starts: no server left behind
        stop_ui(proc)
        raise
    stop_ui(proc)
    raise RuntimeError(f"mlflow server did not answer on {url} within {timeout_s:.0f} s")


def stop_ui(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Stop a server from `start_ui` and its workers (its process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue
