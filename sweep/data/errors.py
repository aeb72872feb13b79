"""`DataError`, what every corpus problem raises.

It imports nothing heavy, so the light checks (`sweep.data.uris`) raise it without numpy.
"""

from __future__ import annotations

from sweep.errors import InputError

__all__ = ["DataError"]


class DataError(InputError):
    """A corpus cannot be used; the message names its URI and what is wrong."""
