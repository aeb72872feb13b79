"""The compute-optimal frontier: N_opt and D_opt against C, and loss against compute.

`frontier_figure` draws N_opt(C) and D_opt(C) of every fitted approach (Hoffmann et al. 2022,
Figure 3 centre and right; C = 6ND), each with its bootstrap band, solid over the studied
budgets and dashed beyond, approach 2's IsoFLOP minima, the target budgets and the verdict
(`sweep.scaling.verdict`) with its intervals. `loss_compute_figure` draws every run's final
loss against C = 6ND with the runs' lower envelope and the fitted loss at N_opt(C)
(Hoffmann et al. 2022, Figure 2 left, with final losses in place of whole curves).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sweep.plotting import colours, pyplot
from sweep.scaling.diagnostics import LAW_FITS
from sweep.scaling.isoflop import IsoFLOPFit
from sweep.scaling.plot_axes import (
    compute_6nd,
    framed,
    linear_limits,
    log_limits,
    mark_outside,
    studied_compute,
)
from sweep.scaling.report import FLOP_CONVENTION, OptimalRow, ScalingReport, optimal_rows
from sweep.scaling.result import FitError
from sweep.scaling.runs import LOSS, column
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS

__all__ = ["frontier_figure", "loss_compute_figure"]

log = logging.getLogger(__name__)

_C_LABEL = f"compute C (FLOPs, {FLOP_CONVENTION})"
# Budgets along each drawn line: each costs one split per bootstrap draw, and the lines are
# straight or nearly so on log axes (power laws of C).
_GRID = 24
#: What each panel of the frontier shows: the row's value, its name and the axis label.
_PANELS: tuple[tuple[str, Callable[[OptimalRow], float], str, str], ...] = (
    (METRIC_N_PARAMS, lambda r: r.n_params, "N_opt", "compute-optimal parameters N_opt"),
    (METRIC_N_TOKENS, lambda r: r.n_tokens, "D_opt", "compute-optimal tokens D_opt"),
)


def _lines(report: ScalingReport, grid: np.ndarray) -> dict[str, list[OptimalRow]]:
    """Each fitted approach's compute-optimal rows along ``grid`` (those with a split)."""
    lines = {}
    for key, result in report.results.items():
        if result.fit is None:
            continue
        try:
            lines[key] = optimal_rows(result.fit, grid)
        except FitError as exc:
            log.info("approach %s left off the frontier: %s", key, exc)
    return lines


def _draw_split(ax: Any, grid: np.ndarray, values: np.ndarray, largest: float, colour: Any,
                label: str) -> None:
    """A line solid up to ``largest`` (the studied budgets) and dashed beyond it."""
    inside, beyond = grid <= largest, grid >= largest
    ax.plot(grid[inside], values[inside], color=colour, label=label)
    if beyond.sum() > 1:
        ax.plot(grid[beyond], values[beyond], color=colour, ls="--")


def _verdict_rows(report: ScalingReport) -> list[Any]:
    return list(report.verdict.rows) if report.verdict is not None else []


def _verdict_marks(ax: Any, rows: Sequence[Any], value: Callable[[Any], float],
                   metric: str, label: str) -> list[float]:
    """The verdict's estimates with their intervals as error bars; returns the values drawn."""
    xs = [r.budget_flops for r in rows if math.isfinite(value(r))]
    ys = [value(r) for r in rows if math.isfinite(value(r))]
    if not xs:
        return []
    spans = [r.intervals.get(metric) for r in rows if math.isfinite(value(r))]
    # A percentile interval of the draws may miss the full fit's estimate (noiseless points):
    # the bar then reaches from the estimate to the interval's far end.
    lo = [max(y - s[0], 0.0) if s else 0.0 for y, s in zip(ys, spans, strict=True)]
    hi = [max(s[1] - y, 0.0) if s else 0.0 for y, s in zip(ys, spans, strict=True)]
    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="D", color="black", ms=5, capsize=3, zorder=5,
                label=label)
    return ys + [v for s in spans if s for v in s]


def _minima(ax: Any, report: ScalingReport, value: Callable[[float, float], float],
            colour: Any) -> tuple[list[float], list[tuple[float, float]]]:
    """Approach 2's usable minima drawn; returns their values and the flagged ones' points."""
    result = report.results.get("2")
    fit = result.fit if result is not None else None
    if not isinstance(fit, IsoFLOPFit):
        return [], []
    usable = [(k.budget_flops, value(k.budget_flops, k.n_opt)) for k in fit.curves
              if k.usable and math.isfinite(k.n_opt)]
    flagged = [(k.budget_flops, value(k.budget_flops, k.n_opt)) for k in fit.curves
               if not k.usable and math.isfinite(k.n_opt)]
    if usable:
        ax.scatter(*zip(*usable, strict=True), color=colour, s=28, zorder=4,
                   label="approach 2: IsoFLOP minima")
    return [y for _, y in usable], flagged


def _mark_targets(ax: Any, targets: Sequence[float], largest: float, *, top: bool) -> None:
    """The targets as dotted lines labelled at the ``top`` or bottom, the extrapolation shaded."""
    if any(t > largest for t in targets):
        ax.axvspan(largest, ax.get_xlim()[1], color="grey", alpha=0.08, lw=0)
    for target in targets:
        ax.axvline(target, color="grey", ls=":", lw=1.0)
        ax.annotate(f"target {target:.2g}", (target, 0.98 if top else 0.02),
                    xycoords=("data", "axes fraction"), rotation=90, fontsize=8, ha="right",
                    va="top" if top else "bottom")


def _frontier_panel(ax: Any, report: ScalingReport, lines: dict[str, list[OptimalRow]],
                    grid: np.ndarray, largest: float, panel: tuple) -> None:
    metric, value, symbol, label = panel
    exponent = "a" if metric == METRIC_N_PARAMS else "b"  # N_opt ~ C^a, D_opt ~ C^b
    chosen = report.verdict.approach if report.verdict is not None else None
    framed_y: list[Any] = []
    for colour, (key, rows) in zip(colours(len(lines)), lines.items(), strict=True):
        values = np.array([value(r) for r in rows])
        framed_y.append(values)
        shown = report.results[key].params.get(exponent, math.nan)
        _draw_split(ax, grid, values, largest, colour, f"approach {key}: {exponent} = {shown:.3f}")
        band = [r.intervals.get(metric, (math.nan, math.nan)) for r in rows]
        if any(math.isfinite(lo) for lo, _ in band):  # the verdict's band the darkest
            ax.fill_between(grid, [lo for lo, _ in band], [hi for _, hi in band], color=colour,
                            alpha=0.25 if key == chosen else 0.1, lw=0)
    vertex = (lambda c, n: n) if metric == METRIC_N_PARAMS else (lambda c, n: c / (6 * n))
    minima: Any = colours(len(lines))[list(lines).index("2")] if "2" in lines else "grey"
    usable, flagged = _minima(ax, report, vertex, minima)
    verdict = report.verdict
    marks = _verdict_marks(ax, _verdict_rows(report), value, metric,
                           f"verdict (approach {verdict.approach}, {verdict.level:.0%})"
                           if verdict else "")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*log_limits(grid))
    ax.set_ylim(*log_limits(*framed_y, usable, marks))
    for x, y in flagged:
        if not mark_outside(ax, x, y, f"flagged {symbol}", colour=minima):
            ax.scatter([x], [y], s=28, zorder=4, facecolors="none", edgecolors=minima)
    _mark_targets(ax, report.targets, largest, top=False)  # the lines rise to the right
    ax.set_xlabel(_C_LABEL)
    ax.set_ylabel(label)
    ax.legend(fontsize=7, loc="best")


def frontier_figure(report: ScalingReport) -> Any:
    """N_opt(C) and D_opt(C) of every fitted approach, two panels (C = 6ND).

    Each line runs from the smallest studied budget to the largest target, solid over the
    studied budgets and dashed beyond (the shaded side), with its bootstrap band where the fit
    has draws; approach 2's minima as points (flagged ones hollow, or at the edge they lie
    beyond); the targets as dotted lines; the verdict's estimate at each of its budgets as a
    black diamond with its interval. The y limits hold the lines, the usable minima and the
    verdict, never a flagged minimum.

    Raises:
        ValueError: No approach gives a compute-optimal split.
    """
    studied = studied_compute(report.points)
    studied = studied[np.isfinite(studied) & (studied > 0)]
    if not studied.size:
        raise ValueError("no budget to draw the frontier over")
    largest = float(studied.max())
    top = max([largest, *report.targets, *(r.budget_flops for r in _verdict_rows(report))])
    grid = np.unique(np.append(np.geomspace(studied.min(), top, _GRID), largest))
    lines = _lines(report, grid)
    if not lines:
        raise ValueError("no approach gives a compute-optimal split")
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, panel in zip(axes, _PANELS, strict=True):
        _frontier_panel(ax, report, lines, grid, largest, panel)
    fig.suptitle("Compute-optimal frontier (solid: studied budgets; dashed, shaded: "
                 "extrapolated)")
    fig.tight_layout()
    return fig


def _loss_line(report: ScalingReport, grid: np.ndarray) -> tuple[str, list[OptimalRow]] | None:
    """The verdict's approach (else a fit of L(N, D), else approach 2) with a loss along grid."""
    first = [report.verdict.approach] if report.verdict is not None else []
    for key in [*first, *LAW_FITS, "2"]:
        result = report.results.get(key)
        if result is None or result.fit is None:
            continue
        try:
            rows = optimal_rows(result.fit, grid)
        except FitError:
            continue
        if all(math.isfinite(r.loss) for r in rows):
            return key, rows
    return None


def _lower_envelope(compute: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs on the lower convex hull of (log C, loss), up to the lowest loss.

    Andrew's monotone chain over the runs sorted by C: no run lies below the segments
    joining these, so they trace the best loss reached at each compute.
    """
    order = np.lexsort((loss, compute))  # by C, the lowest loss first among equal C
    x, y = np.log(compute[order]), loss[order]
    hull: list[int] = []
    for i in range(x.size):
        while len(hull) >= 2:
            (x0, y0), (x1, y1) = (x[hull[-2]], y[hull[-2]]), (x[hull[-1]], y[hull[-1]])
            if (x1 - x0) * (y[i] - y0) - (y1 - y0) * (x[i] - x0) > 0:  # a left turn: keep
                break
            hull.pop()
        if not hull or x[i] > x[hull[-1]]:
            hull.append(i)
    lowest = int(np.argmin(y[hull]))
    kept = order[hull[:lowest + 1]]
    return compute[kept], loss[kept]


def loss_compute_figure(report: ScalingReport) -> Any:
    """Every run's final loss against C = 6ND, coloured by N, with the frontier.

    The runs' lower envelope (their lower convex hull in log C, up to the lowest loss) and the
    fitted loss at N_opt(C) of the verdict's approach (else the first fit that predicts a
    loss), solid over the runs' compute and dashed to the targets within `FRAME_REACH` of it,
    with its band and the verdict's losses; targets beyond are named in a corner.

    Raises:
        ValueError: No point with finite C and loss.
    """
    compute, loss = compute_6nd(report.points), column(report.points, LOSS)
    n = column(report.points, METRIC_N_PARAMS)
    ok = np.isfinite(compute) & (compute > 0) & np.isfinite(loss)
    if not ok.any():
        raise ValueError("no point with a finite compute and loss")
    compute, loss, n = compute[ok], loss[ok], n[ok]
    largest = float(compute.max())
    rows = _verdict_rows(report)
    inside, beyond = framed(sorted({*report.targets, *(r.budget_flops for r in rows)}), largest)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    dots = ax.scatter(compute, loss, c=n, cmap="viridis", s=22, zorder=3,
                      norm="log", label="runs (final loss)")
    fig.colorbar(dots, ax=ax, label="parameters N")
    ax.plot(*_lower_envelope(compute, loss), color="black", lw=0.8, ls="--", marker="o",
            ms=7, mfc="none", label="lower envelope of the runs (convex hull)")
    grid = np.unique(np.append(np.geomspace(compute.min(), max([largest, *inside]), _GRID),
                               largest))
    framed_y: list[Any] = [loss]
    line = _loss_line(report, grid)
    if line is not None:
        key, fitted = line
        values = np.array([r.loss for r in fitted])
        framed_y.append(values)
        _draw_split(ax, grid, values, largest, "C3", f"approach {key}: L at N_opt(C)")
        band = [r.intervals.get(LOSS, (math.nan, math.nan)) for r in fitted]
        if any(math.isfinite(lo) for lo, _ in band):
            ax.fill_between(grid, [lo for lo, _ in band], [hi for _, hi in band], color="C3",
                            alpha=0.15, lw=0)
    shown = [r for r in rows if r.budget_flops in inside]
    verdict = report.verdict
    framed_y.append(_verdict_marks(ax, shown, lambda r: r.loss, LOSS,
                                   f"verdict (approach {verdict.approach}, {verdict.level:.0%})"
                                   if verdict else ""))
    ax.set_xscale("log")
    ax.set_xlim(*log_limits(compute, inside))
    ax.set_ylim(*linear_limits(*framed_y))
    _mark_targets(ax, [t for t in report.targets if t in inside], largest, top=True)
    if beyond:
        far = [r for r in rows if r.budget_flops in beyond]
        text = "\n".join(f"C = {r.budget_flops:.2g}: L = {r.loss:.4g}" for r in far) or \
            "\n".join(f"target C = {b:.2g}" for b in beyond)
        ax.text(0.98, 0.98, "beyond the axes:\n" + text, transform=ax.transAxes, fontsize=7,
                ha="right", va="top")
    ax.set_xlabel("compute C = 6ND of each run (FLOPs)")
    ax.set_ylabel("final val loss (nats/token)")
    ax.set_title("Loss against compute, every run")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig
