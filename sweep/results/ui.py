"""The MLflow UI for a study's store: ``mlflow server`` on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def ui_command(tracking_uri: str, *, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """The ``mlflow server`` command serving ``tracking_uri`` (one worker; local artifacts)."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri]
    cmd += ["--host", host, "--port", str(port), "--workers", "1"]
    if tracking_uri.startswith("sqlite:///"):
        store_dir = Path(tracking_uri[len("sqlite:///") :]).resolve().parent
        cmd += ["--artifacts-destination", (store_dir / "mlartifacts").as_uri()]
    return cmd


def start_ui(
    tracking_uri: str,
    *,
    host: str = "127.0.0.1",
    port: int = 5000,
    timeout_s: float = 90.0,
    log_path: Path | None = None,
) -> subprocess.Popen:
    """Start the MLflow UI for a store in its own process group and wait until it answers.

    Args:
        tracking_uri: Store to serve.
        host: Interface to bind; keep 127.0.0.1 unless the network is trusted.
        port: TCP port.
        timeout_s: Seconds to wait for ``GET /health``.
        log_path: File for the server's output (default: discarded).

    Returns:
        The server process; stop it with `stop_ui`.

    Raises:
        RuntimeError: If the server exits or does not answer within ``timeout_s``.
    """
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        ui_command(tracking_uri, host=host, port=port),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://{host}:{port}/health"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return proc
        except (urllib.error.URLError, OSError):
            time.sleep(0.25)
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
