"""Standard streams that a reader going away never breaks (``sweep run SPEC | head -3``).

Python ignores SIGPIPE, so a write to a pipe whose reader has closed raises `BrokenPipeError`
(EPIPE) wherever it happens: a progress line, a note, a library's warning; rich's consoles turn
it into ``SystemExit(1)``. Either, raised inside a study, would end it as if it had failed.
`guard_std_streams` wraps ``sys.stdout`` and ``sys.stderr`` so that the first write that meets a
closed reader points the stream's file descriptor at ``os.devnull`` (the advice of the Python
documentation, signal module, "Note on SIGPIPE") and the output is dropped from then on: the
program goes on as it would have, and ends with the status it would have had, without a
traceback.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, TextIO

__all__ = ["GuardedStream", "guard_std_streams"]

_lock = threading.Lock()


class GuardedStream:
    """A text stream whose writes and flushes survive the reader going away.

    Everything but `write`, `writelines` and `flush` is the wrapped stream's (``encoding``,
    ``isatty``, ``fileno``), so rich and click treat it as the stream itself.

    Args:
        stream: The stream to guard (``sys.stdout``, ``sys.stderr``).
        name: ``stdout`` or ``stderr``, for `closed_streams`.
    """

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream, self._name = stream, name
        self.closed_reader = False

    def _reader_gone(self) -> None:
        """Point the descriptor at ``os.devnull``: what is buffered and what follows is dropped."""
        with _lock:
            if self.closed_reader:
                return
            self.closed_reader = True
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._stream.fileno())
                os.close(devnull)
            except (OSError, ValueError):  # no descriptor of its own (a test's stream)
                pass

    def write(self, text: str) -> int:
        """Write ``text``; once the reader has gone, drop it. Returns ``len(text)``."""
        if not self.closed_reader:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def writelines(self, lines: Any) -> None:
        """Write each of ``lines`` (`write`)."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Flush the stream; after the reader has gone, into ``os.devnull``."""
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()
            try:
                self._stream.flush()
            except OSError:
                pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_std_streams() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in `GuardedStream` (once; SIGPIPE ignored).

    Only the process's own streams are wrapped (``sys.__stdout__``, ``sys.__stderr__``): a
    stream a test put in their place is left as it is.
    """
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # EPIPE, not death, if a library reset it
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and stream is getattr(sys, f"__{name}__"):
            setattr(sys, name, GuardedStream(stream, name))

