"""The ``sweep`` command line.

Bad input (a spec, a flag, a file) exits with status 2 and one message naming what is wrong,
before anything is written. Each command's work lives in its own module; this file only parses
flags and prints.
"""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

app = typer.Typer(
    name="sweep",
    help="Hyperparameter search and scaling studies for transformer models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def bad_input(message: str) -> NoReturn:
    """Print ``message`` as an error and exit with status 2 (bad input)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def parse_sets(pairs: list[str] | None) -> dict[str, object]:
    """Parse ``--set key=value`` flags; values are read as YAML scalars (ints, floats, bools).

    Raises:
        typer.Exit: With status 2 for a flag without ``=``.
    """
    import yaml

    out: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            bad_input(f"--set {pair!r} must have the form key=value")
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            out[key.strip()] = raw
    return out


if __name__ == "__main__":  # pragma: no cover
    app()
