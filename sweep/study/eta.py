"""The time a study has left: the training FLOPs still to do over the FLOPs per second so far.

Each trial's cost comes from the cost model: its token budget (`sweep.train.resolve_budget`)
times its training FLOPs per token (``sweep_models.cost.flops_per_token(model, train=True)``).
The throughput is measured: the training FLOPs the trials did since the progress view first saw
them, over the seconds since then (all trials together, so parallel workers count). What is left
is the rest of every running trial's budget, and for each trial not yet started the mean
budget of those seen. Trials a pruner stops early make the estimate an upper bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweep.schema import TrialState

if TYPE_CHECKING:
    from sweep.study.progress import TrialRow

__all__ = ["Eta", "TrialCost", "format_eta", "spec_cost"]


@dataclass(frozen=True)
class TrialCost:
    """What a trial costs to train.

    Attributes:
        tokens: Its whole token budget.
        flops_per_token: Training FLOPs per token (forward and backward).
    """

    tokens: int
    flops_per_token: float


def spec_cost(spec: Any) -> Callable[[TrialRow], TrialCost | None]:
    """The cost of a trial of ``spec`` from its params; None where it has none in tokens.

    A trial whose params make no valid config (an infeasible draw) or whose budget is in
    seconds has no cost here.
    """
    from sweep.space import configs_from_params
    from sweep.train.config import resolve_budget
    from sweep_models.cost import flops_per_token

    def cost(row: TrialRow) -> TrialCost | None:
        try:
            model, train = configs_from_params(spec, row.params)
            budget = resolve_budget(train, model)
        except Exception:  # noqa: BLE001 (an invalid config is the trial's own to report)
            return None
        if budget.total_tokens is None:
            return None
        return TrialCost(budget.total_tokens, flops_per_token(model, train=True))

    return cost


class Eta:
    """Seconds left of a study, from the trials it has seen (`observe`) and their costs.

    Args:
        n_trials: Finished trials the study aims for.
        cost: A trial's `TrialCost` (`spec_cost`), None where unknown.
        clock: Seconds, monotonic (tests pass their own).
    """

    def __init__(self, n_trials: int, cost: Callable[[TrialRow], TrialCost | None], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.n_trials, self._cost, self._clock = n_trials, cost, clock
        self._costs: dict[int, TrialCost | None] = {}
        self._first_tokens: dict[int, int] = {}
        self._started: float | None = None
        self._seconds_left: float | None = None

    def observe(self, rows: list[TrialRow]) -> None:
        """Take the trials' progress now; `seconds_left` says what it makes of it."""
        now = self._clock()
        if self._started is None:
            self._started = now
        trained = remaining = 0.0
        planned: list[float] = []
        running = finished = 0
        for row in rows:
            if row.number not in self._costs:
                self._costs[row.number] = self._cost(row)
                self._first_tokens[row.number] = row.tokens
            cost = self._costs[row.number]
            running += row.state == TrialState.RUNNING
            finished += row.state.finished
            if cost is None:
                continue
            done = cost.tokens if row.state == TrialState.COMPLETE else min(row.tokens,
                                                                             cost.tokens)
            trained += max(0, done - self._first_tokens[row.number]) * cost.flops_per_token
            if row.state != TrialState.INFEASIBLE:
                planned.append(cost.tokens * cost.flops_per_token)
            if row.state == TrialState.RUNNING:
                remaining += (cost.tokens - done) * cost.flops_per_token
        unstarted = max(0, self.n_trials - finished - running)
        elapsed = now - self._started
        if trained <= 0 or elapsed <= 0 or (unstarted and not planned):
            self._seconds_left = None
            return
        if unstarted:
            remaining += unstarted * sum(planned) / len(planned)
        self._seconds_left = remaining / (trained / elapsed)

    def seconds_left(self) -> float | None:
        """The estimate at the last `observe`: None before any training was measured."""
        return self._seconds_left


def format_eta(seconds: float) -> str:
    """``45s``, ``3m20s``, ``1h02m``: a duration to the second under an hour."""
    s = max(0, math.ceil(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
