"""A scaling study's design simulated: the grid it would lay out, losses drawn from a law.

`simulate_grid` walks the budgets as the scaling kind's driver does
(`sweep.kinds.scaling.driver.run_budgets`): each budget laid out by
`sweep.kinds.scaling.layout.layout_budget` around the tokens-per-param prior, or with
``scaling.recentre`` around `sweep.kinds.scaling.layout.next_centre` of the earlier budgets'
optima (`curve_optimum` of their simulated losses). Each point's N is the cost model's parameter
count of the shape the grid lays out and D the tokens the budget buys it
(`sweep.kinds.scaling.shapes.Candidate`); its loss is the law's at (N, D, the study's lr, its
tokens per step) times log-normal noise (`sweep.simulate.law`). The corpus is not read, so the
``scaling.max_epochs`` limit is not applied (``sweep validate`` shows it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling.rules import scaling_section
from sweep.kinds.scaling.shapes import Candidate, candidates, configs
from sweep.simulate.law import SimulatedLaw, noisy
from sweep.spec import StudySpec

__all__ = ["Design", "GridCache", "SimulatedPoints", "simulate_grid", "study_lr"]


@dataclass(frozen=True)
class SimulatedPoints:
    """One simulated study's trained points, each array of shape ``(n,)``.

    Attributes:
        budget_flops: Each point's budget C (the study's own FLOPs, the cost model's).
        n_params: N, parameters (the cost model's count of the shape).
        n_tokens: D, tokens trained.
        loss: The simulated final loss, nats/token.
        train_flops: FLOPs each point trains (D x training FLOPs per token).
        reasons: Why each point was chosen (one line each).
    """

    budget_flops: np.ndarray
    n_params: np.ndarray
    n_tokens: np.ndarray
    loss: np.ndarray
    train_flops: np.ndarray
    reasons: tuple[str, ...] = ()

    @property
    def total_flops(self) -> float:
        """The FLOPs the design trains, in all."""
        return float(self.train_flops.sum())


@dataclass
class Design:
    """What every repeat shares: the spec, its priced shapes, lr and the law.

    Attributes:
        spec: A scaling study.
        law: The law losses are drawn from.
        noise: Sigma of the log-normal seed noise (0: none).
        cands: The family's shapes, priced (`candidates`).
        lr: The study's peak learning rate (the law's lr penalty reads it).
    """

    spec: StudySpec
    law: SimulatedLaw
    noise: float
    cands: list[Candidate]
    lr: float

    @classmethod
    def of(cls, spec: StudySpec, law: SimulatedLaw, noise: float) -> Design:
        """The design of ``spec`` under ``law`` (prices the shapes once)."""
        cands = candidates(spec)
        return cls(spec, law, noise, cands, study_lr(spec, cands))

    def loss(self, n_params: float, n_tokens: float, batch_tokens: float,
             rng: random.Random) -> float:
        """One simulated loss, nats/token."""
        return noisy(self.law.loss(n_params, n_tokens, self.lr, batch_tokens), self.noise, rng)


def study_lr(spec: StudySpec, cands: list[Candidate]) -> float:
    """The peak learning rate the study trains with (its fixed ``train.lr`` or the default)."""
    _, train = configs(spec, cands[0].shape, scaling_section(spec).budgets[0])
    return float(train.lr)


class GridCache:
    """Layouts by (budget, centre): a repeat whose centre did not move reuses the layout."""

    def __init__(self) -> None:
        self._held: dict[tuple[float, float | None], grid.BudgetLayout] = {}

    def layout(self, design: Design, budget: float, centre: float | None,
               source: str | None) -> grid.BudgetLayout:
        key = (budget, centre)
        if key not in self._held:
            self._held[key] = grid.layout_budget(design.spec, budget, cands=design.cands,
                                                 centre_n_params=centre, centre_source=source)
        return self._held[key]


def simulate_grid(design: Design, rng: random.Random,
                  cache: GridCache | None = None) -> SimulatedPoints:
    """One simulated run of the study's fixed grid, budget by budget (module docstring)."""
    section = scaling_section(design.spec)
    cache = cache or GridCache()
    optima: list[tuple[float, float]] = []
    rows: list[tuple[float, float, float, float, float]] = []
    reasons: list[str] = []
    for budget in section.budgets:
        centre, source = grid.next_centre(section.recentre, budget, optima)
        lay = cache.layout(design, float(budget), centre, source)
        at = []
        for p in lay.points:
            n, d = float(p.candidate.n_params), float(p.n_tokens)
            y = design.loss(n, d, d / p.steps, rng)
            at.append((n, y))
            rows.append((float(budget), n, d, y, d * p.candidate.flops_per_token_train))
            reasons.append(f"grid: C={budget:.3g}, {lay.centre_source}")
        optimum = grid.curve_optimum([n for n, _ in at], [y for _, y in at]) if at else None
        if optimum is not None:
            optima.append((float(budget), optimum))
    cols = np.array(rows, dtype=float).reshape(-1, 5)
    return SimulatedPoints(cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], cols[:, 4],
                           tuple(reasons))
