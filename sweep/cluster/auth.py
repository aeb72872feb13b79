"""The Ray cluster's authentication token, found where Ray looks for it and never shown.

Ray's token authentication (``RAY_AUTH_MODE=token``, on by default for ``ray start`` since Ray
2.59) makes the dashboard's Jobs API answer only requests with ``Authorization: Bearer
<token>``. Ray reads the token from, in order: ``RAY_AUTH_TOKEN``, the file named by
``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token`` (Ray's "Token Authentication" design page,
"Token sources and precedence"). `find_token` reads the same places itself, so a submission
works whatever the client's ``RAY_AUTH_MODE`` says, and wraps the value in `ClusterToken`,
whose ``repr`` and ``str`` never contain it.
"""

from __future__ import annotations

import os
from pathlib import Path

from sweep.errors import InputError

__all__ = ["ClusterToken", "TokenError", "default_token_path", "find_token"]


class TokenError(InputError, ValueError):
    """``RAY_AUTH_TOKEN_PATH`` names a file that cannot be read or is empty."""


class ClusterToken:
    """A Ray authentication token and where it came from; the value is never printed.

    Attributes:
        source: ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH (<path>)`` or the default file's path,
            for messages.
    """

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str) -> None:
        self._value, self.source = value, source

    def headers(self) -> dict[str, str]:
        """The HTTP header the Jobs API checks: ``Authorization: Bearer <token>``."""
        return {"Authorization": f"Bearer {self._value}"}

    def __repr__(self) -> str:
        return f"ClusterToken(from {self.source})"

    __str__ = __repr__


def default_token_path() -> Path:
    """Ray's default token file, ``~/.ray/auth_token``."""
    return Path.home() / ".ray" / "auth_token"


def find_token() -> ClusterToken | None:
    """The token a Ray client on this machine would send, or None where there is none.

    ``RAY_AUTH_TOKEN`` when set and not empty, else the file ``RAY_AUTH_TOKEN_PATH`` names,
    else ``~/.ray/auth_token`` when it exists; surrounding whitespace is dropped, as Ray does.

    Raises:
        TokenError: ``RAY_AUTH_TOKEN_PATH`` is set but its file cannot be read or is empty
            (Ray treats that as a fatal misconfiguration rather than fall back).
    """
    value = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if value:
        return ClusterToken(value, "RAY_AUTH_TOKEN")
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if named:
        source = f"RAY_AUTH_TOKEN_PATH ({named})"
        try:
            value = Path(named).expanduser().read_text().strip()
        except OSError as exc:
            raise TokenError(f"{source}: cannot read the token file ({exc.strerror or exc})"
                             ) from None
        if not value:
            raise TokenError(f"{source}: the token file is empty")
        return ClusterToken(value, source)
    path = default_token_path()
    try:
        value = path.read_text().strip()
    except OSError:
        return None
    return ClusterToken(value, str(path)) if value else None
