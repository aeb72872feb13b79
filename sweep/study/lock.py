"""One driver per study folder: ``sweep run`` holds ``<out>/driver.lock`` while it runs.

The lock is ``fcntl.flock`` (exclusive, non-blocking) on the study folder's ``driver.lock``, so
two drivers started at the same instant cannot both hold it: exactly one runs, the other is
refused with the holder's record. The kernel releases a flock when its process dies, however it
dies (``kill -9`` included), so a dead driver never blocks the next run; the record in the file
(the holder's owner string, `sweep.tracking.owner.current_owner`, and since when) only names the
holder in the refusal. ``sweep worker`` joins a running study without this lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Iterator
from pathlib import Path

from sweep.errors import InputError
from sweep.folder import StudyFolder
from sweep.tracking.owner import current_owner

__all__ = ["DriverRunningError", "driver_lock"]


class DriverRunningError(InputError, RuntimeError):
    """Another live process drives this study folder (it holds ``driver.lock``)."""


def _holder(lock_path: Path) -> str:
    """The record of the process holding ``lock_path``, as words for a message."""
    try:
        record = json.loads(lock_path.read_text() or "{}")
    except (OSError, ValueError):
        record = {}
    parts = str(record.get("owner", "")).split("/")
    if len(parts) != 4:
        return "another process (its record is not written yet)"
    host, _boot, pid, _start = parts
    return f"pid {pid} on host {host} since {record.get('since', '?')}"


@contextlib.contextmanager
def driver_lock(out: Path, study: str) -> Iterator[None]:
    """Hold ``<out>/driver.lock`` while the block runs; refuse if another driver holds it.

    Args:
        out: The study folder (it exists: `sweep.study.preflight.preflight` made it).
        study: The study's name, for the message.

    Raises:
        DriverRunningError: A live process holds the lock, naming its pid, host and start
            time, and ``sweep worker`` as the way to join.
        OSError: The lock file cannot be created or opened.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover (Windows: no flock, no guard)
        yield
        return
    path = StudyFolder(out).driver_lock
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "r+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DriverRunningError(
                f"study {study}: --out {out} is already driven by {_holder(path)} "
                f"(it holds {path}); one sweep run drives a study at a time: wait for it to "
                "end or stop it, or join it with sweep worker (Optuna executor)") from None
        since = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        lock.truncate(0)
        lock.write(json.dumps({"owner": current_owner(), "since": since}) + "\n")
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
