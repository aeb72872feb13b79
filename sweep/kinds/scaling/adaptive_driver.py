"""Run an adaptive scaling study (``scaling.adaptive``): round after round, placed by the fits.

The study trains its first round (`sweep.kinds.scaling.adaptive.first_round`), then after each
round refits the law on the finished trials and places the next round with the code the
simulation uses (`sweep.kinds.scaling.adaptive.after_round`), lays it out
(`sweep.kinds.scaling.layout.layout_budget`, centred on the fit's N_opt) and trains it, until
the interval at the target is reached or the allowance is spent. Each round's points go to the
executor as ``ctx.points`` (their three axes, `sweep.kinds.scaling.shapes.adaptive_point`; a
replicate of a point trains with the next seed).

Resume: the rounds are derived from the finished trials alone. Each round's fit reads the
points in the order they were laid out, and its bootstrap is seeded from ``search.seed`` and
the number of budgets laid out (`round_seed`), so a resumed study places the same rounds,
skips the points whose trials ended and trains the rest (`sweep.kinds.common.run_points`). The
first round lays out two budgets; the rounds after it one each.

Records: tag ``sweep.adaptive.why`` on each trial run (its round, budget, centre and why);
tag ``sweep.adaptive.stop`` (why the study stopped) and metric ``adaptive_spent_flops`` (the
training FLOPs its rounds laid out, tokens x the cost model's FLOPs per token) on the parent
run; ``scaling_grid.csv`` with each round's centre and reason.
"""

from __future__ import annotations

import math
from typing import Any

from sweep.kinds.base import KindRun
from sweep.kinds.common import run_points
from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling.adaptive import (
    Refit,
    after_round,
    first_round,
    round_cost,
    settings_of,
    why_stopped,
)
from sweep.kinds.scaling.driver import grid_csv, say_layout
from sweep.kinds.scaling.rules import scaling_section
from sweep.kinds.scaling.shapes import adaptive_label, adaptive_point, candidates
from sweep.schema import (
    METRIC_ADAPTIVE_SPENT_FLOPS,
    METRIC_FINAL_VAL_LOSS,
    SCALING_GRID_ARTIFACT,
    TAG_ADAPTIVE_STOP,
    TAG_ADAPTIVE_WHY,
    TrialState,
)
from sweep.spec import StudySpec

__all__ = ["first_layouts", "round_seed", "run_adaptive"]

#: VPNLS fits five parameters: the first refit waits for this many finished points.
MIN_FIT_POINTS = 6


def round_seed(spec: StudySpec, n_layout: int) -> int:
    """The bootstrap seed of the refit after the ``n_layout``-th budget laid out (1-based)."""
    return spec.search.seed * 1000 + n_layout


def first_layouts(spec: StudySpec, *, corpus_train_tokens: int | None = None,
                  device: str | None = None) -> list[grid.BudgetLayout]:
    """The first round as the prior lays it out (``sweep validate``, the progress total)."""
    settings = settings_of(spec)
    cands = candidates(spec)
    return [grid.layout_budget(spec, budget, cands=cands, corpus_train_tokens=corpus_train_tokens,
                               device=device, span=span, sizes=settings.sizes)
            for budget, _, span, _ in first_round(spec, settings)]


def _finished(job: KindRun, held: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each point's finished trial by label (a COMPLETE one before any other)."""
    spec = job.ctx.spec
    out: dict[str, dict[str, Any]] = {}
    for t in held:
        if t["state"].finished:
            key = str(spec.kind.point_key(spec, t["params"]))
            if key not in out or t["state"] is TrialState.COMPLETE:
                out[key] = t
    return out


def run_adaptive(job: KindRun, corpus_train_tokens: int | None) -> tuple[Any, list, str]:
    """Run the rounds until `next_round` stops (module docstring).

    Args:
        job: The kind's run.
        corpus_train_tokens: Tokens in the corpus's training split (the epoch limit).

    Returns:
        ``(study, layouts, stop)``: the last Optuna study (or None), each round's layout as
        run, and why the study stopped (one line, also tag ``sweep.adaptive.stop``).
    """
    ctx, say, spec = job.ctx, job.say, job.ctx.spec
    section, settings, cands = scaling_section(spec), settings_of(spec), candidates(spec)
    queue = first_round(spec, settings)
    rows: list[tuple[float, float, float, float]] = []
    optima: list[tuple[float, float]] = []
    layouts: list[grid.BudgetLayout] = []
    spent, fit, stop, study = 0.0, None, "", None
    held = ctx.tracking.read_trials()
    while queue:
        budget, centre, span, why = queue.pop(0)
        source = why
        if centre is None:
            centre, recentred = grid.next_centre(section.recentre, budget, optima)
            source = f"{why}; {recentred}" if recentred else why
        lay = grid.layout_budget(spec, budget, cands=cands, centre_n_params=centre,
                                 centre_source=source, corpus_train_tokens=corpus_train_tokens,
                                 device=ctx.device, span=span, sizes=settings.sizes)
        if not lay.points or spent + round_cost(lay) > settings.allowance_flops:
            stop = why_stopped(settings, fit, spent) if lay.points else \
                f"no trainable sizes at C={budget:.4g}"
            break
        spent += round_cost(lay)
        replicate = sum(1 for earlier in layouts if earlier.budget_flops == lay.budget_flops)
        layouts.append(lay)
        if job.view is not None:  # the progress total grows round by round
            job.view.n_trials = max(job.view.n_trials, sum(len(x.points) for x in layouts))
        n_round = max(1, len(layouts) - 1)  # the first round lays out two budgets
        if say is not None:
            say(f"round {n_round}: {why}")
            say_layout(lay, say, [])
        points = [adaptive_point(budget, p.candidate.shape, replicate) for p in lay.points]
        ran = run_points(job, points, held)
        if ran is not None:
            study, held = ran, ctx.tracking.read_trials()
        at = _record_round(job, held, lay, points, f"round {n_round}: C={budget:.4g}, "
                           f"N*={lay.centre_n_params:.4g}: {why}")
        rows += [(budget, n, d, y) for n, d, y in at]
        optimum = grid.curve_optimum([n for n, _, _ in at], [y for _, _, y in at])
        if optimum is not None:
            optima.append((budget, optimum))
        if queue or len(rows) < MIN_FIT_POINTS:
            continue
        fit, step = after_round(settings, rows, spent, span, round_seed(spec, len(layouts)))
        if step is not None:
            queue.append(step)
    stop = stop or _stopped(settings, fit, spent, len(rows))
    _record_study(job, layouts, stop, spent)
    return study, layouts, stop


def _stopped(settings: Any, fit: Refit | None, spent: float, n_rows: int) -> str:
    if fit is None:
        return (f"too few finished points to fit: {n_rows} (VPNLS needs {MIN_FIT_POINTS}); "
                f"{spent:.3g} FLOPs trained")
    return why_stopped(settings, fit, spent)


def _record_round(job: KindRun, held: list[dict[str, Any]], lay: grid.BudgetLayout,
                  points: list[dict[str, Any]], why: str) -> list[tuple[float, float, float]]:
    """Tag the round's trials with ``why``; its finished points as ``(N, D, final loss)``."""
    done = _finished(job, held)
    tags, at = {}, []
    for p, point in zip(lay.points, points, strict=True):
        trial = done.get(str(adaptive_label(point)))
        if trial is None:
            continue
        tags[trial["run_id"]] = {TAG_ADAPTIVE_WHY: why}
        loss = trial["metrics"].get(METRIC_FINAL_VAL_LOSS)
        if trial["state"] is TrialState.COMPLETE and loss is not None and math.isfinite(loss):
            at.append((float(p.candidate.n_params), float(p.n_tokens), float(loss)))
    job.ctx.tracking.set_trial_tags(tags)
    return at


def _record_study(job: KindRun, layouts: list[grid.BudgetLayout], stop: str,
                  spent: float) -> None:
    tracking = job.ctx.tracking
    tracking.set_parent_tags({TAG_ADAPTIVE_STOP: stop})
    tracking.log_parent_metrics({METRIC_ADAPTIVE_SPENT_FLOPS: spent})
    tracking.log_parent_text(grid_csv(layouts), SCALING_GRID_ARTIFACT)
    if job.say is not None:
        job.say(f"stopped: {stop}; {max(1, len(layouts) - 1)} rounds ({len(layouts)} budgets "
                f"laid out), {spent:.3g} training FLOPs")
