"""One-variable scaling law with an irreducible term: L(X) = E + A / X^alpha.

X is parameters N, tokens D or compute C (Kaplan et al. 2020, "Scaling Laws for Neural Language
Models", eq. 1.1-1.3 without E; Hoffmann et al. 2022, "Training Compute-Optimal Large Language
Models", eq. 2 in one variable). Fitted by nonlinear least squares on the loss itself (scipy's
trust-region reflective ``least_squares`` with the exact Jacobian, E >= 0, A > 0, alpha > 0),
with A fitted as log A so that the scale of X does not matter; standard errors from the
Jacobian at the optimum (the Gauss-Newton covariance, residual variance times (J^T J)^-1) and
percentile bootstrap intervals from refits on resampled points (or whole groups of points), each
started from the full fit's optimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from sweep.scaling.bootstrap import (
    bootstrap_counts,
    check_bootstrap_args,
    kept_groups,
    percentile_intervals,
)
from sweep.scaling.result import FitError, FitResult, dropped_note, finite_rows

__all__ = ["PowerLawFit", "fit_power_law"]

_NAMES = ("E", "A", "alpha")


@dataclass(frozen=True, kw_only=True)
class PowerLawFit(FitResult):
    """The fit of L(X) = E + A / X^alpha (`FitResult` fields, residuals in loss).

    Attributes:
        params: ``E`` (loss units, nats/token), ``A`` (loss x X^alpha), ``alpha`` (unitless).
        stderr: Standard error of each parameter (nan where the covariance is singular).
        intervals: ``(lo, hi)`` percentile bootstrap interval of each parameter, at ``level``
            (empty when ``n_bootstrap`` is 0).
        level: Confidence level of ``intervals`` (e.g. 0.95).
        objective: Half the sum of squared residuals at the optimum.
    """

    method: str = "least_squares(trf) on L = E + A / X^alpha"

    def predict(self, x: float | np.ndarray) -> float | np.ndarray:
        """The fitted loss at ``x`` (same units as the fitted X).

        Raises:
            FitError: For a non-positive ``x``.
        """
        arr = np.asarray(x, dtype=float)
        if np.any(~(arr > 0)):
            raise FitError(f"x={x!r}: the power law is defined for x > 0 only")
        p = self.params
        out = p["E"] + p["A"] / arr ** p["alpha"]
        return float(out) if np.ndim(out) == 0 else out


def _model(theta: np.ndarray, log_x: np.ndarray) -> np.ndarray:
    e, log_a, alpha = theta
    return e + np.exp(log_a - alpha * log_x)


def _jacobian(theta: np.ndarray, log_x: np.ndarray) -> np.ndarray:
    """Shape ``(n, 3)``: d L / d (E, log A, alpha), exact (no finite differences)."""
    power = np.exp(theta[1] - theta[2] * log_x)
    return np.column_stack([np.ones_like(log_x), power, -log_x * power])


def _solve(log_x: np.ndarray, loss: np.ndarray, start: np.ndarray):
    return least_squares(lambda t: _model(t, log_x) - loss, start,
                         jac=lambda t: _jacobian(t, log_x), method="trf",
                         bounds=([0.0, -np.inf, 1e-6], [np.inf, np.inf, 10.0]),
                         x_scale="jac", max_nfev=10_000)


def _start(log_x: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """A start from the data: E just below the smallest loss, alpha from the two ends."""
    e0 = max(0.0, float(loss.min()) * 0.9)
    lo, hi = np.argmin(log_x), np.argmax(log_x)
    gap_lo, gap_hi = float(loss[lo]) - e0, float(loss[hi]) - e0
    alpha0 = 0.3
    if gap_lo > 0 and gap_hi > 0 and gap_lo > gap_hi:
        alpha0 = min(5.0, max(0.01, math.log(gap_lo / gap_hi) / float(log_x[hi] - log_x[lo])))
    return np.array([e0, math.log(max(gap_lo, 1e-12)) + alpha0 * float(log_x[lo]), alpha0])


def fit_power_law(x, loss, *, n_bootstrap: int = 0, seed: int = 0,
                  level: float = 0.95, groups=None) -> PowerLawFit:
    """Fit L(X) = E + A / X^alpha to points ``(x, loss)``.

    Rows with a NaN or infinite value (a diverged or failed trial) are dropped and listed in
    ``dropped``.

    Args:
        x: Shape ``(n,)``: parameters, tokens or FLOPs, all > 0.
        loss: Shape ``(n,)``: losses (nats/token).
        n_bootstrap: Refits on points resampled with replacement, for the intervals (0: none).
        seed: Seed of the resampling.
        level: Confidence level of the bootstrap intervals, in (0, 1).
        groups: Shape ``(n,)``: a label per point; resample whole groups. None: points.

    Returns:
        The `PowerLawFit`; ``converged`` is False when the optimiser stopped without meeting its
        tolerances (the parameters are then its last iterate, ``message`` says why).

    Raises:
        FitError: Fewer than 4 points after dropping non-finite rows (3 parameters need a
            residual), shapes that differ, non-positive ``x``, fewer than 3 distinct ``x``, or
            a bad ``n_bootstrap`` or ``level``.
    """
    (x_arr, y), dropped = finite_rows(("x", "loss"), x, loss)
    note = dropped_note(dropped)
    if x_arr.size < 4:
        raise FitError(f"{x_arr.size} points{note}: fitting E, A and alpha needs at least 4")
    if not np.all(x_arr > 0):
        raise FitError("x: every value must be finite and > 0")
    if np.unique(x_arr).size < 3:
        raise FitError(f"x takes {np.unique(x_arr).size} distinct values{note}: a power law "
                       "with an offset needs at least 3")
    check_bootstrap_args(n_bootstrap, level)
    groups = kept_groups(groups, x_arr.size + len(dropped), dropped)
    log_x = np.log(x_arr)
    start = _start(log_x, y)
    sol = _solve(log_x, y, start)
    theta = sol.x
    params = {"E": float(theta[0]), "A": float(math.exp(theta[1])), "alpha": float(theta[2])}
    dof = x_arr.size - 3
    sigma2 = float(np.sum(sol.fun ** 2)) / dof
    try:
        cov = np.linalg.inv(sol.jac.T @ sol.jac) * sigma2
        se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
        # A was fitted as log A: delta method, se(A) = A * se(log A).
        stderr = {"E": float(se[0]), "A": params["A"] * float(se[1]), "alpha": float(se[2])}
    except np.linalg.LinAlgError:
        stderr = dict.fromkeys(_NAMES, math.nan)
    intervals: dict[str, tuple[float, float]] = {}
    draws: dict[str, np.ndarray] = {}
    if n_bootstrap:
        table = np.full((n_bootstrap, 3), np.nan)
        counts = bootstrap_counts(x_arr.size, n_bootstrap, seed, groups=groups)
        for i, times in enumerate(counts):
            pick = np.repeat(np.arange(x_arr.size), times)
            if np.unique(x_arr[pick]).size < 3:
                continue
            refit = _solve(log_x[pick], y[pick], theta).x
            table[i] = (refit[0], math.exp(refit[1]), refit[2])
        draws = {name: table[:, i] for i, name in enumerate(_NAMES)}
        intervals = percentile_intervals(draws, level)
    return PowerLawFit(
        params=params, stderr=stderr, intervals=intervals, level=level, draws=draws,
        residuals=y - _model(theta, log_x), objective=float(sol.cost),
        converged=bool(sol.success), n_points=int(x_arr.size), dropped=dropped,
        message="" if sol.success else str(sol.message),
        settings={"start": {"E": float(start[0]), "A": float(math.exp(start[1])),
                            "alpha": float(start[2])},
                  "n_bootstrap": n_bootstrap, "seed": seed, "dropped": len(dropped)},
    )
