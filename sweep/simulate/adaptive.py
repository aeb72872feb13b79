"""The adaptive scaling design simulated on a law (``sweep plan --design adaptive``, bench).

The rounds are placed by the one implementation the real driver uses
(`sweep.kinds.scaling.adaptive`: `first_round`, then `after_round` after each round); here each
point's loss is drawn from the law (`sweep.simulate.design.Design.loss`) instead of trained.
"""

from __future__ import annotations

import random

import numpy as np

from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling.adaptive import (
    EXTRAPOLATION_RATIO,
    AdaptiveSettings,
    Refit,
    after_round,
    first_round,
    next_round,
    refit,
    round_cost,
)
from sweep.kinds.scaling.rules import scaling_section
from sweep.simulate.design import Design, GridCache, SimulatedPoints

__all__ = ["EXTRAPOLATION_RATIO", "AdaptiveSettings", "Refit", "next_round", "refit",
           "simulate_adaptive"]


def simulate_adaptive(design: Design, rng: random.Random, settings: AdaptiveSettings,
                      cache: GridCache | None = None) -> SimulatedPoints:
    """One simulated adaptive study; ``reasons`` say why each point was chosen."""
    spec, section = design.spec, scaling_section(design.spec)
    rows: list[tuple[float, float, float, float, float]] = []
    reasons: list[str] = []
    queue = first_round(spec, settings)
    optima: list[tuple[float, float]] = []
    spent = 0.0
    seed = rng.randrange(2**31)
    while queue:
        budget, centre, span, why = queue.pop(0)
        if centre is None:
            centre, _ = grid.next_centre(section.recentre, budget, optima)
        lay = grid.layout_budget(spec, budget, cands=design.cands, centre_n_params=centre,
                                 span=span, sizes=settings.sizes)
        cost = round_cost(lay)
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
        _, step = after_round(settings, rows, spent, span, seed + len(rows))
        if step is not None:
            queue.append(step)
    cols = np.array(rows, dtype=float).reshape(-1, 5)
    return SimulatedPoints(cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], cols[:, 4],
                           tuple(reasons))
