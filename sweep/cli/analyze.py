"""``sweep analyze scaling`` and ``sweep analyze transfer``: analyses of a study's trials.

``scaling`` fits scaling laws to a study's trials, or to a CSV of points; ``transfer`` measures
how far a transfer study's best learning rate moves with width.

Flags are checked before the fits, MLflow and matplotlib are imported, so bad input exits 2
at once. The work lives in `sweep.scaling` (`runs`, `report`, `plots`); this module parses,
prints, and hands the plots and fits to the study's parent run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from sweep.cli import common
from sweep.cli.common import app, bad_input
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS

_PIPE_WIDTH = 160  # characters a line when printing to a file or pipe

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
                  f"(excluded: {_excluded(points.attrs['excluded']) or 'none'})")
    return points, trained


def _study_spec(attrs: dict[str, Any]) -> Any:
    """The study's spec from its parent run's ``spec.yaml``, or None when it cannot be read."""
    import yaml
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from sweep.schema import SPEC_ARTIFACT
    from sweep.spec import SpecError, parse_spec
    from sweep.tracking.study_run import load_stored_spec

    try:
        return parse_spec(load_stored_spec(MlflowClient(attrs["tracking_uri"]),
                                           attrs["parent_run_id"]))
    except (SpecError, MlflowException, OSError, KeyError, yaml.YAMLError) as exc:
        common.err_console.print(f"note: no recommended shapes: the study's {SPEC_ARTIFACT} "
                                 f"could not be read ({type(exc).__name__})", highlight=False)
        return None


def _excluded(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items()))


def _num(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _interval(interval: tuple[float, float] | None) -> str:
    """``[lo, hi]`` (escaped for rich), or ``-``."""
    return rf"\[{_num(interval[0])}, {_num(interval[1])}]" if interval else "-"


def _with_interval(value: float, interval: tuple[float, float] | None) -> str:
    return f"{_num(value)} {_interval(interval)}" if interval else _num(value)


def _print_report(report: Any, out: Any) -> None:
    from sweep.scaling.report import FLOP_CONVENTION
    from sweep.scaling.runs import LOSS

    excluded = _excluded(report.excluded)
    out.print(f"{report.source}: {len(report.points)} points"
              f"{f' (excluded: {excluded})' if excluded else ''}; parameter count N: "
              f"{report.n_params_convention}; FLOPs: {FLOP_CONVENTION}", highlight=False,
              markup=False)
    for key, result in report.results.items():
        out.print(f"\napproach {key}: {result.approach.title}", highlight=False,
                  style="bold", markup=False)
        if not result.ok:
            out.print(f"no fit: {result.error}", highlight=False, markup=False)
            continue
        level = f"{result.level:.0%} interval" if result.intervals else "interval"
        out.print(f"{result.fit.n_points} points; {result.fit.method}", highlight=False,
                  markup=False)
        table = Table()
        table.add_column("parameter")
        table.add_column("value", justify="right")
        table.add_column(level, justify="right")
        for name, value in result.params.items():
            table.add_row(name, _num(value), _interval(result.intervals.get(name)))
        out.print(table)
        optimal = Table(title="compute-optimal models")
        for header in ("C (FLOPs)", "N_opt (params)", "D_opt (tokens)", "D/N", "loss"):
            optimal.add_column(header, justify="right")
        for row in result.optimal:
            optimal.add_row(
                _num(row.budget_flops) + (" *" if row.extrapolated else ""),
                _with_interval(row.n_params, row.intervals.get(METRIC_N_PARAMS)),
                _with_interval(row.n_tokens, row.intervals.get(METRIC_N_TOKENS)),
                _num(row.tokens_per_param),
                _with_interval(row.loss, row.intervals.get(LOSS)))
        out.print(optimal)
        out.print(f"{FLOP_CONVENTION}; [{level}] where the bootstrap gives one"
                  + ("; * beyond the largest budget fitted" if any(
                      row.extrapolated for row in result.optimal) else ""),
                  highlight=False, markup=False)
        for note in result.notes:
            out.print(f"note: {note}", highlight=False, markup=False)
    _print_recommendations(report.recommendations, out)


def _print_recommendations(rows: list[dict[str, Any]], out: Any) -> None:
    """Recommended model shapes per target budget (`ScalingReport.recommendations`), if any."""
    from rich.markup import escape

    if not rows:
        return
    table = Table(title="recommended shapes (nearest to N_opt on the study's size rule)")
    columns = [c for c in dict.fromkeys(k for row in rows for k in row) if c != "spec_fragment"]
    for column in columns:
        table.add_column(escape(str(column)))
    for row in rows:
        table.add_row(*(_num(v) if isinstance(v, float) else escape(str(v if v is not None
                                                                        else "-"))
                        for v in (row.get(c) for c in columns)))
    out.print(table)
    seen = set()
    for row in rows:  # the shape nearest N_opt at each budget, ready to train
        budget = row["C (FLOPs)"]
        if budget in seen:
            continue
        seen.add(budget)
        nearest = min((r for r in rows if r["C (FLOPs)"] == budget),
                      key=lambda r: abs(math.log(r["N"] / r["N_opt"])))
        out.print(f"\nspec fragment for C={budget:.3g} ({nearest['shape']}; merge into the "
                  "study's spec in place of its scaling section):", highlight=False,
                  markup=False)
        out.print(nearest["spec_fragment"].rstrip(), highlight=False, markup=False)


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
    if (study is None) == (csv is None):
        bad_input("give a study (STUDY_OR_DIR) or --csv FILE, not both" if study else
                  "give a study (STUDY_OR_DIR) or --csv FILE")
    budgets = _parse_budgets(budget)
    if csv is not None and not Path(csv).is_file():
        bad_input(f"--csv {csv}: no such file")
    if study is not None and tracking_uri is None:
        _check_local_store(study)

    from sweep.scaling.approaches import parse_approaches
    from sweep.scaling.report import analyze
    from sweep.scaling.report_json import log_report, report_json
    from sweep.scaling.runs import N_PARAMS_CONVENTIONS, PointsError, read_csv_points

    try:
        approaches = parse_approaches(approach)
    except ValueError as exc:
        bad_input(str(exc))
    if n_params not in N_PARAMS_CONVENTIONS:
        bad_input(f"--n-params {n_params!r}: choose {' or '.join(N_PARAMS_CONVENTIONS)}")
    if csv is not None:
        if n_params != "total":
            bad_input("--n-params applies to a study; a --csv table's n_params is used as given")
        try:
            points, curves = read_csv_points(csv), None
        except PointsError as exc:
            bad_input(f"--csv {exc}")
    else:
        points, curves = _load_study(study, tracking_uri, n_params, curves="1" in approaches)

    folder = Path(out) if out else _default_out(points, study)
    try:  # before the fits, which may take a while
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        bad_input(f"--out {folder}: {exc.strerror or exc}")

    report = analyze(points, approaches=approaches, budgets=budgets, curves=curves,
                     n_bootstrap=bootstrap, seed=seed)
    if study is not None:
        from sweep.scaling.recommend import add_recommendations

        add_recommendations(report, _study_spec(points.attrs))

    from rich.markup import escape

    from sweep.scaling.plots import write_figures

    try:
        paths = write_figures(report, folder)
    except OSError as exc:
        bad_input(f"--out {folder}: {exc.strerror or exc}")
    done = [f"wrote {len(paths)} plots to {folder}"]
    if study is not None:
        try:
            log_report(report, points.attrs["tracking_uri"], points.attrs["parent_run_id"],
                       paths)
        except Exception as exc:  # the analysis stands without its copy in MLflow
            common.err_console.print(f"[bold yellow]warning:[/] plots and fits not logged to "
                                     f"the study's run: {escape(type(exc).__name__)}: "
                                     f"{escape(str(exc))}", highlight=False)
        else:
            done.append(f"logged the fits and plots to run {points.attrs['parent_run_id']}")
    if as_json:
        print(json.dumps(report_json(report)))
    elif common.console.is_terminal:
        _print_report(report, common.console)
    else:  # a file or a pipe: whole lines, tables never folded
        from rich.console import Console

        _print_report(report, Console(width=_PIPE_WIDTH))
    for line in done:
        (common.err_console if as_json else common.console).print(line, highlight=False,
                                                                  markup=False)
    if not any(result.ok for result in report.results.values()):
        raise typer.Exit(code=1)


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
    if spec is None or spec.transfer is None:
        bad_input(f"study {attrs['study']!r} is not a transfer study (its spec has no "
                  "transfer section)" if spec is not None else
                  f"study {attrs['study']!r}: its spec could not be read")
    return spec


def _print_transfer(reports: list[Any], out: Any) -> None:
    for rep in reports:
        table = Table(title=f"{rep.group}: best learning rate per width")
        for header in ("d_model", "best lr (grid)", "grid index", "lr* (vertex)",
                       "final val loss"):
            table.add_column(header, justify="right")
        for c in rep.curves:
            table.add_row(str(c.width), f"{c.lr_best:.4g}", str(c.best_index),
                          f"{c.lr_vertex:.4g}", _num(c.losses[c.best_index]))
        out.print(table)
        level = f"{rep.level:.0%} interval"
        out.print(f"{rep.group}: the best grid point moves {rep.grid_steps} grid step(s) "
                  f"(x{rep.grid_ratio:.3g} each) across widths; drift "
                  f"{rep.drift:+.3f} doublings of lr* per doubling of width "
                  + (f"[{level} {_num(rep.interval[0])}, {_num(rep.interval[1])}]"
                     if rep.interval else "(no bootstrap)")
                  + f"; on the grid {rep.drift_grid:+.3f}"
                  + (f"; each point the mean of {rep.replicates} seeds" if rep.replicates > 1
                     else ""), highlight=False, markup=False)
        for note in rep.notes:
            out.print(f"note: {note}", highlight=False, markup=False)


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
    from sweep.scaling.transfer import analyze_transfer, transfer_figure, transfer_points
    from sweep.space.transfer import grid_fields

    points = transfer_points(trials, grid_fields(spec))
    reports = analyze_transfer(points, n_bootstrap=bootstrap, seed=seed)
    if not reports:
        bad_input(f"study {attrs['study']!r}: no group has trained points at two widths yet "
                  f"({len(points)} points trained of {len(trials)} trials)")
    points.attrs.update(attrs)
    folder = Path(out) if out else _default_out(points, study)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "transfer.png"
        transfer_figure(reports, path)
    except OSError as exc:
        bad_input(f"--out {folder}: {exc.strerror or exc}")
    data = [r.to_dict() for r in reports]
    done = [f"wrote {path}"]
    try:
        from mlflow import MlflowClient

        from sweep.schema import TRANSFER_ANALYSIS_ARTIFACT, TRANSFER_PLOTS_ARTIFACT_DIR

        client = MlflowClient(attrs["tracking_uri"])
        client.log_text(attrs["parent_run_id"], json.dumps(data, indent=2),
                        TRANSFER_ANALYSIS_ARTIFACT)
        client.log_artifact(attrs["parent_run_id"], str(path), TRANSFER_PLOTS_ARTIFACT_DIR)
    except Exception as exc:  # the analysis stands without its copy in MLflow
        common.err_console.print(f"warning: the analysis was not logged to the study's run: "
                                 f"{type(exc).__name__}: {exc}", highlight=False, markup=False)
    else:
        done.append(f"logged the analysis and plot to run {attrs['parent_run_id']}")
    if as_json:
        print(json.dumps(data))
    else:
        from rich.console import Console

        _print_transfer(reports, common.console if common.console.is_terminal
                        else Console(width=_PIPE_WIDTH))
    for line in done:
        (common.err_console if as_json else common.console).print(line, highlight=False,
                                                                  markup=False)
