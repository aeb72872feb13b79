"""Approach 2's bias from the sampling grid, and its disagreement with the fits of L(N, D).

The mechanism (Czech 2026, "Problems with Chinchilla Approach 2", section on off-centre
sampling; Open-Athena/scaling-law-analysis, experiment 3): an IsoFLOP curve is not a parabola
in log N but L(u) - E ~ beta e^(-alpha u) + alpha e^(beta u) (u = log N - log N_opt, up to a
scale; its Taylor series has no linear term and a cubic term (beta - alpha) u / 3 times the
quadratic one), so a parabola fitted over an off-centre window has its vertex pulled by an
amount that depends on the offset, the window's width and alpha - beta. A constant offset moves
every vertex alike and biases only the intercept k_N; an offset that changes with C (the sizes'
centre drifting from 1x to 3x N_opt across the budgets) biases the exponent a, with every vertex
still inside its curve's sizes, so no curve is flagged.

`implied_bias` measures it on the study's own design: the fitted L(N, D) (VPNLS or approach 3)
evaluated without noise at the very (C, N, D) the study sampled, then approach 2 run on those
losses; the exponent it returns minus the law's own is the bias the grid gives approach 2
(`BIAS_TOLERANCE` and above is named). `parted` is the one rule for two estimates that differ
beyond their intervals, used here for the exponent and by `sweep.scaling.verdict` for N_opt.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from sweep.scaling.diagnostics import LAW_FITS, Note
from sweep.scaling.result import FitError
from sweep.scaling.runs import LOSS, column
from sweep.schema import METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, METRIC_N_TOKENS

if TYPE_CHECKING:
    from sweep.scaling.report import ScalingReport

__all__ = ["BIAS_TOLERANCE", "DRIFT_TOLERANCE", "implied_bias", "isoflop_notes", "parted",
           "vertex_offsets"]

#: An implied bias of approach 2's exponent a at least this large is named.
BIAS_TOLERANCE = 0.005
#: Without a fit of L(N, D), a change of the sizes' centre against the vertex by more than
#: this factor across the budgets is named.
DRIFT_TOLERANCE = 2.0


def parted(x: float, x_interval: tuple[float, float] | None, y: float,
           y_interval: tuple[float, float] | None) -> bool:
    """Whether two estimates differ beyond their intervals.

    The gap between them exceeds the two half-intervals that face each other, added in
    quadrature: for independent estimates with intervals at one level, the interval of the
    difference at about that level excludes 0. False when either interval is missing.
    """
    if not x_interval or not y_interval:
        return False
    if not all(math.isfinite(v) for v in (x, y, *x_interval, *y_interval)):
        return False
    if x < y:
        x, x_interval, y, y_interval = y, y_interval, x, x_interval
    return x - y > math.hypot(x - x_interval[0], y_interval[1] - y)


def _curve_points(points) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Budget, N, D and loss of the rows approach 2 fits (a finite, positive budget)."""
    c, n = column(points, METRIC_BUDGET_FLOPS), column(points, METRIC_N_PARAMS)
    d, y = column(points, METRIC_N_TOKENS), column(points, LOSS)
    ok = np.isfinite(c) & (c > 0) & np.isfinite(n) & (n > 0) & np.isfinite(d) & (d > 0)
    return c[ok], n[ok], d[ok], y[ok]


def vertex_offsets(fit, points) -> list[tuple[float, float]]:
    """``(C, log N_vertex - mean log N sampled at C)`` of each usable IsoFLOP curve (natural log).

    Args:
        fit: An `sweep.scaling.isoflop.IsoFLOPFit`.
        points: The points it was fitted to.
    """
    c, n, _, _ = _curve_points(points)
    return [(k.budget_flops, math.log(k.n_opt) - float(np.mean(np.log(n[c == k.budget_flops]))))
            for k in fit.curves if k.usable]


def implied_bias(law_params: dict[str, float], points) -> tuple[float, float] | None:
    """Approach 2's exponent a on the law's noise-free losses at the sampled points, and the law's.

    Returns:
        ``(a_approach_2, a_law)``, or None when approach 2 cannot be fitted to them.
    """
    from sweep.scaling.isoflop import fit_isoflop
    from sweep.scaling.law import law_loss

    c, n, d, _ = _curve_points(points)
    try:
        fit = fit_isoflop(c, n, law_loss(law_params, n, d))
    except FitError:
        return None
    return fit.params["a"], law_params["beta"] / (law_params["alpha"] + law_params["beta"])


def isoflop_notes(report: ScalingReport, law: dict[str, float] | None = None) -> list[Note]:
    """Approach 2's bias from a drifting grid, and where it parts from the fits of L(N, D).

    Args:
        report: The analysed report.
        law: The L(N, D) parameters to size the bias on; default the first fit of `LAW_FITS`.
    """
    result = report.results.get("2")
    if result is None or result.fit is None:
        return []
    offsets = vertex_offsets(result.fit, report.points)
    law_key = next((k for k in LAW_FITS if k in report.results and report.results[k].ok), None)
    law_fit = report.results[law_key].fit if law_key is not None else None
    notes = []
    first, last = offsets[0], offsets[-1]
    trend = (f"the sampled sizes' centre is {math.exp(-first[1]):.2f}x the parabola's vertex at "
             f"C={first[0]:.3g} and {math.exp(-last[1]):.2f}x at C={last[0]:.3g} "
             f"({(last[1] - first[1]) / math.log10(last[0] / first[0]):+.3f} in log N_vertex "
             "against the centre per decade of C)")
    a2 = result.params["a"]
    if law_fit is not None:
        law = law or law_fit.params
        biased = implied_bias(law, report.points)
        if biased is not None and abs(biased[0] - biased[1]) >= BIAS_TOLERANCE:
            bias = biased[0] - biased[1]
            notes.append(Note(
                "approach2-bias", "2", "approach 2's exponent is biased by the sampling grid, "
                "whose centre moves against the optimum across budgets (Czech 2026)",
                f"{trend}; on the fitted L(N, D) of approach {law_key} with these same sizes, "
                f"approach 2 returns a = {biased[0]:.4f} against the law's {biased[1]:.4f}: a bias "
                f"of {bias:+.4f}, so approach 2's a = {a2:.4f} would be {a2 - bias:.4f} without it",
                "centre each budget's sizes on its N_opt (re-centre the grid on the last fit), "
                "or take the fit of L(N, D) (the verdict), which this grid does not bias"))
    elif abs(last[1] - first[1]) > math.log(DRIFT_TOLERANCE):
        notes.append(Note(
            "approach2-bias", "2", "the sampling grid's centre moves against approach 2's "
            "vertices across budgets, which biases its exponent (Czech 2026)", trend,
            "centre each budget's sizes on its N_opt, and fit approach 3 or vpnls, which size "
            "the bias"))
    notes += _disagreements(report, a2, result.intervals.get("a"))
    return notes


def _disagreements(report: ScalingReport, a2: float,
                   interval: tuple[float, float] | None) -> list[Note]:
    parts = []
    for key in LAW_FITS:
        other = report.results.get(key)
        if other is None or other.fit is None:
            continue
        a = other.params.get("a", math.nan)
        spread = other.intervals.get("a")
        if spread is not None and parted(a2, interval, a, spread):
            parts.append(f"approach {key}'s a = {a:.4f} [{spread[0]:.4f}, {spread[1]:.4f}]")
    if not parts or interval is None:
        return []
    level = report.results["2"].level
    return [Note(
        "approach2-disagrees", "2", "approach 2 and the fits of L(N, D) disagree on the "
        "exponent beyond their intervals",
        f"approach 2's a = {a2:.4f} [{interval[0]:.4f}, {interval[1]:.4f}] ({level:.0%}) against "
        + "; ".join(parts), "look for the cause in the other notes (a drifting grid, an "
        "influential point, a curve without a clear minimum); the verdict takes the fit of "
        "L(N, D), which approach 2's parabolas do not bias")]
