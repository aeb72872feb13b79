"""Store files recognised as a study's own (an MLflow store, an Optuna journal or database).

One check for every command that opens a store: a file that is not one of these is foreign, and
no command writes to it. Files are only read here: a SQLite database is opened read-only
(``mode=ro``), so its bytes and mtime stay as they are. A database that a killed writer left
with a hot journal (``<db>-journal``, which a read-only open cannot roll back) is read from a
copy of the two files, rolled back there, so a store of ours never looks foreign for it.

- An MLflow tracking store is a SQLite database with MLflow's tables (`MLFLOW_TABLES`: its
  core tables and ``alembic_version``, the schema revision MLflow migrates by) and one schema
  revision recorded. A file of the user's own that happens to hold a table named
  ``experiments`` is not one.
- An Optuna journal is empty or starts with a journal record; an Optuna database holds
  Optuna's tables (`OPTUNA_TABLES`).

Imports nothing beyond the standard library, so ``sweep run`` refuses a foreign file before
MLflow or Optuna load.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

__all__ = ["MLFLOW_TABLES", "OPTUNA_TABLES", "hot_journal", "is_optuna_journal",
           "mlflow_revision", "mlflow_store_problem", "optuna_storage_problem", "read_only_url",
           "reading_lock", "sqlite_file", "sqlite_tables", "what_file"]

_SQLITE_HEADER = b"SQLite format 3\x00"
#: Tables by which a SQLite file is recognised as an Optuna storage.
OPTUNA_TABLES = frozenset({"studies", "version_info"})
#: Tables every MLflow tracking store holds (MLflow 1.x to 3.x); ``alembic_version`` records
#: the schema revision.
MLFLOW_TABLES = frozenset({"alembic_version", "experiments", "runs", "metrics", "params",
                           "tags", "experiment_tags", "latest_metrics"})


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL (``sqlite+DRIVER:///`` too), else None.

    None for other schemes and for an in-memory database (``sqlite://``, ``:memory:``). A
    relative ``PATH`` is relative to the current folder, as SQLAlchemy and MLflow read it.
    """
    match = re.fullmatch(r"sqlite(\+\w+)?:///([^?]*)(\?.*)?", url, flags=re.DOTALL)
    if match is None or match.group(2) in ("", ":memory:"):
        return None
    return Path(match.group(2))


def read_only_url(path: Path) -> str:
    """The SQLAlchemy URL that opens the SQLite file ``path`` read-only (SQLite's ``mode=ro``).

    ``sqlite+pysqlite:///file:PATH?mode=ro&uri=true``: SQLite's URI filename, handed on by
    SQLAlchemy as it is (the ``+pysqlite`` spelling also keeps MLflow from creating the folder
    of a ``sqlite:///`` path). A write through it fails ("attempt to write a readonly
    database"); table creation and migrations cannot run.
    """
    return f"sqlite+pysqlite:///file:{urllib.parse.quote(str(path.resolve()))}?mode=ro&uri=true"


@contextlib.contextmanager
def reading_lock(db: Path) -> Iterator[None]:
    """A shared lock on ``<db>.lock`` while ``db`` is read, where that lock file exists.

    It exists where this service creates or migrates the store
    (`sweep.tracking.stores.store_lock`, which holds it exclusively meanwhile), so another
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


def hot_journal(path: Path) -> Path | None:
    """``<path>-journal`` where it exists and is not empty (a writer's transaction), else None."""
    journal = Path(f"{path}-journal")
    try:
        return journal if journal.stat().st_size > 0 else None
    except OSError:
        return None


def _query(path: Path, sql: str) -> list[tuple]:
    """The rows of ``sql`` on the SQLite database ``path``, which is never written.

    Opened read-only; where that open fails on a hot journal ("attempt to write a readonly
    database": a read-only connection cannot roll it back), the database and its journal are
    copied to a temporary folder and read there, rolled back as SQLite would.

    Raises:
        sqlite3.DatabaseError: Not a database, or damaged.
    """
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError:
        journal = hot_journal(path)
        if journal is None:
            raise
    with tempfile.TemporaryDirectory(prefix="sweep-store-") as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        shutil.copyfile(journal, f"{copy}-journal")
        con = sqlite3.connect(copy, timeout=10)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()


def _is_sqlite(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER


def sqlite_tables(path: Path) -> set[str] | None:
    """The table names of the SQLite database ``path``, read only; None if it is not one."""
    if not _is_sqlite(path):
        return None
    try:
        rows = _query(path, "SELECT name FROM sqlite_master WHERE type = 'table'")
    except sqlite3.DatabaseError:
        return None
    return {name for (name,) in rows}


def mlflow_revision(path: Path) -> str | None:
    """The schema revision an MLflow store ``path`` records (``alembic_version``), or None.

    None also when the file has no such table, or records no revision or several.
    """
    try:
        rows = _query(path, "SELECT version_num FROM alembic_version")
    except sqlite3.DatabaseError:
        return None
    return rows[0][0] if len(rows) == 1 and isinstance(rows[0][0], str) else None


def what_file(path: Path, tables: set[str] | None) -> str:
    """What the file ``path`` is, for a message: a folder, a SQLite database and its tables..."""
    if path.is_dir():
        return "a folder"
    size = path.stat().st_size
    if tables is not None:
        if OPTUNA_TABLES <= tables:
            return "an Optuna storage database"
        if MLFLOW_TABLES <= tables:
            return "an MLflow tracking database"
        if not tables:
            return f"a SQLite database of {size:,} bytes with no tables"
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        return f"a SQLite database of {size:,} bytes with tables {shown}"
    if size == 0:
        return "an empty file"
    with path.open("rb") as f:
        head = f.read(200)
    try:
        line = head.decode().splitlines()[0] if head.strip() else ""
    except UnicodeDecodeError:
        return f"a binary file of {size:,} bytes"
    return f"a text file of {size:,} bytes starting {line[:40]!r}"


def mlflow_store_problem(path: Path, *, new_ok: bool) -> str | None:
    """Why the file ``path`` is not an MLflow tracking store to open; None if it is one.

    Args:
        path: The SQLite file of a ``sqlite:///`` tracking URI (it exists).
        new_ok: Whether a file with nothing to lose (empty, or a SQLite database with no
            tables) is accepted too: ``sweep run`` creates its store's tables there; a
            command that reads a study finds no study in it.

    Returns:
        ``"<path> is <what it is>, not an MLflow tracking store"`` (or says it is empty, or
        records no schema revision); None for a store MLflow made.
    """
    if not path.is_file():
        return f"{path} is {what_file(path, None)}, not an MLflow tracking store"
    with reading_lock(path):
        tables = sqlite_tables(path)
        revision = mlflow_revision(path) if tables is not None else None
    if path.stat().st_size == 0 or tables == set():
        return None if new_ok else f"{path} is {what_file(path, tables)}: no study there"
    if tables is None or not MLFLOW_TABLES <= tables:
        return f"{path} is {what_file(path, tables)}, not an MLflow tracking store"
    if revision is None:
        return (f"{path} holds MLflow's tables but records no schema revision "
                "(alembic_version): not a store MLflow made")
    return None


def is_optuna_journal(path: Path) -> bool:
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


def optuna_storage_problem(path: Path, *, journal: bool, new_ok: bool) -> str | None:
    """Why the file ``path`` is not an Optuna storage to open; None if it is one.

    Args:
        path: A journal file (``journal``) or the SQLite file of an RDB URL; it exists.
        journal: Whether it is named as a journal (else as a SQLite database).
        new_ok: Whether a file with nothing to lose (empty, or a SQLite database with no
            tables) is accepted too: a study creates its storage there; a command that reads
            one finds nothing in it.

    Returns:
        ``"<path> is <what it is>, not an Optuna journal"`` (or ``storage database``); None
        for an Optuna journal or an Optuna database.
    """
    tables = None if path.is_dir() else sqlite_tables(path)
    if not path.is_file():
        ok = False
    elif journal:
        ok = tables is None and is_optuna_journal(path) and (new_ok or path.stat().st_size > 0)
    else:
        empty = path.stat().st_size == 0 or tables == set()
        ok = new_ok if empty else tables is not None and OPTUNA_TABLES <= tables
    if ok:
        return None
    return (f"{path} is {what_file(path, tables)}, not an Optuna "
            f"{'journal' if journal else 'storage database'}")
