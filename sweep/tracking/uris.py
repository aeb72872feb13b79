"""MLflow tracking URIs.

The study's default SQLite store, absolute paths for workers elsewhere, passwords hidden in
messages (`sweep.redact.shown_uri`, re-exported), credentials moved out of a URI
(`split_credentials`), and a fast check that a server answers. Opening a store:
`sweep.tracking.stores`.
"""

from __future__ import annotations

import base64
import http.client
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from sweep.errors import InputError
from sweep.folder import StudyFolder
from sweep.redact import shown_uri


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


#: MLflow's basic-auth environment variables (``mlflow.utils.credentials``).
CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def split_credentials(tracking_uri: str) -> tuple[str, dict[str, str]]:
    """An ``http(s)`` URI's userinfo moved out of it, for processes that store what they get.

    MLflow sends ``http://user:password@host`` as HTTP basic auth, and sends the same from
    ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` when the URI has none, so the
    URI without userinfo plus those variables reach the server alike.

    Returns:
        The URI without userinfo, and the two variables (percent-decoded) to set; the URI
        unchanged and ``{}`` when it has no password or is not ``http(s)``.
    """
    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https") or parts.password is None:
        return tracking_uri, {}
    netloc = parts.netloc.rsplit("@", 1)[-1]
    creds = dict(zip(CREDENTIAL_ENV, (urllib.parse.unquote(parts.username or ""),
                                      urllib.parse.unquote(parts.password)), strict=True))
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), creds


class UnreachableStoreError(InputError, ValueError):
    """An MLflow tracking server does not answer."""


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
