"""Connecting to a Ray cluster's Jobs API (the dashboard's HTTP server, ``http://HEAD:8265``).

Each way a connection can fail is told apart before a job is touched, in one message that
names ``--address`` or the token's source: an address that is not an ``http(s)://`` URL, no
server answering (within `CONNECT_TIMEOUT_S`), a server that is not a Ray dashboard, a
cluster with token authentication and no token here, a token the cluster refuses. The
dashboard's ``/api/authentication_mode`` answers without a token and says whether one is
needed; ``/api/version`` needs one, so it tells a wrong token from a right one.

Ray imports only inside `connect`, after the address and token have been checked.
"""

from __future__ import annotations

import contextlib
import logging
import os
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sweep.cluster.auth import ClusterToken, TokenError, default_token_path, find_token
from sweep.errors import InputError

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

__all__ = ["CONNECT_TIMEOUT_S", "ClusterError", "check_address", "connect", "resolve_address"]

#: Seconds to wait for the dashboard to answer one request before calling it unreachable.
CONNECT_TIMEOUT_S = 5.0


class ClusterError(InputError, ValueError):
    """A cluster that cannot be reached or used as asked, or a job that is not this service's."""


def resolve_address(address: str | None) -> tuple[str, str]:
    """The Jobs API address and where it came from: ``--address``, else ``RAY_API_SERVER_ADDRESS``.

    Raises:
        ClusterError: Neither is given.
    """
    if address:
        return address, "--address"
    env = os.environ.get("RAY_API_SERVER_ADDRESS")
    if env:
        return env, "RAY_API_SERVER_ADDRESS"
    raise ClusterError("--address: give the Ray dashboard's address, e.g. --address "
                       "http://HEAD:8265 (or set RAY_API_SERVER_ADDRESS)")


def check_address(address: str, source: str = "--address") -> str:
    """``address`` as the Jobs API's base URL (no trailing slash), checked without a request.

    Raises:
        ClusterError: Not an ``http://`` or ``https://`` URL with a host (a GCS address such as
            ``HEAD:6379`` or ``auto`` is refused: jobs go to the dashboard's HTTP port).
    """
    try:
        parts = urllib.parse.urlsplit(address)
        port = parts.port
    except ValueError as exc:
        raise ClusterError(f"{source} {address}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ClusterError(f"{source} {address}: give the Ray dashboard's HTTP address, "
                           "http://HEAD:8265 (Ray's Jobs API), not a GCS address or 'auto'")
    if parts.path.strip("/") or parts.query or parts.fragment or parts.username:
        raise ClusterError(f"{source} {address}: give only scheme, host and port, e.g. "
                           "http://HEAD:8265")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def _get(url: str, headers: dict[str, str], source: str, address: str) -> Any:
    import requests

    try:
        return requests.get(url, headers=headers, timeout=CONNECT_TIMEOUT_S)
    except requests.exceptions.RequestException as exc:
        reason = type(exc).__name__
        if isinstance(exc, requests.exceptions.ConnectionError) and exc.args:
            inner = exc.args[0]
            reason = str(getattr(inner, "reason", inner)).split(": ", 1)[-1]
        raise ClusterError(f"{source} {address}: no Ray dashboard answers there ({reason}); "
                           "start the cluster (ray start --head) or fix the address") from None


def _auth_mode(base: str, source: str, address: str) -> str:
    """The cluster's authentication mode (``token`` or ``disabled``), asked without a token."""
    response = _get(f"{base}/api/authentication_mode", {}, source, address)
    try:
        mode = response.json()["authentication_mode"] if response.status_code == 200 else None
    except (ValueError, KeyError, TypeError):
        mode = None
    if not isinstance(mode, str):
        raise ClusterError(f"{source} {address}: the server there is not a Ray dashboard of Ray "
                           f">= 2.52 (GET /api/authentication_mode answered "
                           f"{response.status_code}); give the dashboard's address, "
                           "http://HEAD:8265")
    return mode


def _token_for(mode: str, source: str, address: str) -> ClusterToken | None:
    try:
        token = find_token()
    except TokenError as exc:
        raise ClusterError(str(exc)) from None
    if mode == "token" and token is None:
        raise ClusterError(f"{source} {address}: the cluster uses token authentication "
                           "(RAY_AUTH_MODE=token) and no token was found here; set "
                           "RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH to the token's file, or put "
                           f"it in {default_token_path()} (ray get-auth-token on the head "
                           "prints it)")
    return token if mode == "token" else None


@contextlib.contextmanager
def _address_wins(base: str) -> Iterator[None]:
    """``base`` as ``RAY_API_SERVER_ADDRESS`` while a client is made.

    `ray.job_submission.JobSubmissionClient` takes that variable, else ``RAY_ADDRESS``, over
    the address it is given (as ``ray.init`` does); an explicit ``--address`` must win. Where
    neither is set the environment is left alone: another thread may be reading it.
    """
    before = os.environ.get("RAY_API_SERVER_ADDRESS")
    if before in (None, base) and os.environ.get("RAY_ADDRESS") is None:
        yield
        return
    os.environ["RAY_API_SERVER_ADDRESS"] = base
    try:
        yield
    finally:
        if before is None:
            del os.environ["RAY_API_SERVER_ADDRESS"]
        else:
            os.environ["RAY_API_SERVER_ADDRESS"] = before


def connect(address: str | None) -> JobSubmissionClient:
    """A Jobs API client for the cluster at ``address`` (default ``RAY_API_SERVER_ADDRESS``).

    Sends the token `find_token` finds (``Authorization: Bearer``) when the cluster asks for
    one. At most three requests of `CONNECT_TIMEOUT_S` each before the client exists.

    Raises:
        ClusterError: Naming ``--address`` (or ``RAY_API_SERVER_ADDRESS``) or the token's
            source: a malformed address, nothing answering, not a Ray dashboard, no token, a
            token the cluster refuses.
    """
    address, source = resolve_address(address)
    base = check_address(address, source)
    mode = _auth_mode(base, source, address)
    token = _token_for(mode, source, address)
    headers = token.headers() if token is not None else {}
    response = _get(f"{base}/api/version", headers, source, address)
    if response.status_code in (401, 403):
        raise ClusterError(f"{source} {address}: the cluster refused the token from "
                           f"{token.source if token else 'nowhere'} (HTTP "
                           f"{response.status_code}); use the token the cluster was started "
                           "with (ray get-auth-token on the head prints it)")
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    from sweep.adapters.ray import CHATTY_LOGGERS

    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)

    try:
        with _address_wins(base):
            return JobSubmissionClient(base, headers=headers)
    except AuthenticationError:
        raise ClusterError(f"{source} {address}: the cluster refused the token from "
                           f"{token.source if token else 'nowhere'}") from None
    except (ConnectionError, RuntimeError) as exc:
        raise ClusterError(f"{source} {address}: the Jobs API does not answer ({exc})") from None
