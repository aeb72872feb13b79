"""Optuna storage of a study.

A journal file in the study folder by default (safe for several processes on one machine or a shared
file system) or any RDB URL (PostgreSQL on a cluster), checked before the study writes anything.
Each journal write is an append and an ``fsync``; `held_writes` appends a trial's closing
records (its state, run, costs, constraints) together, with one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage

from sweep.errors import InputError
from sweep.tracking import shown_uri

#: Seconds after which a journal lock is taken for one a killed process left.
JOURNAL_LOCK_GRACE_S = 5


class HeldJournalFile(JournalFileBackend):
    """A journal file whose appends from one thread can be held and written together.

    Inside `held`, the holding thread's appends wait in memory and are written in one append
    (one lock, one ``fsync``) when the block ends, in their order; other threads' (a trial's
    heartbeat) go to the file at once. Until then this process's storage does not see them:
    hold only writes that nothing reads back inside the block.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: list[dict[str, Any]] | None = None
        self._holder: int | None = None

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        if self._held is not None and self._holder == threading.get_ident():
            self._held.extend(logs)
            return
        super().append_logs(logs)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold this thread's appends until the block ends (nested: the outer block's end)."""
        if self._held is not None:
            yield
            return
        self._held, self._holder = [], threading.get_ident()
        try:
            yield
        finally:
            logs, self._held, self._holder = self._held, None, None
            if logs:
                super().append_logs(logs)


class _JournalStorage(JournalStorage):
    """`JournalStorage` on a `HeldJournalFile`, kept as ``file``."""

    def __init__(self, file: HeldJournalFile) -> None:
        super().__init__(file)
        self.file = file


def make_storage(url: str) -> Any:
    """Optuna storage for ``url``: an RDB URL as is, anything else a journal file path."""
    if "://" in url:
        return url
    from optuna.storages.journal import JournalFileSymlinkLock

    Path(url).parent.mkdir(parents=True, exist_ok=True)
    # A lock left by a killed process is taken over after JOURNAL_LOCK_GRACE_S (Optuna's
    # default, 30 s, stalls every resume after a kill); a journal write holds it milliseconds.
    lock = JournalFileSymlinkLock(str(url), grace_period=JOURNAL_LOCK_GRACE_S)
    return _JournalStorage(HeldJournalFile(str(url), lock_obj=lock))


@contextlib.contextmanager
def held_writes(storage: Any) -> Iterator[None]:
    """This thread's writes to ``storage`` inside the block, written together at its end.

    For the study's journal file (`HeldJournalFile`); any other storage writes them at once.
    """
    file = getattr(storage, "file", None)
    if isinstance(file, HeldJournalFile):
        with file.held():
            yield
    else:
        yield


def study_exists(name: str, url: str) -> bool:
    """Whether the storage at ``url`` holds an Optuna study ``name`` (a missing journal: no).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: An RDB storage that cannot be read (`check_storage`
            first tells why).
    """
    if "://" not in url and not Path(url).is_file():
        return False
    storage = make_storage(url)
    return any(s.study_name == name for s in optuna.get_all_study_summaries(storage))


class StorageError(InputError, ValueError):
    """An RDB storage URL that cannot be used: no driver, or no database answers."""


def check_storage(url: str, *, timeout_s: int = 10) -> None:
    """Fail fast when an RDB storage URL cannot be used, before the study writes anything.

    Opens one connection with SQLAlchemy (what Optuna's ``RDBStorage`` uses), with a
    ``timeout_s`` connect timeout for PostgreSQL and MySQL. Journal file paths and SQLite files
    are created on first use; an existing one is checked, read-only, by
    `sweep.study.preflight.check_stores` (an Optuna journal or database, else refused).

    Args:
        url: ``search.storage`` as resolved (`sweep.spec.StudySpec.storage_url`).
        timeout_s: Seconds to wait for the database's answer.

    Raises:
        StorageError: Naming ``search.storage`` and the URL (password hidden), with the
            missing driver (``pip install 'transformer-sweep[postgres]'`` for PostgreSQL) or
            the database's answer.
    """
    if "://" not in url:
        return
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    shown = shown_uri(url)
    try:
        parsed = sqlalchemy.engine.make_url(url)
        parsed.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except (sqlalchemy.exc.ArgumentError, ValueError) as exc:
        raise StorageError(f"search.storage {shown}: not a database URL ({exc})") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":  # a file: created on first use, nothing to reach
        return
    args = {"connect_timeout": timeout_s} if backend in ("postgresql", "mysql") else {}
    try:
        engine = sqlalchemy.create_engine(parsed, connect_args=args, poolclass=NullPool)
    except (ImportError, sqlalchemy.exc.NoSuchModuleError) as exc:
        missing = getattr(exc, "name", None) or ""
        hint = (" (pip install 'transformer-sweep[postgres]')"
                if backend == "postgresql" and missing.startswith("psycopg") else "")
        raise StorageError(f"search.storage {shown}: no database driver for it: "
                           f"{exc}{hint}") from None
    try:
        with engine.connect():
            pass
    except (sqlalchemy.exc.SQLAlchemyError, ValueError) as exc:
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
        raise StorageError(f"search.storage {shown}: cannot connect: {reason}") from None
    finally:
        engine.dispose()
