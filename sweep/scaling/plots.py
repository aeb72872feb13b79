"""Figures of a scaling analysis (`sweep.scaling.report.ScalingReport`), drawn with matplotlib.

One function per figure, each returning the ``matplotlib.figure.Figure``: the IsoFLOP curves
(`isoflop_figure`), loss against N and D with the parametric fit (`parametric_figure`) and its
residuals (`residuals_figure`); N_opt and D_opt against C and loss against compute
(`sweep.scaling.plot_frontier`), the contours of L(N, D) (`sweep.scaling.plot_contours`);
`report_figures` draws every one the report's fits allow and `write_figures` saves them as PNG.
Drawn with `sweep.plotting`'s backend: Agg unless pyplot is already in use.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sweep.plotting import colours, pyplot
from sweep.scaling.isoflop import IsoFLOPFit
from sweep.scaling.plot_axes import linear_limits, log_limits, mark_outside
from sweep.scaling.plot_contours import contour_figure
from sweep.scaling.plot_frontier import frontier_figure, loss_compute_figure
from sweep.scaling.report import ScalingReport
from sweep.scaling.result import FitResult
from sweep.scaling.runs import LOSS, column
from sweep.schema import METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, METRIC_N_TOKENS

__all__ = ["close_figures", "contour_figure", "frontier_figure", "isoflop_figure",
           "loss_compute_figure", "parametric_figure", "report_figures", "residuals_figure",
           "write_figures"]

log = logging.getLogger(__name__)

_LOSS_LABEL = "final val loss (nats/token)"
_N_LABEL = "parameters N"
_D_LABEL = "training tokens D"
_SYMBOL = {METRIC_BUDGET_FLOPS: "C", METRIC_N_PARAMS: "N", METRIC_N_TOKENS: "D"}
# At most this many distinct values of the other variable get a fitted line each.
_MAX_LINES = 10


def isoflop_figure(fit: IsoFLOPFit, points: pd.DataFrame) -> Any:
    """Loss against N at each FLOP budget, the fitted parabolas and their minima (approach 2).

    The axes frame the points, the parabolas over their sampled N and the usable minima
    (`sweep.scaling.plot_axes`); a flagged minimum beyond them is drawn at the edge
    (`mark_outside`), so it never stretches an axis.

    Args:
        fit: The approach 2 fit (its ``curves``).
        points: The points it was fitted to (``budget_flops``, ``n_params``, ``loss``).

    Returns:
        The figure: points per budget, each parabola over its sampled N, its vertex as a star
        (hollow when flagged and left out of the power laws).
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    budget, n, loss = (column(points, c) for c in (METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, LOSS))
    drawn_y: list[Any] = [loss]
    outside = []
    for colour, curve in zip(colours(len(fit.curves)), fit.curves, strict=True):
        at = budget == curve.budget_flops
        ax.scatter(n[at], loss[at], color=colour, s=18, label=f"C = {curve.budget_flops:.2g}")
        c0, c1, c2 = curve.coefficients
        log_n = np.linspace(np.log(n[at].min()), np.log(n[at].max()), 100)
        drawn_y.append(c0 + c1 * log_n + c2 * log_n**2)
        ax.plot(np.exp(log_n), drawn_y[-1], color=colour, lw=1.0)
        if not math.isfinite(curve.n_opt):
            continue
        if not curve.usable:  # drawn once the limits are set, at an edge if beyond them
            outside.append(((curve.n_opt, curve.loss_opt), colour))
            continue
        drawn_y.append(curve.loss_opt)
        ax.scatter([curve.n_opt], [curve.loss_opt], marker="*", s=140, zorder=3, color=colour)
    ax.set_xscale("log")
    ax.set_xlim(*log_limits(n))
    ax.set_ylim(*linear_limits(*drawn_y))
    for (x, y), colour in outside:
        if not mark_outside(ax, x, y, "flagged minimum", colour=colour):
            ax.scatter([x], [y], marker="*", s=140, zorder=3, edgecolors=colour,
                       facecolors="none")
    ax.set_xlabel(_N_LABEL)
    ax.set_ylabel(_LOSS_LABEL)
    ax.set_title("IsoFLOP curves (stars: minima; hollow: flagged, not fitted)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _groups(points: pd.DataFrame, other: str) -> tuple[str | None, np.ndarray]:
    """How to draw fitted lines: along each IsoFLOP budget, at each value of ``other``, or not."""
    budget = column(points, METRIC_BUDGET_FLOPS)
    if np.isfinite(budget).all() and np.unique(budget).size <= _MAX_LINES:
        return METRIC_BUDGET_FLOPS, budget
    values = column(points, other)
    if np.unique(values).size <= _MAX_LINES:
        return other, values
    return None, values


def _law_panel(ax: Any, fit: FitResult, points: pd.DataFrame, x_name: str, other: str) -> None:
    x, y = column(points, x_name), column(points, LOSS)
    key, labels = _groups(points, other)
    if key is None:
        ax.scatter(x, y, s=14, color="C0", label="trials")
        n, d = column(points, METRIC_N_PARAMS), column(points, METRIC_N_TOKENS)
        ax.scatter(x, fit.predict(n, d), s=14, marker="x", color="C1", label="fit")
    else:
        values = np.unique(labels)
        for colour, value in zip(colours(values.size), values, strict=True):
            at = labels == value
            ax.scatter(x[at], y[at], s=14, color=colour, label=f"{_SYMBOL[key]} = {value:.3g}")
            line = np.geomspace(x[at].min(), x[at].max(), 60)
            # Along a budget the other variable follows from C = 6ND; else it is held.
            held = value / (6 * line) if key == METRIC_BUDGET_FLOPS else np.full_like(line, value)
            n, d = (line, held) if x_name == METRIC_N_PARAMS else (held, line)
            ax.plot(line, fit.predict(n, d), color=colour, lw=1.0)
    ax.set_xscale("log")
    ax.set_xlabel(_N_LABEL if x_name == METRIC_N_PARAMS else _D_LABEL)
    ax.set_ylabel(_LOSS_LABEL)
    ax.legend(fontsize=7)


def parametric_figure(fit: FitResult, points: pd.DataFrame, title: str = "") -> Any:
    """Loss against N and against D with the fitted L(N, D) (approach 3, VPNLS).

    Fitted lines follow each IsoFLOP budget (D = C / (6N)) when the points have at most
    ten budgets, else each distinct D (N) when there are at most ten, else the fit's value at
    each point is marked.

    Args:
        fit: A fit of L(N, D) with ``predict(n_params, n_tokens)``.
        points: The points it was fitted to.
        title: The figure's title (default: the fitted law).
    """
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    _law_panel(axes[0], fit, points, METRIC_N_PARAMS, METRIC_N_TOKENS)
    _law_panel(axes[1], fit, points, METRIC_N_TOKENS, METRIC_N_PARAMS)
    p = fit.params
    fig.suptitle(title or (f"L = {p['E']:.3g} + {p['A']:.3g} / N^{p['alpha']:.3f} + "
                           f"{p['B']:.3g} / D^{p['beta']:.3f}"))
    fig.tight_layout()
    return fig


def residuals_figure(report: ScalingReport) -> Any:
    """Residuals in log loss, log L observed - log L fitted, of every L(N, D) fit, vs N and D.

    Computed here from each fit's ``predict`` (approach 3 fits log loss, VPNLS loss itself), so
    that the fits share one scale.

    Raises:
        ValueError: No L(N, D) fit was made.
    """
    fits = {k: r.fit for k, r in report.results.items()
            if r.fit is not None and {"alpha", "beta"} <= set(r.fit.params)}
    if not fits:
        raise ValueError("no fit of L(N, D) to show residuals of")
    n, d = column(report.points, METRIC_N_PARAMS), column(report.points, METRIC_N_TOKENS)
    log_loss = np.log(column(report.points, LOSS))
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for i, (key, fit) in enumerate(fits.items()):
        residuals = log_loss - np.log(fit.predict(n, d))
        for ax, x in zip(axes, (n, d), strict=True):
            ax.scatter(x, residuals, s=14, color=f"C{i}", label=f"approach {key}")
    for ax, label in zip(axes, (_N_LABEL, _D_LABEL), strict=True):
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("residual: log L observed - log L fitted")
    fig.suptitle("Residuals of the fits of L(N, D)")
    fig.tight_layout()
    return fig


def report_figures(report: ScalingReport) -> dict[str, Any]:
    """Every figure the report's fits allow, by file stem; one that cannot be drawn is skipped.

    ``isoflop_curves`` (approach 2), ``loss_vs_n_and_d_<key>`` (approach 3, VPNLS),
    ``frontier`` (N_opt and D_opt against C), ``loss_vs_compute`` (every run, the frontier),
    ``loss_contours`` (L(N, D) with the efficient frontier) and ``residuals``.
    """
    draws: dict[str, Any] = {}
    for key, result in report.results.items():
        fit = result.fit
        if isinstance(fit, IsoFLOPFit):
            draws["isoflop_curves"] = (lambda f=fit: isoflop_figure(f, report.points))
        elif fit is not None and {"alpha", "beta"} <= set(fit.params):
            draws[f"loss_vs_n_and_d_{key}"] = (
                lambda f=fit, r=result: parametric_figure(f, report.points, r.approach.title))
    draws["frontier"] = lambda: frontier_figure(report)
    draws["loss_vs_compute"] = lambda: loss_compute_figure(report)
    draws["loss_contours"] = lambda: contour_figure(report)
    draws["residuals"] = lambda: residuals_figure(report)
    figures = {}
    for name, draw in draws.items():
        try:
            figures[name] = draw()
        except (ValueError, ArithmeticError) as exc:
            log.info("plot %s skipped: %s", name, exc)
    return figures


def close_figures(figures: Mapping[str, Any]) -> None:
    """Release the figures of `report_figures`."""
    plt = pyplot()
    for figure in figures.values():
        plt.close(figure)


def write_figures(report: ScalingReport, out_dir: str | Path, *, dpi: int = 120) -> list[Path]:
    """Draw `report_figures` and save each as ``<out_dir>/<name>.png``.

    Returns:
        The files written, in drawing order.

    Raises:
        OSError: ``out_dir`` cannot be created or written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = report_figures(report)
    paths = []
    try:
        for name, figure in figures.items():
            path = out / f"{name}.png"
            figure.savefig(path, dpi=dpi)
            paths.append(path)
    finally:
        close_figures(figures)
    return paths
