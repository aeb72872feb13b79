"""The IsoFLOP grid of a scaling study: which shape trains at which FLOP budget, for how long.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", section 3.2) train, for
each budget C, a range of model sizes N for D = C / (FLOPs per token) tokens each, and read the
compute-optimal N off the minimum of loss against N. For each budget, `layout_budget` picks
``sizes_per_budget`` shapes (`sweep.kinds.scaling.shapes`) log-spaced from N*/span to N* x span
around a centre N*: where D / N equals the spec's ``tokens_per_param`` prior (`prior_centre`),
or the optimum the earlier budgets point to (`recentre`, from each earlier curve's parabola
vertex, `curve_optimum`). Shapes that would train less than one optimizer step, or more than
``max_epochs`` passes over the corpus's training split, are left out with a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sweep.kinds.scaling.rules import scaling_section
from sweep.kinds.scaling.shapes import Candidate, candidates, configs, point_label
from sweep.schema import (
    METRIC_BRANCH_TOKENS,
    METRIC_BUDGET_FLOPS,
    METRIC_MEM_ESTIMATE,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    METRIC_TOKENS_PER_PARAM,
    METRIC_TRAIN_FLOPS,
)
from sweep.space.constraints import check_constraints, training_cost
from sweep.spec import StudySpec
from sweep.train.config import resolve_budget
from sweep.train.schedule import wsd_stable_end
from sweep_models.errors import required

__all__ = ["BudgetLayout", "GridPoint", "curve_optimum", "grid_rows", "layout", "layout_budget",
           "layout_problems", "next_centre", "prior_centre", "recentre"]


@dataclass(frozen=True)
class GridPoint:
    """One trial of the grid.

    Attributes:
        budget_flops: The FLOP budget C.
        candidate: The priced shape.
        n_tokens: Tokens it trains (whole optimizer steps of the budget).
        tokens_per_param: ``n_tokens / n_params``.
        steps: Optimizer steps it trains (``n_tokens`` / tokens per step).
    """

    budget_flops: float
    candidate: Candidate
    n_tokens: int
    tokens_per_param: float
    steps: int

    @property
    def label(self) -> str:
        return point_label(self.budget_flops, self.candidate.shape)


@dataclass
class BudgetLayout:
    """The shapes one budget trains.

    Attributes:
        budget_flops: The budget C.
        centre_n_params: The N* the sizes are centred on.
        centre_source: How N* was found (the tokens-per-param prior, or re-centred).
        points: The grid points to train, smallest first.
        dropped: ``(shape label, reason)`` of shapes within the span that cannot train.
        trainable_n: The smallest and largest N of the family's shapes that can train at this
            budget (None when none can): the range the points were picked from.
    """

    budget_flops: float
    centre_n_params: float
    centre_source: str
    points: list[GridPoint] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    trainable_n: tuple[int, int] | None = None


def prior_centre(cands: list[Candidate], budget_flops: float, tokens_per_param: float) -> float:
    """N* where D / N = ``tokens_per_param`` at ``budget_flops``, D = C / FLOPs per token.

    FLOPs per token are interpolated in log N between the family's shapes (extrapolated as
    6N beyond them, Kaplan et al. 2020 eq. 2.1's dominant term, scaled to the nearest shape).
    """
    log_n = np.log([c.n_params for c in cands])
    log_f = np.log([c.flops_per_token_train for c in cands])

    def log_ratio(x: float) -> float:  # log(D / N) at log N = x; decreasing in x
        if x < log_n[0]:
            f = log_f[0] + (x - log_n[0])
        elif x > log_n[-1]:
            f = log_f[-1] + (x - log_n[-1])
        else:
            f = float(np.interp(x, log_n, log_f))
        return math.log(budget_flops) - f - x

    target = math.log(tokens_per_param)
    lo, hi = log_n[0] - 20.0, log_n[-1] + 20.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if log_ratio(mid) > target else (lo, mid)
    return math.exp(0.5 * (lo + hi))


def curve_optimum(n_params, loss) -> float | None:
    """One budget's optimum N (parameters) from its trained points: the vertex in log N.

    ``n_params`` and ``loss`` (nats/token) have shape ``(n,)``; non-finite pairs are ignored.

    The vertex of loss = c0 + c1 log N + c2 (log N)^2 (Hoffmann et al. 2022, section 3.2)
    when it opens upwards and lies within the sampled sizes; else the size of the lowest loss.
    None for fewer than 3 distinct sizes with finite losses.
    """
    n = np.asarray(n_params, dtype=float)
    y = np.asarray(loss, dtype=float)
    ok = np.isfinite(n) & np.isfinite(y) & (n > 0)
    n, y = n[ok], y[ok]
    if np.unique(n).size < 3:
        return None
    x = np.log(n)
    c2, c1, _ = np.polyfit(x, y, 2)
    if c2 > 0 and x.min() <= -c1 / (2 * c2) <= x.max():
        return math.exp(-c1 / (2 * c2))
    return float(n[np.argmin(y)])


def recentre(budget_flops: float, optima: list[tuple[float, float]]) -> float | None:
    """N* at ``budget_flops`` from earlier budgets' optima ``(C, N_opt)``.

    Two or more: the least-squares line of log N_opt on log C, extrapolated (N_opt = k C^a,
    Hoffmann et al. 2022 eq. 3); one: N_opt (C / C_1)^0.5 (their a = 0.5). None without any.
    """
    if not optima:
        return None
    if len(optima) == 1:
        c1, n1 = optima[0]
        return n1 * (budget_flops / c1) ** 0.5
    log_c = np.log([c for c, _ in optima])
    log_n = np.log([n for _, n in optima])
    a, k = np.polyfit(log_c, log_n, 1)
    return float(math.exp(k + a * math.log(budget_flops)))


def next_centre(recentring: bool, budget_flops: float,
                optima: list[tuple[float, float]]) -> tuple[float | None, str | None]:
    """The centre N* of the next budget and how it was found, as the study runs.

    With ``recentring`` (``scaling.recentre``) and earlier optima ``(C, N_opt)``: `recentre`;
    else ``(None, None)``, the tokens-per-param prior (`layout_budget`'s default).
    """
    if not (recentring and optima):
        return None, None
    return (recentre(budget_flops, optima),
            f"re-centred on the optimum of {len(optima)} earlier budget(s)")


def layout_budget(
    spec: StudySpec,
    budget_flops: float,
    *,
    cands: list[Candidate] | None = None,
    centre_n_params: float | None = None,
    centre_source: str | None = None,
    corpus_train_tokens: int | None = None,
    device: str | None = None,
    span: float | None = None,
    sizes: int | None = None,
) -> BudgetLayout:
    """The points of one budget: ``sizes_per_budget`` shapes spanning the centre.

    Targets are log-spaced from N*/span to N* x span; each takes the nearest shape (in log N)
    not taken yet among those that can train: at least one optimizer step, at most
    ``max_epochs`` passes over ``corpus_train_tokens`` when given, and within the spec's
    ``constraints`` (`sweep.space.check_constraints` on ``device``).

    Args:
        spec: A scaling study.
        budget_flops: The budget C.
        cands: `candidates` (priced here when None).
        centre_n_params: N*; default `prior_centre` from ``scaling.tokens_per_param``.
        centre_source: How ``centre_n_params`` was found (for the report).
        corpus_train_tokens: Tokens in the corpus's training split (no epoch limit when None).
        device: The device whose memory bounds ``constraints.max_memory_gb`` (None: the train
            config's).
        span: The span around N* (None: ``scaling.span``).
        sizes: How many sizes (None: ``scaling.sizes_per_budget``).

    Returns:
        The `BudgetLayout`; fewer points than ``sizes_per_budget`` when the family is short
        (then every shape left out is in ``dropped``, else those near the span).
    """
    sc = scaling_section(spec)
    cands = cands if cands is not None else candidates(spec)
    if centre_n_params is None:
        centre_n_params = prior_centre(cands, budget_flops, sc.tokens_per_param)
        centre_source = f"prior: {sc.tokens_per_param:g} tokens per parameter"
    out = BudgetLayout(float(budget_flops), float(centre_n_params), centre_source or "given")
    span, sizes = span or sc.span, sizes or sc.sizes_per_budget
    lo, hi = centre_n_params / span, centre_n_params * span
    usable: list[GridPoint] = []
    left_out: list[tuple[int, str, str]] = []
    for cand in cands:
        model, train = configs(spec, cand.shape, budget_flops)
        reason = None
        try:
            budget = resolve_budget(train, model)
        except ValueError as exc:
            reason = str(exc)
        else:
            tokens = required("total_tokens", budget.total_tokens)  # a FLOP budget sets it
            if corpus_train_tokens is not None and tokens > sc.max_epochs * corpus_train_tokens:
                reason = (f"{tokens:,} tokens is {tokens / corpus_train_tokens:.2f} epochs of "
                          f"the corpus's {corpus_train_tokens:,} training tokens (over "
                          f"scaling.max_epochs={sc.max_epochs:g})")
        if reason is None and _constrained(spec):
            ok, why, _ = check_constraints(spec, model, train, device=device or train.device)
            reason = None if ok else f"over the constraints: {why}"
        if reason is not None:
            left_out.append((cand.n_params, cand.shape.label, reason))
            continue
        usable.append(GridPoint(float(budget_flops), cand, int(tokens), tokens / cand.n_params,
                                required("total_steps", budget.total_steps)))
    if not usable:
        out.dropped = [(label, reason) for _, label, reason in left_out]
        return out
    out.trainable_n = (usable[0].candidate.n_params, usable[-1].candidate.n_params)
    out.points = [usable[i] for i in _nearest(usable, lo, hi, sizes)]
    short = len(out.points) < sizes
    out.dropped = [(label, reason) for n, label, reason in left_out
                   if short or lo / 1.5 <= n <= hi * 1.5]
    return out


def _nearest(usable: list[GridPoint], lo: float, hi: float, sizes: int) -> list[int]:
    """Indices of the points nearest (log N) to ``sizes`` targets log-spaced in [lo, hi]."""
    log_n = np.log([p.candidate.n_params for p in usable])
    chosen: list[int] = []
    for target in np.linspace(math.log(lo), math.log(hi), sizes):
        order = np.argsort(np.abs(log_n - target), kind="stable")
        pick = next((int(i) for i in order if int(i) not in chosen), None)
        if pick is not None:
            chosen.append(pick)
    return sorted(chosen)


def _constrained(spec: StudySpec) -> bool:
    c = spec.constraints
    return any(v is not None for v in (c.max_params, c.max_flops_per_token, c.max_memory_gb))


def layout_problems(layouts: list[BudgetLayout]) -> list[str]:
    """One line per budget that cannot give an IsoFLOP curve (fewer than 3 sizes), with why."""
    out = []
    for lay in layouts:
        if len(lay.points) < 3:
            why = "; ".join(sorted({r for _, r in lay.dropped}))[:600] or \
                "the size rule has too few shapes near the optimum"
            out.append(f"scaling.budgets: C={lay.budget_flops:.4g} has {len(lay.points)} "
                       f"trainable size(s), an IsoFLOP curve needs 3 ({why})")
    return out


def layout(spec: StudySpec, *, corpus_train_tokens: int | None = None,
           device: str | None = None) -> list[BudgetLayout]:
    """Every budget laid out from the tokens-per-param prior (what ``sweep validate`` shows).

    With ``scaling.recentre`` the study re-centres each budget after the first from the
    earlier results as it runs, so its later budgets may differ from this layout.
    """
    cands = candidates(spec)
    return [layout_budget(spec, b, cands=cands, corpus_train_tokens=corpus_train_tokens,
                          device=device) for b in scaling_section(spec).budgets]


def grid_rows(spec: StudySpec, layouts: list[BudgetLayout], *, device: str = "auto",
              flops_per_s: float | None = None) -> list[dict[str, Any]]:
    """One row per grid point, for ``sweep validate``.

    Args:
        spec: A scaling study.
        layouts: `layout`'s budgets.
        device: The device whose training memory is estimated (`sweep.space.training_cost`).
        flops_per_s: Measured training FLOP/s on this device (None: no time estimate).

    Returns:
        Dicts keyed by the schema's names (``budget_flops``, ``n_params``, ``n_tokens``,
        ``tokens_per_param``, ``mem_estimate_bytes``: training, per micro-batch) plus ``shape``,
        ``branch_tokens`` (with ``scaling.branches``: tokens continued from the same shape's
        trunk at the previous budget, `sweep.train.branches`; else 0), ``train_flops`` (the
        FLOPs it trains itself: tokens less ``branch_tokens``, x training FLOPs per token) and
        ``est_seconds`` (``train_flops`` / ``flops_per_s``, or None).
    """
    rows = []
    trunks: dict[str, int] = {}  # shape label -> its trunk point so far (scaling.branches)
    for lay in layouts:
        for p in lay.points:
            model, train = configs(spec, p.candidate.shape, lay.budget_flops)
            mem = training_cost(model, train, device).memory.total
            reused = 0
            if scaling_section(spec).branches:
                b = resolve_budget(train, model)
                reused = trunks.get(p.candidate.shape.label, 0)
                trunks[p.candidate.shape.label] = wsd_stable_end(
                    required("total_tokens", b.total_tokens), b.step_tokens,
                    b.warmup_tokens or 0, train.decay_fraction)
            flops = (p.n_tokens - reused) * p.candidate.flops_per_token_train
            rows.append({METRIC_BUDGET_FLOPS: lay.budget_flops,
                         "shape": p.candidate.shape.label, METRIC_BRANCH_TOKENS: reused,
                         METRIC_TRAIN_FLOPS: flops,
                         METRIC_N_PARAMS: p.candidate.n_params, METRIC_N_TOKENS: p.n_tokens,
                         METRIC_TOKENS_PER_PARAM: p.tokens_per_param,
                         METRIC_MEM_ESTIMATE: mem,
                         "est_seconds": flops / flops_per_s if flops_per_s else None})
    return rows
