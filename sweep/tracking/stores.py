"""A study's SQLite store checked before MLflow opens it, and opened read-only for reading.

MLflow, given a SQLite file, makes it a tracking store: it creates its tables where they are
missing and migrates the schema, altering whatever the file held. So before any command opens
a SQLite file as a study's store, `check_store` refuses one that is not an MLflow store
(`sweep.store_files.mlflow_store_problem`, the check `sweep run` makes too) and one whose
schema revision is not the one this MLflow writes (an older one would be migrated, a newer one
is unknown to it); the file is left as it is. Commands that only read a study then open the
store read-only (`reading_uri`: SQLite's ``mode=ro``), so nothing in it can change.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from pathlib import Path

from sweep.errors import InputError
from sweep.store_files import hot_journal, mlflow_revision, mlflow_store_problem, sqlite_file
from sweep.tracking.uris import store_lock

__all__ = ["ForeignStoreError", "StoreSchemaError", "check_store", "reading_uri",
           "schema_problem"]


class ForeignStoreError(InputError, ValueError):
    """A file named as a study's store is not an MLflow store; it is left as it is."""


class StoreSchemaError(InputError, RuntimeError):
    """An MLflow store's schema revision is not the one this MLflow writes."""


def _schema_revisions() -> tuple[str, set[str]]:
    """The schema revision this MLflow writes (its migrations' head) and every one it knows."""
    import mlflow.store.db_migrations as migrations
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(Path(migrations.__file__).parent))
    return script.get_current_head() or "", {s.revision for s in script.walk_revisions()}


def schema_problem(db: Path) -> str | None:
    """Why the MLflow store ``db`` cannot be opened without a migration; None if it can.

    Returns:
        One line naming the store's schema revision: made by a newer MLflow (a revision this
        one does not know), or by an older one (MLflow would migrate it on open).
    """
    import mlflow

    revision = mlflow_revision(db)
    head, known = _schema_revisions()
    if revision == head:
        return None
    if revision not in known:
        return (f"{db} has MLflow schema revision {revision}, which MLflow {mlflow.__version__} "
                "does not know (a newer MLflow made it); read it with that MLflow version, "
                "it is left as it is")
    return (f"{db} has the schema of an older MLflow (revision {revision}; MLflow "
            f"{mlflow.__version__} writes {head}); it is left as it is; back it up, then "
            f"`mlflow db upgrade sqlite:///{db}` migrates it")


def _recover(db: Path) -> None:
    """Roll back a hot journal a killed writer left beside the service's store ``db``.

    A read-only connection cannot (SQLite answers "attempt to write a readonly database"), so
    one ordinary connection reads the schema once, under the store lock; SQLite rolls the
    journal back then, restoring the last committed state, as any writer of the store would.
    """
    with store_lock(db):
        con = sqlite3.connect(db, timeout=30)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchall()
        finally:
            con.close()


def check_store(db: Path, *, reading: bool) -> str:
    """Check that ``db`` is an MLflow store this MLflow opens as it is; its tracking URI.

    Args:
        db: The SQLite file a command was pointed at (it exists).
        reading: The command only reads: a hot journal a killed writer left is rolled back
            first (the store is then read with ``mode=ro``, which cannot roll it back).

    Returns:
        ``sqlite:///<db, absolute>``.

    Raises:
        ForeignStoreError: ``db`` is not an MLflow store (`mlflow_store_problem`) or holds no
            tables; nothing was written to it.
        StoreSchemaError: Its schema is not the one this MLflow writes (`schema_problem`).
    """
    problem = mlflow_store_problem(db, new_ok=False)
    if problem is not None:
        raise ForeignStoreError(f"{problem}; it is left as it is")
    problem = schema_problem(db)
    if problem is not None:
        raise StoreSchemaError(problem)
    if reading and hot_journal(db) is not None:
        _recover(db)
    return f"sqlite:///{db.resolve()}"


def reading_uri(tracking_uri: str) -> str:
    """The URI that opens a ``sqlite:///`` store read-only (``mode=ro``); other URIs as given.

    ``sqlite+pysqlite:///file:PATH?mode=ro&uri=true``: SQLite's URI filename, which MLflow
    hands to SQLAlchemy as it is (the ``+pysqlite`` spelling keeps MLflow from creating the
    folder of a ``sqlite:///`` path). A write through it fails ("attempt to write a readonly
    database"), and MLflow's table creation and migrations never run.
    """
    path = sqlite_file(tracking_uri)
    if path is None or "mode=ro" in tracking_uri:
        return tracking_uri
    quoted = urllib.parse.quote(str(path.resolve()))
    return f"sqlite+pysqlite:///file:{quoted}?mode=ro&uri=true"
