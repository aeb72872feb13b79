"""The compute-optimal model for a FLOP budget, with intervals from a fit's bootstrap draws.

Two FLOP counts:

- C = 6 N D (Kaplan et al. 2020, sec. 2.1; Hoffmann et al. 2022): for the parametric law
  L = E + A / N^alpha + B / D^beta the closed form of Hoffmann et al. 2022, eq. 4,
  N_opt = G (C/6)^a, D_opt = G^-1 (C/6)^b, G = (alpha A / (beta B))^(1/(alpha+beta)),
  a = beta / (alpha + beta), b = alpha / (alpha + beta) (their appendix A);
- the project's own count, ``flops_per_token(N)`` training FLOPs per token for a model of N
  parameters (e.g. an interpolation of `sweep_models.cost`'s ``flops_per_token_train`` over a size
  ladder): D = C / flops_per_token(N), and N_opt minimises L(N, C / flops_per_token(N)) over
  log N by bounded 1-D search (Brent's method, `scipy.optimize.minimize_scalar`).

For approach 1 and 2 fits (`EnvelopeFit`, `IsoFLOPFit`), which fit N_opt = k_N C^a and D_opt =
k_D C^b directly, the allocation is those power laws (their own FLOP count is the one of the
data they were fitted on) and no loss is predicted.

Intervals: the same allocation computed for every bootstrap draw of the fit (`FitResult.draws`),
then percentile intervals at the fit's level.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize_scalar

from sweep.scaling.bootstrap import percentile_intervals
from sweep.scaling.envelope import EnvelopeFit
from sweep.scaling.isoflop import IsoFLOPFit
from sweep.scaling.law import PARAMS, closed_form_split, law_loss
from sweep.scaling.parametric import ParametricFit
from sweep.scaling.result import FitError, FitResult
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS, METRIC_TOKENS_PER_PARAM

__all__ = ["Allocation", "CONVENTION_6ND", "CONVENTION_COST_MODEL", "optimal_allocation"]

CONVENTION_6ND = "C = 6ND"
CONVENTION_COST_MODEL = "C = flops_per_token(N) * D"
_SEARCH_WIDTH = 1e3  # default search range: N_opt under 6ND times or divided by this
_XATOL = 1e-9  # in natural log of N


@dataclass(frozen=True)
class Allocation:
    """The compute-optimal model for a budget.

    Attributes:
        flops: The budget C (FLOPs).
        convention: How FLOPs were counted: `CONVENTION_6ND` or `CONVENTION_COST_MODEL`
            (approach 1/2 fits: ``"fitted power laws"``).
        n_params: N_opt (parameters).
        n_tokens: D_opt (tokens).
        tokens_per_param: D_opt / N_opt.
        loss: The fitted loss at (N_opt, D_opt), nats/token (nan for approach 1/2 fits).
        exponents: ``a`` (N_opt ~ C^a) and ``b`` (D_opt ~ C^b): beta/(alpha+beta) and
            alpha/(alpha+beta) for a parametric fit (exact under 6ND or any flops_per_token
            proportional to N), the fitted exponents for approach 1/2.
        intervals: ``(lo, hi)`` of each of ``n_params``, ``n_tokens``, ``tokens_per_param``,
            ``loss``, ``a`` and ``b`` at ``level``, over the fit's bootstrap draws (empty
            when the fit has none).
        level: Confidence level of ``intervals``.
        n_draws: Draws the intervals were taken over.
        warnings: Why the allocation may not be trusted (a search ending at its bound).
    """

    flops: float
    convention: str
    n_params: float
    n_tokens: float
    tokens_per_param: float
    loss: float
    exponents: dict[str, float]
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    level: float = math.nan
    n_draws: int = 0
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, float]:
        """``n_params``, ``n_tokens``, ``tokens_per_param`` and ``loss`` (as `compute_optimal`)."""
        return {METRIC_N_PARAMS: self.n_params, METRIC_N_TOKENS: self.n_tokens,
                METRIC_TOKENS_PER_PARAM: self.tokens_per_param, "loss": self.loss}


def _cost_model(p, flops, flops_per_token, bounds):
    """(N_opt, D_opt, at_bound) minimising L(N, C / flops_per_token(N)) over log N."""
    lo, hi = math.log(bounds[0]), math.log(bounds[1])

    def along(log_n):
        n = math.exp(log_n)
        per_token = float(flops_per_token(n))
        if not (math.isfinite(per_token) and per_token > 0):
            raise FitError(f"flops_per_token({n:.4g}) = {per_token!r}: must be finite and > 0")
        return law_loss(p, n, flops / per_token)

    sol = minimize_scalar(along, bounds=(lo, hi), method="bounded", options={"xatol": _XATOL})
    log_n = float(sol.x)
    at_bound = min(log_n - lo, hi - log_n) < 1e3 * _XATOL
    n_opt = math.exp(log_n)
    return n_opt, flops / float(flops_per_token(n_opt)), at_bound


def _one(p, flops, flops_per_token, n_bounds):
    if not (p["alpha"] > 0 and p["beta"] > 0):
        raise FitError(f"alpha={p['alpha']:.3g}, beta={p['beta']:.3g}: the compute-optimal "
                       "split needs both exponents > 0")
    n6, d6 = closed_form_split(p, flops)
    if flops_per_token is None:
        return n6, d6, False
    bounds = n_bounds or (n6 / _SEARCH_WIDTH, n6 * _SEARCH_WIDTH)
    return _cost_model(p, flops, flops_per_token, bounds)


def optimal_allocation(fit: FitResult, flops: float, *,
                       flops_per_token: Callable[[float], float] | None = None,
                       n_bounds: tuple[float, float] | None = None) -> Allocation:
    """N_opt, D_opt and the predicted loss for a budget of ``flops``, with intervals.

    Args:
        fit: A `ParametricFit` (approach 3, `sweep.scaling.vpnls.VPNLSFit`), or an
            `IsoFLOPFit` / `EnvelopeFit` (approach 2 / 1: their power laws).
        flops: The budget C, FLOPs (finite, > 0).
        flops_per_token: N -> training FLOPs per token (> 0); None: the 6ND convention. Only
            for a parametric fit.
        n_bounds: ``(lo, hi)`` parameters for the 1-D search under ``flops_per_token`` (keep
            it inside the range the cost model is valid for); default N_opt under 6ND divided
            and multiplied by 1,000. A minimum at a bound is reported in ``warnings``.

    Returns:
        The `Allocation`; intervals from every finite bootstrap draw of ``fit``.

    Raises:
        FitError: A budget that is not a finite number > 0, a fit with an exponent <= 0, a
            ``flops_per_token`` for an approach 1/2 fit, or one returning a non-positive or
            non-finite value, bad ``n_bounds``, or a fit of another kind.
    """
    if not (isinstance(flops, (int, float)) and math.isfinite(flops) and flops > 0):
        raise FitError(f"flops={flops!r}: must be a finite number > 0")
    if n_bounds is not None and not (len(n_bounds) == 2 and 0 < n_bounds[0] < n_bounds[1]
                                     and math.isfinite(n_bounds[1])):
        raise FitError(f"n_bounds={n_bounds!r}: must be (lo, hi) with 0 < lo < hi")
    if isinstance(fit, (IsoFLOPFit, EnvelopeFit)):
        if flops_per_token is not None:
            raise FitError(f"{type(fit).__name__}: approach 1/2 fit N_opt and D_opt against the "
                           "FLOPs of their data; flops_per_token applies to a parametric fit")
        return _power_law_allocation(fit, flops)
    if not isinstance(fit, ParametricFit):
        raise FitError(f"{type(fit).__name__}: no compute-optimal allocation for this fit")
    p = fit.params
    n_opt, d_opt, at_bound = _one(p, flops, flops_per_token, n_bounds)
    total = p["alpha"] + p["beta"]
    exponents = {"a": p["beta"] / total, "b": p["alpha"] / total}
    warnings: tuple[str, ...] = ()
    if at_bound:
        warnings = (f"the search for N_opt ended at its bound ({n_opt:.4g} parameters): widen "
                    "n_bounds or extend the cost model's size range",)
    intervals, n_draws = {}, 0
    if fit.draws:
        table = np.column_stack([np.asarray(fit.draws[k], dtype=float)
                                 for k in PARAMS])
        rows = []
        for values in table[np.isfinite(table).all(axis=1)]:
            q = dict(zip(PARAMS, values, strict=True))
            if not (q["alpha"] > 0 and q["beta"] > 0):
                continue
            n_q, d_q, _ = _one(q, flops, flops_per_token, n_bounds)
            t = q["alpha"] + q["beta"]
            rows.append((n_q, d_q, d_q / n_q, law_loss(q, n_q, d_q), q["beta"] / t, q["alpha"] / t))
        n_draws = len(rows)
        if rows:
            cols = np.array(rows)
            names = (METRIC_N_PARAMS, METRIC_N_TOKENS, METRIC_TOKENS_PER_PARAM, "loss", "a", "b")
            intervals = percentile_intervals({k: cols[:, i] for i, k in enumerate(names)},
                                             fit.level)
    return Allocation(
        flops=float(flops),
        convention=CONVENTION_6ND if flops_per_token is None else CONVENTION_COST_MODEL,
        n_params=n_opt, n_tokens=d_opt, tokens_per_param=d_opt / n_opt,
        loss=law_loss(p, n_opt, d_opt), exponents=exponents, intervals=intervals, level=fit.level,
        n_draws=n_draws, warnings=warnings)


def _power_law_allocation(fit, flops):
    p = fit.params
    n_opt, d_opt = p["k_n"] * flops ** p["a"], p["k_d"] * flops ** p["b"]
    # The optima's loss as a power law of C (Kaplan et al. 2020 eq. 1.3), when fitted.
    loss = p["k_l"] * flops ** -p["alpha_c"] if "k_l" in p else math.nan
    intervals, n_draws = {}, 0
    if fit.draws:
        table = np.column_stack([np.asarray(fit.draws[k], dtype=float)
                                 for k in ("a", "k_n", "b", "k_d")])
        table = table[np.isfinite(table).all(axis=1)]
        n_draws = table.shape[0]
        if n_draws:
            n_q = table[:, 1] * flops ** table[:, 0]
            d_q = table[:, 3] * flops ** table[:, 2]
            spread = {METRIC_N_PARAMS: n_q, METRIC_N_TOKENS: d_q,
                      METRIC_TOKENS_PER_PARAM: d_q / n_q, "a": table[:, 0], "b": table[:, 2]}
            if "k_l" in fit.draws:
                k_l = np.asarray(fit.draws["k_l"], dtype=float)
                alpha_c = np.asarray(fit.draws["alpha_c"], dtype=float)
                ok = np.isfinite(k_l) & np.isfinite(alpha_c)
                spread["loss"] = (k_l * flops ** -alpha_c)[ok]
            intervals = percentile_intervals(spread, fit.level)
    return Allocation(flops=float(flops), convention="fitted power laws", n_params=n_opt,
                      n_tokens=d_opt, tokens_per_param=d_opt / n_opt, loss=loss,
                      exponents={"a": p["a"], "b": p["b"]}, intervals=intervals,
                      level=fit.level, n_draws=n_draws)
