"""The one redaction: secrets shown as ``***`` in every line, JSON field, tag and file written.

A secret is a password in a URI's userinfo (``http://user:secret@host``) or its ``password``
query parameter (libpq's ``?password=...``), and the value of an environment variable that
holds one (`SECRET_ENV`: MLflow's basic-auth password and token, the Ray cluster's token).
`shown_uri` masks a URI for display; `redact` masks free text (an exception's message, a
command line, a note), by URI pattern and by every secret `remember` was given or the
environment holds, so a password that reached a message in another form (percent-decoded,
quoted by a library) is masked too. Only the standard library: ``sweep --help`` and the
cluster commands import it without MLflow.
"""

from __future__ import annotations

import os
import re
import urllib.parse

__all__ = ["MASK", "SECRET_ENV", "redact", "remember", "shown_uri"]

#: What a secret is shown as.
MASK = "***"
#: Environment variables whose values are secrets (MLflow's basic auth, the Ray Jobs token).
SECRET_ENV = ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "RAY_AUTH_TOKEN")
# The environment variables whose URIs may carry a password.
_URI_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
# scheme://user:password@ in free text; the password stops at the last '@' before the host.
_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)[^\s/]*@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&\s#'\"]*")
_remembered: set[str] = set()


def _passwords(uri: str) -> set[str]:
    """The passwords in ``uri``, as written and percent-decoded; none when it has none."""
    try:
        parts = urllib.parse.urlsplit(uri)
        found = {parts.password} if parts.password else set()
    except ValueError:
        return set()
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        if key == "password" and value:
            found.add(value)
    return found | {urllib.parse.unquote(p) for p in found}


def remember(uri: str | None) -> None:
    """Mask the passwords of ``uri`` wherever `redact` meets them from now on (this process)."""
    if uri:
        _remembered.update(p for p in _passwords(uri) if p)


def _secrets() -> set[str]:
    found = set(_remembered)
    found.update(v for v in (os.environ.get(name) for name in SECRET_ENV) if v)
    for name in _URI_ENV:
        found.update(_passwords(os.environ.get(name, "")))
    return found


def redact(text: str) -> str:
    """``text`` with every secret as `MASK`: URI passwords by pattern, and each known secret.

    Known secrets are those `remember` was given and those of the environment (`SECRET_ENV`,
    and the passwords in ``MLFLOW_TRACKING_URI``); the longest are masked first.
    """
    text = _USERINFO.sub(rf"\1{MASK}@", text)
    text = _QUERY_PASSWORD.sub(rf"\1{MASK}", text)
    for secret in sorted(_secrets(), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def shown_uri(uri: str) -> str:
    """A tracking URI or database URL for messages and stored specs, its passwords as ``***``.

    Masks the userinfo's password (``scheme://user:***@host``) and a ``password`` query
    parameter (libpq's ``?password=...``); a URL too malformed to parse shows its scheme only.
    """
    try:
        parts = urllib.parse.urlsplit(uri)
        password = parts.password
    except ValueError:
        return f"{uri.split('://', 1)[0]}://{MASK}"
    pairs = parts.query.split("&") if parts.query else []
    if password is None and not any(p.split("=", 1)[0] == "password" for p in pairs):
        return uri  # as written (urlunsplit would turn sqlite:/// into sqlite:/)
    netloc = parts.netloc
    if password is not None:
        netloc = netloc.replace(f":{password}@", f":{MASK}@", 1)
    query = "&".join(f"password={MASK}" if p.split("=", 1)[0] == "password" else p
                     for p in pairs)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))
