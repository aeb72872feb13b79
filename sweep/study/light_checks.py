"""The checks of a study's tracking URI and vocabulary that need neither the corpus nor MLflow.

Part of `sweep.study.preflight.check_inputs`: the tracking URI's scheme and, for a server,
that its port accepts a connection (`check_tracking_uri`); that the space's largest
``model.vocab_size`` holds the corpus's token ids as its URI declares them (`check_vocab`).
`PreflightError` is what every check of a study's inputs raises.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
import urllib.request

from sweep.errors import InputError
from sweep.spec import StudySpec
from sweep.spec.values import candidates, section_defaults

__all__ = ["CONNECT_TIMEOUT_S", "TRACKING_SCHEMES", "PreflightError", "check_tracking_uri",
           "check_vocab", "largest_vocab"]

#: Schemes of an MLflow tracking URI that a study accepts: a tracking server, a database
#: (``postgresql+psycopg2`` and other drivers included) or a local folder (``file``, or a path
#: with no scheme).
TRACKING_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "file",
                    "databricks")


class PreflightError(InputError, ValueError):
    """The study cannot start or could never train a trial; found before anything is written."""


def check_tracking_uri(spec: StudySpec) -> None:
    """Refuse a tracking URI that no study could use.

    The URI (``tracking.uri``, else ``MLFLOW_TRACKING_URI``) has a scheme of
    `TRACKING_SCHEMES`; an ``http(s)`` one accepts a connection (`_check_listening`).

    Raises:
        PreflightError: Naming the URI's source and the rule.
    """
    uri = spec.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return  # the study's own SQLite store
    source = spec.tracking_uri_source()
    try:
        scheme = urllib.parse.urlsplit(uri).scheme.lower()
    except ValueError as exc:
        raise PreflightError(f"{source}: not a valid URI ({exc})") from None
    if scheme in ("http", "https"):
        _check_listening(source, uri)
    # A one-letter scheme is a Windows drive (C:\...), which MLflow reads as a folder.
    if len(scheme) <= 1 or scheme.split("+", 1)[0] in TRACKING_SCHEMES:
        return
    raise PreflightError(f"{source}: scheme {scheme!r} is not an MLflow tracking store this "
                         f"service opens; use one of {', '.join(TRACKING_SCHEMES)}, or a folder "
                         "path")


#: Seconds `_check_listening` waits for a tracking server's port to accept a connection.
CONNECT_TIMEOUT_S = 3.0


def _check_listening(source: str, uri: str) -> None:
    """Refuse an ``http(s)://`` tracking URI whose host and port accept no connection.

    One TCP connection, `CONNECT_TIMEOUT_S` at most, without MLflow: what ``sweep run`` would
    find only after loading it (`sweep.tracking.check_reachable`, which also asks the server's
    ``/health``, runs later). A host reached through a proxy (``HTTP(S)_PROXY``) is left to
    that check. The message shows the URL without its user and password.
    """
    parts = urllib.parse.urlsplit(uri)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return  # a port out of range: check_reachable names it
    host = parts.hostname
    if not host or (parts.scheme in urllib.request.getproxies()
                    and not urllib.request.proxy_bypass(host)):
        return
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
    netloc = parts.netloc.rsplit("@", 1)[-1]
    shown = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    raise PreflightError(f"{source} {shown}: no MLflow server answers there (nothing accepts a "
                         f"connection at {netloc}: {reason}); start it (mlflow server --host "
                         "127.0.0.1 --port PORT) or fix the address")


def largest_vocab(spec: StudySpec) -> int | None:
    """The largest ``model.vocab_size`` the space can take, from the spec alone.

    ``model.vocab_size`` (a value, a choice's options or a range's high end), else
    ``data.vocab_size``, else the preset's or `sweep_models.ModelConfig`'s default, as
    `sweep.space.sampling.build_configs` resolves it.
    """
    value = spec.model.get("vocab_size")
    if value is None:
        value = spec.data.vocab_size or section_defaults(spec, "model")["vocab_size"]
    ints = [v for v in candidates(value) if isinstance(v, int)]
    return max(ints) if ints else None


def check_vocab(spec: StudySpec, corpus_vocab: int, largest: int | None) -> None:
    """Refuse a space whose largest ``model.vocab_size`` is below the corpus's vocab size.

    Raises:
        PreflightError: Naming ``model.vocab_size``, the corpus and its number of token ids.
    """
    if largest is not None and largest < corpus_vocab:
        raise PreflightError(f"model.vocab_size={largest} is smaller than the vocabulary of "
                             f"{spec.data.uri!r} ({corpus_vocab} token ids); give "
                             f"model.vocab_size >= {corpus_vocab}")
