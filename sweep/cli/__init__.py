"""The ``sweep`` command line: one module per command group, registered on one Typer app.

Bad input (a spec, a flag, a file) exits with status 2 and one message naming what is wrong,
before anything is written. Each command's work lives in its package; these modules only parse
flags and print, importing the heavy packages (torch, MLflow, Optuna) inside the command that
needs them so that ``sweep validate`` answers fast.

The command line (`main`) imports only the module of the command it names
(`COMMAND_MODULES`), and every module for help, completion or a name it does not know.
``sweep.cli.app`` is the app with every command registered.

The program (`program`: the ``sweep`` script, ``python -m sweep.cli``) is `main`, except that a
refusal (exit status 2) ends the process as soon as its message is out when nothing is left to
clean up (`end_refusal`): the interpreter's teardown, which frees every module and collects
garbage once more, is 6% of a refusal's CPU time and changes nothing outside the process. A
caller of `main` gets its ``SystemExit`` as usual.

The command line runs without pydantic plugins unless ``PYDANTIC_DISABLE_PLUGINS`` is set:
finding them reads the entry points of every installed distribution, about 15 ms of a refusal's
CPU time in an environment with MLflow, Ray and torch installed; and without pydantic's plugin
loader, whose imports cost as much again (`sweep.adapters.pydantic.skip_plugin_loader`).
"""

import importlib
import os
import sys
import threading
from typing import Any

from sweep.adapters.interpreter import pending_exit_handlers
from sweep.adapters.pydantic import skip_plugin_loader

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
skip_plugin_loader()

from sweep.cli.common import COMMAND_MODULES  # noqa: E402 - after the loader is replaced

__all__ = ["COMMAND_MODULES", "app", "end_refusal", "main", "program"]


def _app(modules: Any) -> Any:
    """`sweep.cli.common.app` with the commands of ``modules`` registered (imported)."""
    for module in modules:
        importlib.import_module(f"sweep.cli.{module}")
    from sweep.cli.common import app as typer_app

    return typer_app


def main() -> None:
    """Run the command line ``sys.argv``, importing only the module of the command it names.

    Raises:
        SystemExit: The command's exit status, as click ends every command.
    """
    args = sys.argv[1:2]
    module = COMMAND_MODULES.get(args[0]) if args else None
    if module is None or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        _app(sorted(set(COMMAND_MODULES.values())))()
    else:
        _app([module])()


def program() -> None:
    """The ``sweep`` program, ``python -m sweep.cli``: `main`, refusals ended by `end_refusal`."""
    try:
        main()
    except SystemExit as exc:
        if exc.code == 2:
            end_refusal()
        raise


def end_refusal() -> None:
    """End the process now with status 2 if nothing waits for the interpreter's teardown.

    That is: no exit handler registered (`atexit`: MLflow, Ray, logging and multiprocessing
    register theirs on import), no thread but this one, no profiler or tracer (``python -m
    cProfile -o FILE`` writes FILE after the program), and no interactive prompt to follow
    (``python -i``, ``PYTHONINSPECT``). Bad input is refused before anything is opened or
    written, so the teardown would only free memory; the two standard streams are flushed, then
    `os._exit`. Otherwise it returns, and the process ends as usual.
    """
    if (pending_exit_handlers() or threading.active_count() > 1 or sys.getprofile() is not None
            or sys.gettrace() is not None or sys.flags.inspect
            or os.environ.get("PYTHONINSPECT")):
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: started with that descriptor closed
                stream.flush()
        except (OSError, ValueError):  # a closed stream: end as usual, which reports nothing
            return
    os._exit(2)


def __getattr__(name: str) -> Any:
    if name == "app":
        return _app(sorted(set(COMMAND_MODULES.values())))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
