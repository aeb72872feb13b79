"""Which process runs a trial, and whether it is still alive.

A trial records its owner when it starts: ``host/boot/pid/start`` (the host name, the
kernel's boot id, the process id and the process's start time in clock ticks since boot, from
``/proc``). On the same host the owner's liveness is exact: the process exists, with the same
start time (so a reused pid is not mistaken for it) and the same boot. On another host it is
judged by the trial's heartbeat, a timestamp the owner rewrites every `HEARTBEAT_S` seconds: a
trial whose heartbeat is older than `GRACE_S` is taken for dead (Optuna's heartbeat for RDB
storages works the same way, with ``heartbeat_interval`` and ``grace_period``).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

__all__ = ["GRACE_S", "HEARTBEAT_S", "Heartbeat", "call_each", "current_owner", "owner_alive",
           "owner_pid"]

#: Seconds between heartbeats of a running trial.
HEARTBEAT_S = 30.0
#: Seconds without a heartbeat after which a trial of another host is taken for dead.
GRACE_S = 120.0


@lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "-"


def _start_ticks(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot.

    None if it does not exist or has exited (a zombie waiting to be reaped); ``-`` where
    ``/proc`` cannot tell.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return "-"
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    fields = stat[stat.rindex(")") + 2:].split()
    if fields and fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else "-"


def current_owner() -> str:
    """This process as an owner string: ``host/boot/pid/start``."""
    pid = os.getpid()
    return f"{socket.gethostname()}/{_boot_id()}/{pid}/{_start_ticks(pid) or '-'}"


def owner_pid(owner: str | None) -> int | None:
    """The process id in an owner string, or None."""
    try:
        return int(str(owner).split("/")[2])
    except (IndexError, ValueError):
        return None


def owner_alive(owner: str | None, heartbeat: float | None = None, *,
                now: float | None = None, grace_s: float = GRACE_S) -> bool | None:
    """Whether the process ``owner`` names is alive.

    Args:
        owner: An owner string (`current_owner`), or None if the trial recorded none.
        heartbeat: The trial's last heartbeat (Unix seconds), or None.
        now: The current time (Unix seconds); default ``time.time()``.
        grace_s: Seconds without a heartbeat after which another host's trial is dead.

    Returns:
        True or False; None when it cannot be told (no owner and no heartbeat).
    """
    parts = str(owner).split("/") if owner else []
    if len(parts) == 4 and parts[0] == socket.gethostname():
        _host, boot, pid, start = parts
        if boot != _boot_id():
            return False  # the machine rebooted since
        try:
            ticks = _start_ticks(int(pid))
        except ValueError:
            return None
        if ticks is None:
            return False
        return ticks == start or "-" in (ticks, start)
    if heartbeat is not None:
        return (now if now is not None else time.time()) - float(heartbeat) <= grace_s
    return None


class Heartbeat:
    """Calls ``beat()`` every ``interval_s`` seconds in a daemon thread until `stop`.

    Errors from ``beat`` (a store briefly unreachable) are ignored: a missed beat only makes
    another host's reconcile wait longer.
    """

    def __init__(self, beat: Callable[[], None], interval_s: float = HEARTBEAT_S) -> None:
        self._beat, self._interval = beat, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sweep-heartbeat")

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 (see the class docstring)
                pass

    def stop(self) -> None:
        self._stop.set()

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def call_each(beats: list[Callable[[], None]]) -> None:
    """Call every beat; the first error is raised after all were called."""
    error = None
    for beat in beats:
        try:
            beat()
        except Exception as exc:  # noqa: BLE001 (the others still beat)
            error = error or exc
    if error is not None:
        raise error
