"""Chinchilla approach 3: the parametric law L(N, D) = E + A / N^alpha + B / D^beta.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", section 3.3 and
appendix D.2) fit it by minimising the Huber loss (delta = 1e-3) between the log of the
predicted and observed loss, the prediction written as a log-sum-exp,

    log L(N, D) = LSE(a - alpha log N, b - beta log D, e),   A = e^a, B = e^b, E = e^e,

with L-BFGS from a grid of initialisations (alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5,
..., 1}, a, b in {0, 5, ..., 25}), keeping the best. `compute_optimal` gives their closed form
for the compute-optimal split under C = 6 N D (eq. 4).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import huber, logsumexp

from sweep.scaling.result import FitError, FitResult
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS, METRIC_TOKENS_PER_PARAM

__all__ = ["HOFFMANN_GRID", "ParametricFit", "compute_optimal", "fit_parametric"]

#: Hoffmann et al. 2022, appendix D.2: the initialisations of (alpha, beta, e, a, b).
HOFFMANN_GRID = {
    "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
    "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0),
    "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
}
_NAMES = ("E", "A", "B", "alpha", "beta")


@dataclass(frozen=True, kw_only=True)
class ParametricFit(FitResult):
    """The fit of L(N, D) = E + A / N^alpha + B / D^beta (`FitResult` fields).

    ``params`` are ``E`` (nats/token), ``A``, ``B``, ``alpha``, ``beta``; ``residuals`` are in
    log loss; ``objective`` is the summed Huber loss; ``settings`` hold the Huber delta and the
    number of starts.
    """

    method: str = "Hoffmann et al. 2022 approach 3: Huber on log loss, L-BFGS from a grid"

    def predict(self, n_params, n_tokens):
        """The fitted loss (nats/token) at ``n_params`` N and ``n_tokens`` D (arrays broadcast)."""
        p = self.params
        n, d = np.asarray(n_params, dtype=float), np.asarray(n_tokens, dtype=float)
        out = p["E"] + p["A"] / n ** p["alpha"] + p["B"] / d ** p["beta"]
        return float(out) if np.ndim(out) == 0 else out


def _objective(theta, log_n, log_d, log_loss, delta):
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    r = logsumexp(terms, axis=0) - log_loss
    # Gradient of sum(huber(delta, r)) by the chain rule through the log-sum-exp.
    w = np.exp(terms - logsumexp(terms, axis=0))
    dr = np.clip(r, -delta, delta)
    grad = np.array([np.sum(dr * w[0]), np.sum(dr * w[1]), np.sum(dr * w[2]),
                     -np.sum(dr * w[0] * log_n), -np.sum(dr * w[1] * log_d)])
    return float(np.sum(huber(delta, r))), grad


def fit_parametric(n_params, n_tokens, loss, *, delta: float = 1e-3,
                   grid: dict[str, tuple[float, ...]] | None = None) -> ParametricFit:
    """Fit L(N, D) = E + A / N^alpha + B / D^beta as Hoffmann et al. 2022 (approach 3).

    Args:
        n_params: Shape ``(n,)``: parameters N of each point (> 0).
        n_tokens: Shape ``(n,)``: training tokens D (> 0).
        loss: Shape ``(n,)``: final losses, nats/token (> 0).
        delta: The Huber loss's delta (the paper's 1e-3).
        grid: Initialisations of ``alpha``, ``beta``, ``e``, ``a``, ``b``; default
            `HOFFMANN_GRID` (4,500 starts).

    Returns:
        The `ParametricFit` of the best start.

    Raises:
        FitError: Fewer than 6 points (5 parameters need a residual), shapes that differ,
            non-finite or non-positive values, or fewer than 2 distinct values of N or of D.
    """
    n = np.asarray(n_params, dtype=float).ravel()
    d = np.asarray(n_tokens, dtype=float).ravel()
    y = np.asarray(loss, dtype=float).ravel()
    if not n.shape == d.shape == y.shape:
        raise FitError(f"n_params, n_tokens and loss have {n.size}, {d.size} and {y.size} values")
    if n.size < 6:
        raise FitError(f"{n.size} points: fitting E, A, B, alpha and beta needs at least 6")
    for name, values in ((METRIC_N_PARAMS, n), (METRIC_N_TOKENS, d), ("loss", y)):
        if not np.all(np.isfinite(values) & (values > 0)):
            raise FitError(f"{name}: every value must be finite and > 0")
    for name, values in ((METRIC_N_PARAMS, n), (METRIC_N_TOKENS, d)):
        if np.unique(values).size < 2:
            raise FitError(f"{name} takes one value: its exponent cannot be fitted")
    grid = grid or HOFFMANN_GRID
    log_n, log_d, log_loss = np.log(n), np.log(d), np.log(y)
    best = None
    starts = 0
    for alpha, beta, e, a, b in itertools.product(grid["alpha"], grid["beta"], grid["e"],
                                                  grid["a"], grid["b"]):
        starts += 1
        sol = minimize(_objective, np.array([a, b, e, alpha, beta]), jac=True,
                       args=(log_n, log_d, log_loss, delta), method="L-BFGS-B")
        if best is None or sol.fun < best.fun:
            best = sol
    a, b, e, alpha, beta = best.x
    params = {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": float(alpha),
              "beta": float(beta)}
    fit = ParametricFit(params=params, residuals=np.empty(0), objective=float(best.fun),
                        converged=bool(best.success), n_points=int(n.size),
                        settings={"delta": delta, "starts": starts})
    residuals = log_loss - np.log(fit.predict(n, d))
    return ParametricFit(**{**fit.__dict__, "residuals": residuals})


def compute_optimal(fit: ParametricFit, flops: float) -> dict[str, float]:
    """The compute-optimal model for a budget of ``flops`` under C = 6 N D.

    Hoffmann et al. 2022, eq. 4: N_opt = G (C/6)^(beta/(alpha+beta)), D_opt = G^-1
    (C/6)^(alpha/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta)).

    Returns:
        ``n_params`` (N_opt), ``n_tokens`` (D_opt), ``tokens_per_param`` and ``loss`` (the fit's
        prediction there, nats/token).

    Raises:
        FitError: A budget that is not a finite number > 0, or a fit with an exponent <= 0.
    """
    if not (isinstance(flops, (int, float)) and math.isfinite(flops) and flops > 0):
        raise FitError(f"flops={flops!r}: must be a finite number > 0")
    p = fit.params
    if p["alpha"] <= 0 or p["beta"] <= 0:
        raise FitError(f"alpha={p['alpha']:.3g}, beta={p['beta']:.3g}: the compute-optimal "
                       "split needs both exponents > 0")
    total = p["alpha"] + p["beta"]
    g = (p["alpha"] * p["A"] / (p["beta"] * p["B"])) ** (1 / total)
    n_opt = g * (flops / 6) ** (p["beta"] / total)
    d_opt = (flops / 6) ** (p["alpha"] / total) / g
    return {METRIC_N_PARAMS: n_opt, METRIC_N_TOKENS: d_opt, METRIC_TOKENS_PER_PARAM: d_opt / n_opt,
            "loss": fit.predict(n_opt, d_opt)}
