"""The ``sweep`` command line: one module per command group, registered on one Typer app.

Bad input (a spec, a flag, a file) exits with status 2 and one message naming what is wrong,
before anything is written. Each command's work lives in its package; these modules only parse
flags and print, importing the heavy packages (torch, MLflow, Optuna) inside the command that
needs them so that ``sweep validate`` answers fast.

The program (`main`: ``sweep``, ``python -m sweep.cli``) imports only the module of the
command its command line names (`COMMAND_MODULES`), and every module for help, completion or
a name it does not know. ``sweep.cli.app`` is the app with every command registered.

The command line runs without pydantic plugins unless ``PYDANTIC_DISABLE_PLUGINS`` is set:
finding them reads the entry points of every installed distribution, about 15 ms of a refusal's
CPU time in an environment with MLflow, Ray and torch installed; and without pydantic's plugin
loader, whose imports cost as much again (`sweep.adapters.pydantic.skip_plugin_loader`).
"""

import importlib
import os
import sys
from typing import Any

from sweep.adapters.pydantic import skip_plugin_loader

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
skip_plugin_loader()

from sweep.cli.common import COMMAND_MODULES  # noqa: E402 - after the loader is replaced

__all__ = ["COMMAND_MODULES", "app", "main"]


def _app(modules: Any) -> Any:
    """`sweep.cli.common.app` with the commands of ``modules`` registered (imported)."""
    for module in modules:
        importlib.import_module(f"sweep.cli.{module}")
    from sweep.cli.common import app as typer_app

    return typer_app


def main() -> None:
    """Run the command line ``sys.argv``, importing only the module of the command it names."""
    args = sys.argv[1:2]
    module = COMMAND_MODULES.get(args[0]) if args else None
    if module is None or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        _app(sorted(set(COMMAND_MODULES.values())))()
    else:
        _app([module])()


def __getattr__(name: str) -> Any:
    if name == "app":
        return _app(sorted(set(COMMAND_MODULES.values())))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
