"""Infrastructure faults: errors of the tracking store, the storage or the file system.

They are not a trial's fault, so they never count as a failed trial: the trial they stop is
``INTERRUPTED`` and the study pauses, retries, or stops with one line and resumes later
(`sweep.study.resume`). `infrastructure_fault` tells them from a trial's own errors by the
exception and its causes: a full, read-only or failing disk (``ENOSPC``, ``EDQUOT``,
``EROFS``, ``EIO``), a SQLite store that cannot write, an MLflow server or a database that
does not answer.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

__all__ = ["BACK_POLL_S", "InfrastructureError", "infrastructure_fault", "wait_for_server"]

#: Seconds between checks, during a pause after a fault, of whether the tracking server is back.
BACK_POLL_S = 0.5

_DISK_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                errno.EROFS: "the file system is read-only", errno.EIO: "the disk failed (I/O)"}
# Phrases of errors that a store or server raises when it cannot be reached or written.
_UNREACHABLE = ("max retries exceeded", "connection refused", "failed to establish a new "
                "connection", "connection aborted", "connection reset", "read timed out",
                "name or service not known", "temporary failure in name resolution",
                "server closed the connection", "could not connect to server",
                "remote end closed connection")
_SQLITE_DISK = ("database or disk is full", "disk i/o error", "readonly database",
                "unable to open database file")


class _RaisedAnyway(logging.Filter):
    """Drops MLflow's ERROR log, with traceback, of a SQLAlchemy error it then raises anyway.

    MLflow's SQLite store logs every ``OperationalError`` (a full disk: one per write tried)
    before raising it as an ``MlflowException``; the service reports that exception itself, as
    one line (`infrastructure_fault`), so the log would only repeat it as tracebacks.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("SQLAlchemy database error")


logging.getLogger("mlflow.store.db.utils").addFilter(_RaisedAnyway())


class InfrastructureError(BaseException):
    """A trial stopped by an infrastructure fault (not its own fault).

    A `BaseException`, like ``KeyboardInterrupt``, so that handlers of a trial's own errors
    (Optuna's ``catch``, the Ray trainable's) do not record it as a failed trial.

    Attributes:
        what: What failed, in words (e.g. ``the MLflow tracking server``).
        cause: The original exception.
    """

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(f"{what}: {type(cause).__name__}: {cause}")
        self.what, self.cause = what, cause

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled whole (a Ray trial's error reaches the driver so), not as its message.
        return type(self), (self.what, self.cause)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from, each once."""
    seen = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def infrastructure_fault(exc: BaseException) -> str | None:
    """What failed, if ``exc`` (or an exception it was raised from) is an infrastructure fault.

    Returns:
        A short description (``the disk is full (/runs/x/mlflow.db)``, ``the MLflow tracking
        server does not answer``), or None for a trial's own error.
    """
    for e in _chain(exc):
        if isinstance(e, InfrastructureError):
            return e.what
        if isinstance(e, OSError) and e.errno in _DISK_ERRNOS:
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            return f"{_DISK_ERRNOS[e.errno]}{where}"
        text = str(e).lower()
        kind = type(e).__module__ + "." + type(e).__name__
        if any(p in text for p in _SQLITE_DISK) and ("sqlite" in text or "sqlalchemy" in kind
                                                     or "mlflow" in kind):
            return "the SQLite store cannot write (disk full, read-only or failing)"
        if isinstance(e, (ConnectionError, TimeoutError)) or any(p in text for p in _UNREACHABLE):
            if "mlflow" in kind or "api request" in text or "/api/2.0/mlflow" in text:
                return "the MLflow tracking server does not answer"
            if "sqlalchemy" in kind or "psycopg" in kind:
                return "the storage database does not answer"
            return "a server the study needs does not answer"
    return None


def _answers(host: str, port: int) -> bool:
    """Whether a TCP connection to ``host:port`` is accepted within `BACK_POLL_S`."""
    try:
        with socket.create_connection((host, port), timeout=BACK_POLL_S):
            return True
    except OSError:
        return False


def wait_for_server(pause_s: float, tracking_uri: str) -> None:
    """Sleep ``pause_s`` seconds after a fault, ending early when an HTTP tracking server is back.

    Every `BACK_POLL_S` the server's port is tried; the pause ends as soon as a server that did
    not answer during it answers again (the retry that follows is the real test). A server that
    answered all along (the fault was elsewhere) or a store that is not a server (a SQLite file,
    a full disk) waits the whole pause, so the retries keep their spacing.
    """
    parts = urlsplit(tracking_uri)
    end = time.monotonic() + pause_s
    if parts.scheme not in ("http", "https") or not parts.hostname:
        time.sleep(pause_s)
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    was_down = False
    while time.monotonic() < end:
        up = _answers(parts.hostname, port)
        if up and was_down:
            return
        was_down = was_down or not up
        time.sleep(min(BACK_POLL_S, max(0.0, end - time.monotonic())))
