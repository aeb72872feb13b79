"""The analysis's estimators run on one simulated study: N_opt, D_opt and exponents per target.

The fits are the ones ``sweep analyze scaling`` runs (`sweep.scaling.approaches`): approach 2
(`fit_isoflop`, IsoFLOP parabolas then power laws of C, its split by `optimal_allocation`),
approach 3 (`fit_parametric`, Huber on log loss, Hoffmann et al. 2022 sec. 3.3) and VPNLS
(`weighted_refits`, Czech 2026), whose split is `closed_form_split` (C = 6ND, Hoffmann et al.
2022 eq. 4, as `optimal_allocation` computes it). No bootstrap: a plan's interval is the
spread of the estimates over repeated simulated studies. Approach 3 starts from `PLAN_GRID`
(32 starts) rather than Hoffmann's 4,500 (a fit of 20 points: 0.3 s against 1.3 s, most of it the
polish), so that a hundred repeats fit in a minute; on the simulated laws its best start
reaches the full grid's optimum (the noise-free test holds this).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from sweep.scaling.allocation import optimal_allocation
from sweep.scaling.isoflop import fit_isoflop
from sweep.scaling.law import PARAMS, closed_form_split
from sweep.scaling.parametric import fit_parametric
from sweep.scaling.result import FitError
from sweep.scaling.vpnls import weighted_refits
from sweep.simulate.design import SimulatedPoints
from sweep.simulate.law import SimulatedLaw

__all__ = ["ESTIMATORS", "LAW_QUANTITIES", "PLAN_GRID", "estimate", "true_values"]

#: The estimators a plan runs, by ``sweep analyze scaling --approach`` key.
ESTIMATORS = ("2", "3", "vpnls")
#: Approach 3's starts in a plan: 2 values per coordinate of (alpha, beta, e, a, b).
PLAN_GRID: dict[str, tuple[float, ...]] = {
    "alpha": (0.25, 0.75), "beta": (0.25, 0.75), "e": (-0.5, 0.5), "a": (3.0, 8.0),
    "b": (3.0, 8.0)}
#: Quantities estimated once per study (not per budget): the allocation exponents N_opt ~ C^a,
#: D_opt ~ C^b, and for the fits of L(N, D) the law's exponents.
LAW_QUANTITIES = ("a", "b", "alpha", "beta")
#: VPNLS's Nelder-Mead tolerances in a plan (`_law_params`).
VPNLS_XATOL, VPNLS_FATOL = 1e-6, 1e-12


def _law_params(key: str, points: SimulatedPoints) -> dict[str, float]:
    """E, A, B, alpha, beta by approach 3 or VPNLS.

    VPNLS is `weighted_refits` (the whole procedure, grid then Nelder-Mead) at tolerances
    `VPNLS_XATOL` and `VPNLS_FATOL`: with ``fit_vpnls``'s own (1e-10 and 1e-15, below the
    RSS's rounding) Nelder-Mead ran to its 10,000 iterations in about a quarter of the noisy
    repeats, 5 s each, to the same exponents within 1e-4.
    """
    if key == "3":
        return dict(fit_parametric(points.n_params, points.n_tokens, points.loss,
                                   grid=PLAN_GRID).params)
    with warnings.catch_warnings():  # Nelder-Mead's simplex test on an infinite RSS
        warnings.simplefilter("ignore", RuntimeWarning)
        row = weighted_refits(points.n_params, points.n_tokens, points.loss,
                              np.ones((1, points.n_params.size)), xatol=VPNLS_XATOL,
                              fatol=VPNLS_FATOL)[0]
    return dict(zip(PARAMS, (float(v) for v in row), strict=True))


def estimate(key: str, points: SimulatedPoints, targets: list[float]) -> dict[str, float]:
    """One estimator's numbers on one simulated study; empty where the fit cannot be made.

    Returns:
        ``n_params@C`` and ``n_tokens@C`` (N_opt, D_opt at each target C, formatted ``%g``),
        ``a``, ``b`` and, for the fits of L(N, D), ``alpha`` and ``beta``.
    """
    out: dict[str, float] = {}
    try:
        if key == "2":
            fit = fit_isoflop(points.budget_flops, points.n_params, points.loss)
            for c in targets:
                split = optimal_allocation(fit, float(c))
                out[f"n_params@{c:g}"], out[f"n_tokens@{c:g}"] = split.n_params, split.n_tokens
            out.update(split.exponents)
        else:
            p = _law_params(key, points)
            if not (p["alpha"] > 0 and p["beta"] > 0):
                return {}
            for c in targets:
                out[f"n_params@{c:g}"], out[f"n_tokens@{c:g}"] = closed_form_split(p, float(c))
            total = p["alpha"] + p["beta"]
            out |= {"a": p["beta"] / total, "b": p["alpha"] / total, "alpha": p["alpha"],
                    "beta": p["beta"]}
    except (FitError, np.linalg.LinAlgError, ValueError):
        return {}
    return {k: float(v) if math.isfinite(v) else math.nan for k, v in out.items()}


def true_values(law: SimulatedLaw, targets: list[float]) -> dict[str, float]:
    """The law's own numbers, in `estimate`'s keys (C = 6ND, Hoffmann et al. 2022 eq. 4)."""
    total = law.alpha + law.beta
    out = {"a": law.beta / total, "b": law.alpha / total, "alpha": law.alpha, "beta": law.beta}
    for c in targets:
        out[f"n_params@{c:g}"], out[f"n_tokens@{c:g}"] = law.optimal_split(float(c))
    return out
