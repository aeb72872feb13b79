"""CPython's private parts the service uses, in one place. Checked against CPython 3.11.

- ``atexit._ncallbacks``: how many exit handlers are registered (CPython 3.0+), which
  `sweep.cli.end_refusal` needs to know that nothing waits for the interpreter's teardown.
  Where it is missing (another interpreter), `pending_exit_handlers` counts one, so the
  process ends as usual.
"""

from __future__ import annotations

import atexit

__all__ = ["pending_exit_handlers"]


def pending_exit_handlers() -> int:
    """The number of `atexit` handlers registered (1 where the interpreter cannot say).

    CPython 3.11 keeps counting a handler after `atexit.unregister`: the count errs towards
    the usual end, never towards the fast one.
    """
    count = getattr(atexit, "_ncallbacks", None)
    return 1 if count is None else int(count())
