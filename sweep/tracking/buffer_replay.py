"""Buffer files read back and sent: only those a trial of this study wrote.

The reading half of `sweep.tracking.buffer` (which writes them): `scan` tells the files of
this study (every line signed with its key, `sweep.tracking.buffer_auth`) from any other
``*.jsonl`` file, `replay_file` sends one file's writes in order, at most once each, and
`sync_folder` sends a folder's, counting what it sent per run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag

from sweep.tracking.buffer_auth import BufferKeyError, key_path, read_key, sent_mac, verify_lines
from sweep.tracking.faults import infrastructure_fault

#: The header line's ``format`` of a buffer file.
FORMAT = "transformer-sweep mlflow-buffer 2"

__all__ = ["FORMAT", "BufferRefusedError", "SyncResult", "buffered_runs", "locked",
           "replay_file", "scan", "sync_folder", "sync_to"]


@contextlib.contextmanager
def locked(path: Path, mode: str = "a+"):
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


@dataclass
class SyncResult:
    """What `sync_folder` sent.

    Attributes:
        runs: Run ids whose buffered writes were all sent (their files deleted).
        writes: Writes sent, in all.
        left: Run ids whose files remain because the store failed during the replay.
        error: The infrastructure fault that stopped the replay, if one did.
        rejected: ``(run id, reason)`` of files the store refused for another reason (the run
            was deleted, say); they are kept and tried again at the next sync.
        sent: Writes sent per run id (a run the store failed during counts what went).
        refused: ``(file, reason)`` of the ``*.jsonl`` files this study did not write
            (`BufferRefusedError`); nothing of them is sent, and they are left as they are.
    """

    runs: list[str]
    writes: int
    left: list[str]
    error: BaseException | None = None
    rejected: list[tuple[str, str]] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)
    refused: list[tuple[Path, str]] = field(default_factory=list)


class BufferRefusedError(ValueError):
    """A file in the buffer folder that is not one this study wrote (the message says why)."""


def _sent_path(path: Path) -> Path:
    return path.with_suffix(".sent")


def _read_header(line: str) -> dict[str, Any] | None:
    try:
        header = json.loads(line)
    except ValueError:
        return None
    return header if isinstance(header, dict) and header.get("format") == FORMAT else None


def _signed(path: Path, text: str) -> tuple[bytes, dict[str, Any], list[dict[str, Any]]]:
    """The study's key, the header and the writes of buffer file ``path`` holding ``text``.

    Every whole line must carry its MAC under the study's key, chained from the header's
    (`sweep.tracking.buffer_auth`); a last line without its newline was cut by a crash
    mid-write and is no write.

    Raises:
        BufferRefusedError: No usable key, a line whose MAC does not match, or a header that
            does not name the run the file is named after.
    """
    try:
        key = read_key(key_path(path.parent))
    except BufferKeyError as exc:
        raise BufferRefusedError(f"no key to check it with ({exc})") from None
    texts, bad = verify_lines(key, text.split("\n")[:-1])
    if not texts:
        raise BufferRefusedError("it does not carry this study's MAC (not written by a trial "
                                 "of this study)")
    if bad is not None:
        raise BufferRefusedError(f"line {bad + 1} does not carry this study's MAC (changed or "
                                 "added after the trial wrote the file)")
    header = _read_header(texts[0])
    if header is None or header.get("run_id") != path.stem:
        raise BufferRefusedError("its header does not name the run the file is named after")
    return key, header, [json.loads(t) for t in texts[1:]]


def _done(path: Path, key: bytes, run_id: str, n_ops: int) -> int:
    """How many writes of the file a replay already sent (its signed ``.sent`` record)."""
    try:
        count, _, mac = _sent_path(path).read_text().strip().partition("\t")
    except FileNotFoundError:
        return 0
    if (not count.isdigit() or int(count) > n_ops
            or not hmac.compare_digest(mac, sent_mac(key, run_id, int(count)))):
        raise BufferRefusedError(f"its record of writes sent ({_sent_path(path).name}) does not "
                                 "carry this study's MAC")
    return int(count)


def scan(folder: Path | str) -> tuple[list[tuple[Path, dict[str, Any]]], list[tuple[Path, str]]]:
    """The buffer files of ``folder`` this study wrote, with their headers; the others, why.

    Only ``*.jsonl`` files are looked at, and none is changed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return [], []
    found, refused = [], []
    for path in sorted(folder.glob("*.jsonl")):
        try:
            if path.is_symlink() or not path.is_file():
                raise BufferRefusedError("not a regular file")
            _, header, _ = _signed(path, path.read_text(encoding="utf-8"))
            found.append((path, header))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            refused.append((path, str(exc) if isinstance(exc, BufferRefusedError)
                            else f"unreadable ({type(exc).__name__})"))
    return found, refused


def buffered_runs(folder: Path | str) -> list[tuple[Path, dict[str, Any]]]:
    """The buffer files in ``folder`` this study wrote (`scan`), with their headers."""
    return scan(folder)[0]


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


def replay_file(path: Path | str | None, client: Any,
                on_sent: Callable[[], object] | None = None) -> int:
    """Send the writes of one buffer file in order, then delete it; return how many were sent.

    Resumes after the writes a previous replay sent (``<run_id>.sent``, signed). A missing
    file sends nothing. ``on_sent`` is called after each write the store took.

    Raises:
        Exception: The client's error when the store fails mid-replay (the file keeps the
            writes not sent yet).
        BufferRefusedError: The file is not one this study wrote (`_signed`); nothing sent.
    """
    if path is None:
        return 0
    path = Path(path)
    if path.is_symlink():
        raise BufferRefusedError(f"{path}: not a regular file")
    sent_path = _sent_path(path)
    with locked(path, "r") as f:
        if f is None:
            return 0
        key, header, ops = _signed(path, f.read())
        run_id = header["run_id"]
        sent = 0
        for index in range(_done(path, key, run_id, len(ops)), len(ops)):
            _apply(client, run_id, ops[index])
            sent += 1
            if on_sent is not None:
                on_sent()
            tmp = sent_path.with_suffix(".sent.tmp")
            tmp.write_text(f"{index + 1}\t{sent_mac(key, run_id, index + 1)}")
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
    """Replay every buffer file this study wrote in ``folder`` (`replay_file`).

    Stops at the first infrastructure fault (the store still does not answer); a file the
    store refuses otherwise is counted in ``rejected`` and the others are sent. Files the
    study did not write are listed in ``refused`` and never read further.

    Args:
        folder: A study's buffer folder (``<study>/mlflow-buffer``).
        client_for: Called with a file's header, returns the MLflow client to send it with.

    Returns:
        The `SyncResult`, with the writes sent per run.
    """
    files, refused = scan(folder)
    result = SyncResult([], 0, [], refused=refused)
    for i, (path, header) in enumerate(files):
        run_id = header["run_id"]

        def count(run_id: str = run_id) -> None:
            result.sent[run_id] = result.sent.get(run_id, 0) + 1
            result.writes += 1

        try:
            replay_file(path, client_for(header), count)
            result.runs.append(run_id)
        except BufferRefusedError as exc:  # changed since `scan` read it
            result.refused.append((path, str(exc)))
        except Exception as exc:  # noqa: BLE001 (reported in the result)
            if infrastructure_fault(exc) is None:
                result.rejected.append((run_id, f"{type(exc).__name__}: {exc}"))
                continue
            result.error = exc
            result.left.extend(h["run_id"] for _, h in files[i:])
            break
    return result
