"""``sweep schema``: the study spec's JSON Schema for editors, or its field reference."""

from __future__ import annotations

import json

import typer

from sweep.cli.common import app


@app.command()
def schema(
    markdown: bool = typer.Option(False, "--markdown",
                                  help="Print the field reference (docs/spec-reference.md) "
                                       "instead."),
) -> None:
    """Print the JSON Schema of a study spec (fields, types, defaults, ranges).

    Point a YAML language server at it (``# yaml-language-server: $schema=FILE`` as a spec's
    first line) and an editor checks a spec as it is typed; ``sweep validate`` also checks the
    rules across fields.
    """
    from sweep.spec.reference import json_schema, reference_markdown

    if markdown:
        typer.echo(reference_markdown(), nl=False)
    else:
        typer.echo(json.dumps(json_schema(), indent=2))
