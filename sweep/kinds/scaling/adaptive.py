"""An adaptive scaling design: rounds placed where they shrink the interval of N_opt at a target.

One implementation serves the real driver (`sweep.kinds.scaling.adaptive_driver`) and the
simulation (`sweep.simulate.adaptive`, for ``sweep plan`` and ``bench/adaptive.py``). After each
round the law is refitted by VPNLS (the verdict's first estimator) with a small bootstrap
(`refit`), and the next round placed (`next_round`, both through `after_round`):

- stop when the interval of N_opt at ``target_flops`` (q95 / q05 of the bootstrap draws) is at
  most ``target_rel_ci``, or when the next round does not fit in what is left of the allowance
  (`why_stopped` says which);
- extrapolation dominates when the interval at the target is more than `EXTRAPOLATION_RATIO`
  times the one at the largest budget trained: add a budget ``growth`` times the largest (or
  the largest the allowance still buys with ``sizes`` points, if that is at least 1.5 times it);
- else noise dominates: replicate the largest budget's sizes (another seed each);
- every round is centred on the fit's N_opt at its budget (C = 6ND, Hoffmann et al. 2022
  eq. 4), its span widened by 1.5 when the fit's N_opt at the largest budget lies in the outer
  fifth of that budget's sampled sizes (in log N): a vertex near an edge.

The first round (`first_round`) is the spec's two smallest budgets around the tokens-per-param
prior (the second re-centred on the first when ``scaling.recentre``), ``sizes`` points each,
spanning twice ``scaling.span`` unless ``span`` is given. Each point records why it was chosen.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling.rules import scaling_section
from sweep.scaling.bootstrap import bootstrap_counts
from sweep.scaling.law import PARAMS, closed_form_split
from sweep.scaling.vpnls import weighted_refits
from sweep.spec import StudySpec

__all__ = ["EXTRAPOLATION_RATIO", "FIRST_ROUND", "AdaptiveSettings", "Refit", "Step",
           "after_round", "describe_design", "first_round", "next_round", "refit", "round_cost",
           "settings_of", "why_stopped"]

#: Extrapolation dominates when the target's interval is this many times the largest budget's.
EXTRAPOLATION_RATIO = 1.5
_EDGE = 0.2  # a vertex in the outer fifth of the sampled log-N range is near an edge
#: Why the first round's points were chosen.
FIRST_ROUND = "first round: the spec's smallest budgets"
#: A round to train: ``(budget C, centre N* or None for the prior / re-centring, span, why)``.
Step = tuple[float, float | None, float, str]


@dataclass(frozen=True)
class AdaptiveSettings:
    """How an adaptive design spends its allowance (``scaling.adaptive``, `settings_of`).

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


def settings_of(spec: StudySpec) -> AdaptiveSettings:
    """The settings of ``spec``'s ``scaling.adaptive``, its defaults filled in.

    ``target_flops``: 100 x the largest of ``scaling.budgets``; ``allowance_flops``: the
    training FLOPs of the fixed grid as the prior lays it out (what ``sweep validate`` prices).

    Raises:
        ValueError: ``spec`` has no ``scaling.adaptive``.
    """
    section = scaling_section(spec)
    ad = section.adaptive
    if ad is None:
        raise ValueError(f"{spec.name}: no scaling.adaptive section")
    allowance = ad.allowance_flops
    if allowance is None:
        allowance = sum(round_cost(lay) for lay in grid.layout(spec))
    return AdaptiveSettings(
        target_flops=ad.target_flops or 100 * max(section.budgets),
        allowance_flops=float(allowance), target_rel_ci=ad.target_rel_ci, sizes=ad.sizes,
        growth=ad.growth, n_bootstrap=ad.n_bootstrap, span=ad.span)


def round_cost(lay: grid.BudgetLayout) -> float:
    """Training FLOPs of a round's points: tokens x the cost model's training FLOPs per token."""
    return float(sum(p.n_tokens * p.candidate.flops_per_token_train for p in lay.points))


def first_round(spec: StudySpec, settings: AdaptiveSettings) -> list[Step]:
    """The first round: the spec's two smallest budgets, centres from the prior (None)."""
    section = scaling_section(spec)
    span = settings.span or 2 * section.span
    return [(float(b), None, span, FIRST_ROUND) for b in sorted(section.budgets)[:2]]


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


def after_round(settings: AdaptiveSettings, rows: Sequence[Sequence[float]], spent: float,
                span: float, seed: int) -> tuple[Refit, tuple[float, float, float, str] | None]:
    """Refit on the points so far and place the next round (`refit`, `next_round`).

    Args:
        settings: The design's settings.
        rows: One ``(budget C, N, D, loss)`` per trained point (more columns are ignored).
        spent: FLOPs trained so far.
        span: The span of the last round.
        seed: Seeds the bootstrap's resamples.

    Returns:
        The refit and the next round (None: stop, `why_stopped` says why).
    """
    cols = np.asarray(rows, dtype=float)[:, :4]
    fit = refit(cols[:, 1], cols[:, 2], cols[:, 3], settings.n_bootstrap, seed)
    top = cols[cols[:, 0] == cols[:, 0].max()]
    step = next_round(settings, fit, sorted(set(cols[:, 0].tolist())),
                      (float(top[:, 1].min()), float(top[:, 1].max())), spent, span)
    return fit, step


def why_stopped(settings: AdaptiveSettings, fit: Refit | None, spent: float) -> str:
    """Why `next_round` placed no round (or a round did not fit): one line, for the record."""
    rel = fit.rel_ci(settings.target_flops) if fit is not None else math.inf
    shown = f"N_opt's interval at C={settings.target_flops:.3g} is x{rel:.3g}"
    if rel <= settings.target_rel_ci:
        return f"interval reached: {shown}, within scaling.adaptive.target_rel_ci " \
               f"x{settings.target_rel_ci:g}"
    if fit is not None and not np.isfinite(fit.n_opt(settings.target_flops)[0]):
        return f"no fit: the refit gives no finite N_opt ({shown})"
    return (f"allowance spent: {spent:.3g} of {settings.allowance_flops:.3g} FLOPs trained and "
            f"the next round does not fit in the rest ({shown}, target "
            f"x{settings.target_rel_ci:g})")


def describe_design(spec: StudySpec, settings: AdaptiveSettings) -> list[str]:
    """What ``sweep validate`` says of an adaptive design: its later rounds are not known yet."""
    first = ", ".join(f"C={b:.3g}" for b, _, _, _ in first_round(spec, settings))
    span = first_round(spec, settings)[0][2]
    return [
        f"adaptive design (scaling.adaptive): the table is the first round only ({first}, "
        f"{settings.sizes} sizes each, span {span:g}); later rounds are placed from the fits "
        "as the study runs",
        f"target: N_opt at C={settings.target_flops:.3g} FLOPs; allowance "
        f"{settings.allowance_flops:.3g} training FLOPs",
        f"after each round: VPNLS refitted with {settings.n_bootstrap} bootstrap draws; the next "
        f"round adds a budget x{settings.growth:g} the largest where extrapolation dominates, "
        "else replicates the largest (another seed), centred on the fit's N_opt",
        f"stops when N_opt's interval at the target (q95 / q05) is at most "
        f"x{settings.target_rel_ci:g}, or when the next round does not fit in the allowance",
    ]
