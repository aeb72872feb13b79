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


@app.callback()
def main() -> None:
    """Hyperparameter search and scaling studies for transformer models."""


@app.command()
def validate(
    spec_path: str = typer.Argument(..., metavar="SPEC", help="Study spec YAML."),
    samples: int = typer.Option(256, min=1, help="Random configs to price with the cost model."),
    device: str = typer.Option(None, help="Device whose memory bounds max_memory_gb (default: "
                               "the spec's train.device)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Check a spec; print its search space and cost range without training anything.

    Exits 2 for an invalid spec, or a space in which no sampled config is valid and feasible.
    """
    import json

    from rich.table import Table

    from sweep import space
    from sweep.spec import SpecError, load_spec, spec_hash

    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        bad_input(str(exc))
    summary = space.summarize(spec, n_samples=samples, device=device)
    n_ok = summary["n_configs"] - summary["n_invalid"] - summary["n_infeasible"]
    if as_json:
        console.print_json(json.dumps({"name": spec.name, "spec_hash": spec_hash(spec),
                                       "search": spec.search.model_dump(mode="json"),
                                       **summary}))
    else:
        s = spec.search
        console.print(f"[bold]{spec.name}[/] ({spec_hash(spec)}): executor {s.executor}, "
                      f"sampler {s.sampler}, pruner {s.pruner}, scheduler {s.scheduler}, "
                      f"{s.n_trials} trials, objectives "
                      f"{', '.join(f'{o} ({d})' for o, d in spec.objective_directions())}")
        table = Table("parameter", "kind", "domain", "when")
        for row in summary["params"]:
            table.add_row(row["path"], row["kind"], row["domain"], row["when"])
        console.print(table)
        cost = Table("cost", "min", "max")
        for name, rng in summary["cost"].items():
            cost.add_row(name, *(f"{v:,.0f}" for v in rng) if rng else ("-", "-"))
        console.print(cost)
        console.print(f"{summary['n_configs']} configs priced (corners + random): {n_ok} ok, "
                      f"{summary['n_invalid']} invalid, {summary['n_infeasible']} over the "
                      "constraints", highlight=False)
        for kind in ("invalid", "infeasible"):
            for example in summary[f"{kind}_examples"]:
                console.print(f"  {kind}: {example}", highlight=False, soft_wrap=True)
    if n_ok == 0:
        bad_input(f"{spec_path}: none of {summary['n_configs']} sampled configs is valid and "
                  "within the constraints; the study could never train a trial")


if __name__ == "__main__":  # pragma: no cover
    app()
