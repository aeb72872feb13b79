"""A study's SQLite store checked before MLflow opens it, and opened read-only for reading.

MLflow, given a SQLite file, makes it a tracking store: it creates its tables where they are
missing and migrates the schema, altering whatever the file held. So before any command opens
a SQLite file as a study's store, `check_store` refuses one that is not an MLflow store
(`sweep.store_files.mlflow_store_problem`, the check `sweep run` makes too) and one whose
schema revision is not the one this MLflow writes (an older one would be migrated, a newer one
is unknown to it); the file is left as it is. Commands that only read a study then open the
store read-only (`reading_uri`: SQLite's ``mode=ro``), so nothing in it can change.

A study folder can be moved: artifact locations MLflow stored under the old folder are read
under the new one (`artifact_root`), and a command that writes to the study points them there
first (`relocate_artifacts`).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from mlflow import MlflowClient

from sweep.errors import InputError
from sweep.store_files import (
    hot_journal,
    mlflow_revision,
    mlflow_store_problem,
    read_only_url,
    sqlite_file,
)

__all__ = ["ForeignStoreError", "StoreSchemaError", "artifact_root", "check_store",
           "ensure_store", "reading_uri", "relocate_artifacts", "schema_problem", "store_lock"]


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


def schema_problem(db: Path, *, older_ok: bool = False) -> str | None:
    """Why the MLflow store ``db`` cannot be opened without a migration; None if it can.

    Args:
        db: An MLflow store (`mlflow_store_problem` accepts it).
        older_ok: Accept an older schema (a command that writes: MLflow migrates it).

    Returns:
        One line naming the store's schema revision: made by a newer MLflow (a revision this
        one does not know), or by an older one (MLflow would migrate it on open).
    """
    import mlflow

    revision = mlflow_revision(db)
    head, known = _schema_revisions()
    if revision == head or older_ok and revision in known:
        return None
    if revision not in known:
        return (f"{db} has MLflow schema revision {revision}, which MLflow {mlflow.__version__} "
                "does not know (a newer MLflow made it); read it with that MLflow version, "
                "it is left as it is")
    return (f"{db} has the schema of an older MLflow (revision {revision}; MLflow "
            f"{mlflow.__version__} writes {head}); it is left as it is; back it up, then "
            f"`mlflow db upgrade sqlite:///{db}` migrates it")


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


def ensure_store(tracking_uri: str) -> None:
    """Create and migrate the tracking store once, before any worker opens it.

    MLflow creates the tables of a fresh database when a client first opens it; several
    processes doing so at once race in the schema migration ("table ... already exists",
    alembic ``CommandError``). For a SQLite store the first open happens under `store_lock`,
    so one process creates and migrates it while the others wait and then find it ready; call
    this before anything else in the process opens the store (the driver does, in
    `StudyTracker.start`). For other stores, a connectivity check only.

    A SQLite file that exists must be an MLflow store, or empty (`check_store`'s rule), and
    not of a schema newer than this MLflow's; an older one is migrated, as MLflow does.

    Raises:
        ForeignStoreError: The SQLite file is not an MLflow store; nothing was written to it.
        StoreSchemaError: Its schema is newer than this MLflow knows.
        mlflow.exceptions.MlflowException: If the store cannot be reached or migrated.
        OSError: The folder of a SQLite store or its lock file cannot be created.
    """
    path = sqlite_file(tracking_uri)
    if path is None:
        MlflowClient(tracking_uri).search_experiments(max_results=1)
        return
    if path.exists():  # checked before the lock: the check takes it shared
        problem = mlflow_store_problem(path, new_ok=True)
        if problem is not None:
            raise ForeignStoreError(f"{problem}; it is left as it is")
        if path.stat().st_size and (problem := schema_problem(path, older_ok=True)):
            raise StoreSchemaError(problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    with store_lock(path):
        MlflowClient(tracking_uri).search_experiments(max_results=1)


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
    """The URI that opens a ``sqlite:///`` store read-only; other URIs as given.

    `sweep.store_files.read_only_url`: a write through it fails, and MLflow's table creation
    and migrations never run. A hot journal a killed writer left beside an MLflow store is
    rolled back first (`_recover`), which a read-only connection cannot do; a file that is not
    an MLflow store is left as it is.
    """
    path = sqlite_file(tracking_uri)
    if path is None or "mode=ro" in tracking_uri:
        return tracking_uri
    if hot_journal(path) is not None and mlflow_store_problem(path, new_ok=False) is None:
        _recover(path)
    return read_only_url(path)


_ARTIFACTS = "mlartifacts"


def artifact_root(tracking_uri: str, artifact_uri: str) -> str:
    """An experiment's or run's artifact URI as it is under the study's folder now.

    MLflow stores artifact locations as absolute paths, so a study folder moved or copied
    (``mv out out2``) keeps pointing at the old place. Where the store is ``sqlite:///<dir>/
    mlflow.db`` and ``artifact_uri`` lies in some ``.../mlartifacts`` folder (where this
    service puts a study's artifacts, `sweep.folder.StudyFolder.artifacts`), the same path under
    ``<dir>/mlartifacts``; any other URI as it is.
    """
    db = sqlite_file(tracking_uri)
    match = re.fullmatch(rf"(?:file://)?/.*/{_ARTIFACTS}(/[0-9a-f]{{32}}/artifacts(?:/.*)?)?",
                         artifact_uri)
    if db is None or match is None:
        return artifact_uri
    return (db.resolve().parent / _ARTIFACTS).as_uri() + (match.group(1) or "")


def relocate_artifacts(tracking_uri: str, experiment_id: str) -> bool:
    """Point a study's experiment and its runs at ``<store's folder>/mlartifacts`` again.

    After a study folder is moved or copied, its store still names the old place: new runs
    would write their artifacts there and reads would miss them. MLflow has no call to change
    an artifact location, so the two columns that hold it (``experiments.artifact_location``,
    ``runs.artifact_uri``) are rewritten in the study's own store, under the store lock, as
    `artifact_root` says. Only for a SQLite store; nothing else changes. MLflow keeps a run's
    artifact repository for the life of the process that first used it, so call this in a
    process that has not written to the study before it moved (each command is one).

    Returns:
        Whether anything was rewritten.
    """
    db = sqlite_file(tracking_uri)
    if db is None:
        return False
    with store_lock(db), contextlib.closing(sqlite3.connect(db, timeout=30)) as con, con:
        row = con.execute("SELECT artifact_location FROM experiments WHERE experiment_id = ?",
                          (int(experiment_id),)).fetchone()
        if row is None or artifact_root(tracking_uri, row[0]) == row[0]:
            return False
        old, new = row[0].rstrip("/"), artifact_root(tracking_uri, row[0]).rstrip("/")
        where = ("WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                 (int(experiment_id), len(old), old))
        con.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                    (new, int(experiment_id)))
        con.execute(f"UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) {where[0]}",
                    (new, len(old) + 1, *where[1]))
    return True
