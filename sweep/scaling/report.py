"""Running the chosen scaling-law approaches on a study's points, and the report they make.

`analyze` fits each approach of `APPROACHES` to a points frame (`sweep.scaling.runs`), turns
every fit into the compute-optimal N_opt, D_opt and predicted loss at the target budgets, with
bootstrap intervals where the fit has draws, and returns a `ScalingReport`; `report_json` is
its JSON form (one object keyed by approach), `log_report` puts that JSON and the plots on the
study's parent MLflow run. A fit that cannot be made (`FitError`) is reported for its approach
and the others still run.

The approaches (Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models",
section 3), one entry each in `APPROACHES`:

- ``1``: the lower envelope of the training curves (section 3.1);
- ``2``: IsoFLOP parabolas, then N_opt and D_opt as power laws of C (section 3.2);
- ``3``: the parametric L(N, D) = E + A / N^alpha + B / D^beta by Huber on log loss (3.3);
- ``vpnls``: the same law by variable projection (Czech 2026, "Problems with Chinchilla
  Approach 2"): E, A, B by non-negative least squares at each (alpha, beta), the exponents
  by a grid, then Nelder-Mead, on the loss itself.

FLOPs follow C = 6ND throughout (`FLOP_CONVENTION`): the budgets, the compute-optimal split
(`sweep.scaling.allocation.optimal_allocation`: N_opt = G (C/6)^a, D_opt = G^-1 (C/6)^b for
a fit of L(N, D), Hoffmann et al. eq. 4), and D_opt = C / (6 N_opt) of approaches 1 and 2.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sweep.scaling.result import FitError, FitResult
from sweep.scaling.runs import LOSS
from sweep.schema import (
    METRIC_BUDGET_FLOPS,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    METRIC_TOKENS,
    METRIC_TOKENS_PER_PARAM,
    METRIC_VAL_LOSS,
)

__all__ = ["ALL", "APPROACHES", "EXPONENTS", "FITS_ARTIFACT", "FLOP_CONVENTION",
           "PLOTS_ARTIFACT_DIR",
           "Approach", "ApproachResult", "OptimalRow", "ScalingReport", "analyze",
           "default_budgets", "log_report", "optimal_rows", "parse_approaches",
           "report_json"]

#: How FLOPs relate to parameters N and tokens D in every budget and allocation here.
FLOP_CONVENTION = "C = 6ND"
#: Where `log_report` puts the fits (JSON) and the plots on the study's parent run.
FITS_ARTIFACT = "scaling_analysis/fits.json"
PLOTS_ARTIFACT_DIR = "scaling_analysis/plots"
#: ``--approach all``.
ALL = "all"
#: The allocation exponents: N_opt ~ C^a, D_opt ~ C^b.
EXPONENTS = ("a", "b")


@dataclass(frozen=True)
class FitInputs:
    """What an approach's fit reads: the points, the training curves, the bootstrap settings.

    Attributes:
        points: One row per trial (`sweep.scaling.runs.POINT_COLUMNS`).
        curves: One row per evaluation (`sweep.scaling.runs.load_curves`), or None.
        n_bootstrap: Bootstrap refits asked for (0: none).
        seed: Seed of the resampling.
    """

    points: pd.DataFrame
    curves: pd.DataFrame | None
    n_bootstrap: int
    seed: int


@dataclass(frozen=True)
class Approach:
    """One way of fitting a scaling law, as `analyze` runs it.

    Its compute-optimal split comes from `sweep.scaling.allocation.optimal_allocation`, which
    knows every fit type.

    Attributes:
        key: Its ``--approach`` name.
        title: What it is, for reports.
        fit: Makes the fit from the inputs; raises `FitError` when it cannot.
        shown: The fitted parameters a report lists, in order (then ``a`` and ``b``).
    """

    key: str
    title: str
    fit: Callable[[FitInputs], FitResult]
    shown: tuple[str, ...]


def _column(points: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(points[name], errors="coerce").to_numpy(dtype=float)


def _bootstrap(inputs: FitInputs) -> dict[str, int]:
    return {"n_bootstrap": inputs.n_bootstrap, "seed": inputs.seed}


# The fits (scipy) are imported inside the functions that run them, so that the CLI can check
# an approach's name against `APPROACHES` before loading them.
def _fit_isoflop(inputs: FitInputs) -> FitResult:
    from sweep.scaling.isoflop import fit_isoflop

    budget = _column(inputs.points, METRIC_BUDGET_FLOPS)
    if not np.isfinite(budget).any():
        raise FitError(f"needs each trial's FLOP budget ({METRIC_BUDGET_FLOPS}; with --csv, a "
                       "budget column): the IsoFLOP curves are grouped by it")
    at = np.isfinite(budget)
    return fit_isoflop(budget[at], _column(inputs.points, METRIC_N_PARAMS)[at],
                       _column(inputs.points, LOSS)[at], **_bootstrap(inputs))


def _fit_law(function: Callable[..., FitResult], inputs: FitInputs) -> FitResult:
    """A fit of L(N, D) = E + A / N^alpha + B / D^beta to the points by ``function``."""
    p = inputs.points
    return function(_column(p, METRIC_N_PARAMS), _column(p, METRIC_N_TOKENS), _column(p, LOSS),
                    **_bootstrap(inputs))


def _fit_parametric(inputs: FitInputs) -> FitResult:
    from sweep.scaling.parametric import fit_parametric

    return _fit_law(fit_parametric, inputs)


def _fit_vpnls(inputs: FitInputs) -> FitResult:
    from sweep.scaling.vpnls import fit_vpnls

    return _fit_law(fit_vpnls, inputs)


def _fit_envelope(inputs: FitInputs) -> FitResult:
    """Approach 1 on the training curves, compute counted as C = 6 N x tokens seen.

    The curves' ``flops`` column (the cost model's training FLOPs) is not used, so that the
    envelope's budgets are in the same C = 6ND as the other approaches' and the targets.
    """
    from sweep.scaling.envelope import fit_envelope

    if inputs.curves is None or inputs.curves.empty:
        raise FitError("needs the trials' training curves (their val_loss at every "
                       "evaluation), which a study has and a --csv table does not")
    c = inputs.curves
    stable = c.attrs.get("excluded", {}).get("wsd stable phase", 0)
    if stable and c.groupby("run_id").size().max() < 2:
        raise FitError(f"needs training curves, and a warmup-stable-decay study's runs are "
                       f"points only at their cooled-down ends ({stable} stable-phase "
                       "evaluations left out); use approaches 2, 3 or vpnls")
    n = _column(c, METRIC_N_PARAMS)
    # Runs as integer codes: `fit_envelope` labels its points with numpy scalars' ``item()``.
    runs, _ = pd.factorize(c["run_id"])
    return fit_envelope(runs, n, 6 * n * _column(c, METRIC_TOKENS),
                        _column(c, METRIC_VAL_LOSS), **_bootstrap(inputs))


_LAW = ("E", "A", "B", "alpha", "beta")
#: Every approach by ``--approach`` name; adding one is one entry.
APPROACHES: dict[str, Approach] = {a.key: a for a in (
    Approach("1", "Chinchilla approach 1 (lower envelope of the training curves)",
             _fit_envelope, ("k_n", "k_d")),
    Approach("2", "Chinchilla approach 2 (IsoFLOP parabolas)", _fit_isoflop, ("k_n", "k_d")),
    Approach("3", "Chinchilla approach 3 (parametric L(N, D), Huber on log loss)",
             _fit_parametric, _LAW),
    Approach("vpnls", "Parametric L(N, D) by variable projection (VPNLS)", _fit_vpnls, _LAW),
)}


def parse_approaches(text: str) -> tuple[str, ...]:
    """``"all"``, one key of `APPROACHES` or several joined by commas -> the keys, in order.

    Raises:
        ValueError: Naming an unknown approach and the known ones.
    """
    keys = [k.strip() for k in str(text).split(",") if k.strip()]
    if not keys:
        raise ValueError(f"--approach {text!r}: name one of {', '.join(APPROACHES)} or {ALL}")
    if ALL in keys:
        return tuple(APPROACHES)
    unknown = [k for k in keys if k not in APPROACHES]
    if unknown:
        raise ValueError(f"--approach {', '.join(unknown)}: unknown; choose from "
                         f"{', '.join(APPROACHES)} or {ALL} (several joined by commas)")
    return tuple(dict.fromkeys(keys))


@dataclass(frozen=True)
class OptimalRow:
    """The compute-optimal model at one budget, by one approach.

    Attributes:
        budget_flops: The budget C, FLOPs (C = 6ND).
        n_params: N_opt, parameters.
        n_tokens: D_opt, tokens.
        loss: The predicted loss there, nats/token (nan when the approach predicts none).
        intervals: ``(lo, hi)`` bootstrap intervals of ``n_params``, ``n_tokens`` and ``loss``
            (those the fit's draws give; empty without a bootstrap).
        extrapolated: Whether C lies beyond the largest budget the points reach.
    """

    budget_flops: float
    n_params: float
    n_tokens: float
    loss: float
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    extrapolated: bool = False

    @property
    def tokens_per_param(self) -> float:
        """D_opt / N_opt."""
        return self.n_tokens / self.n_params


@dataclass(frozen=True)
class ApproachResult:
    """One approach's outcome: its fit and compute-optimal table, or why it has none.

    Attributes:
        approach: The `Approach` run.
        fit: Its `FitResult`, or None when ``error`` says why it could not be made.
        error: The `FitError` message, or None.
        params: The parameters reported (``approach.shown``, then ``a`` and ``b``).
        intervals: ``(lo, hi)`` at ``level`` of each parameter the bootstrap gives.
        level: The intervals' confidence level.
        optimal: A row per target budget.
        notes: What a reader should know (flagged curves, no intervals, convergence).
    """

    approach: Approach
    fit: FitResult | None = None
    error: str | None = None
    params: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    level: float = math.nan
    optimal: list[OptimalRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the fit was made."""
        return self.fit is not None


@dataclass
class ScalingReport:
    """Every approach's result on one set of points.

    Attributes:
        results: `ApproachResult` by approach key, in the order asked.
        budgets: The budgets C of the compute-optimal tables, FLOPs, ascending.
        targets: The budgets asked for (then ``budgets``), or empty when the tables show the
            study's own (`default_budgets`).
        points: The points fitted (`sweep.scaling.runs.POINT_COLUMNS`).
        curves: The training curves (approach 1), or None.
        source: The study name or CSV path.
        n_params_convention: Which parameter count ``n_params`` holds.
        excluded: Rows left out before fitting, by reason (``frame.attrs["excluded"]``).
        recommendations: Rows of recommended model shapes per target budget, printed after
            the compute-optimal tables; none unless a caller adds them.
    """

    results: dict[str, ApproachResult]
    budgets: list[float]
    targets: list[float]
    points: pd.DataFrame
    curves: pd.DataFrame | None = None
    source: str = ""
    n_params_convention: str = "total"
    excluded: dict[str, int] = field(default_factory=dict)
    recommendations: list[dict[str, Any]] = field(default_factory=list)


def default_budgets(points: pd.DataFrame) -> list[float]:
    """The budgets a compute-optimal table shows when none are asked for.

    The points' distinct ``budget_flops`` (an IsoFLOP study's budgets); without any, the
    powers of ten within the range of 6ND over the points (at least the one nearest its
    geometric middle).
    """
    budgets = _column(points, METRIC_BUDGET_FLOPS)
    budgets = np.unique(budgets[np.isfinite(budgets) & (budgets > 0)])
    if budgets.size:
        return [float(b) for b in budgets]
    flops = 6 * _column(points, METRIC_N_PARAMS) * _column(points, METRIC_N_TOKENS)
    flops = flops[np.isfinite(flops) & (flops > 0)]
    if not flops.size:
        return []
    lo, hi = np.log10(flops.min()), np.log10(flops.max())
    decades = np.arange(math.ceil(lo), math.floor(hi) + 1)
    if not decades.size:
        decades = np.array([round((lo + hi) / 2)])
    return [float(10.0 ** d) for d in decades]


def optimal_rows(fit: FitResult, budgets: Sequence[float], *,
                 largest: float = math.inf) -> list[OptimalRow]:
    """The compute-optimal model by ``fit`` at each budget (C = 6ND), with intervals.

    `sweep.scaling.allocation.optimal_allocation` at each budget: Hoffmann et al. 2022 eq. 4
    for a fit of L(N, D), the fitted power laws for approaches 1 and 2; the intervals are the
    same split over the fit's bootstrap draws (none without draws).

    Args:
        fit: A fit of any approach.
        budgets: Budgets C, FLOPs.
        largest: The largest budget the points reach; beyond it a row is ``extrapolated``.

    Raises:
        FitError: The fit gives no split (an exponent <= 0).
    """
    from sweep.scaling.allocation import optimal_allocation

    rows = []
    for budget in budgets:
        split = optimal_allocation(fit, float(budget))
        spread = {k: v for k, v in split.intervals.items()
                  if k in (METRIC_N_PARAMS, METRIC_N_TOKENS, LOSS)}
        rows.append(OptimalRow(float(budget), split.n_params, split.n_tokens, split.loss,
                               spread, extrapolated=bool(budget > largest)))
    return rows


def _exponents(fit: FitResult, budget: float) -> tuple[dict[str, float], dict]:
    """``a``, ``b`` and their intervals (the same at every budget under C = 6ND)."""
    from sweep.scaling.allocation import optimal_allocation

    split = optimal_allocation(fit, budget)
    return dict(split.exponents), {k: v for k, v in split.intervals.items() if k in EXPONENTS}


def _result(approach: Approach, fit: FitResult, budgets: list[float],
            largest: float, n_bootstrap: int) -> ApproachResult:
    params = {k: float(fit.params[k]) for k in approach.shown if k in fit.params}
    intervals = {k: v for k, v in fit.intervals.items() if k in params}
    notes = [w for curve in getattr(fit, "curves", ()) for w in curve.warnings]
    try:
        exponents, spread = _exponents(fit, budgets[0] if budgets else 1e21)
        rows = optimal_rows(fit, budgets, largest=largest)
    except FitError as exc:
        exponents, spread, rows = {k: math.nan for k in EXPONENTS}, {}, []
        notes.append(f"no compute-optimal split: {exc}")
    params.update(exponents)
    intervals.update(spread)
    if not fit.converged:
        notes.append(f"the optimiser did not converge{': ' + fit.message if fit.message else ''}")
    elif fit.message:
        notes.append(fit.message)
    if n_bootstrap and not fit.intervals:
        notes.append(f"no intervals: none of the {n_bootstrap} bootstrap refits could be made")
    return ApproachResult(approach, fit, params=params, intervals=intervals, level=fit.level,
                          optimal=rows, notes=notes)


def analyze(points: pd.DataFrame, *, approaches: Sequence[str] = tuple(APPROACHES),
            budgets: Sequence[float] | None = None, curves: pd.DataFrame | None = None,
            n_bootstrap: int = 0, seed: int = 0) -> ScalingReport:
    """Fit each approach to ``points`` and tabulate the compute-optimal models.

    Args:
        points: One row per trial, columns `sweep.scaling.runs.POINT_COLUMNS` (from
            `load_runs` or `read_csv_points`); ``frame.attrs`` supplies the source, the
            parameter-count convention and the exclusions.
        approaches: Keys of `APPROACHES`, run in this order.
        budgets: Target budgets C (FLOPs, > 0) of the compute-optimal tables, marked as
            targets in the frontier plot; default `default_budgets` (no targets marked).
        curves: Training curves (`load_curves`), for approach 1.
        n_bootstrap: Bootstrap refits per fit, for the intervals (0: none).
        seed: Seed of the resampling.

    Returns:
        The `ScalingReport`; an approach whose fit raised `FitError` has ``error`` set and no
        fit, and the others are unaffected.

    Raises:
        ValueError: An unknown approach, or a budget that is not a finite number > 0.
    """
    unknown = [k for k in approaches if k not in APPROACHES]
    if unknown:
        raise ValueError(f"unknown approach(es) {', '.join(unknown)}; known: "
                         f"{', '.join(APPROACHES)}")
    targets = []
    for budget in budgets or ():
        try:
            value = float(budget)
        except (TypeError, ValueError):
            value = math.nan
        if isinstance(budget, bool) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"budget {budget!r}: must be a finite number of FLOPs > 0")
        targets.append(value)
    targets.sort()
    table = targets or default_budgets(points)
    flops = _column(points, METRIC_BUDGET_FLOPS)
    if not np.isfinite(flops).any():
        flops = 6 * _column(points, METRIC_N_PARAMS) * _column(points, METRIC_N_TOKENS)
    largest = float(np.nanmax(flops)) if np.isfinite(flops).any() else math.inf
    inputs = FitInputs(points, curves, n_bootstrap, seed)
    results = {}
    for key in approaches:
        approach = APPROACHES[key]
        try:
            fit = approach.fit(inputs)
        except FitError as exc:
            results[key] = ApproachResult(approach, error=str(exc))
            continue
        results[key] = _result(approach, fit, table, largest, n_bootstrap)
    attrs = points.attrs
    return ScalingReport(results=results, budgets=table, targets=targets, points=points,
                         curves=curves, source=str(attrs.get("study", attrs.get("source", ""))),
                         n_params_convention=str(attrs.get("n_params_convention", "total")),
                         excluded=dict(attrs.get("excluded", {})))


def _number(value: float) -> float | None:
    """A JSON number: nan and infinities become null."""
    value = float(value)
    return value if math.isfinite(value) else None


def _pairs(intervals: Mapping[str, tuple[float, float]]) -> dict[str, list[float | None]]:
    return {k: [_number(lo), _number(hi)] for k, (lo, hi) in intervals.items()}


def report_json(report: ScalingReport) -> dict[str, dict[str, Any]]:
    """The report as one JSON-ready object keyed by approach.

    Each approach's object: ``title``; then either ``error`` (why the fit could not be made)
    or its parameters at top level (``E``, ``A``, ``B``, ``alpha``, ``beta`` for approach 3
    and VPNLS; ``k_n``, ``k_d`` for 1 and 2) and the allocation exponents ``a``, ``b``;
    ``intervals`` (name -> ``[lo, hi]`` at ``level``), ``optimal`` (a row per budget:
    ``budget_flops``, ``n_params``, ``n_tokens``, ``tokens_per_param``, ``loss``,
    ``extrapolated``, ``intervals``), ``method``, ``n_points``, ``converged``, ``notes``,
    ``flop_convention`` (``C = 6ND``) and ``n_params_convention``. Non-finite numbers are null.
    """
    out: dict[str, dict[str, Any]] = {}
    for key, result in report.results.items():
        entry: dict[str, Any] = {"title": result.approach.title}
        if not result.ok:
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
            method=result.fit.method, n_points=result.fit.n_points,
            converged=bool(result.fit.converged), notes=list(result.notes),
            flop_convention=FLOP_CONVENTION, n_params_convention=report.n_params_convention)
        out[key] = entry
    return out


def log_report(report: ScalingReport, tracking_uri: str, run_id: str,
               plot_paths: Sequence[Any] = ()) -> None:
    """Log the report's JSON (`FITS_ARTIFACT`) and the plot files (`PLOTS_ARTIFACT_DIR`).

    Args:
        report: The report.
        tracking_uri: The study's MLflow store.
        run_id: The study's parent run.
        plot_paths: PNG files to log.

    Raises:
        mlflow.exceptions.MlflowException: The store refuses the artifacts.
    """
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    client.log_text(run_id, json.dumps(report_json(report), indent=2), FITS_ARTIFACT)
    for path in plot_paths:
        client.log_artifact(run_id, str(path), PLOTS_ARTIFACT_DIR)

