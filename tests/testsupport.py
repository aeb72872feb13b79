"""Functions several test modules share (importable as ``testsupport``: tests/ is on sys.path).

Fixtures live in ``conftest.py``; plain functions a test calls live here.
"""

import socket


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (a server started next may take it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
