"""`sweep dashboard`: optuna-dashboard over a study's Optuna storage, on 127.0.0.1.

Where the storage is comes from the study's folder: the spec its parent run stored
(``search.storage``: an RDB URL, a journal file, or none for ``<out>/optuna.journal``), or,
where the folder holds no MLflow store (a study tracked on a server), the journal file in it.
The dashboard reads the storage only (`sweep.results.readonly`) unless writes are asked for;
it serves with the standard library's WSGI server in this process and stops on SIGINT,
SIGTERM or SIGHUP (`sweep.results.ui.stop_signals`).
"""

from __future__ import annotations

import socketserver
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from sweep.errors import InputError
from sweep.folder import StudyFolder
from sweep.results.ui import Stopped, stop_signals


class DashboardError(InputError, ValueError):
    """A study folder whose Optuna storage cannot be found or opened (bad input, exit 2)."""


@dataclass(frozen=True)
class StudyStorage:
    """Where a study's Optuna storage is.

    Attributes:
        url: A journal file path or an RDB URL (as Optuna takes it).
        study: The Optuna study's name (the spec's ``name``), if the folder says.
    """

    url: str
    study: str | None = None


def _stored_spec(study_dir: Path) -> dict[str, Any] | None:
    """The spec the latest parent run in ``<study_dir>/mlflow.db`` stored, or None."""
    from sweep.results.table import StudyNotFoundError, resolve_study
    from sweep.tracking import StoredSpecError, find_study, read_stored_spec

    try:
        uri, name = resolve_study(study_dir)
    except StudyNotFoundError:
        return None
    found = find_study(uri, name)
    if found is None:
        return None
    try:
        return read_stored_spec(uri, found[1])
    except StoredSpecError:  # no spec.yaml: the folder decides alone
        return None


def locate_storage(study_dir: str | Path, storage: str | None = None) -> StudyStorage:
    """Find the Optuna storage of the study whose output folder is ``study_dir``.

    Args:
        study_dir: The study's output folder (``runs/<name>``, or ``sweep run --out``).
        storage: A storage URL or journal path given by hand (``--storage``), which wins.

    Raises:
        DashboardError: ``study_dir`` is not a folder, its study ran on Ray (whose searcher
            keeps no Optuna storage), its spec's RDB URL had its password masked when it was
            stored, or no storage is found; naming ``STUDY_DIR`` or ``--storage``.
    """
    folder = Path(study_dir)
    if not folder.is_dir():
        raise DashboardError(f"STUDY_DIR {study_dir}: no such folder (pass a study's output "
                             "folder, e.g. runs/<name>)")
    spec = _stored_spec(folder) if StudyFolder(folder).mlflow_db.is_file() else None
    name = spec.get("name") if spec else None
    if storage is not None:
        if "://" not in storage and not Path(storage).is_file():
            raise DashboardError(f"--storage {storage}: no such journal file (an RDB storage "
                                 "is a URL, e.g. postgresql://user:pass@host/db)")
        return StudyStorage(storage, name)
    search = (spec or {}).get("search") or {}
    if search.get("executor") == "ray":
        raise DashboardError(f"STUDY_DIR {study_dir}: study {name} ran on Ray, whose searcher "
                             "keeps no Optuna storage; its trials are in MLflow (sweep ui "
                             f"{study_dir})")
    url = search.get("storage")
    if url and "://" in url:
        if "***" in url:
            raise DashboardError(f"STUDY_DIR {study_dir}: the study's storage {url} was stored "
                                 "with its password masked; pass the URL with --storage")
        return StudyStorage(url, name)
    journal = Path(url) if url else StudyFolder(folder).journal
    if not journal.is_file():
        raise DashboardError(f"STUDY_DIR {study_dir}: no Optuna storage: {journal} does not "
                             "exist (no trial has started yet, or the study used another "
                             "storage: pass it with --storage)")
    return StudyStorage(str(journal), name)


def _check_file(url: str, shown: str) -> None:
    """Refuse a journal or SQLite file that is not an Optuna storage, before Optuna opens it.

    The rule every command applies (`sweep.store_files.optuna_storage_problem`); the file is
    left as it is.
    """
    from sweep.store_files import optuna_storage_problem, sqlite_file

    journal = "://" not in url
    path = Path(url) if journal else sqlite_file(url)
    if path is None:
        return
    if not path.exists():
        raise DashboardError(f"storage {shown}: no such file {path}")
    problem = optuna_storage_problem(path, journal=journal, new_ok=False)
    if problem is not None:
        raise DashboardError(f"storage {shown}: {problem}; it is left as it is")


def open_storage(url: str, *, writable: bool = False) -> Any:
    """The Optuna storage at ``url``; read-only (`sweep.results.readonly`) unless ``writable``.

    A write to the read-only storage raises bottle's ``HTTPError(403, reason)``, which
    optuna-dashboard's API answers as ``403 {"reason": ...}`` (any other error is a 500 that
    names no cause).

    Raises:
        DashboardError: The file is not an Optuna journal or database (`_check_file`), or the
            database cannot be read as Optuna's, naming the storage (password masked).
    """
    from sweep.tracking import shown_uri

    _check_file(url, shown_uri(url))
    try:
        if writable:
            import optuna

            return optuna.storages.get_storage(url) if "://" in url else \
                optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(url))
        from bottle import HTTPError

        from sweep.results.readonly import open_read_only

        storage = open_read_only(url, refuse=lambda reason: HTTPError(403, reason))
        storage.get_all_studies()  # read once: a file that is not a journal fails here
        return storage
    except Exception as exc:  # noqa: BLE001 (Optuna's and SQLAlchemy's errors, told in one line)
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise DashboardError(f"storage {shown_uri(url)}: cannot be read as an Optuna storage "
                             f"({type(exc).__name__}: {first})") from None


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a browser's open connections do not hold up the stop


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


def serve_dashboard(storage: Any, *, host: str = "127.0.0.1", port: int = 8080,
                    ready: Callable[[str], None] | None = None) -> str:
    """Serve optuna-dashboard over ``storage`` until a stop signal; return the signal's name.

    Args:
        storage: An Optuna storage (`open_storage`).
        host: Interface to bind; keep 127.0.0.1 (the dashboard has no authentication).
        port: TCP port.
        ready: Called with the base URL once the server listens.

    Raises:
        OSError: The port cannot be bound.
    """
    import optuna_dashboard

    app = optuna_dashboard.wsgi(storage)
    with stop_signals():
        httpd = make_server(host, port, app, server_class=_ThreadingServer,
                            handler_class=_QuietHandler)
        try:
            if ready is not None:
                ready(f"http://{host}:{port}")
            httpd.serve_forever()
        except Stopped as exc:
            return exc.name
        except KeyboardInterrupt:
            return "SIGINT"
        finally:
            httpd.server_close()
    return "stopped"
