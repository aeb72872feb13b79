"""``sweep analyze hparams``: the hparams kind's analysis command.

eta_opt(C) = a C^b and B_opt(C) = a C^b of an hparams study by both estimators of
`sweep.scaling.hparam_laws` (DeepSeek LLM's near-optimal band, per-budget parabola vertices),
with bootstrap intervals, predictions at ``--target`` budgets and the verdict (one estimator
per law); ``hparams.png`` (`sweep.scaling.hparam_plot`) and the report as ``hparams.json``
written to ``--out`` (default ``<study dir>/analysis``, where ``train.lr: {from_study}`` reads
it: `sweep.spec.from_study`) and logged to the study's parent run.
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
from sweep.cli.common import as_bad_input, bad_input
from sweep.schema import HPARAMS_ANALYSIS_ARTIFACT, HPARAMS_PLOTS_ARTIFACT_DIR
from sweep.spec.from_study import ANALYSIS_FILE

__all__ = ["HELP", "NAME", "command", "print_hparam_report"]

#: The command's name under ``sweep analyze``.
NAME = "hparams"
HELP = (
    "Learning-rate and batch-size laws of an hparams study.\n\n"
    "Fits eta_opt(C) = a C^b and B_opt(C) = a C^b two ways: DeepSeek LLM's (Bi et al. 2024, "
    "sec. 3.1), a power law through each budget's runs within the band of its best loss "
    "(hparams.band, 0.25% by default; --band), and a power law through each budget's parabola "
    "vertex in log lr and log batch. Prints both with bootstrap intervals and their "
    "predictions at --target budgets, and the verdict: the vertices when each budget has one "
    "inside the grid, else the band. Writes hparams.png (per budget the runs in lr x batch, "
    "the near-optimal band marked; the fitted lines) and hparams.json (what train.lr: "
    "{from_study: STUDY} reads) to --out and logs both to the study's parent run. Exits 2 "
    "for bad input."
)


def print_hparam_report(report: Any, out: Any) -> None:
    """Each law by each estimator, its interval, and its predictions at the targets."""
    from rich.table import Table

    table = Table(title=f"optimal hyperparameters: value = a C^b (C in FLOPs; band "
                        f"{report.band:.2%})")
    for header in ("law", "estimator", "a", "b", "b interval",
                   *[f"at C={t:.3g}" for t in report.targets]):
        table.add_column(header, justify="right")
    for fit in report.fits:
        lo_hi = fit.intervals.get("exponent")
        preds = []
        for t in report.targets:
            ci = fit.interval_at(t)
            preds.append(f"{fit.predict(t):.4g}" + (f" [{ci[0]:.4g}, {ci[1]:.4g}]" if ci
                                                    else ""))
        table.add_row("eta_opt" if fit.hparam == "lr" else "B_opt (tokens)", fit.method,
                      f"{fit.coef:.4g}", f"{fit.exponent:+.4f}",
                      f"[{lo_hi[0]:+.4f}, {lo_hi[1]:+.4f}]" if lo_hi else "no bootstrap",
                      *preds)
    out.print(table)
    level = next((f.level for f in report.fits), None)
    if level is not None and any(f.intervals for f in report.fits):
        out.print(f"intervals: {level:.0%} percentile bootstrap, runs resampled within each "
                  "budget", highlight=False, markup=False)
    for fit in report.fits:
        if fit.hparam == "lr" and fit.intervals.get("exponent"):
            lo, hi = fit.intervals["exponent"]
            trend = "falls" if hi < 0 else "rises" if lo > 0 else "neither falls nor rises " \
                "clearly (its interval holds 0)"
            out.print(f"eta_opt by {fit.method}: {trend} with C (b = {fit.exponent:+.3f} "
                      f"[{lo:+.3f}, {hi:+.3f}])", highlight=False, markup=False)
    for hparam, method in report.verdict.items():
        out.print(f"verdict: {'eta_opt' if hparam == 'lr' else 'B_opt'} by {method}"
                  + (" (a vertex inside the grid at every budget)" if method == "vertex" else
                     " (DeepSeek's band; the vertices are missing or at a grid's edge)"),
                  highlight=False, markup=False)
    for note in report.notes:
        out.print(f"note: {note}", highlight=False, markup=False)


def command(
    study: str = typer.Argument(..., metavar="STUDY_OR_DIR",
                                help="Study name (./runs/<name>), its folder, or its mlflow.db."),
    target: list[float] = typer.Option(None, "--target", metavar="FLOPS",
                                       help="A budget to predict eta_opt and B_opt at "
                                            "(repeatable)."),
    band: float = typer.Option(None, help="The near-optimal band as a fraction of each "
                                          "budget's best loss (default: hparams.band)."),
    bootstrap: int = typer.Option(1000, min=0, help="Bootstrap resamples (0: none)."),
    seed: int = typer.Option(0, help="Seed of the bootstrap resampling."),
    out: str = typer.Option(None, "--out", metavar="DIR",
                            help="Folder for hparams.png (default: <study dir>/analysis)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    tracking_uri: str = typer.Option(None, help="MLflow tracking URI (then STUDY is the "
                                                "experiment name), e.g. http://host:5000."),
) -> None:
    """eta_opt(C) and B_opt(C) of an hparams study, by both estimators."""
    for t in target or []:
        if not (t > 0 and t < float("inf")):
            bad_input(f"--target {t}: must be a FLOP count > 0")
    if band is not None and not 0 <= band < 1:
        bad_input(f"--band {band}: must be in [0, 1) (a fraction of the best loss)")
    trials, attrs = read_analysed_study(study, tracking_uri)
    spec = study_spec(attrs, "no hparams analysis")
    if spec is None or spec.section("hparams") is None:
        bad_input(f"study {attrs['study']!r} is not an hparams study (its spec has no "
                  "hparams section)" if spec is not None else
                  f"study {attrs['study']!r}: its spec could not be read")
    from sweep.scaling.hparam_laws import fit_hparam_laws
    from sweep.scaling.hparam_plot import hparam_figure, hparam_points
    from sweep.scaling.result import FitError

    points = hparam_points(trials)
    band = spec.section("hparams").band if band is None else band
    try:
        report = fit_hparam_laws(points["flops"], points["lr"], points["batch_size"],
                                 points["loss"], band=band,
                                 targets=target or [], n_bootstrap=bootstrap, seed=seed)
    except FitError as exc:
        bad_input(f"study {attrs['study']!r}: {exc} ({len(points)} points trained of "
                  f"{len(trials)} trials)")
    points.attrs.update(attrs)
    path = draw_figure(out, points, study, "hparams.png",
                       lambda p: hparam_figure(points, report, p))
    data = {"kind": "hparams", "study": attrs["study"], **report.to_dict()}
    written = path.parent / ANALYSIS_FILE  # what train.lr: {from_study} reads
    with as_bad_input(f"--out {path.parent}", OSError):
        written.write_text(json.dumps(data, indent=1))
    done = [f"wrote {path} and {written}",
            *log_analysis(attrs, data, path, HPARAMS_ANALYSIS_ARTIFACT,
                          HPARAMS_PLOTS_ARTIFACT_DIR)]
    if as_json:
        print(json.dumps(data))
    else:
        from sweep.cli.analyze_tables import report_console

        print_hparam_report(report, report_console())
    print_done(done, as_json)
