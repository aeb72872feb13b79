"""Store files a study finds in place: recognised as Optuna's or MLflow's, else refused.

A study never writes to a file it did not create or recognise. An existing Optuna storage file
(``search.storage`` as a journal path, or a ``sqlite:///`` file; default
``<out>/optuna.journal``) must be empty or an Optuna journal (its first line a journal record),
or a SQLite database with Optuna's tables (``studies``, ``version_info``) or none. An existing
MLflow SQLite store (``tracking.uri`` or ``MLFLOW_TRACKING_URI`` as ``sqlite:///``; default
``<out>/mlflow.db``) must be empty or hold MLflow's tables (``experiments``, ``runs``) or none.
The two may not be one file. Files are only read: SQLite databases are opened read-only
(``mode=ro``), so their bytes and mtime stay as they are.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from sweep.folder import StudyFolder
from sweep.spec import StudySpec

__all__ = ["sqlite_file", "store_problem"]

_SQLITE_HEADER = b"SQLite format 3\x00"
#: Tables by which a SQLite file is recognised as an Optuna storage or an MLflow store.
_OPTUNA_TABLES = frozenset({"studies", "version_info"})
_MLFLOW_TABLES = frozenset({"experiments", "runs"})


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL (``sqlite+DRIVER:///`` too), else None.

    None for other schemes and for an in-memory database (``sqlite://``, ``:memory:``). A
    relative ``PATH`` is relative to the current folder, as SQLAlchemy and MLflow read it.
    """
    match = re.fullmatch(r"sqlite(\+\w+)?:///([^?]*)(\?.*)?", url, flags=re.DOTALL)
    if match is None or match.group(2) in ("", ":memory:"):
        return None
    return Path(match.group(2))


def _sqlite_tables(path: Path) -> set[str] | None:
    """The table names of the SQLite database ``path``, read-only; None if it is not one.

    The file is opened with ``mode=ro``, so neither it nor its mtime changes.
    """
    with path.open("rb") as f:
        if f.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
            return None
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    try:
        rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    except sqlite3.DatabaseError:
        return None
    finally:
        con.close()
    return {name for (name,) in rows}


@contextlib.contextmanager
def _reading_store(db: Path) -> Iterator[None]:
    """A shared lock on ``<db>.lock`` while ``db`` is read, where that lock file exists.

    It exists where this service creates or migrates the store
    (`sweep.tracking.uris.store_lock`, which holds it exclusively meanwhile), so another
    driver's half-migrated database is never read; nothing is created here.
    """
    try:
        import fcntl

        lock = open(f"{db}.lock", "rb")  # noqa: SIM115 (closed below)
    except (ImportError, OSError):  # no lock file: no driver of ours is creating this store
        yield
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield
    finally:
        lock.close()


def _what_file(path: Path, tables: set[str] | None) -> str:
    """What the file ``path`` is, for a message: a folder, a SQLite database and its tables..."""
    if path.is_dir():
        return "a folder"
    size = path.stat().st_size
    if tables is not None:
        if _OPTUNA_TABLES <= tables:
            return "an Optuna storage database"
        if _MLFLOW_TABLES <= tables:
            return "an MLflow tracking database"
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        return f"a SQLite database of {size:,} bytes with tables {shown}"
    with path.open("rb") as f:
        head = f.read(200)
    try:
        line = head.decode().splitlines()[0] if head.strip() else ""
    except UnicodeDecodeError:
        return f"a binary file of {size:,} bytes"
    return f"a text file of {size:,} bytes starting {line[:40]!r}"


def _is_optuna_journal(path: Path) -> bool:
    """Whether ``path`` is empty or its first record is an Optuna journal record.

    Optuna's journal holds one JSON object per line, each with an integer ``op_code`` and a
    ``worker_id``; a first line cut short by a crash counts when it starts as Optuna writes it.
    """
    with path.open("rb") as f:
        head = f.read(1 << 16)
    if not head:
        return True
    first, newline, _ = head.partition(b"\n")
    try:
        record = json.loads(first)
    except ValueError:
        return not newline and len(head) < 1 << 16 and first.startswith(b'{"op_code":')
    return (isinstance(record, dict) and type(record.get("op_code")) is int
            and isinstance(record.get("worker_id"), str))


def store_problem(spec: StudySpec, out: Path | None = None) -> str | None:
    """Why a store file that exists is not what the study would write there; None if none is.

    A study never writes to a file it did not create or recognise. An existing Optuna storage
    file (``search.storage`` as a journal path, or a ``sqlite:///`` file; default
    ``<out>/optuna.journal``) must be empty or an Optuna journal (its first line a journal
    record), or a SQLite database with Optuna's tables (``studies``, ``version_info``) or none.
    An existing MLflow SQLite store (``tracking.uri`` or ``MLFLOW_TRACKING_URI`` as
    ``sqlite:///``; default ``<out>/mlflow.db``) must be empty or hold MLflow's tables
    (``experiments``, ``runs``) or none. The two may not be one file. Files are only read:
    SQLite databases are opened read-only (``mode=ro``), so their bytes and mtime stay as
    they are. Files that do not exist yet, RDB servers and tracking servers are not checked
    here (`preflight` connects to them).

    Args:
        spec: The study spec.
        out: The study's output folder (``--out``, default ``./runs/<name>``), which holds
            the default stores; None (``sweep validate``) checks only the files the spec or
            ``MLFLOW_TRACKING_URI`` names.

    Returns:
        One line naming ``search.storage`` or the tracking URI's source, the file and what it
        is; None when every existing store file is one the study may use.
    """
    storage = spec.search.storage or (str(StudyFolder(out).journal) if out is not None else None)
    storage_source = ("search.storage" if spec.search.storage
                      else f"search.storage (default, in --out {out})")
    tracking = spec.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")
    tracking_source = spec.tracking_uri_source() if tracking else f"--out {out}"
    tracking_file = (sqlite_file(tracking) if tracking
                     else StudyFolder(out).mlflow_db if out is not None else None)
    if storage is None:
        storage_file, journal = None, False
    elif "://" not in storage:
        storage_file, journal = Path(storage), True
    else:
        storage_file, journal = sqlite_file(storage), False
    if (storage_file is not None and tracking_file is not None
            and os.path.abspath(storage_file) == os.path.abspath(tracking_file)):
        return (f"{storage_source} and {tracking_source} name one file, {storage_file}; Optuna "
                "and MLflow each need a store of their own")
    if storage_file is not None and storage_file.exists():
        tables = None if storage_file.is_dir() else _sqlite_tables(storage_file)
        if journal:
            ok = storage_file.is_file() and tables is None and _is_optuna_journal(storage_file)
        else:
            ok = storage_file.is_file() and (
                storage_file.stat().st_size == 0 or tables is not None
                and (not tables or _OPTUNA_TABLES <= tables))
        if not ok:
            hint = (f"; for an Optuna SQLite storage write sqlite:///{storage_file}"
                    if journal and tables is not None and _OPTUNA_TABLES <= tables else
                    "; point it at a new file, or at an Optuna storage")
            return (
                f"{storage_source} {storage}: {storage_file} is "
                f"{_what_file(storage_file, tables)}, not an Optuna "
                f"{'journal' if journal else 'storage database'}; the study writes only to a "
                f"storage it created or recognises, and leaves this file as it is{hint}")
    if tracking_file is not None and tracking_file.exists():
        with _reading_store(tracking_file):
            tables = None if tracking_file.is_dir() else _sqlite_tables(tracking_file)
        ok = tracking_file.is_file() and (
            tracking_file.stat().st_size == 0 or tables is not None
            and (not tables or _MLFLOW_TABLES <= tables))
        if not ok:
            return (
                f"{tracking_source} sqlite:///{tracking_file}: {tracking_file} is "
                f"{_what_file(tracking_file, tables)}, not an MLflow tracking store; the study "
                "writes only to a store it created or recognises, and leaves this file as it "
                "is; point the tracking URI at a new file, or at an MLflow store")
    return None
