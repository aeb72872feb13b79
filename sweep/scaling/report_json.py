"""A scaling report as JSON, and its copy on the study's parent MLflow run.

`report_json` is one object keyed by approach; `log_report` puts it (`FITS_ARTIFACT`) and the
plots (`PLOTS_ARTIFACT_DIR`) on the study's parent run through `sweep.tracking`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweep.scaling.report import FLOP_CONVENTION, ScalingReport
from sweep.scaling.runs import LOSS
from sweep.schema import (
    METRIC_BUDGET_FLOPS,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    METRIC_TOKENS_PER_PARAM,
)

__all__ = ["FITS_ARTIFACT", "PLOTS_ARTIFACT_DIR", "log_report", "report_json"]

#: Where `log_report` puts the fits (JSON) and the plots on the study's parent run.
FITS_ARTIFACT = "scaling_analysis/fits.json"
PLOTS_ARTIFACT_DIR = "scaling_analysis/plots"


def _number(value: float) -> float | None:
    """A JSON number: nan and infinities become null."""
    value = float(value)
    return value if math.isfinite(value) else None


def _pairs(intervals: Mapping[str, tuple[float, float]]) -> dict[str, list[float | None]]:
    return {k: [_number(lo), _number(hi)] for k, (lo, hi) in intervals.items()}


def report_json(report: ScalingReport) -> dict[str, Any]:
    """The report as one JSON-ready object keyed by approach.

    Each approach's object: ``title``; then either ``error`` (why the fit could not be made)
    or its parameters at top level (``E``, ``A``, ``B``, ``alpha``, ``beta`` for approach 3
    and VPNLS; ``k_n``, ``k_d`` for 1 and 2) and the allocation exponents ``a``, ``b``;
    ``intervals`` (name -> ``[lo, hi]`` at ``level``), ``optimal`` (a row per budget:
    ``budget_flops``, ``n_params``, ``n_tokens``, ``tokens_per_param``, ``loss``,
    ``extrapolated``, ``intervals``), ``method``, ``n_points``, ``converged``, ``notes``,
    ``flop_convention`` (``C = 6ND``), ``n_params_convention`` and ``n_tokens_from`` (how a
    table's ``n_tokens`` was derived, ``--convention``; null when given); approach 3 adds
    ``huber_delta``, the delta it used. Non-finite numbers are null.
    A report with a verdict or notes (`sweep.scaling.verdict.conclude`) adds ``verdict``
    (`sweep.scaling.verdict.verdict_json`), ``notes`` (each `Note` with its ``text``) and
    ``recommendations`` (the shapes to train, each with its spec fragment). A simulated
    study's report adds ``simulated``, the law its losses were drawn from.
    """
    out: dict[str, Any] = {}
    for key, result in report.results.items():
        entry: dict[str, Any] = {"title": result.approach.title}
        fit = result.fit
        if fit is None:
            out[key] = {**entry, "error": result.error}
            continue
        entry.update({k: _number(v) for k, v in result.params.items()})
        entry.update(
            intervals=_pairs(result.intervals), level=_number(result.level),
            optimal=[{METRIC_BUDGET_FLOPS: row.budget_flops,
                      METRIC_N_PARAMS: _number(row.n_params),
                      METRIC_N_TOKENS: _number(row.n_tokens),
                      METRIC_TOKENS_PER_PARAM: _number(row.tokens_per_param),
                      LOSS: _number(row.loss), "extrapolated": row.extrapolated,
                      "intervals": _pairs(row.intervals)} for row in result.optimal],
            method=fit.method, n_points=fit.n_points, converged=bool(fit.converged),
            notes=list(result.notes),
            flop_convention=FLOP_CONVENTION, n_params_convention=report.n_params_convention,
            n_tokens_from=report.points.attrs.get("n_tokens_from"))
        if "delta" in fit.settings:
            entry["huber_delta"] = fit.settings["delta"]
        out[key] = entry
    if report.verdict is not None or report.notes:
        from sweep.scaling.verdict import verdict_json

        out["verdict"] = verdict_json(report.verdict)
        out["notes"] = [note.as_dict() for note in report.notes]
        out["recommendations"] = [dict(row) for row in report.recommendations]
    if report.points.attrs.get("simulated"):
        out["simulated"] = report.points.attrs["simulated"]
    return out


def log_report(report: ScalingReport, tracking_uri: str, run_id: str,
               plot_paths: Sequence[str | Path] = ()) -> None:
    """Log the report's JSON (`FITS_ARTIFACT`) and the plot files (`PLOTS_ARTIFACT_DIR`).

    Args:
        report: The report.
        tracking_uri: The study's MLflow store.
        run_id: The study's parent run.
        plot_paths: PNG files to log.

    Raises:
        mlflow.exceptions.MlflowException, OSError: The store refuses the artifacts.
    """
    from sweep.tracking import log_files, log_json  # MLflow, once the analysis is made

    log_json(tracking_uri, run_id, report_json(report), FITS_ARTIFACT)
    log_files(tracking_uri, run_id, plot_paths, PLOTS_ARTIFACT_DIR)

