"""Resampling for bootstrap intervals, shared by every fit.

The nonparametric bootstrap (Efron & Tibshirani 1993, "An Introduction to the Bootstrap",
ch. 6 and 13): refit on data resampled with replacement and take the percentile interval of the
refits, ``[q((1 - level) / 2), q((1 + level) / 2)]`` (their eq. 13.5). A resample is given as
counts, how many times each input point enters it, so that a refit is a weighted fit (a point
drawn twice weighs two) and resamples of different kinds share one shape. Three kinds:

- points: ``n`` points drawn with replacement from the ``n``;
- groups: whole groups (an IsoFLOP curve, a training run) drawn with replacement, as many as
  there are groups, every point of a drawn group entering once per draw (the block or cluster
  bootstrap, Davison & Hinkley 1997, "Bootstrap Methods and their Application", sec. 3.8);
- strata: points drawn with replacement within each stratum, each keeping its size (Davison &
  Hinkley sec. 3.2.2), e.g. points within each IsoFLOP curve.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sweep.scaling.result import FitError

__all__ = ["bootstrap_counts", "check_bootstrap_args", "kept_groups", "percentile_intervals"]


def bootstrap_counts(n_points: int, n_bootstrap: int, seed: int, *, groups=None,
                     strata=None) -> np.ndarray:
    """How many times each point enters each of ``n_bootstrap`` resamples.

    Args:
        n_points: Points ``n`` in the data.
        n_bootstrap: Resamples ``B``.
        seed: Seed of the generator (`numpy.random.default_rng`).
        groups: Shape ``(n,)``: a label per point; whole groups are resampled. None: points.
        strata: Shape ``(n,)``: a label per point; points are resampled within each stratum.

    Returns:
        Integer counts, shape ``(B, n)``; each row sums to ``n`` for points and strata, and to
        the sizes of the drawn groups for groups.

    Raises:
        FitError: Both ``groups`` and ``strata``, labels of the wrong length, or a negative
            ``n_bootstrap``.
    """
    if n_bootstrap < 0:
        raise FitError(f"n_bootstrap={n_bootstrap}: must be >= 0")
    if groups is not None and strata is not None:
        raise FitError("groups and strata: resample whole groups or within strata, not both")
    rng = np.random.default_rng(seed)
    counts = np.zeros((n_bootstrap, n_points), dtype=np.int64)
    rows = np.arange(n_bootstrap)[:, None]
    labels = groups if groups is not None else strata
    if labels is None:
        picks = rng.integers(0, n_points, (n_bootstrap, n_points))
        np.add.at(counts, (rows, picks), 1)
        return counts
    labels = np.asarray(labels).ravel()
    if labels.size != n_points:
        raise FitError(f"{'groups' if groups is not None else 'strata'} has {labels.size} "
                       f"labels for {n_points} points")
    _, code = np.unique(labels, return_inverse=True)
    members = [np.flatnonzero(code == k) for k in range(code.max() + 1)] if n_points else []
    if groups is not None:
        picks = rng.integers(0, len(members), (n_bootstrap, len(members)))
        times = np.zeros((n_bootstrap, len(members)), dtype=np.int64)
        np.add.at(times, (rows, picks), 1)
        for k, idx in enumerate(members):
            counts[:, idx] = times[:, k:k + 1]
        return counts
    for idx in members:
        picks = idx[rng.integers(0, idx.size, (n_bootstrap, idx.size))]
        np.add.at(counts, (rows, picks), 1)
    return counts


def percentile_intervals(draws: dict[str, np.ndarray],
                         level: float) -> dict[str, tuple[float, float]]:
    """Percentile interval of each name's draws at ``level`` (nan draws left out).

    Args:
        draws: Name -> refits, shape ``(B,)``.
        level: Confidence level, in (0, 1).

    Returns:
        Name -> ``(lo, hi)``, the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (linear
        interpolation); names with no finite draw are left out.

    Raises:
        FitError: A level outside (0, 1).
    """
    if not 0 < level < 1:
        raise FitError(f"level={level}: must be in (0, 1)")
    tail = (1 - level) / 2 * 100
    out = {}
    for name, values in draws.items():
        finite = np.asarray(values, dtype=float)
        finite = finite[np.isfinite(finite)]
        if finite.size:
            lo, hi = np.percentile(finite, [tail, 100 - tail])
            out[name] = (float(lo), float(hi))
    return out


def check_bootstrap_args(n_bootstrap: int, level: float) -> None:
    """Refuse a negative bootstrap count or a level outside (0, 1), naming the argument."""
    if not (isinstance(n_bootstrap, (int, np.integer)) and n_bootstrap >= 0):
        raise FitError(f"n_bootstrap={n_bootstrap!r}: must be an integer >= 0")
    if not (isinstance(level, (int, float)) and math.isfinite(level) and 0 < level < 1):
        raise FitError(f"level={level!r}: must be in (0, 1)")


def kept_groups(groups: Any, n_rows: int, dropped: tuple[int, ...]) -> np.ndarray | None:
    """A fit's ``groups`` labels as a flat array, without the rows its data dropped.

    Args:
        groups: Shape ``(n_rows,)``: a label per input row, or None (returned as None).
        n_rows: Rows of the input, the dropped ones included.
        dropped: Input indices of the rows left out (`sweep.scaling.result.finite_rows`).

    Raises:
        FitError: Labels of the wrong length.
    """
    if groups is None:
        return None
    labels = np.asarray(groups).ravel()
    if labels.size != n_rows:
        raise FitError(f"groups has {labels.size} labels for {n_rows} rows")
    return labels[np.setdiff1d(np.arange(n_rows), dropped)]
