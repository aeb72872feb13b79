"""Names of a package imported on first use (PEP 562), so importing it stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, lazy: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each name of ``lazy`` from its module when used.

    Args:
        package: The package's ``__name__``, for the error message.
        lazy: Each lazily imported name and the module that defines it.

    Raises:
        AttributeError: (from the returned function) a name the package does not have.
    """

    def __getattr__(name: str) -> Any:
        if name in lazy:
            return getattr(importlib.import_module(lazy[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
