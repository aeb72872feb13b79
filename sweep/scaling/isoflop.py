"""Chinchilla approach 2: a parabola per IsoFLOP curve, then N_opt and D_opt as power laws of C.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", section 3.2): for each
FLOP budget C, fit loss against log N with a parabola; its vertex is the compute-optimal N for
that budget, and D_opt = C / (6 N_opt); then fit N_opt = k_N C^a and D_opt = k_D C^b by least
squares on the logs. The vertex is biased when the sampled sizes sit off-centre around the true
optimum, span a wide range, or alpha != beta (Czech 2026, "Problems with Chinchilla Approach 2",
Open-Athena/scaling-law-analysis), so each curve reports where its vertex sits within its
sampled range and is flagged when the vertex lies at or beyond an edge or the parabola does not
open upwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sweep.scaling.result import FitError, FitResult
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS

__all__ = ["IsoFLOPCurve", "IsoFLOPFit", "fit_isoflop"]

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

    ``params`` are ``a``, ``k_n``, ``b``, ``k_d``; ``residuals`` are log N_opt observed minus
    fitted, one per usable curve; ``objective`` is their sum of squares.

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


def _curve(budget: float, log_n: np.ndarray, loss: np.ndarray) -> IsoFLOPCurve:
    c2, c1, c0 = np.polyfit(log_n, loss, 2)
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
    return IsoFLOPCurve(budget, int(log_n.size), (float(c0), float(c1), float(c2)),
                        math.exp(vertex), loss_opt, float(position), warnings)


def fit_isoflop(budget_flops, n_params, loss) -> IsoFLOPFit:
    """Fit approach 2 to trials grouped by budget.

    Args:
        budget_flops: Shape ``(n,)``: each trial's FLOP budget C (the group key).
        n_params: Shape ``(n,)``: parameters N (> 0).
        loss: Shape ``(n,)``: final losses, nats/token.

    Returns:
        The `IsoFLOPFit`. D_opt is C / (6 N_opt) (the C = 6ND convention of the paper).

    Raises:
        FitError: Shapes that differ, non-finite or non-positive values, a budget with fewer
            than 3 distinct sizes, or fewer than 2 usable curves (every curve's reason is named).
    """
    c = np.asarray(budget_flops, dtype=float).ravel()
    n = np.asarray(n_params, dtype=float).ravel()
    y = np.asarray(loss, dtype=float).ravel()
    if not c.shape == n.shape == y.shape:
        raise FitError(f"budget_flops, n_params and loss have {c.size}, {n.size} and {y.size} "
                       "values")
    for name, values in (("budget_flops", c), (METRIC_N_PARAMS, n), ("loss", y)):
        if not np.all(np.isfinite(values) & (values > 0)):
            raise FitError(f"{name}: every value must be finite and > 0")
    curves = []
    for budget in np.unique(c):
        at = c == budget
        if np.unique(n[at]).size < 3:
            raise FitError(f"C={budget:.3g}: {np.unique(n[at]).size} distinct sizes; a parabola "
                           "needs at least 3")
        curves.append(_curve(float(budget), np.log(n[at]), y[at]))
    usable = [k for k in curves if k.usable]
    if len(usable) < 2:
        reasons = "; ".join(w for k in curves for w in k.warnings) or "one budget only"
        raise FitError(f"{len(usable)} usable IsoFLOP curves of {len(curves)}; the power laws "
                       f"need 2: {reasons}")
    log_c = np.log([k.budget_flops for k in usable])
    log_n_opt = np.log([k.n_opt for k in usable])
    log_d_opt = log_c - math.log(6) - log_n_opt
    a, log_kn = np.polyfit(log_c, log_n_opt, 1)
    b, log_kd = np.polyfit(log_c, log_d_opt, 1)
    residuals = log_n_opt - (log_kn + a * log_c)
    return IsoFLOPFit(
        params={"a": float(a), "k_n": math.exp(log_kn), "b": float(b), "k_d": math.exp(log_kd)},
        residuals=residuals, objective=float(np.sum(residuals**2)), converged=True,
        n_points=int(c.size), curves=curves,
        settings={"edge_fraction": _EDGE, "usable_curves": len(usable)},
    )
