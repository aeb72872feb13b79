"""``sweep analyze transfer``: the transfer kind's analysis command.

How far a transfer study's best learning rate moves with width (`sweep.scaling.transfer`): the
best rate per width on the grid and between grid points, the grid steps it moves, its drift per
doubling of width with a bootstrap interval; ``transfer.png`` written and logged with the JSON
to the study's parent run.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from sweep.cli.analysis import (
    draw_figure,
    log_analysis,
    print_done,
    read_analysed_study,
    study_spec,
)
from sweep.cli.analyze_tables import print_transfer_reports, report_console
from sweep.cli.common import bad_input
from sweep.schema import TRANSFER_ANALYSIS_ARTIFACT, TRANSFER_PLOTS_ARTIFACT_DIR

__all__ = ["HELP", "NAME", "command"]

#: The command's name under ``sweep analyze``.
NAME = "transfer"
HELP = (
    "How far the best learning rate moves with width in a transfer study.\n\n"
    "Prints, per group of the grid (e.g. each parametrization), the best learning rate at each "
    "width on the grid and between grid points (a parabola's vertex in log lr), how many grid "
    "steps the best point moves across the widths, and the drift: doublings of the best "
    "learning rate per doubling of width, with a bootstrap interval. Writes transfer.png "
    "(loss against lr, a line per width) to --out and logs it with the JSON to the study's "
    "parent run. Exits 2 for bad input."
)


def transfer_spec(study: str, attrs: dict[str, Any]) -> Any:
    """The stored spec of a transfer study; exits 2 when it is not one or cannot be read."""
    spec = study_spec(attrs, "no transfer analysis")
    if spec is None or spec.section("transfer") is None:
        bad_input(f"study {attrs['study']!r} is not a transfer study (its spec has no "
                  "transfer section)" if spec is not None else
                  f"study {attrs['study']!r}: its spec could not be read")
    return spec


def command(
    study: str = typer.Argument(..., metavar="STUDY_OR_DIR",
                                help="Study name (./runs/<name>), its folder, or its mlflow.db."),
    bootstrap: int = typer.Option(1000, min=0, help="Bootstrap resamples for the drift's "
                                                    "interval (0: none)."),
    seed: int = typer.Option(0, help="Seed of the bootstrap resampling."),
    out: str = typer.Option(None, "--out", metavar="DIR",
                            help="Folder for transfer.png (default: <study dir>/analysis)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON list, one object per "
                                                       "group."),
    tracking_uri: str = typer.Option(None, help="MLflow tracking URI (then STUDY is the "
                                                "experiment name), e.g. http://host:5000."),
) -> None:
    """The best learning rate per width of a transfer study, and its drift with width."""
    trials, attrs = read_analysed_study(study, tracking_uri)
    spec = transfer_spec(study, attrs)
    from sweep.kinds.transfer.grid import grid_fields
    from sweep.scaling.transfer import analyze_transfer, transfer_figure, transfer_points

    points = transfer_points(trials, grid_fields(spec))
    reports = analyze_transfer(points, n_bootstrap=bootstrap, seed=seed)
    if not reports:
        bad_input(f"study {attrs['study']!r}: no group has trained points at two widths yet "
                  f"({len(points)} points trained of {len(trials)} trials)")
    points.attrs.update(attrs)
    path = draw_figure(out, points, study, "transfer.png",
                       lambda p: transfer_figure(reports, p))
    data = [r.to_dict() for r in reports]
    done = [f"wrote {path}"]
    done += log_analysis(attrs, data, path, TRANSFER_ANALYSIS_ARTIFACT,
                         TRANSFER_PLOTS_ARTIFACT_DIR)
    if as_json:
        print(json.dumps(data))
    else:
        print_transfer_reports(reports, report_console())
    print_done(done, as_json)
