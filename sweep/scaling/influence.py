"""Points that alone move the fitted exponent: leave-one-out refits of L(N, D).

Each point is left out in turn and L(N, D) = E + A / N^alpha + B / D^beta refitted by VPNLS
(`sweep.scaling.vpnls.weighted_refits`, the whole procedure per refit), giving two numbers per
point (Cook 1977, "Detection of influential observation in linear regression"; Belsley, Kuh &
Welsch 1980, ch. 2, for the deleted residual and the change of an estimate on deletion):

- its deleted residual, log(loss / the refit's prediction at the point): how far the point lies
  from the law the others give; as a robust z-score (median and 1.4826 x median absolute
  deviation over all points);
- the change of the allocation exponent a = beta / (alpha + beta) when it is left out.

A point is named (`influence_notes`) when its z-score is at least `OUTLIER_Z` and leaving it out
moves a by at least `MOVE_TOLERANCE`: it both disagrees with the law and moves the answer. At
1% log-normal noise on a centred grid the largest z-score of 36 points stayed below 5 over 30
seeds, and one loss x1.5 scored 12 to 27 (measured when this rule was set). The note names the
point's ``trial`` (a study's trial number, a --csv table's data row), which
``sweep analyze scaling --exclude`` takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sweep.scaling.diagnostics import LAW_FITS, Note, trial_labels
from sweep.scaling.runs import LOSS, column
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS

if TYPE_CHECKING:
    from sweep.scaling.report import ScalingReport

__all__ = ["LOO_XATOL", "MAX_POINTS", "MOVE_TOLERANCE", "OUTLIER_Z", "Influence", "influence",
           "influence_notes"]

#: A deleted residual this many robust standard deviations out is an outlier.
OUTLIER_Z = 6.0
#: Leaving a point out must move a by this much for the point to be named.
MOVE_TOLERANCE = 0.005
#: Nelder-Mead's tolerance on alpha and beta in the refits: a's change is named from 0.005,
#: and the fit's own 1e-10 made the refits of noise-free points 5 times slower.
LOO_XATOL = 1e-6
#: Leave-one-out refits are made for at most this many points (one refit each, so fewer than
#: the 1,000 bootstrap refits ``sweep analyze scaling`` makes of VPNLS by default; 500 points
#: took 182 s on a loaded 2-core machine, time growing with the square of the points).
MAX_POINTS = 500


@dataclass(frozen=True)
class Influence:
    """Each point's leave-one-out numbers, in the order of the points fitted.

    Attributes:
        trial: Shape ``(n,)``: the points' ``trial`` labels.
        a: The exponent a = beta / (alpha + beta) of the fit on every point.
        a_without: Shape ``(n,)``: a refitted without each point.
        residual: Shape ``(n,)``: each point's deleted residual, log(loss / prediction).
        z: Shape ``(n,)``: the deleted residuals as robust z-scores.
    """

    trial: np.ndarray
    a: float
    a_without: np.ndarray
    residual: np.ndarray
    z: np.ndarray

    @property
    def move(self) -> np.ndarray:
        """Shape ``(n,)``: how far leaving each point out moves a."""
        return self.a_without - self.a


def influence(points) -> Influence | None:
    """Leave-one-out VPNLS refits of ``points`` (None with fewer than 7 or over `MAX_POINTS`).

    Args:
        points: A points frame (`sweep.scaling.runs.POINT_COLUMNS`).
    """
    from sweep.scaling.law import PARAMS, law_loss
    from sweep.scaling.vpnls import weighted_refits

    n, d, y = (column(points, k) for k in (METRIC_N_PARAMS, METRIC_N_TOKENS, LOSS))
    ok = np.isfinite(n) & np.isfinite(d) & np.isfinite(y) & (n > 0) & (d > 0) & (y > 0)
    n, d, y = n[ok], d[ok], y[ok]
    if not 7 <= n.size <= MAX_POINTS:
        return None
    weights = np.vstack([np.ones(n.size), 1 - np.eye(n.size)])
    refits = weighted_refits(n, d, y, weights, xatol=LOO_XATOL)
    a = refits[:, 4] / (refits[:, 3] + refits[:, 4])
    predicted = np.array([law_loss(dict(zip(PARAMS, row, strict=True)), n[k], d[k])
                          for k, row in enumerate(refits[1:])])
    with np.errstate(divide="ignore", invalid="ignore"):
        residual = np.log(y / predicted)
    centre = np.nanmedian(residual)
    scale = 1.4826 * np.nanmedian(np.abs(residual - centre))
    z = (residual - centre) / scale if scale > 0 else np.zeros_like(residual)
    return Influence(trial_labels(points)[ok], float(a[0]), a[1:], residual, z)


def influence_notes(report: ScalingReport) -> tuple[list[Note], dict[str, float] | None]:
    """The points that lie off the law and move a (`OUTLIER_Z`, `MOVE_TOLERANCE`), if any.

    Returns:
        The note (or none), and the law's parameters refitted by VPNLS without the named
        points (None when none is named).
    """
    if not any(k in report.results and report.results[k].ok for k in LAW_FITS):
        return [], None
    found = influence(report.points)
    if found is None:
        return [], None
    named = np.flatnonzero((np.abs(found.z) >= OUTLIER_Z)
                           & (np.abs(found.move) >= MOVE_TOLERANCE))
    if not named.size:
        return [], None
    named = named[np.argsort(-np.abs(found.move[named]))]
    points = report.points.set_index(trial_labels(report.points))
    parts = []
    for k in named:
        trial = found.trial[k]
        row = points.loc[trial]
        parts.append(f"trial {trial} (N={row[METRIC_N_PARAMS]:.4g}, D={row[METRIC_N_TOKENS]:.4g}, "
                     f"loss {row[LOSS]:.4g}, {math.exp(found.residual[k]):.3g}x what the others "
                     f"predict, z = {found.z[k]:.1f}) moves a from {found.a_without[k]:.4f} to "
                     f"{found.a:.4f} ({-found.move[k]:+.4f})")
    flags = " ".join(f"--exclude {found.trial[k]}" for k in named)
    return [Note(
        "influential-point", "vpnls",
        (f"{len(named)} points off the law move" if len(named) > 1 else
         "1 point off the law moves") + " the exponent a on its own (leave-one-out refits of "
        "L(N, D) by VPNLS)", "; ".join(parts),
        "check those runs (a failed evaluation, a wrong budget); "
        f"if they are faulty, rerun sweep analyze scaling with {flags}; approach 3's Huber loss "
        "weighs them less")], _without(report.points, set(found.trial[named]))


def _without(points, trials: set) -> dict[str, float]:
    """L(N, D) refitted by VPNLS on ``points`` without the rows of ``trials``."""
    from sweep.scaling.law import PARAMS
    from sweep.scaling.vpnls import weighted_refits

    n, d, y = (column(points, k) for k in (METRIC_N_PARAMS, METRIC_N_TOKENS, LOSS))
    ok = np.isfinite(n) & np.isfinite(d) & np.isfinite(y) & (n > 0) & (d > 0) & (y > 0)
    keep = ~np.isin(trial_labels(points), list(trials))
    (row,) = weighted_refits(n[ok], d[ok], y[ok], keep[ok][None].astype(float))
    return dict(zip(PARAMS, (float(v) for v in row), strict=True))
