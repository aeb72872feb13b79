"""Axis limits of the scaling figures, taken from the data each figure shows.

A figure's limits come from the values it fits to (`log_limits`, `linear_limits`), never from a
flagged point: an extrapolated IsoFLOP vertex at N = 4 among sizes of 1e6-1e8 would otherwise
stretch the axis over decades and squeeze the data at one edge. Such a point is drawn at the
edge it lies beyond, as an arrowhead pointing out with its value written beside it
(`mark_outside`). Budgets far beyond the data (`framed`) stay out of the figures that show
the data, and are written in a corner instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from sweep.scaling.runs import column
from sweep.schema import METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, METRIC_N_TOKENS

__all__ = ["FRAME_REACH", "MARGIN", "compute_6nd", "framed", "linear_limits", "log_limits",
           "mark_outside", "studied_compute"]

#: Each side of a figure's axis extends its data's range by this share of the range.
MARGIN = 0.06
#: Figures of the data frame a target budget with it only up to this factor beyond the data.
FRAME_REACH = 100.0
_EMPTY_SPAN = 0.25  # decades (log) or units (linear) each side when all values are one


def _finite(values: Iterable[Any], positive: bool) -> np.ndarray:
    flat = [np.asarray(v, dtype=float).ravel() for v in values]
    array = np.concatenate(flat) if flat else np.array([])
    keep = np.isfinite(array) & ((array > 0) if positive else True)
    return array[keep]


def log_limits(*values: Any, margin: float = MARGIN) -> tuple[float, float]:
    """Limits of a log axis holding every finite value > 0, widened by ``margin`` of the range.

    Args:
        values: Arrays or scalars; nan, inf and values <= 0 are ignored.
        margin: The share of the log range added on each side.

    Raises:
        ValueError: No finite value > 0.
    """
    array = _finite(values, positive=True)
    if not array.size:
        raise ValueError("no finite positive value to frame")
    lo, hi = math.log10(array.min()), math.log10(array.max())
    pad = margin * (hi - lo) if hi > lo else _EMPTY_SPAN
    return 10.0 ** (lo - pad), 10.0 ** (hi + pad)


def linear_limits(*values: Any, margin: float = MARGIN) -> tuple[float, float]:
    """Limits of a linear axis holding every finite value, widened by ``margin`` of the range.

    Raises:
        ValueError: No finite value.
    """
    array = _finite(values, positive=False)
    if not array.size:
        raise ValueError("no finite value to frame")
    lo, hi = float(array.min()), float(array.max())
    pad = margin * (hi - lo) if hi > lo else _EMPTY_SPAN * max(abs(lo), 1.0)
    return lo - pad, hi + pad


def compute_6nd(points: pd.DataFrame) -> np.ndarray:
    """C = 6ND of every point, FLOPs (Kaplan et al. 2020, sec. 2.1)."""
    return 6 * column(points, METRIC_N_PARAMS) * column(points, METRIC_N_TOKENS)


def studied_compute(points: pd.DataFrame) -> np.ndarray:
    """Each point's budget: ``budget_flops`` where given, else 6ND (as `analyze` counts it)."""
    budget = column(points, METRIC_BUDGET_FLOPS)
    return np.where(np.isfinite(budget), budget, compute_6nd(points))


def framed(budgets: Sequence[float], largest: float) -> tuple[list[float], list[float]]:
    """``(inside, beyond)``: the budgets up to `FRAME_REACH` x ``largest``, and the others."""
    inside = [b for b in budgets if b <= FRAME_REACH * largest]
    return inside, [b for b in budgets if b > FRAME_REACH * largest]


def _side(value: float, limits: tuple[float, float]) -> int:
    return -1 if value < limits[0] else (1 if value > limits[1] else 0)


def mark_outside(ax: Any, x: float, y: float, text: str, *, colour: Any) -> bool:
    """Draw a point that lies outside ``ax``'s limits at the edge it lies beyond.

    Call after the limits are set. The point becomes an arrowhead on the edge, pointing the
    way it lies, with ``text`` and its coordinates beside it. Returns whether it was outside
    (nothing is drawn for a point inside, or one with a coordinate that is nan or <= 0 on a
    log axis).
    """
    xlim, ylim = ax.get_xlim(), ax.get_ylim()
    if not (math.isfinite(x) and math.isfinite(y)) or \
            (ax.get_xscale() == "log" and x <= 0) or (ax.get_yscale() == "log" and y <= 0):
        return False
    sx, sy = _side(x, xlim), _side(y, ylim)
    if sx == sy == 0:
        return False
    marker = {-1: "<", 1: ">"}[sx] if sx else {-1: "v", 1: "^"}[sy]
    at = (min(max(x, xlim[0]), xlim[1]), min(max(y, ylim[0]), ylim[1]))
    ax.scatter([at[0]], [at[1]], marker=marker, s=70, facecolors="none", edgecolors=colour,
               linewidths=1.5, clip_on=False, zorder=4)
    if not sx:  # on the top or bottom edge: the text runs inwards from the nearer side
        fraction = ax.transAxes.inverted().transform(ax.transData.transform(at))[0]
        sx_text = -1 if fraction < 0.5 else 1
    else:
        sx_text = sx
    ha = "left" if sx_text < 0 else "right"
    va = "bottom" if sy < 0 else ("top" if sy > 0 else "center")
    offset = (8 * -sx_text, 8 * -sy if sy else 0)
    ax.annotate(f"{text} ({x:.3g}, {y:.3g}), off the axes", at, xytext=offset,
                textcoords="offset points", fontsize=7, color=colour, ha=ha, va=va)
    return True
