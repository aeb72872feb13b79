"""``sweep analyze scaling`` and ``sweep analyze transfer``: analyses of a study's trials.

``scaling`` fits scaling laws to a study's trials, or to a CSV of points; ``transfer`` measures
how far a transfer study's best learning rate moves with width.

Flags are checked before the fits, MLflow and matplotlib are imported, so bad input exits 2
at once. The work lives in `sweep.scaling` (`runs`, `approaches`, `report`, `plots`,
`transfer`); this module parses, prints (the tables: `sweep.cli.analyze_tables`), and hands the
plots and fits to the study's parent run (`sweep.tracking`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer

from sweep.cli import common
from sweep.cli.analyze_tables import (
    excluded_text,
    print_scaling_report,
    print_transfer_reports,
    report_console,
)
from sweep.cli.common import app, bad_input

analyze_app = common.command_group(help="Analyses of a study's trials.", no_args_is_help=True)
app.add_typer(analyze_app, name="analyze")


def _parse_budgets(values: list[str] | None) -> list[float]:
    """``--budget`` values (repeated, or joined by commas) as FLOPs; exits 2 on a bad one."""
    budgets = []
    for raw in (v for value in values or [] for v in value.split(",")):
        try:
            budget = float(raw)
        except ValueError:
            budget = math.nan
        if not (math.isfinite(budget) and budget > 0):
            bad_input(f"--budget {raw.strip()!r}: must be a positive number of FLOPs, e.g. 1e21")
        budgets.append(budget)
    return budgets


def _check_local_store(study: str) -> None:
    """Exit 2 when no local store can hold ``study``, before MLflow is imported.

    The same places `sweep.results.resolve_study` looks without a tracking URI.
    """
    path = Path(study)
    candidates = (path, path / "mlflow.db", Path("runs") / study / "mlflow.db")
    if not any(db.is_file() and db.suffix == ".db" for db in candidates):
        stores = list(dict.fromkeys(str(db) for db in candidates[1:]))
        bad_input(f"no study {study!r}: {stores[0]} does not exist" if len(stores) == 1 else
                  f"no study {study!r}: neither {stores[0]} nor {stores[1]} exists")


def _default_out(points: Any, study: str | None) -> Path:
    """``<study dir>/analysis``: the folder of the study's SQLite store; ``./analysis`` for CSV."""
    if study is None:
        return Path("analysis")
    from sweep.tracking.uris import sqlite_path

    db = sqlite_path(points.attrs["tracking_uri"])
    return (db.parent if db is not None else Path("runs") / points.attrs["study"]) / "analysis"


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


def _study_spec(attrs: dict[str, Any]) -> Any:
    """The study's spec from its parent run's ``spec.yaml``, or None when it cannot be read."""
    import yaml
    from mlflow.exceptions import MlflowException  # raised through sweep.tracking as it is

    from sweep.schema import SPEC_ARTIFACT
    from sweep.spec import SpecError, parse_spec
    from sweep.tracking import read_stored_spec

    try:
        return parse_spec(read_stored_spec(attrs["tracking_uri"], attrs["parent_run_id"]))
    except (SpecError, MlflowException, OSError, KeyError, yaml.YAMLError) as exc:
        common.err_console.print(f"note: no recommended shapes: the study's {SPEC_ARTIFACT} "
                                 f"could not be read ({type(exc).__name__})", highlight=False)
        return None


_SCALING_HELP = (
    "Fit scaling laws (Chinchilla approaches 1, 2, 3 and VPNLS) and size compute-optimal "
    "models.\n\n"
    "Prints each fit's parameters with bootstrap intervals and the compute-optimal N_opt, D_opt "
    "and loss per target budget (C = 6ND); writes the plots to --out and, for a study, logs the "
    "plots and the fits' JSON to its parent MLflow run. An approach that cannot be fitted is "
    "reported and the others still run; exits 1 when none could be, 2 for bad input."
)


@analyze_app.command("scaling", help=_SCALING_HELP)
def scaling(
    study: str = typer.Argument(None, metavar="[STUDY_OR_DIR]",
                                help="Study name (./runs/<name>), its folder, or its mlflow.db."),
    csv: str = typer.Option(None, "--csv", metavar="FILE",
                            help="Fit a table instead: columns n_params, n_tokens, loss "
                                 "(optional flops, budget)."),
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
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object keyed by "
                                                       "approach."),
    tracking_uri: str = typer.Option(None, help="MLflow tracking URI (then STUDY is the "
                                                "experiment name), e.g. http://host:5000."),
) -> None:
    """Fit scaling laws to a study or a CSV table and print the compute-optimal models."""
    budgets = _scaling_flags(study, csv, budget, tracking_uri)
    approaches = _approaches(approach, n_params)
    if csv is not None:
        points, curves = _csv_points(csv, n_params), None
    else:
        points, curves = _load_study(study, tracking_uri, n_params, curves="1" in approaches)
    folder = _out_folder(out, points, study)  # before the fits, which may take a while

    from sweep.scaling.report import analyze

    report = analyze(points, approaches=approaches, budgets=budgets, curves=curves,
                     n_bootstrap=bootstrap, seed=seed)
    if study is not None:
        from sweep.scaling.recommend import add_recommendations

        add_recommendations(report, _study_spec(points.attrs))
    done = _scaling_outputs(report, folder, points.attrs if study is not None else None)
    if as_json:
        from sweep.scaling.report_json import report_json

        print(json.dumps(report_json(report)))
    else:
        print_scaling_report(report, report_console())
    _print_done(done, as_json)
    if not any(result.ok for result in report.results.values()):
        raise typer.Exit(code=1)


def _scaling_flags(study: str | None, csv: str | None, budget: list[str] | None,
                   tracking_uri: str | None) -> list[float]:
    """The target budgets; exits 2 on a bad flag, before anything heavy is imported."""
    if (study is None) == (csv is None):
        bad_input("give a study (STUDY_OR_DIR) or --csv FILE, not both" if study else
                  "give a study (STUDY_OR_DIR) or --csv FILE")
    budgets = _parse_budgets(budget)
    if csv is not None and not Path(csv).is_file():
        bad_input(f"--csv {csv}: no such file")
    if study is not None and tracking_uri is None:
        _check_local_store(study)
    return budgets


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


def _csv_points(csv: str, n_params: str) -> Any:
    """The points of ``--csv``; exits 2 when they cannot be read."""
    from sweep.scaling.runs import PointsError, read_csv_points

    if n_params != "total":
        bad_input("--n-params applies to a study; a --csv table's n_params is used as given")
    try:
        return read_csv_points(csv)
    except PointsError as exc:
        bad_input(f"--csv {exc}")


def _out_folder(out: str | None, points: Any, study: str | None) -> Path:
    """``--out`` or the default folder, created; exits 2 when it cannot be."""
    folder = Path(out) if out else _default_out(points, study)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        bad_input(f"--out {folder}: {exc.strerror or exc}")
    return folder


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


def _print_done(lines: list[str], as_json: bool) -> None:
    """What was written and logged: on stderr beside JSON output, else on stdout."""
    for line in lines:
        (common.err_console if as_json else common.console).print(line, highlight=False,
                                                                  markup=False)


_TRANSFER_HELP = (
    "How far the best learning rate moves with width in a transfer study.\n\n"
    "Prints, per group of the grid (e.g. each parametrization), the best learning rate at each "
    "width on the grid and between grid points (a parabola's vertex in log lr), how many grid "
    "steps the best point moves across the widths, and the drift: doublings of the best "
    "learning rate per doubling of width, with a bootstrap interval. Writes transfer.png "
    "(loss against lr, a line per width) to --out and logs it with the JSON to the study's "
    "parent run. Exits 2 for bad input."
)


def _transfer_spec(study: str, attrs: dict[str, Any]) -> Any:
    """The stored spec of a transfer study; exits 2 when it is not one or cannot be read."""
    spec = _study_spec(attrs)
    if spec is None or spec.section("transfer") is None:
        bad_input(f"study {attrs['study']!r} is not a transfer study (its spec has no "
                  "transfer section)" if spec is not None else
                  f"study {attrs['study']!r}: its spec could not be read")
    return spec


@analyze_app.command("transfer", help=_TRANSFER_HELP)
def transfer(
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
    if tracking_uri is None:
        _check_local_store(study)
    from sweep.results import StudyNotFoundError, read_study
    from sweep.tracking import UnreachableStoreError

    try:
        trials, attrs = read_study(study, tracking_uri)
    except (StudyNotFoundError, UnreachableStoreError) as exc:
        bad_input(str(exc))
    spec = _transfer_spec(study, attrs)
    from sweep.kinds.transfer.grid import grid_fields
    from sweep.scaling.transfer import analyze_transfer, transfer_figure, transfer_points

    points = transfer_points(trials, grid_fields(spec))
    reports = analyze_transfer(points, n_bootstrap=bootstrap, seed=seed)
    if not reports:
        bad_input(f"study {attrs['study']!r}: no group has trained points at two widths yet "
                  f"({len(points)} points trained of {len(trials)} trials)")
    points.attrs.update(attrs)
    folder = _out_folder(out, points, study)
    path = folder / "transfer.png"
    try:
        transfer_figure(reports, path)
    except OSError as exc:
        bad_input(f"--out {folder}: {exc.strerror or exc}")
    data = [r.to_dict() for r in reports]
    done = [f"wrote {path}"]
    try:
        from sweep.schema import TRANSFER_ANALYSIS_ARTIFACT, TRANSFER_PLOTS_ARTIFACT_DIR
        from sweep.tracking import log_files, log_json

        log_json(attrs["tracking_uri"], attrs["parent_run_id"], data, TRANSFER_ANALYSIS_ARTIFACT)
        log_files(attrs["tracking_uri"], attrs["parent_run_id"], [path],
                  TRANSFER_PLOTS_ARTIFACT_DIR)
    except Exception as exc:  # the analysis stands without its copy in MLflow
        common.err_console.print(f"warning: the analysis was not logged to the study's run: "
                                 f"{type(exc).__name__}: {exc}", highlight=False, markup=False)
    else:
        done.append(f"logged the analysis and plot to run {attrs['parent_run_id']}")
    if as_json:
        print(json.dumps(data))
    else:
        print_transfer_reports(reports, report_console())
    _print_done(done, as_json)
