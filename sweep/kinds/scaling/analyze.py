"""``sweep analyze scaling``: the scaling kind's analysis command.

Fits scaling laws (Chinchilla approaches 1-3 and VPNLS, `sweep.scaling`) to a study's trained
points or a table of points (CSV or parquet, anyone's read through `sweep.scaling.options`),
prints the compute-optimal models per target budget, recommends shapes of the study's size rule
nearest to each N_opt (`sweep.kinds.scaling.recommend`), writes the plots and logs them with the
fits to the study's parent run. Flags are checked before the fits, MLflow and matplotlib are
imported (the table's flags before pandas), so bad input exits 2 at once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer

from sweep.cli import common
from sweep.cli.analysis import check_local_store, out_folder, print_done, study_spec
from sweep.cli.analyze_tables import excluded_text, print_scaling_report, report_console
from sweep.cli.common import bad_input

__all__ = ["HELP", "NAME", "command"]

#: The command's name under ``sweep analyze``.
NAME = "scaling"
HELP = (
    "Fit scaling laws (Chinchilla approaches 1, 2, 3 and VPNLS) and size compute-optimal "
    "models.\n\n"
    "Prints each fit's parameters with bootstrap intervals and the compute-optimal N_opt, D_opt "
    "and loss per target budget (C = 6ND); writes the plots to --out and, for a study, logs the "
    "plots and the fits' JSON to its parent MLflow run. An approach that cannot be fitted is "
    "reported and the others still run; exits 1 when none could be, 2 for bad input.\n\n"
    "A table of anyone's is read as it is: --columns names its columns, --where picks its rows "
    "and --convention 6ND derives n_tokens from its FLOPs."
)


def command(
    study: str = typer.Argument(None, metavar="[STUDY_OR_DIR]",
                                help="Study name (./runs/<name>), its folder, or its mlflow.db."),
    csv: str = typer.Option(None, "--csv", metavar="FILE",
                            help="Fit a table instead, CSV or parquet (.parquet, .pq): columns "
                                 "n_params, n_tokens, loss (optional flops, budget)."),
    columns: list[str] = typer.Option(None, "--columns", metavar="NAME=COLUMN",
                                      help="Read the table's COLUMN as NAME (n_params, "
                                           "n_tokens, loss, flops, budget), e.g. --columns "
                                           "n_params=\"Model Size\"; repeat for each."),
    where: list[str] = typer.Option(None, "--where", metavar="COLUMN=VALUE",
                                    help="Fit only the table's rows whose COLUMN is VALUE "
                                         "(text or the same number); repeat: one column's "
                                         "values any, different columns all."),
    convention: str = typer.Option(None, "--convention", metavar="6ND",
                                   help="Derive n_tokens from the table's flops column (else "
                                        "budget) as D = C / (6N), for a table without it."),
    huber_delta: str = typer.Option("1e-3", "--huber-delta", metavar="DELTA",
                                    help="Approach 3's Huber delta on log loss, in [1e-06, "
                                         "1e+09]: Hoffmann's 1e-3; a large one (1e9) is least "
                                         "squares."),
    approach: str = typer.Option("all", help="1, 2, 3, vpnls or all (several joined by "
                                             "commas, e.g. 2,3)."),
    budget: list[str] = typer.Option(None, "--budget", metavar="FLOPS",
                                     help="Target budget for the compute-optimal table "
                                          "(repeat for several). Default: the study's own."),
    bootstrap: int = typer.Option(1000, min=0, help="Bootstrap resamples per fit, for the "
                                                    "intervals (0: none)."),
    seed: int = typer.Option(0, help="Seed of the bootstrap resampling."),
    out: str = typer.Option(None, "--out", metavar="DIR",
                            help="Folder for the plots (default: <study dir>/analysis, or "
                                 "./analysis with --csv)."),
    n_params: str = typer.Option("total", "--n-params",
                                 help="Parameter count: total (Chinchilla) or non-embedding "
                                      "(Kaplan)."),
    exclude: list[str] = typer.Option(None, "--exclude", metavar="TRIAL",
                                      help="Leave out this point before fitting: a study's "
                                           "trial number, or a --csv table's data row from 0, "
                                           "as the influential-point note names it (repeat, or "
                                           "join by commas)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object keyed by "
                                                       "approach, with the verdict and notes."),
    tracking_uri: str = typer.Option(None, help="MLflow tracking URI (then STUDY is the "
                                                "experiment name), e.g. http://host:5000."),
) -> None:
    """Fit scaling laws to a study or a table and print the compute-optimal models."""
    table, delta = _table_flags(csv, columns, where, convention, huber_delta)
    budgets = _scaling_flags(study, csv, budget, tracking_uri)
    approaches = _approaches(approach, n_params)
    if csv is not None:
        points, curves = _csv_points(csv, n_params, table), None
    else:
        points, curves = _load_study(study, tracking_uri, n_params, curves="1" in approaches)
    points, curves = _excluded(points, curves, exclude)
    folder = out_folder(out, points, study)  # before the fits, which may take a while

    from sweep.scaling.report import analyze
    from sweep.scaling.verdict import conclude

    report = conclude(analyze(points, approaches=approaches, budgets=budgets, curves=curves,
                              n_bootstrap=bootstrap, seed=seed, huber_delta=delta))
    if study is not None:
        from sweep.kinds.scaling.recommend import add_recommendations

        add_recommendations(report, study_spec(points.attrs, "no recommended shapes"))
    done = _scaling_outputs(report, folder, points.attrs if study is not None else None)
    if as_json:
        from sweep.scaling.report_json import report_json

        print(json.dumps(report_json(report)))
    else:
        print_scaling_report(report, report_console())
    print_done(done, as_json)
    if not any(result.ok for result in report.results.values()):
        raise typer.Exit(code=1)


def _excluded(points: Any, curves: Any, exclude: list[str] | None) -> tuple[Any, Any]:
    """The points (and curves) without the ``--exclude`` trials; exits 2 on an unknown one."""
    if not exclude:
        return points, curves
    wanted = []
    for raw in (v.strip() for value in exclude for v in value.split(",")):
        try:
            wanted.append(int(raw))
        except ValueError:
            bad_input(f"--exclude {raw!r}: must be a trial number (an integer)")
    known = set(points["trial"].astype(int))
    unknown = [t for t in wanted if t not in known]
    if unknown:
        bad_input(f"--exclude {', '.join(map(str, unknown))}: no such point among the "
                  f"{len(points)} fitted (trials {min(known)} to {max(known)})")
    attrs = dict(points.attrs)
    kept = points[~points["trial"].astype(int).isin(wanted)].reset_index(drop=True)
    kept.attrs.update(attrs, excluded={**attrs.get("excluded", {}),
                                       "--exclude": len(set(wanted))})
    if curves is not None:
        cattrs = dict(curves.attrs)
        curves = curves[~curves["trial"].astype(int).isin(wanted)].reset_index(drop=True)
        curves.attrs.update(cattrs)
    return kept, curves


def _scaling_flags(study: str | None, csv: str | None, budget: list[str] | None,
                   tracking_uri: str | None) -> list[float]:
    """The target budgets; exits 2 on a bad flag, before anything heavy is imported."""
    if study is not None and csv is not None and "=" in study:
        bad_input(f"{study!r}: one NAME=VALUE per flag; repeat --columns or --where for each, "
                  "e.g. --columns n_params=\"Model Size\" --columns budget=\"Training FLOP\"")
    if (study is None) == (csv is None):
        bad_input("give a study (STUDY_OR_DIR) or --csv FILE, not both" if study else
                  "give a study (STUDY_OR_DIR) or --csv FILE")
    budgets = _parse_budgets(budget)
    if csv is not None and not Path(csv).is_file():
        bad_input(f"--csv {csv}: no such file")
    if study is not None and tracking_uri is None:
        check_local_store(study)
    return budgets


def _table_flags(csv: str | None, columns: list[str] | None, where: list[str] | None,
                 convention: str | None, huber_delta: str) -> tuple[Any, float]:
    """``--csv``'s `TableOptions` and the Huber delta; exits 2 on a bad flag (no pandas yet)."""
    from sweep.scaling.options import (
        TableOptionError,
        TableOptions,
        check_huber_delta,
        parse_columns,
        parse_convention,
        parse_where,
    )

    try:
        delta = check_huber_delta(huber_delta)
        table = TableOptions(parse_columns(columns), parse_where(where),
                             parse_convention(convention))
    except TableOptionError as exc:
        bad_input(str(exc))
    given = [flag for flag, value in (("--columns", columns), ("--where", where),
                                      ("--convention", convention)) if value]
    if csv is None and given:
        bad_input(f"{given[0]} reads a --csv table; a study's points already have the names "
                  "and tokens the fits use")
    return table, delta


def _approaches(approach: str, n_params: str) -> tuple[str, ...]:
    """The ``--approach`` keys; exits 2 on an unknown one or an unknown ``--n-params``."""
    from sweep.scaling.approaches import parse_approaches
    from sweep.scaling.runs import N_PARAMS_CONVENTIONS

    try:
        approaches = parse_approaches(approach)
    except ValueError as exc:
        bad_input(str(exc))
    if n_params not in N_PARAMS_CONVENTIONS:
        bad_input(f"--n-params {n_params!r}: choose {' or '.join(N_PARAMS_CONVENTIONS)}")
    return approaches


def _csv_points(csv: str, n_params: str, table: Any) -> Any:
    """The points of ``--csv`` read by ``table`` (`TableOptions`); exits 2 when they cannot be."""
    from sweep.scaling.options import TableOptionError
    from sweep.scaling.points_csv import read_csv_points
    from sweep.scaling.runs import PointsError

    if n_params != "total":
        bad_input("--n-params applies to a study; a --csv table's n_params is used as given")
    try:
        return read_csv_points(csv, table)
    except TableOptionError as exc:
        bad_input(str(exc))
    except PointsError as exc:
        bad_input(f"--csv {exc}")


def _scaling_outputs(report: Any, folder: Path, study: dict[str, Any] | None) -> list[str]:
    """Write the plots to ``folder`` and log them and the fits to a ``study``'s parent run.

    ``study`` is the points' ``attrs`` (its store and parent run), or None for a CSV. Returns
    the lines saying what was written and logged; exits 2 when ``folder`` cannot be written.
    """
    from rich.markup import escape

    from sweep.scaling.plots import write_figures
    from sweep.scaling.report_json import log_report

    try:
        paths = write_figures(report, folder)
    except OSError as exc:
        bad_input(f"--out {folder}: {exc.strerror or exc}")
    done = [f"wrote {len(paths)} plots to {folder}"]
    if study is not None:
        try:
            log_report(report, study["tracking_uri"], study["parent_run_id"], paths)
        except Exception as exc:  # the analysis stands without its copy in MLflow
            common.err_console.print(f"[bold yellow]warning:[/] plots and fits not logged to "
                                     f"the study's run: {escape(type(exc).__name__)}: "
                                     f"{escape(str(exc))}", highlight=False)
        else:
            done.append(f"logged the fits and plots to run {study['parent_run_id']}")
    return done


def _parse_budgets(values: list[str] | None) -> list[float]:
    """``--budget`` values (repeated, or joined by commas) as FLOPs; exits 2 on a bad one."""
    if not values:
        return []
    from sweep.scaling.limits import LIMITS

    top = LIMITS["budget"].hi
    budgets = []
    for raw in (v for value in values for v in value.split(",")):
        try:
            budget = float(raw)
        except ValueError:
            budget = math.nan
        if not (math.isfinite(budget) and 0 < budget <= top):
            bad_input(f"--budget {raw.strip()!r}: must be a positive number of FLOPs up to "
                      f"{top:g}, e.g. 1e21")
        budgets.append(budget)
    return budgets


def _load_study(study: str, tracking_uri: str | None, n_params: str, curves: bool):
    from sweep.results import StudyNotFoundError
    from sweep.scaling.runs import load_study
    from sweep.tracking import UnreachableStoreError, shown_uri

    try:
        points, trained = load_study(study, tracking_uri=tracking_uri, n_params=n_params,
                                     curves=curves)
    except (StudyNotFoundError, UnreachableStoreError) as exc:
        bad_input(str(exc))
    except Exception as exc:  # MLflow's errors for an unreachable or unknown server
        if tracking_uri is None:
            raise
        bad_input(f"--tracking-uri {shown_uri(tracking_uri)}: {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''}")
    if points.empty:
        bad_input(f"study {points.attrs['study']!r}: none of its {points.attrs['n_trials']} "
                  f"trials trained to the end with a finite loss "
                  f"(excluded: {excluded_text(points.attrs['excluded']) or 'none'})")
    return points, trained
