"""L(N, D) as contours over parameters and tokens, with the efficient frontier.

`contour_figure` draws the fitted law L = E + A / N^alpha + B / D^beta (approach 3 or VPNLS,
the verdict's when it is one of them) as loss contours over the (N, D) plane framed on the
points, the IsoFLOP lines D = C / (6N) of the studied budgets, the efficient frontier
(N_opt(C), D_opt(C)) where each IsoFLOP line touches the lowest contour (Hoffmann et al. 2022,
eq. 4 and Figure 4 left, there over (C, N)), the points trained, and the verdict's target
budgets (those beyond `sweep.scaling.plot_axes.FRAME_REACH` named in a corner).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sweep.plotting import pyplot
from sweep.scaling.diagnostics import LAW_FITS, law_fit
from sweep.scaling.law import closed_form_split
from sweep.scaling.plot_axes import framed, log_limits, studied_compute
from sweep.scaling.report import ScalingReport, optimal_rows
from sweep.scaling.result import FitError
from sweep.scaling.runs import column
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS

__all__ = ["contour_figure"]

_CELLS = 100  # grid cells along each axis of the contours
_LEVELS = 14
_MAX_ISOFLOP_LINES = 10
_MARGIN = 0.1  # of the log range each side: a target's star stays inside the frame


def _law_key(report: ScalingReport) -> str | None:
    verdict = report.verdict
    if verdict is not None and verdict.approach in LAW_FITS:
        return str(verdict.approach)
    return law_fit(report)


def _levels(loss: np.ndarray, floor: float) -> np.ndarray:
    """Contour levels even in log(L - E) when every L > E > 0 (power laws look even), else L."""
    lo, hi = float(loss.min()), float(loss.max())
    if math.isfinite(floor) and 0 < floor < lo:
        return floor + np.geomspace(lo - floor, hi - floor, _LEVELS)
    return np.linspace(lo, hi, _LEVELS)


def _isoflop_lines(ax: Any, budgets: np.ndarray) -> None:
    """D = C / (6N) of each budget, labelled along the line where it enters the frame.

    Call after the limits are set: the label's angle is the line's on the screen.
    """
    (x_lo, x_hi), (y_lo, y_hi) = ax.get_xlim(), ax.get_ylim()
    n = np.geomspace(x_lo, x_hi, 50)
    for budget in budgets:
        ax.plot(n, budget / (6 * n), color="white", ls=":", lw=1.0)
        enter = max(budget / (6 * y_hi), x_lo) * 1.15
        if not (enter < x_hi and budget / (6 * enter) > y_lo):
            continue
        (x0, y0), (x1, y1) = ax.transData.transform(
            [(enter, budget / (6 * enter)), (2 * enter, budget / (12 * enter))])
        ax.annotate(f"C = {budget:.2g}", (enter, budget / (6 * enter)), xytext=(2, 2),
                    textcoords="offset points", fontsize=7, color="white", ha="left",
                    va="bottom", rotation=math.degrees(math.atan2(y1 - y0, x1 - x0)),
                    rotation_mode="anchor")


def _frontier(ax: Any, fit: Any, xlim: tuple, ylim: tuple, largest: float) -> None:
    """N_opt(C), D_opt(C) across the frame, solid up to ``largest``, dashed beyond."""
    budgets = np.geomspace(6 * xlim[0] * ylim[0], 6 * xlim[1] * ylim[1], 100)
    n, d = closed_form_split(fit.params, budgets)  # no intervals: the line alone is drawn
    inside, beyond = budgets <= largest, budgets >= largest
    ax.plot(n[inside], d[inside], color="C3", lw=2.0, label="efficient frontier N_opt(C)")
    ax.plot(n[beyond], d[beyond], color="C3", lw=2.0, ls="--")


def _targets(ax: Any, report: ScalingReport, inside: list[float]) -> None:
    rows = [r for r in (report.verdict.rows if report.verdict else [])
            if r.budget_flops in inside and r.budget_flops in report.targets]
    for row in rows:
        ax.scatter([row.n_params], [row.n_tokens], marker="*", s=160, color="C3",
                   edgecolors="white", zorder=5)
        ax.annotate(f"target {row.budget_flops:.2g}", (row.n_params, row.n_tokens),
                    xytext=(-8, 4), textcoords="offset points", fontsize=7, color="white",
                    ha="right")


def contour_figure(report: ScalingReport) -> Any:
    """Loss contours of the fitted L(N, D) over N and D, with the efficient frontier.

    The frame holds every point, and the verdict's target budgets up to `FRAME_REACH` x the
    largest studied one; the IsoFLOP lines are the studied budgets' (at most ten).

    Raises:
        ValueError: No fit of L(N, D), one with an exponent <= 0, or no point with finite N
            and D > 0.
    """
    key = _law_key(report)
    if key is None:
        raise ValueError("no fit of L(N, D) to draw contours of")
    fit = report.results[key].fit
    assert fit is not None  # law_fit and the verdict name fitted approaches only
    if not (fit.params["alpha"] > 0 and fit.params["beta"] > 0):
        raise ValueError(f"approach {key}: alpha={fit.params['alpha']:.3g}, "
                         f"beta={fit.params['beta']:.3g}: no efficient frontier without both > 0")
    n, d = column(report.points, METRIC_N_PARAMS), column(report.points, METRIC_N_TOKENS)
    ok = np.isfinite(n) & np.isfinite(d) & (n > 0) & (d > 0)
    if not ok.any():
        raise ValueError("no point with finite N and D > 0")
    studied = studied_compute(report.points)
    studied = np.unique(studied[np.isfinite(studied) & (studied > 0)])
    largest = float(studied.max()) if studied.size else float((6 * n * d)[ok].max())
    inside, beyond = framed(sorted(report.targets), largest)
    try:
        at_targets = optimal_rows(fit, inside)
    except FitError as exc:
        raise ValueError(f"approach {key}: {exc}") from exc
    xlim = log_limits(n[ok], [r.n_params for r in at_targets], margin=_MARGIN)
    ylim = log_limits(d[ok], [r.n_tokens for r in at_targets], margin=_MARGIN)
    grid_n, grid_d = np.meshgrid(np.geomspace(*xlim, _CELLS), np.geomspace(*ylim, _CELLS))
    loss = fit.predict(grid_n, grid_d)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    levels = _levels(loss, float(fit.params.get("E", math.nan)))
    filled = ax.contourf(grid_n, grid_d, loss, levels=levels, cmap="viridis")
    lines = ax.contour(grid_n, grid_d, loss, levels=levels, colors="black", linewidths=0.4)
    ax.clabel(lines, lines.levels[::2], fontsize=6, fmt="%.3g", colors="white")
    fig.colorbar(filled, ax=ax, label="fitted loss L(N, D) (nats/token)", format="%.3g")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    if studied.size <= _MAX_ISOFLOP_LINES:
        _isoflop_lines(ax, studied)
    _frontier(ax, fit, xlim, ylim, largest)
    ax.scatter(n[ok], d[ok], s=14, color="black", edgecolors="white", linewidths=0.5,
               zorder=4, label="runs")
    _targets(ax, report, inside)
    if beyond:
        ax.text(0.98, 0.02, "beyond the axes: targets " + ", ".join(f"{b:.2g}" for b in beyond),
                transform=ax.transAxes, fontsize=7, ha="right", va="bottom", color="white")
    ax.set_xlabel("parameters N")
    ax.set_ylabel("training tokens D")
    p = fit.params
    ax.set_title(f"approach {key}: L = {p['E']:.3g} + {p['A']:.3g} / N^{p['alpha']:.3f} + "
                 f"{p['B']:.3g} / D^{p['beta']:.3f}\n(dotted: IsoFLOP lines C = 6ND; "
                 "dashed: extrapolated)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")  # the frontier and the targets rise to the right
    fig.tight_layout()
    return fig
