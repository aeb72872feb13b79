"""pydantic's private parts the service uses, in one place. Checked against pydantic 2.14.4.

- ``pydantic.plugin._loader``: the first model pydantic builds imports it, and it imports
  ``importlib.metadata`` (with ``email``, ``zipfile`` and ``csv``: about a tenth of a refused
  spec's CPU time) even when ``PYDANTIC_DISABLE_PLUGINS`` is ``__all__``, where its one
  function, ``get_plugins``, returns no plugin without using it. `skip_plugin_loader` puts a
  module whose ``get_plugins`` returns none in its place, for the command line, which runs
  without plugins (`sweep.cli`).
"""

from __future__ import annotations

import os
import sys
import types

__all__ = ["LOADER", "LOADER_NAMES", "skip_plugin_loader"]

#: The module replaced, and the names pydantic imports from it.
LOADER = "pydantic.plugin._loader"
LOADER_NAMES = ("get_plugins",)


def _no_plugins() -> tuple[()]:
    return ()


def skip_plugin_loader() -> bool:
    """With ``PYDANTIC_DISABLE_PLUGINS=__all__``, a plugin loader that loads none; whether set.

    Nothing is replaced where the variable says otherwise (plugins then load as pydantic
    loads them) or where pydantic has already imported its loader.
    """
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") != "__all__" or LOADER in sys.modules:
        return False
    module = types.ModuleType(LOADER, "pydantic's plugin loader, with every plugin disabled.")
    module.get_plugins = _no_plugins  # type: ignore[attr-defined]
    sys.modules[LOADER] = module
    return True
