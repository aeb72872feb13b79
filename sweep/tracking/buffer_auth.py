"""The study's key that signs its buffer files, so that a replay sends only what a trial wrote.

Anyone who can write to a study folder could otherwise plant a file in ``mlflow-buffer/``
whose replay rewrites a trial's metrics and tags. Each line of a buffer file
(`sweep.tracking.buffer`) carries an HMAC-SHA256 (RFC 2104, Python's `hmac`) chained from the
previous line's, the first one over the header that names the run: a line changed, added,
reordered or moved from another run's file or another study's breaks the chain. The key is 32
random bytes (`secrets`) in ``mlflow-buffer.key`` beside the buffer folder (not in it), made by
the first trial that buffers, readable by its owner only. A key file that is not a regular
file of this user, or that others may read or write, is not used: nothing is signed or sent
with it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

__all__ = ["BufferKeyError", "key_path", "line_mac", "read_key", "sent_mac", "study_key",
           "verify_lines"]

_KEY_HEX = 64  # 32 bytes


class BufferKeyError(OSError):
    """The study's buffer key cannot be used (missing, or not this user's private file)."""


def key_path(folder: Path | str) -> Path:
    """``<study>/mlflow-buffer.key`` for the buffer folder ``<study>/mlflow-buffer``."""
    return Path(folder).with_suffix(".key")


def read_key(path: Path) -> bytes:
    """The key in ``path``; never creates one.

    Raises:
        BufferKeyError: Missing, a link or not a regular file, another user's, readable or
            writable by others, or not 64 hex digits.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise BufferKeyError(f"{path} does not exist: no buffer of this study can be "
                             "trusted") from None
    if not stat.S_ISREG(info.st_mode):
        raise BufferKeyError(f"{path} is not a regular file")
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise BufferKeyError(f"{path} is another user's or open to others (mode "
                             f"{stat.S_IMODE(info.st_mode):o}); only a key of this user's, "
                             "mode 600, is used")
    text = path.read_text(encoding="ascii", errors="replace").strip()
    if len(text) != _KEY_HEX or any(c not in "0123456789abcdef" for c in text):
        raise BufferKeyError(f"{path} holds no key")
    return bytes.fromhex(text)


def study_key(path: Path) -> bytes:
    """The key in ``path``, made first if there is none (atomically: one key per study).

    Raises:
        BufferKeyError: An existing key file that cannot be used (`read_key`).
        OSError: The folder cannot be written.
    """
    if not os.path.lexists(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (secrets.token_hex(_KEY_HEX // 2) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if another process made the key first: that one holds
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return read_key(path)


def line_mac(key: bytes, previous: str, line: str) -> str:
    """The MAC of ``line`` after the line whose MAC is ``previous`` ("" for the header)."""
    return hmac.new(key, f"{previous}\n{line}".encode(), hashlib.sha256).hexdigest()


def sent_mac(key: bytes, run_id: str, count: int) -> str:
    """The MAC of the record that ``count`` writes of run ``run_id`` were sent."""
    return hmac.new(key, f"sent {run_id} {count}".encode(), hashlib.sha256).hexdigest()


def verify_lines(key: bytes, lines: list[str]) -> tuple[list[str], int | None]:
    r"""The JSON text of each signed line, in order; the index of the first bad line, or None.

    Each line is ``<json>\t<mac>`` (`line_mac`, chained); a line whose MAC does not match
    ends the list there.
    """
    texts: list[str] = []
    previous = ""
    for index, line in enumerate(lines):
        text, tab, mac = line.rpartition("\t")
        if not tab or not hmac.compare_digest(mac, line_mac(key, previous, text)):
            return texts, index
        texts.append(text)
        previous = mac
    return texts, None
