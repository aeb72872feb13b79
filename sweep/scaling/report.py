"""Running the chosen scaling-law approaches on a study's points, and the report they make.

`analyze` fits each approach of `sweep.scaling.approaches.APPROACHES` to a points frame
(`sweep.scaling.runs`), turns every fit into the compute-optimal N_opt, D_opt and predicted
loss at the target budgets, with bootstrap intervals where the fit has draws, and returns a
`ScalingReport` (its JSON and the copy on the study's run: `sweep.scaling.report_json`). A fit
that cannot be made (`FitError`) is reported for its approach and the others still run.

FLOPs follow C = 6ND throughout (`FLOP_CONVENTION`, defined in `sweep.scaling.options`): the
budgets, the compute-optimal split (`sweep.scaling.allocation.optimal_allocation`: N_opt =
G (C/6)^a, D_opt = G^-1 (C/6)^b for a fit of L(N, D), Hoffmann et al. 2022 eq. 4), and
D_opt = C / (6 N_opt) of approaches 1 and 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sweep.scaling.approaches import APPROACHES, Approach, FitInputs
from sweep.scaling.options import DEFAULT_HUBER_DELTA, FLOP_CONVENTION, check_huber_delta
from sweep.scaling.result import FitError, FitResult
from sweep.scaling.runs import LOSS, column
from sweep.schema import METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, METRIC_N_TOKENS

__all__ = ["EXPONENTS", "FLOP_CONVENTION", "ApproachResult", "OptimalRow", "ScalingReport",
           "analyze", "default_budgets", "optimal_rows"]

#: The allocation exponents: N_opt ~ C^a, D_opt ~ C^b.
EXPONENTS = ("a", "b")


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
        notes: The diagnostics (`sweep.scaling.diagnostics.Note`), and ``verdict`` the
            recommended estimate (`sweep.scaling.verdict.Verdict`): filled by
            `sweep.scaling.verdict.conclude`, empty and None until then.
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
    notes: list[Any] = field(default_factory=list)
    verdict: Any = None


def default_budgets(points: pd.DataFrame) -> list[float]:
    """The budgets a compute-optimal table shows when none are asked for.

    The points' distinct ``budget_flops`` (an IsoFLOP study's budgets); without any, the
    powers of ten within the range of 6ND over the points (at least the one nearest its
    geometric middle).
    """
    budgets = column(points, METRIC_BUDGET_FLOPS)
    budgets = np.unique(budgets[np.isfinite(budgets) & (budgets > 0)])
    if budgets.size:
        return [float(b) for b in budgets]
    flops = 6 * column(points, METRIC_N_PARAMS) * column(points, METRIC_N_TOKENS)
    flops = flops[np.isfinite(flops) & (flops > 0)]
    if not flops.size:
        return []
    lo, hi = np.log10(flops.min()), np.log10(flops.max())
    decades = np.arange(math.ceil(lo), math.floor(hi) + 1)
    if not decades.size:
        decades = np.array([round((lo + hi) / 2)])
    return [float(10.0 ** d) for d in decades]


def optimal_rows(fit: FitResult, budgets: Iterable[float], *,
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
            n_bootstrap: int = 0, seed: int = 0,
            huber_delta: float = DEFAULT_HUBER_DELTA) -> ScalingReport:
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
        huber_delta: Approach 3's Huber delta on log loss (Hoffmann's 1e-3; within
            `sweep.scaling.options.HUBER_DELTA_RANGE`).

    Returns:
        The `ScalingReport`; an approach whose fit raised `FitError` has ``error`` set and no
        fit, and the others are unaffected.

    Raises:
        ValueError: An unknown approach, a budget that is not a finite number > 0, or a
            ``huber_delta`` outside its range.
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
    huber_delta = check_huber_delta(huber_delta)
    table = targets or default_budgets(points)
    flops = column(points, METRIC_BUDGET_FLOPS)
    if not np.isfinite(flops).any():
        flops = 6 * column(points, METRIC_N_PARAMS) * column(points, METRIC_N_TOKENS)
    largest = float(np.nanmax(flops)) if np.isfinite(flops).any() else math.inf
    inputs = FitInputs(points, curves, n_bootstrap, seed, huber_delta)
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
