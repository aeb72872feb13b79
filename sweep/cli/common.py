"""The ``sweep`` Typer app and what every command shares.

Consoles, which pass every line through `sweep.redact.redact` (no secret is shown); the exit-2
message for bad input, given in one place for every `sweep.errors.InputError` and
`sweep_models.ConfigError` a command raises; ``--set`` parsing:
one syntax for every command that takes config fields (``sweep estimate``, ``sweep train``),
``FIELD=VALUE`` or ``SECTION.FIELD=VALUE`` (``d_model=96`` and ``model.d_model=96`` are the
same flag).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

import typer
import yaml
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from sweep.errors import InputError
from sweep.redact import redact
from sweep.streams import guard_std_streams
from sweep_models.errors import ConfigError


class _Flag(TyperOption):
    """A flag, which help writes without a type: Typer 0.2x's gives it one (``--quiet <bool>``)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


class _Argument(TyperArgument):
    """An argument the usage line writes as its metavar (``SPEC``, ``[STUDY_OR_DIR]``).

    Typer 0.2x wraps a required argument in braces there (``{SPEC}``).
    """

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        if self.metavar is not None:
            return [self.metavar]
        name = (self.name or "").upper()
        return [name if self.required else f"[{name}]"]


def plain_help(text: str | None) -> str | None:
    r"""Help text as a terminal shows it: no reST markup, paragraphs left to rewrap.

    The docstrings that serve as help are written for the code too (``sweep run``, `Name`);
    help shows them without the backticks, each paragraph as one line that rich wraps to the
    terminal's width (a paragraph that starts with ``\b`` keeps its lines, as click's).
    """
    if not text:
        return text
    text = re.sub(r"``(.+?)``", r"\1", inspect.cleandoc(text), flags=re.S)
    text = re.sub(r"`([^`\s][^`]*?)`", r"\1", text)
    paragraphs = text.split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n"))
                       for p in paragraphs)


def _show_params_plainly(params: list[Any]) -> list[Any]:
    """Flags without a type, arguments by their metavar, help without markup."""
    for param in params:  # Typer builds each as one of its own; these change only the help
        if isinstance(param, TyperOption) and param.is_flag:
            param.__class__ = _Flag
        elif isinstance(param, TyperArgument):
            param.__class__ = _Argument
        if getattr(param, "help", None):
            param.help = plain_help(param.help)
    return params


class _Command(TyperCommand):
    """A command whose help writes flags and arguments as the README does; bad input exits 2.

    Any `sweep.errors.InputError` or `sweep_models.ConfigError` raised while the command runs
    ends it here, the one place: its message as one ``error:`` line and exit status 2
    (`bad_input`). Messages that need a command's own context (``data.uri: ``) are added where
    the command catches them.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = plain_help(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _show_params_plainly(super().get_params(ctx))

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (InputError, ConfigError) as exc:
            bad_input(str(exc))


#: Each command's module under ``sweep.cli``, in the order help lists them; a test holds it to
#: the commands each module registers.
COMMAND_MODULES = {
    "run": "study", "validate": "spec", "plan": "plan", "results": "results", "ui": "results",
    "dashboard": "results", "analyze": "analyze", "train": "train", "sample": "train",
    "estimate": "estimate", "coord-check": "coord", "schema": "spec", "worker": "study",
    "sync": "study", "submit": "cluster", "status": "cluster", "jobs": "cluster",
    "logs": "cluster", "stop": "cluster",
}

#: ``sweep --help`` lists the commands in the order of a user's day: run a study, look at it,
#: analyse it, train and sample the chosen model; then the tools, then the cluster's commands
#: (`COMMAND_MODULES`'s order).
COMMAND_ORDER = tuple(COMMAND_MODULES)


class Group(TyperGroup):
    """A command group whose help lists `COMMAND_ORDER` first and writes flags plainly."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = plain_help(self.help)

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(names, key=lambda name: rank.get(name, len(rank)))

    def get_params(self, ctx: Any) -> list[Any]:
        return _show_params_plainly(super().get_params(ctx))


class _Typer(typer.Typer):
    """`typer.Typer` whose commands are `_Command`s unless told otherwise.

    Called as the program (``sweep``, ``python -m sweep.cli``), it first guards stdout and
    stderr (`sweep.streams.guard_std_streams`): a reader that goes away (``| head``) never
    changes what a command does, nor its exit status.
    """

    def __init__(self, *args: Any, cls: type[TyperGroup] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", {"help_option_names": ["-h", "--help"]})
        super().__init__(*args, cls=cls or Group, **kwargs)

    def command(self, *args, cls: type[TyperCommand] | None = None, **kwargs):
        return super().command(*args, cls=cls or _Command, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        guard_std_streams()
        return super().__call__(*args, **kwargs)


app = _Typer(
    name="sweep",
    help="Hyperparameter search and scaling studies for transformer models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def command_group(**kwargs) -> typer.Typer:
    """A sub-command group (``sweep analyze ...``) whose commands' help is written as `app`'s."""
    return _Typer(**kwargs)


#: The consoles every command prints through (`sweep.cli.consoles.RedactingConsole`), each
#: name and whether it writes to stderr: made on first use (PEP 562's module ``__getattr__``),
#: so that a refusal never imports rich.
_CONSOLES = {"console": False, "err_console": True}


def _console(name: str) -> Any:
    """The console ``name`` of `_CONSOLES`, made once."""
    if name not in globals():
        from sweep.cli.consoles import RedactingConsole

        globals()[name] = RedactingConsole(stderr=_CONSOLES[name])
    return globals()[name]


def __getattr__(name: str) -> Any:
    if name not in _CONSOLES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _console(name)


def bad_input(message: str) -> NoReturn:
    """Print ``message`` as one ``error:`` line on stderr and exit with status 2 (bad input).

    Written without rich (a refusal must be fast): bold red ``error:`` on a colour terminal
    (not with ``NO_COLOR`` or ``TERM=dumb``, as rich decides), the message itself never styled.
    """
    stream = sys.stderr
    if stream is not None:  # None: started with stderr closed; the status still says it
        colour = (stream.isatty() and "NO_COLOR" not in os.environ
                  and os.environ.get("TERM") != "dumb")
        label = "\x1b[1;31merror:\x1b[0m" if colour else "error:"
        stream.write(f"{label} {redact(message)}\n")
        stream.flush()
    raise typer.Exit(code=2)


@contextlib.contextmanager
def as_bad_input(prefix: str, *errors: type[Exception]) -> Iterator[None]:
    """Any of ``errors`` raised inside exits 2 with its message after ``PREFIX: ``.

    For errors whose message does not name the flag or field at fault (``--out DIR``,
    ``data.uri``); an `OSError` gives only its reason (``--out DIR: Permission denied``).
    """
    try:
        yield
    except errors as exc:
        reason = exc.strerror or exc if isinstance(exc, OSError) else exc
        bad_input(f"{prefix}: {reason}")


def stopped(message: str, code: int) -> NoReturn:
    """Print why a study stopped early (one line, no traceback) and exit with ``code``."""
    from rich.markup import escape

    _console("err_console").print(f"[bold yellow]stopped:[/] {escape(message)}",
                                  highlight=False, soft_wrap=True)
    raise typer.Exit(code=code)


def auto_device(device: str) -> str:
    """``--device auto`` as `sweep.train.hardware.pick_device` reads it; others unchanged.

    ``cuda`` where torch finds a CUDA device, else ``cpu``. Torch is loaded only where a CUDA
    driver is present (`sweep.train.cuda_probe`).
    """
    if device != "auto":
        return device
    from sweep.train.cuda_probe import no_cuda_driver

    if no_cuda_driver():
        return "cpu"
    from sweep.train.hardware import pick_device

    return pick_device("auto").type


def parse_sets(pairs: list[str] | None) -> dict[str, object]:
    """Parse ``--set key=value`` flags; values are YAML scalars (ints, floats, bools, lists).

    ``3e-4`` is read as a number.

    Raises:
        typer.Exit: With status 2 for a flag without ``=``.
    """
    out: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            bad_input(f"--set {pair!r} must have the form key=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str):
            # PyYAML follows YAML 1.1, which reads 3e-4 as a string; users mean a number.
            try:
                value = float(value)
            except ValueError:
                pass
        out[key.strip()] = value
    return out


#: The accepted forms of ``--set``, named in every message that refuses one.
SET_FORMS = "FIELD=VALUE or SECTION.FIELD=VALUE (d_model=96, model.d_model=96, train.lr=3e-4)"


def split_sets(sets: dict[str, object], sections: tuple[str, ...] = ("model", "train"),
               ) -> dict[str, dict[str, object]]:
    """Sort parsed ``--set`` flags into config sections by field name.

    A key is ``FIELD`` (the section whose config has that field; no field name is shared by
    `sweep_models.ModelConfig` and `sweep.train.TrainConfig`) or ``SECTION.FIELD``.

    Args:
        sets: `parse_sets`'s result.
        sections: The sections this command takes, of ``model`` and ``train``.

    Returns:
        ``{section: {field: value}}`` with every section of ``sections`` present.

    Raises:
        typer.Exit: With status 2 for a key of another section or an unknown field, the
            message naming the flag, the closest field names and `SET_FORMS`.
    """
    import difflib

    from sweep.train.config import TrainConfig
    from sweep_models.config import ModelConfig

    fields = {"model": ModelConfig.field_names(), "train": TrainConfig.field_names()}
    out: dict[str, dict[str, object]] = {section: {} for section in sections}
    for key, value in sets.items():
        head, dot, name = key.partition(".")
        if dot:
            if head not in fields:
                bad_input(f"--set {key}: {head!r} is not a section (model or train); "
                          f"accepted forms: {SET_FORMS}")
            if head not in sections:
                bad_input(f"--set {key}: this command takes {' and '.join(sections)} fields "
                          f"only; accepted forms: {SET_FORMS}")
            found = head if name in fields[head] else None
        else:
            name = key
            found = next((s for s in sections if name in fields[s]), None)
        if found is None:
            known = [f for s in ((head,) if dot else sections) for f in fields[s]]
            close = difflib.get_close_matches(name, known, n=3)
            where = f"a {head} field" if dot else f"a {' or '.join(sections)} field"
            bad_input(f"--set {key}: {name!r} is not {where}"
                      + (f" (did you mean {', '.join(close)}?)" if close else "")
                      + f"; accepted forms: {SET_FORMS}")
        out[found][name] = value
    return out


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"sweep {version('transformer-sweep')}")
        raise typer.Exit()


@app.callback()
def main(
    show_version: bool = typer.Option(False, "--version", callback=_print_version,
                                      is_eager=True, help="Print the version and exit."),
) -> None:
    """Hyperparameter search and scaling studies for transformer models."""
    # MLflow announces every store migration at INFO; the commands report what matters.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # With a tracking server MLflow writes "View run ... at: URL" to stdout for every run it
    # ends, which would break `--json` output; `sweep results` and `sweep ui` show the runs.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
