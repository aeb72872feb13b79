"""Chinchilla approach 2: a parabola per IsoFLOP curve, then N_opt and D_opt as power laws of C.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", section 3.2): for each
FLOP budget C, fit loss against log N with a parabola; its vertex is the compute-optimal N for
that budget, and D_opt = C / (6 N_opt); then fit N_opt = k_N C^a and D_opt = k_D C^b by least
squares on the logs. The vertex is biased when the sampled sizes sit off-centre around the true
optimum, span a wide range, or alpha != beta (Czech 2026, "Problems with Chinchilla Approach 2",
Open-Athena/scaling-law-analysis). Each curve reports where its vertex sits within its sampled
range and is flagged (left out) when the vertex lies at or beyond an edge or the parabola does
not open upwards; the bias of a grid that drifts against the optimum, with every vertex inside
its range, is sized by `sweep.scaling.isoflop_bias` on the fitted L(N, D).

Bootstrap intervals (``n_bootstrap``) refit both stages on resamples: of the points within each
curve (``resample="points"``, each curve keeping its size) or of whole curves, i.e. budgets
(``resample="curves"``); a resample's curves are judged usable as the full fit's are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from sweep.scaling.bootstrap import bootstrap_counts, check_bootstrap_args, percentile_intervals
from sweep.scaling.result import DEFAULT_LEVEL, FitError, FitResult, dropped_note, finite_rows
from sweep.schema import METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, METRIC_N_TOKENS

__all__ = ["IsoFLOPCurve", "IsoFLOPFit", "fit_isoflop", "fit_loglog_line"]

_EDGE = 0.1  # a vertex in the outer tenth of the sampled log-N range is at an edge


@dataclass(frozen=True)
class IsoFLOPCurve:
    """One budget's parabola, loss = c0 + c1 log N + c2 (log N)^2.

    Attributes:
        budget_flops: The budget C (FLOPs).
        n_points: Sizes sampled at this budget.
        coefficients: ``(c0, c1, c2)``, natural log of N.
        n_opt: The vertex, parameters (nan when the parabola does not open upwards).
        loss_opt: The parabola's loss at the vertex, nats/token.
        position: Where log N_opt lies in the sampled log-N range (0: smallest size, 1:
            largest; outside [0, 1] when the vertex is beyond the sampled sizes).
        warnings: Why this curve's vertex should not be trusted (empty when it can be).
    """

    budget_flops: float
    n_points: int
    coefficients: tuple[float, float, float]
    n_opt: float
    loss_opt: float
    position: float
    warnings: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        """Whether the vertex enters the power-law fits."""
        return not self.warnings


@dataclass(frozen=True, kw_only=True)
class IsoFLOPFit(FitResult):
    """N_opt = k_N C^a and D_opt = k_D C^b from the usable IsoFLOP vertices (`FitResult`).

    ``params`` are ``a``, ``k_n``, ``b``, ``k_d`` (N_opt and D_opt in parameters and tokens, C
    in FLOPs), and ``alpha_c``, ``k_l`` of the vertices' loss, L_opt = k_L C^-alpha_C
    (nats/token; Kaplan et al. 2020 eq. 1.3's form, fitted on logs); ``residuals`` are log
    N_opt observed minus fitted, one per usable curve;
    ``objective`` is their sum of squares; ``stderr`` the least-squares standard errors of the
    line in log-log space (k_n, k_d by the delta method; with 3 or more usable curves).

    Attributes:
        curves: Every budget's `IsoFLOPCurve`, usable or not.
    """

    curves: list[IsoFLOPCurve]
    method: str = "Hoffmann et al. 2022 approach 2: parabola per budget in log N, then power laws"

    def predict(self, flops: float) -> dict[str, float]:
        """``n_params`` (N_opt) and ``n_tokens`` (D_opt) for a budget of ``flops``."""
        p = self.params
        return {METRIC_N_PARAMS: p["k_n"] * flops ** p["a"],
                METRIC_N_TOKENS: p["k_d"] * flops ** p["b"]}


def _curve(budget: float, log_n: np.ndarray, loss: np.ndarray, weights=None) -> IsoFLOPCurve:
    c2, c1, c0 = np.polyfit(log_n, loss, 2, w=None if weights is None else np.sqrt(weights))
    lo, hi = float(log_n.min()), float(log_n.max())
    warnings = []
    if not c2 > 0:
        warnings.append(f"C={budget:.3g}: the parabola does not open upwards (curvature "
                        f"{c2:.3g}); sample sizes on both sides of the minimum")
        return IsoFLOPCurve(budget, int(log_n.size), (float(c0), float(c1), float(c2)),
                            math.nan, math.nan, math.nan, warnings)
    vertex = -c1 / (2 * c2)
    position = (vertex - lo) / (hi - lo)
    if position < _EDGE or position > 1 - _EDGE:
        side = "smallest" if position < 0.5 else "largest"
        warnings.append(f"C={budget:.3g}: the minimum lies at the {side} sampled size (position "
                        f"{position:.2f} of the range); re-centre the sizes on it")
    loss_opt = float(c0 + c1 * vertex + c2 * vertex**2)
    if not loss_opt > 0:
        warnings.append(f"C={budget:.3g}: the parabola's minimum loss {loss_opt:.3g} is not > 0; "
                        "the sizes do not trace a minimum")
    return IsoFLOPCurve(budget, int(log_n.size), (float(c0), float(c1), float(c2)),
                        math.exp(vertex), loss_opt, float(position), warnings)


def fit_loglog_line(log_x: np.ndarray, log_y: np.ndarray, weights=None):
    """Least squares of ``log_y = slope * log_x + intercept`` (natural logs).

    Args:
        log_x: Shape ``(m,)``: the regressor.
        log_y: Shape ``(m,)``: the response.
        weights: Shape ``(m,)``: each point's multiplicity (a bootstrap's counts), or None.

    Returns:
        ``(slope, intercept, se_slope, se_intercept, residuals)``; the standard errors are
        those of ordinary least squares, s^2 = RSS / (m - 2) (Draper & Smith 1998, "Applied
        Regression Analysis", sec. 1.4), nan with fewer than 3 points.

    Raises:
        FitError: All ``log_x`` equal (no line through one abscissa).
    """
    w = np.ones_like(log_x) if weights is None else np.asarray(weights, dtype=float)
    total = w.sum()
    mean_x = float(w @ log_x / total)
    mean_y = float(w @ log_y / total)
    sxx = float(w @ (log_x - mean_x) ** 2)
    if not sxx > 0:
        raise FitError("every log_x is the same: no line through one abscissa")
    slope = float(w @ ((log_x - mean_x) * (log_y - mean_y))) / sxx
    intercept = mean_y - slope * mean_x
    residuals = log_y - (intercept + slope * log_x)
    m = log_x.size
    if m < 3 or weights is not None:
        return slope, intercept, math.nan, math.nan, residuals
    s2 = float(residuals @ residuals) / (m - 2)
    return (slope, intercept, math.sqrt(s2 / sxx),
            math.sqrt(s2 * (1 / m + mean_x**2 / sxx)), residuals)


def _power_laws(log_c, log_n_opt, weights=None):
    """(a, log k_n, b, log k_d, se) of N_opt = k_N C^a and D_opt = C / (6 N_opt) = k_D C^b."""
    a, log_kn, se_a, se_kn, residuals = fit_loglog_line(log_c, log_n_opt, weights)
    # log D_opt = log C - log 6 - log N_opt, so its line is the complement of N_opt's.
    return a, log_kn, 1 - a, -math.log(6) - log_kn, se_a, se_kn, residuals


def fit_isoflop(budget_flops, n_params, loss, *, n_bootstrap: int = 0, seed: int = 0,
                level: float = DEFAULT_LEVEL, resample: str = "points") -> IsoFLOPFit:
    """Fit approach 2 to trials grouped by budget.

    Rows with a NaN or infinite value are dropped and listed in ``dropped``.

    Args:
        budget_flops: Shape ``(n,)``: each trial's FLOP budget C (the group key).
        n_params: Shape ``(n,)``: parameters N (> 0).
        loss: Shape ``(n,)``: final losses, nats/token.
        n_bootstrap: Bootstrap refits of both stages (0: none).
        seed: Seed of the resampling.
        level: Confidence level of ``intervals``, in (0, 1).
        resample: ``"points"``: resample the points within each curve (each keeps its size);
            ``"curves"``: resample whole curves (budgets) with replacement.

    Returns:
        The `IsoFLOPFit`. D_opt is C / (6 N_opt) (the C = 6ND convention of the paper). A
        resample with fewer than 2 distinct usable budgets gives nan draws (counted in
        ``settings["bootstrap_failed"]``).

    Raises:
        FitError: Shapes that differ, non-positive values, a budget with fewer than 3 distinct
            sizes, fewer than 2 usable curves (every curve's reason is named), a bad
            ``n_bootstrap``, ``level`` or ``resample``.
    """
    (c, n, y), dropped = finite_rows((METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, "loss"),
                                     budget_flops, n_params, loss)
    check_bootstrap_args(n_bootstrap, level)
    if resample not in ("points", "curves"):
        raise FitError(f"resample={resample!r}: must be 'points' or 'curves'")
    for name, values in ((METRIC_BUDGET_FLOPS, c), (METRIC_N_PARAMS, n), ("loss", y)):
        if not np.all(values > 0):
            raise FitError(f"{name}: every value must be finite and > 0")
    note = dropped_note(dropped)
    if c.size == 0:
        raise FitError(f"no points{note}: approach 2 needs curves at 2 budgets or more")
    budgets = np.unique(c)
    curves = []
    for budget in budgets:
        at = c == budget
        if np.unique(n[at]).size < 3:
            raise FitError(f"C={budget:.3g}: {np.unique(n[at]).size} distinct sizes{note}; a "
                           "parabola needs at least 3")
        curves.append(_curve(float(budget), np.log(n[at]), y[at]))
    usable = [k for k in curves if k.usable]
    if len(usable) < 2:
        reasons = "; ".join(w for k in curves for w in k.warnings) or "one budget only"
        raise FitError(f"{len(usable)} usable IsoFLOP curves of {len(curves)}; the power laws "
                       f"need 2: {reasons}")
    log_c = np.log([k.budget_flops for k in usable])
    log_n_opt = np.log([k.n_opt for k in usable])
    a, log_kn, b, log_kd, se_a, se_kn, residuals = _power_laws(log_c, log_n_opt)
    slope, log_kl, *_ = fit_loglog_line(log_c, np.log([k.loss_opt for k in usable]))
    params = {"a": float(a), "k_n": math.exp(log_kn), "b": float(b), "k_d": math.exp(log_kd),
              "alpha_c": float(-slope), "k_l": math.exp(log_kl)}
    stderr = {"a": se_a, "k_n": params["k_n"] * se_kn, "b": se_a, "k_d": params["k_d"] * se_kn}
    settings = {"edge_fraction": _EDGE, "usable_curves": len(usable), "dropped": len(dropped),
                "n_bootstrap": n_bootstrap, "seed": seed, "resample": resample}
    fit = IsoFLOPFit(params=params, residuals=residuals, objective=float(np.sum(residuals**2)),
                     converged=True, n_points=int(c.size), curves=curves, settings=settings,
                     stderr=stderr, level=level, dropped=dropped)
    if not n_bootstrap:
        return fit
    draws, failed = _bootstrap(c, n, y, budgets, n_bootstrap, seed, resample)
    return replace(fit, draws=draws, intervals=percentile_intervals(draws, level),
                   settings={**settings, "bootstrap_failed": failed})


def _bootstrap(c, n, y, budgets, n_bootstrap, seed, resample):
    code = np.searchsorted(budgets, c)
    counts = bootstrap_counts(c.size, n_bootstrap, seed,
                              **({"strata": code} if resample == "points" else {"groups": code}))
    log_n = np.log(n)
    table = np.full((n_bootstrap, 6), np.nan)
    failed = 0
    for r, weights in enumerate(counts):
        log_c, log_n_opt, log_l, mult = [], [], [], []
        for k, budget in enumerate(budgets):
            at = (code == k) & (weights > 0)
            if not at.any() or np.unique(n[at]).size < 3:
                continue
            curve = _curve(float(budget), log_n[at], y[at], weights[at])
            if curve.usable:
                log_c.append(math.log(budget))
                log_n_opt.append(math.log(curve.n_opt))
                log_l.append(math.log(curve.loss_opt))
                # A curve drawn j times counts j times in the power law.
                mult.append(weights[at].sum() / np.sum(code == k))
        if len(log_c) < 2:
            failed += 1
            continue
        a, log_kn, b, log_kd, *_ = _power_laws(np.array(log_c), np.array(log_n_opt),
                                               np.array(mult))
        slope, log_kl, *_ = fit_loglog_line(np.array(log_c), np.array(log_l), np.array(mult))
        table[r] = (a, math.exp(log_kn), b, math.exp(log_kd), -slope, math.exp(log_kl))
    names = ("a", "k_n", "b", "k_d", "alpha_c", "k_l")
    return {name: table[:, i] for i, name in enumerate(names)}, {"too_few_curves": failed}
