"""MLflow tracking URIs.

The study's default SQLite store, absolute paths for workers elsewhere, passwords hidden in
messages, and a fast check that a server answers.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from mlflow import MlflowClient

from sweep.errors import InputError
from sweep.folder import StudyFolder


def default_tracking_uri(out_dir: str | Path) -> str:
    """The default store of a study: `sweep.folder.StudyFolder.tracking_uri` of ``out_dir``."""
    return StudyFolder(Path(out_dir)).tracking_uri()


def sqlite_path(tracking_uri: str) -> Path | None:
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri[len("sqlite:///") :])


def absolute_uri(tracking_uri: str) -> str:
    """A relative ``sqlite:///runs/x/mlflow.db`` made absolute; other URIs unchanged.

    Workers may run in another directory (Ray Tune moves trials into their own folders).
    """
    path = sqlite_path(tracking_uri)
    return f"sqlite:///{path.resolve()}" if path is not None else tracking_uri


class UnreachableStoreError(InputError, ValueError):
    """An MLflow tracking server does not answer."""


def shown_uri(uri: str) -> str:
    """A tracking URI or database URL for messages and stored specs, its passwords as ``***``.

    Masks the userinfo's password (``scheme://user:***@host``) and a ``password`` query
    parameter (libpq's ``?password=...``); a URL too malformed to parse shows its scheme only.
    """
    try:
        parts = urllib.parse.urlsplit(uri)
        password = parts.password
    except ValueError:
        return f"{uri.split('://', 1)[0]}://***"
    pairs = parts.query.split("&") if parts.query else []
    if password is None and not any(p.split("=", 1)[0] == "password" for p in pairs):
        return uri  # as written (urlunsplit would turn sqlite:/// into sqlite:/)
    netloc = parts.netloc
    if password is not None:
        netloc = netloc.replace(f":{password}@", ":***@", 1)
    query = "&".join("password=***" if p.split("=", 1)[0] == "password" else p for p in pairs)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def check_reachable(tracking_uri: str, source: str = "tracking URI", *,
                    timeout_s: float = 10.0) -> None:
    """Fail fast when an ``http(s)://`` tracking URI names no MLflow server.

    MLflow's REST client retries a refused or timed-out request with backoff for minutes
    (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``) before it raises, so a mistyped or stopped server
    would look like a hung study. One GET of the server's ``/health`` endpoint with a
    ``timeout_s`` timeout tells first: an MLflow server answers 200, and 401/403 (a proxy that
    wants credentials other than the URL's) also count as reachable; no answer, or any other
    status (another web server, a wrong path prefix), is refused. Credentials in the URL
    (``http://user:password@host``) are sent as HTTP basic auth, as MLflow does, and never
    printed. Other schemes (SQLite, files) are not checked here.

    Args:
        tracking_uri: The MLflow tracking URI.
        source: Where the URI came from, for the message (``tracking.uri``,
            ``MLFLOW_TRACKING_URI``, ``--tracking-uri``).
        timeout_s: Seconds to wait for the connection and the answer.

    Raises:
        UnreachableStoreError: Naming ``source``, the URI (password hidden) and the reason.
    """
    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https"):
        return
    shown = shown_uri(tracking_uri)
    try:
        parts.port  # noqa: B018 (raises ValueError for a port out of range or not a number)
    except ValueError as exc:
        raise UnreachableStoreError(f"{source} {shown}: not a valid URL ({exc})") from None
    if not parts.hostname:
        raise UnreachableStoreError(f"{source} {shown}: not a valid URL (no host)")
    netloc = parts.netloc.rsplit("@", 1)[-1]
    url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health",
                                   "", ""))
    request = urllib.request.Request(url)
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return
        raise UnreachableStoreError(
            f"{source} {shown}: the server there is not an MLflow tracking server (GET "
            f"{parts.path.rstrip('/')}/health answered {exc.code} {exc.reason}); check the "
            "address and any path prefix") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UnreachableStoreError(
            f"{source} {shown}: no MLflow server answers there ({reason}); start it "
            "(mlflow server --host 127.0.0.1 --port PORT) or fix the address") from None


@contextlib.contextmanager
def store_lock(db: Path) -> Iterator[None]:
    """Hold an exclusive lock for creating or migrating the SQLite store ``db``.

    ``fcntl.flock`` on the sidecar file ``<db>.lock``, which this creates next to the database
    (and leaves there: removing a lock file others may be waiting on would let two processes
    hold it). Blocks until the lock is free. Where ``fcntl`` does not exist (Windows) it holds
    nothing.

    Raises:
        OSError: The lock file cannot be created (e.g. a read-only folder).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover (Windows)
        yield
        return
    with open(f"{db}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class StoreSchemaError(InputError, RuntimeError):
    """An MLflow store whose schema version is not the one this MLflow writes."""


def _open_store(tracking_uri: str) -> None:
    """Open the store once (MLflow creates a new one's tables), its schema version checked.

    Raises:
        StoreSchemaError: MLflow refused the store's schema version (another MLflow wrote it).
    """
    from mlflow.exceptions import MlflowException

    try:
        MlflowClient(tracking_uri).search_experiments(max_results=1)
    except MlflowException as exc:
        if "database schema" not in str(exc):
            raise
        import mlflow

        found = str(exc).split("(", 1)[-1].split(")", 1)[0]
        raise StoreSchemaError(
            f"tracking store {shown_uri(tracking_uri)}: its MLflow schema is not the one "
            f"MLflow {mlflow.__version__} here writes ({found}); another MLflow version wrote "
            "it and the store is left as it is: use that version here (a newer schema), or "
            f"back the store up and run `mlflow db upgrade {shown_uri(tracking_uri)}` (an "
            "older one), or give another --out or tracking.uri") from None


def ensure_store(tracking_uri: str) -> None:
    """Create and migrate the tracking store once, before any worker opens it.

    MLflow creates the tables of a fresh database when a client first opens it; several
    processes doing so at once race in the schema migration ("table ... already exists",
    alembic ``CommandError``). For a SQLite store the first open happens under `store_lock`,
    so one process creates and migrates it while the others wait and then find it ready; call
    this before anything else in the process opens the store (the driver does, in
    `StudyTracker.start`). For other stores, a connectivity check only.

    Raises:
        mlflow.exceptions.MlflowException: If the store cannot be reached or migrated.
        StoreSchemaError: The store's schema version is another MLflow's.
        OSError: The folder of a SQLite store or its lock file cannot be created.
    """
    path = sqlite_path(tracking_uri)
    if path is None:
        _open_store(tracking_uri)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with store_lock(path):
        _open_store(tracking_uri)
