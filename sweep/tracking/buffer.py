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
live trial neither loses nor doubles a write. Only files with this module's header line are
read (`FORMAT`); nothing else in the folder is touched.

The first failing write waits out MLflow's own HTTP retries (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``,
``MLFLOW_HTTP_REQUEST_TIMEOUT``) before it is buffered; the writes after it do not.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag

from sweep.tracking.faults import infrastructure_fault

#: The header line's ``format`` of a buffer file.
FORMAT = "transformer-sweep mlflow-buffer 1"
#: Seconds between attempts to send a buffered run while its trial trains.
PROBE_S = 10.0

__all__ = ["FORMAT", "PROBE_S", "BufferedClient", "SyncResult", "buffered_runs", "sync_to",
           "replay_file", "sync_folder"]


def _metric(m: Metric) -> list[object]:
    return [m.key, m.value, m.timestamp, m.step]


def _kv(items: Iterable[Param | RunTag]) -> list[list[str]]:
    return [[x.key, x.value] for x in items]


@contextlib.contextmanager
def _locked(path: Path, mode: str = "a+"):
    """Open ``path`` and hold an exclusive ``flock`` on it; yield the file, or None if gone.

    A file deleted (replayed) while we waited for the lock is opened again (mode ``a+``:
    created anew, so a writer never appends to the deleted one) or reported as None (mode
    ``r``).
    """
    while True:
        try:
            f = open(path, mode, encoding="utf-8")  # noqa: SIM115
        except FileNotFoundError:
            yield None
            return
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield f
                return
        finally:
            f.close()
        if "r" in mode and "+" not in mode:
            yield None
            return


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
        self.path = Path(folder) / f"{run_id}.jsonl" if folder is not None else None
        self._header = {"format": FORMAT, "run_id": run_id, **header}
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
        self._write({"op": "batch", "metrics": [_metric(m) for m in metrics],
                     "params": _kv(params), "tags": _kv(tags)},
                    lambda: self._client.log_batch(run_id, metrics=list(metrics),
                                                   params=list(params), tags=list(tags)))

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        self._write({"op": "batch", "metrics": [], "params": [], "tags": [[key, str(value)]]},
                    lambda: self._client.set_tag(run_id, key, value))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self._write({"op": "text", "text": text, "file": artifact_file},
                    lambda: self._client.log_text(run_id, text, artifact_file))

    def set_terminated(self, run_id: str, status: str | None = None,
                       end_time: int | None = None) -> None:
        end_time = end_time if end_time is not None else int(time.time() * 1000)
        self._write({"op": "end", "status": status, "end_time": end_time},
                    lambda: self._client.set_terminated(run_id, status, end_time=end_time))
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
        line = json.dumps(op, allow_nan=True) + "\n"
        with _locked(path) as f:  # "a+" opens at the end; a new file gets the header
            if f.tell() == 0:
                f.write(json.dumps(self._header) + "\n")
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

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


@dataclass
class SyncResult:
    """What `sync_folder` sent.

    Attributes:
        runs: Run ids whose buffered writes were all sent (their files deleted).
        writes: Writes sent.
        left: Run ids whose files remain because the store failed during the replay.
        error: The infrastructure fault that stopped the replay, if one did.
        rejected: ``(run id, reason)`` of files the store refused for another reason (the run
            was deleted, say); they are kept and tried again at the next sync.
    """

    runs: list[str]
    writes: int
    left: list[str]
    error: BaseException | None = None
    rejected: list[tuple[str, str]] = field(default_factory=list)


def _sent_path(path: Path) -> Path:
    return path.with_suffix(".sent")


def _read_header(line: str) -> dict[str, Any] | None:
    try:
        header = json.loads(line)
    except ValueError:
        return None
    return header if isinstance(header, dict) and header.get("format") == FORMAT else None


def buffered_runs(folder: Path | str) -> list[tuple[Path, dict[str, Any]]]:
    """The buffer files in ``folder`` (this module's format only), with their headers."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        try:
            with open(path, encoding="utf-8") as f:
                header = _read_header(f.readline())
        except (OSError, UnicodeDecodeError):
            continue
        if header is not None and header.get("run_id") == path.stem:
            found.append((path, header))
    return found


def _apply(client: Any, run_id: str, op: dict[str, Any]) -> None:
    kind = op.get("op")
    if kind == "batch":
        client.log_batch(run_id, metrics=[Metric(k, float(v), int(ts), int(s))
                                          for k, v, ts, s in op["metrics"]],
                         params=[Param(k, v) for k, v in op["params"]],
                         tags=[RunTag(k, v) for k, v in op["tags"]])
    elif kind == "text":
        client.log_text(run_id, op["text"], op["file"])
    elif kind == "end":
        client.set_terminated(run_id, op["status"], end_time=op["end_time"])
    else:
        raise ValueError(f"unknown buffered write {kind!r}")


def replay_file(path: Path | str | None, client: Any) -> int:
    """Send the writes of one buffer file in order, then delete it; return how many were sent.

    Resumes after the writes a previous replay sent (``<run_id>.sent``). A missing file sends
    nothing.

    Raises:
        Exception: The client's error when the store fails mid-replay (the file keeps the
            writes not sent yet).
        ValueError: The file is not a buffer file of this module.
    """
    if path is None:
        return 0
    path = Path(path)
    sent_path = _sent_path(path)
    with _locked(path, "r") as f:
        if f is None:
            return 0
        text = f.read()
        # A last line without its newline was cut by a crash mid-write: it is not a write.
        lines = text.split("\n")[:-1]
        header = _read_header(lines[0]) if lines else None
        if header is None:
            raise ValueError(f"{path}: not a buffer file of this service")
        try:
            done = int(sent_path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            done = 0
        sent = 0
        ops = [json.loads(line) for line in lines[1:] if line.strip()]
        for index in range(done, len(ops)):
            _apply(client, header["run_id"], ops[index])
            sent += 1
            tmp = sent_path.with_suffix(".sent.tmp")
            tmp.write_text(str(index + 1))
            os.replace(tmp, sent_path)
        path.unlink()
        sent_path.unlink(missing_ok=True)
        return sent


def sync_to(folder: Path | str, uri_for: Any) -> SyncResult:
    """`sync_folder` with each file sent to the store ``uri_for(header)`` names."""
    from mlflow import MlflowClient

    clients: dict[str, Any] = {}

    def client_for(header: dict[str, Any]) -> Any:
        uri = uri_for(header)
        if uri not in clients:
            clients[uri] = MlflowClient(uri)
        return clients[uri]

    return sync_folder(folder, client_for)


def sync_folder(folder: Path | str, client_for: Any) -> SyncResult:
    """Replay every buffer file in ``folder`` (`replay_file`).

    Stops at the first infrastructure fault (the store still does not answer); a file the
    store refuses otherwise is counted in ``rejected`` and the others are sent.

    Args:
        folder: A study's buffer folder (``<study>/mlflow-buffer``).
        client_for: Called with a file's header, returns the MLflow client to send it with.

    Returns:
        The `SyncResult`.
    """
    result = SyncResult([], 0, [])
    files = buffered_runs(folder)
    for i, (path, header) in enumerate(files):
        try:
            result.writes += replay_file(path, client_for(header))
            result.runs.append(header["run_id"])
        except Exception as exc:  # noqa: BLE001 (reported in the result)
            if infrastructure_fault(exc) is None:
                result.rejected.append((header["run_id"], f"{type(exc).__name__}: {exc}"))
                continue
            result.error = exc
            result.left.extend(h["run_id"] for _, h in files[i:])
            break
    return result
