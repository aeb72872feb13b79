"""An adaptive scaling design: rounds placed where they shrink the interval of N_opt at a target.

After each round the law is refitted by VPNLS (the verdict's first estimator) with a small
bootstrap (`refit`), and the next round placed (`next_round`):

- stop when the interval of N_opt at ``target_flops`` (q95 / q05 of the bootstrap draws) is at
  most ``target_rel_ci``, or when the next round does not fit in what is left of the allowance;
- extrapolation dominates when the interval at the target is more than `EXTRAPOLATION_RATIO`
  times the one at the largest budget trained: add a budget ``growth`` times the largest (or
  the largest the allowance still buys with ``sizes`` points, if that is at least 1.5 times it);
- else noise dominates: replicate the largest budget's sizes (another seed each);
- every round is centred on the fit's N_opt at its budget (C = 6ND, Hoffmann et al. 2022
  eq. 4), its span widened by 1.5 when the fit's N_opt at the largest budget lies in the outer
  fifth of that budget's sampled sizes (in log N): a vertex near an edge.

The first round is the spec's two smallest budgets around the tokens-per-param prior (the
second re-centred on the first when ``scaling.recentre``), ``sizes`` points each, spanning
twice ``scaling.span`` unless ``span`` is given. Each point
records why it was chosen. `simulate_adaptive` runs the design on a simulated law for
``sweep plan`` and ``bench/adaptive.py``.
"""

from __future__ import annotations

import math
import random
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling.rules import scaling_section
from sweep.scaling.bootstrap import bootstrap_counts
from sweep.scaling.law import PARAMS, closed_form_split
from sweep.scaling.vpnls import weighted_refits
from sweep.simulate.design import Design, GridCache, SimulatedPoints

__all__ = ["EXTRAPOLATION_RATIO", "AdaptiveSettings", "Refit", "next_round", "refit",
           "simulate_adaptive"]

#: Extrapolation dominates when the target's interval is this many times the largest budget's.
EXTRAPOLATION_RATIO = 1.5
_EDGE = 0.2  # a vertex in the outer fifth of the sampled log-N range is near an edge


@dataclass(frozen=True)
class AdaptiveSettings:
    """How an adaptive design spends its allowance.

    Attributes:
        target_flops: The budget C whose N_opt the design is for, FLOPs.
        allowance_flops: The FLOPs the design may train, in all.
        target_rel_ci: Stop when N_opt's interval at the target (q95 / q05) is at most this.
        sizes: Points per budget a round trains.
        growth: A new budget's multiple of the largest so far.
        n_bootstrap: Bootstrap refits after each round.
        span: The first round's span around N* (None: twice ``scaling.span``: the fit of
            L(N, D) learns alpha and beta from sizes away from the optimum, and a measured
            design with the spec's span was x0.78 as wide as the fixed grid, this one x0.56).
    """

    target_flops: float
    allowance_flops: float
    target_rel_ci: float = 1.5
    sizes: int = 3
    growth: float = 3.0
    n_bootstrap: int = 16
    span: float | None = None


@dataclass(frozen=True)
class Refit:
    """VPNLS after a round: the fit and its bootstrap draws, shape ``(1 + B, 5)``."""

    params: np.ndarray

    def n_opt(self, flops: float) -> np.ndarray:
        """N_opt at ``flops`` by the fit (first) and each draw (C = 6ND)."""
        p: dict[str, Any] = {k: self.params[:, i] for i, k in enumerate(PARAMS)}
        with np.errstate(all="ignore"):
            return np.asarray(closed_form_split(p, flops)[0], dtype=float)

    def rel_ci(self, flops: float) -> float:
        """q95 / q05 of the draws' N_opt at ``flops`` (inf without finite draws)."""
        draws = self.n_opt(flops)[1:]
        draws = draws[np.isfinite(draws) & (draws > 0)]
        if draws.size < 2:
            return math.inf
        lo, hi = np.percentile(draws, [5, 95])
        return float(hi / lo)


def refit(n_params, n_tokens, loss, n_bootstrap: int, seed: int) -> Refit:
    """VPNLS on the points and ``n_bootstrap`` resamples (`weighted_refits`, xatol 1e-4)."""
    n = np.asarray(n_params, dtype=float)
    weights = np.vstack([np.ones((1, n.size)),
                         bootstrap_counts(n.size, n_bootstrap, seed).astype(float)])
    with warnings.catch_warnings():  # Nelder-Mead's simplex test on an infinite RSS (inf - inf)
        warnings.simplefilter("ignore", RuntimeWarning)
        return Refit(weighted_refits(n, n_tokens, loss, weights, xatol=1e-4, fatol=1e-12))


def next_round(settings: AdaptiveSettings, fit: Refit, budgets: list[float],
               sampled: tuple[float, float], spent: float,
               span: float) -> tuple[float, float, float, str] | None:
    """The next round ``(budget, centre N*, span, why)``, or None to stop (module docstring).

    Args:
        settings: The design's settings.
        fit: The refit after the last round.
        budgets: Budgets trained so far.
        sampled: The smallest and largest N trained at the largest budget.
        spent: FLOPs trained so far.
        span: The span of the last round.
    """
    largest = max(budgets)
    rel_target = fit.rel_ci(settings.target_flops)
    if rel_target <= settings.target_rel_ci:
        return None
    left = settings.allowance_flops - spent
    n_largest = float(fit.n_opt(largest)[0])
    lo, hi = math.log(sampled[0]), math.log(sampled[1])
    position = (math.log(n_largest) - lo) / (hi - lo) if hi > lo and n_largest > 0 else 0.5
    if not _EDGE <= position <= 1 - _EDGE:
        span, edge = span * 1.5, f"; widened to span {span * 1.5:.3g} (vertex near an edge)"
    else:
        edge = ""
    rel_largest = fit.rel_ci(largest)
    budget = min(largest * settings.growth, left / settings.sizes)
    if rel_target > EXTRAPOLATION_RATIO * rel_largest and budget >= 1.5 * largest:
        why = (f"new budget: extrapolation dominates (interval x{rel_target:.3g} at the target, "
               f"x{rel_largest:.3g} at C={largest:.3g})")
    elif settings.sizes * largest <= left:
        budget, why = largest, (f"replicate: noise dominates (interval x{rel_target:.3g} at "
                                f"the target, x{rel_largest:.3g} at C={largest:.3g})")
    else:
        return None
    centre = float(fit.n_opt(budget)[0])
    if not (math.isfinite(centre) and centre > 0):
        return None
    return budget, centre, span, why + edge


def simulate_adaptive(design: Design, rng: random.Random, settings: AdaptiveSettings,
                      cache: GridCache | None = None) -> SimulatedPoints:
    """One simulated adaptive study (module docstring); ``reasons`` say why each point."""
    spec, section = design.spec, scaling_section(design.spec)
    rows: list[tuple[float, float, float, float, float]] = []
    reasons: list[str] = []
    first = sorted(float(b) for b in section.budgets)[:2]
    span = settings.span or 2 * section.span
    queue: list[tuple[float, float | None, float, str]] = [
        (b, None, span, "first round: the spec's smallest budgets") for b in first]
    optima: list[tuple[float, float]] = []
    spent = 0.0
    seed = rng.randrange(2**31)
    while queue:
        budget, centre, span, why = queue.pop(0)
        if centre is None:
            centre, _ = grid.next_centre(section.recentre, budget, optima)
        lay = grid.layout_budget(spec, budget, cands=design.cands, centre_n_params=centre,
                                 span=span, sizes=settings.sizes)
        cost = sum(p.n_tokens * p.candidate.flops_per_token_train for p in lay.points)
        if not lay.points or spent + cost > settings.allowance_flops:
            break
        spent += cost
        at = []
        for p in lay.points:
            n, d = float(p.candidate.n_params), float(p.n_tokens)
            y = design.loss(n, d, d / p.steps, rng)
            at.append((n, y))
            rows.append((budget, n, d, y, d * p.candidate.flops_per_token_train))
            reasons.append(f"C={budget:.3g}, N*={lay.centre_n_params:.4g}: {why}")
        optimum = grid.curve_optimum(*zip(*at, strict=True)) if len(at) >= 3 else None
        if optimum is not None:
            optima.append((budget, optimum))
        if queue or len(rows) < 6:
            continue
        cols = np.array(rows)
        fit = refit(cols[:, 1], cols[:, 2], cols[:, 3], settings.n_bootstrap, seed + len(rows))
        top = cols[cols[:, 0] == cols[:, 0].max()]
        step = next_round(settings, fit, sorted(set(cols[:, 0])),
                          (float(top[:, 1].min()), float(top[:, 1].max())), spent, span)
        if step is not None:
            queue.append(step)
    cols = np.array(rows, dtype=float).reshape(-1, 5)
    return SimulatedPoints(cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], cols[:, 4],
                           tuple(reasons))
