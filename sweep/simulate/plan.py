"""``sweep plan``: a scaling study's design simulated many times, before anything trains.

Each repeat is one simulated study (`sweep.simulate.design.simulate_grid`: the grid, the
re-centring and the cost model's N and D the study would train, losses from a law with seed
noise), fitted by every estimator of the analysis (`sweep.simulate.estimates`). Over the
repeats, per estimator, target budget and quantity: the median estimate and its 5-95% spread.
The spread's width is the interval a study of this design can expect (q95 / q05 for N_opt and
D_opt, q95 - q05 for exponents), the median's distance from the law's value its bias (median /
truth - 1 for N_opt and D_opt, median - truth for exponents).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from sweep.kinds.scaling.rules import scaling_section
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS
from sweep.simulate.design import Design, GridCache, SimulatedPoints, simulate_grid
from sweep.simulate.estimates import ESTIMATORS, LAW_QUANTITIES, estimate, true_values
from sweep.simulate.law import SimulatedLaw
from sweep.spec import StudySpec

__all__ = ["Plan", "Spread", "plan_targets", "run_plan", "spread_rows"]

#: The percentiles of the spread.
QUANTILES = (5.0, 95.0)
#: The quantities of each target budget.
PER_BUDGET = (METRIC_N_PARAMS, METRIC_N_TOKENS)


@dataclass(frozen=True)
class Spread:
    """One estimator's estimates of one quantity over the repeats.

    Attributes:
        estimator: The approach key (``2``, ``3``, ``vpnls``).
        quantity: ``n_params`` (N_opt), ``n_tokens`` (D_opt), ``a``, ``b``, ``alpha``, ``beta``.
        budget_flops: The target budget C of N_opt and D_opt (None for exponents).
        truth: The law's value.
        median: The median estimate (nan when no repeat gave one).
        q05: The 5th percentile.
        q95: The 95th percentile.
        width: ``q95 / q05`` (N, D) or ``q95 - q05`` (exponents).
        bias: ``median / truth - 1`` (N, D) or ``median - truth`` (exponents).
        n_ok: Repeats whose fit gave a value.
    """

    estimator: str
    quantity: str
    budget_flops: float | None
    truth: float
    median: float
    q05: float
    q95: float
    width: float
    bias: float
    n_ok: int


@dataclass
class Plan:
    """A design's simulated outcome.

    Attributes:
        study: The spec's name.
        law: The law, as plain data (`SimulatedLaw.as_dict`).
        repeats: Simulated studies.
        noise: Seed-noise sigma.
        seed: The first repeat's seed.
        targets: Target budgets C, FLOPs, ascending.
        design_flops: The FLOPs one study trains (median over repeats).
        n_points: Trials one study trains (median over repeats).
        spreads: One `Spread` per estimator, quantity and target.
    """

    study: str
    law: dict
    repeats: int
    noise: float
    seed: int
    targets: list[float]
    design_flops: float
    n_points: float
    spreads: list[Spread] = field(default_factory=list)

    def as_json(self) -> dict:
        """The plan as plain data (``sweep plan --json``)."""
        out = asdict(self)
        out["spreads"] = [{k: _plain(v) for k, v in s.items()} for s in out["spreads"]]
        return out

    def spread(self, estimator: str, quantity: str, budget: float | None = None) -> Spread:
        """The `Spread` of one estimator's quantity (at ``budget`` for N_opt and D_opt).

        Raises:
            KeyError: None such.
        """
        for s in self.spreads:
            if (s.estimator, s.quantity, s.budget_flops) == (estimator, quantity, budget):
                return s
        raise KeyError(f"{estimator} {quantity} {budget}")


def _plain(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def plan_targets(spec: StudySpec, target: float | None = None) -> list[float]:
    """The spec's budgets and ``target`` (default 100 x the largest), ascending."""
    budgets = [float(b) for b in scaling_section(spec).budgets]
    return sorted({*budgets, float(target) if target else 100.0 * max(budgets)})


def spread_rows(estimator: str, draws: list[dict[str, float]], truth: dict[str, float],
                targets: list[float]) -> list[Spread]:
    """The `Spread` of every quantity of one estimator's ``draws`` (one dict per repeat)."""
    keys: list[tuple[str, float | None, str]] = [(q, c, f"{q}@{c:g}") for c in targets
                                                 for q in PER_BUDGET]
    keys += [(q, None, q) for q in LAW_QUANTITIES if estimator != "2" or q in ("a", "b")]
    out = []
    for quantity, budget, key in keys:
        values = np.array([d.get(key, math.nan) for d in draws], dtype=float)
        values = values[np.isfinite(values)]
        true = truth[key]
        if not values.size:
            out.append(Spread(estimator, quantity, budget, true, math.nan, math.nan, math.nan,
                              math.nan, math.nan, 0))
            continue
        median = float(np.median(values))
        lo, hi = (float(v) for v in np.percentile(values, QUANTILES))
        ratio = budget is not None
        out.append(Spread(estimator, quantity, budget, true, median, lo, hi,
                          hi / lo if ratio else hi - lo,
                          median / true - 1 if ratio else median - true, int(values.size)))
    return out


def run_plan(spec: StudySpec, law: SimulatedLaw, *, repeats: int, noise: float, seed: int = 0,
             targets: list[float] | None = None,
             simulate: Callable[[Design, random.Random], SimulatedPoints] | None = None,
             estimators: tuple[str, ...] = ESTIMATORS) -> Plan:
    """Simulate ``spec``'s design ``repeats`` times under ``law`` and summarise the estimates.

    Args:
        spec: A scaling study.
        law: The law losses are drawn from.
        repeats: Simulated studies (>= 1).
        noise: Sigma of the log-normal seed noise (>= 0).
        seed: Repeat ``r`` draws its noise from ``random.Random(f"{seed}:{r}")``.
        targets: Target budgets; default `plan_targets`.
        simulate: One simulated study; default the spec's fixed grid (`simulate_grid`).
        estimators: The approaches to fit (keys of `ESTIMATORS`).

    Returns:
        The `Plan`.
    """
    design = Design.of(spec, law, noise)
    targets = sorted(targets or plan_targets(spec))
    cache = GridCache()
    run = simulate or (lambda d, rng: simulate_grid(d, rng, cache))
    draws: dict[str, list[dict[str, float]]] = {k: [] for k in estimators}
    flops, counts = [], []
    for r in range(repeats):
        points = run(design, random.Random(f"{seed}:{r}"))
        flops.append(points.total_flops)
        counts.append(points.n_params.size)
        for key in estimators:
            draws[key].append(estimate(key, points, targets))
    truth = true_values(law, targets)
    spreads = [s for key in estimators for s in spread_rows(key, draws[key], truth, targets)]
    return Plan(spec.name, law.as_dict(), repeats, noise, seed, targets,
                float(np.median(flops)), float(np.median(counts)), spreads)
