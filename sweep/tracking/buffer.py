"""A trial's MLflow writes kept in the study folder while the tracking store does not answer.

A trial whose run was created keeps training when the store stops answering mid-trial (an
MLflow server stopped or unreachable, its database down): from the first write that fails
with an infrastructure fault (`sweep.tracking.faults.infrastructure_fault`), `BufferedClient`
appends that write and every later one of the run, in order, to
``<study>/mlflow-buffer/<run_id>.jsonl`` instead of sending it, so training never waits on
the store. A background probe (every `PROBE_S` seconds; for an ``http(s)`` store a GET of its
``/health`` first) and the run's own end try to send the file; once MLflow answers, its writes
are replayed in order and the file is deleted. What is still buffered when the trial's process
ends (the store stayed down) is sent by the next resume of the study, which syncs before it
reconciles (`sweep.study.resume.reconcile`), or by ``sweep sync STUDY_DIR`` (`sync_folder`).

No run is created from the buffer: a run is buffered only after MLflow created it, so a replay
writes into that run and never makes a second one. Replay is at most once per write: the number
of writes sent is recorded in ``<run_id>.sent`` after each one, so a replay that stops half-way
(the store failed again, the process was killed) goes on where it stopped. One write may be
sent twice if the process dies between the store's answer and that record: MLflow keeps params
and tags by key (the same value again is accepted), and the sent metric value would appear twice
at the same step and timestamp.

Writers and replays of one file take an exclusive ``flock`` on it, so a ``sweep sync`` next to a
live trial neither loses nor doubles a write. Only files this module wrote for the study are
sent: every line is signed with the study's key (`sweep.tracking.buffer_auth`), the header
names the run and the file is named after it; any other ``*.jsonl`` file is refused with a
note and, like everything else in the folder, left as it is.

The first failing write waits out MLflow's own HTTP retries (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``,
``MLFLOW_HTTP_REQUEST_TIMEOUT``) before it is buffered; the writes after it do not.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag

from sweep.adapters.mlflow import sql_log_batch, sql_set_terminated
from sweep.tracking.buffer_auth import key_path, line_mac, study_key
from sweep.tracking.buffer_replay import (
    FORMAT,
    BufferRefusedError,
    SyncResult,
    buffered_runs,
    locked,
    replay_file,
    scan,
    sync_folder,
    sync_to,
)
from sweep.tracking.faults import infrastructure_fault

#: Seconds between attempts to send a buffered run while its trial trains.
PROBE_S = 10.0

__all__ = ["FORMAT", "PROBE_S", "BufferRefusedError", "BufferedClient", "SyncResult",
           "buffered_runs", "replay_file", "scan", "sync_folder", "sync_to"]


def _metric(m: Metric) -> list[object]:
    return [m.key, m.value, m.timestamp, m.step]


def _kv(items: Iterable[Param | RunTag]) -> list[list[str]]:
    return [[x.key, x.value] for x in items]


class BufferedClient:
    """An `mlflow.MlflowClient` for one trial run whose writes are buffered during a fault.

    Only the writes a `sweep.tracking.TrialRun` makes (``log_batch``, ``set_tag``,
    ``log_text``, ``set_terminated``) are buffered; every other attribute is the client's.
    Thread-safe (the heartbeat writes from its own thread).

    Args:
        client: The MLflow client.
        run_id: The run (already created in MLflow).
        folder: The study's buffer folder (``<study>/mlflow-buffer``); None: no buffering, a
            failing write raises as the client's does.
        header: What the file records about the run: ``tracking_uri`` (as shown, password
            hidden), ``experiment_id``, ``parent_run_id``, ``trial``.
    """

    def __init__(self, client: Any, run_id: str, folder: Path | str | None,
                 header: dict[str, Any]) -> None:
        self._client, self.run_id = client, run_id
        # A SQLite store's batch in one transaction, its end in one statement
        # (`sweep.adapters.mlflow.sql_log_batch`, `sql_set_terminated`).
        self._sql_log_batch = sql_log_batch(client)
        self._sql_set_terminated = sql_set_terminated(client)
        self.path = Path(folder) / f"{run_id}.jsonl" if folder is not None else None
        self._header = {"format": FORMAT, "run_id": run_id, **header}
        self._key: bytes | None = None
        self._last: tuple[int, int, str] | None = None  # (inode, size, MAC) after our write
        self._lock = threading.RLock()
        self._buffering = False
        self._probe: threading.Thread | None = None
        self._closed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    @property
    def buffering(self) -> bool:
        """Whether writes go to the file now (the store failed and has not answered since)."""
        return self._buffering

    # ----------------------------------------------------------------------------- writes
    def log_batch(self, run_id: str, metrics: Sequence[Metric] = (), params: Sequence[Param] = (),
                  tags: Sequence[RunTag] = ()) -> None:
        send = self._sql_log_batch or self._client.log_batch
        self._write({"op": "batch", "metrics": [_metric(m) for m in metrics],
                     "params": _kv(params), "tags": _kv(tags)},
                    lambda: send(run_id, metrics=list(metrics), params=list(params),
                                 tags=list(tags)))

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        self._write({"op": "batch", "metrics": [], "params": [], "tags": [[key, str(value)]]},
                    lambda: self._client.set_tag(run_id, key, value))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self._write({"op": "text", "text": text, "file": artifact_file},
                    lambda: self._client.log_text(run_id, text, artifact_file))

    def set_terminated(self, run_id: str, status: str | None = None,
                       end_time: int | None = None) -> None:
        end_time = end_time if end_time is not None else int(time.time() * 1000)
        end = self._sql_set_terminated or self._client.set_terminated
        self._write({"op": "end", "status": status, "end_time": end_time},
                    lambda: end(run_id, status, end_time=end_time))
        self._closed.set()  # the run is over: the probe thread stops
        if self._buffering:
            self.flush()

    def beat(self, key: str, value: str) -> None:
        """Write the heartbeat tag; while buffering, try to send the file instead.

        A heartbeat is never buffered: replayed later it would say nothing.
        """
        if self._buffering:
            self.flush()
            return
        self._client.set_tag(self.run_id, key, value)

    def _write(self, op: dict[str, Any], send: Callable[[], object]) -> None:
        with self._lock:
            path = self.path
            if path is None:  # no buffer folder: a failing write raises as the client's does
                send()
                return
            if not self._buffering:
                try:
                    send()
                    return
                except Exception as exc:
                    if infrastructure_fault(exc) is None:
                        raise
                    try:
                        self._append(path, op)
                    except OSError:
                        raise exc from None  # nowhere to keep it: the trial is interrupted
                    self._buffering = True
                    self._start_probe()
                    return
            self._append(path, op)

    def _append(self, path: Path, op: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._key is None:
            self._key = study_key(key_path(path.parent))
        text = json.dumps(op, allow_nan=True)
        with locked(path) as f:  # "a+" opens at the end; a new file gets the header
            previous = ""
            if f.tell() == 0:
                previous = line_mac(self._key, "", json.dumps(self._header))
                f.write(f"{json.dumps(self._header)}\t{previous}\n")
            else:
                previous = self._previous_mac(f)
            mac = line_mac(self._key, previous, text)
            f.write(f"{text}\t{mac}\n")
            f.flush()
            os.fsync(f.fileno())
            info = os.fstat(f.fileno())
            self._last = (info.st_ino, info.st_size, mac)

    def _previous_mac(self, f: Any) -> str:
        """The MAC of the last whole line of the open file ``f``, left at its end.

        A last line cut short (a write that failed half-way) is cut off first: it is no
        write, and the next line chains to the one before it.
        """
        info = os.fstat(f.fileno())
        if self._last is not None and self._last[:2] == (info.st_ino, info.st_size):
            return self._last[2]
        f.seek(0)
        text = f.read()
        whole = text[:text.rfind("\n") + 1]
        if len(whole) != len(text):
            f.truncate(len(whole.encode()))
        f.seek(0, os.SEEK_END)
        lines = whole.split("\n")[:-1]
        return lines[-1].rpartition("\t")[2] if lines else ""

    # ------------------------------------------------------------------------------ flush
    def _start_probe(self) -> None:
        if self._probe is None or not self._probe.is_alive():
            self._probe = threading.Thread(target=self._probe_loop, daemon=True,
                                           name="sweep-buffer-probe")
            self._probe.start()

    def _probe_loop(self) -> None:
        while self._buffering and not self._closed.wait(PROBE_S):
            self.flush()

    def flush(self) -> bool:
        """Send the buffered writes if the store answers; True when none are left.

        Never raises: a store still down leaves the file for a later attempt.
        """
        uri = getattr(self._client, "tracking_uri", None) or self._header.get("tracking_uri")
        if uri and str(uri).startswith(("http://", "https://")):
            from sweep.tracking.uris import UnreachableStoreError, check_reachable

            try:
                check_reachable(uri, timeout_s=5.0)
            except UnreachableStoreError:
                return False
        with self._lock:
            try:
                replay_file(self.path, self._client)
            except Exception:  # noqa: BLE001 (still down: try again later)
                return False
            self._buffering = False
            return True
