"""Run a scaling study: its IsoFLOP grid budget by budget, smallest first.

Each budget is laid out (`sweep.kinds.scaling.layout.layout_budget`) when its turn comes: from
the tokens-per-param prior for the first, and with ``scaling.recentre`` re-centred on the
optimum the earlier budgets' trained points predict (`sweep.kinds.scaling.layout.recentre`) for
the later ones.
Its points are handed to the executor as ``ctx.points`` (the executor runs exactly those,
queued in order), so both executors, the trial path and the MLflow layout are the ones of any
study. A resumed study skips the points whose trials already ended (any final state), and
re-centres from the same stored results, so it lays out the same grid again.

The grid as laid out, dropped shapes and their reasons included, goes to the parent run as
``scaling_grid.csv`` and is printed unless quiet, with the plan's warnings for each budget as
laid out (`sweep.kinds.scaling.plan_checks`: a re-centred optimum its sizes cannot bracket).
"""

from __future__ import annotations

import csv
import io
from typing import Any

from sweep.kinds.base import KindRun
from sweep.kinds.common import run_points
from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling.plan_checks import plan_warnings
from sweep.kinds.scaling.rules import scaling_section
from sweep.kinds.scaling.shapes import SCALING_POINT, candidates
from sweep.schema import (
    METRIC_BUDGET_FLOPS,
    METRIC_FINAL_VAL_LOSS,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    METRIC_TOKENS_PER_PARAM,
    SCALING_GRID_ARTIFACT,
    TrialState,
)

__all__ = ["grid_csv", "layout_notes", "plan_notes", "run_budgets", "say_layout"]


def _optimum(trials: list[dict[str, Any]], budget: float) -> float | None:
    """The optimum N of one budget's COMPLETE trials (`layout.curve_optimum`)."""
    done = [t["metrics"] for t in trials if t["state"] is TrialState.COMPLETE
            and t["metrics"].get(METRIC_BUDGET_FLOPS) == budget]
    return grid.curve_optimum([m.get(METRIC_N_PARAMS) for m in done],
                              [m.get(METRIC_FINAL_VAL_LOSS) for m in done]) if done else None


def grid_csv(layouts: list[grid.BudgetLayout]) -> str:
    """The layouts as CSV: one row per point or dropped shape (``dropped`` holds the reason)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([METRIC_BUDGET_FLOPS, "centre_n_params", "centre_source", "shape",
                     METRIC_N_PARAMS, METRIC_N_TOKENS, METRIC_TOKENS_PER_PARAM, "dropped"])
    for lay in layouts:
        head = [f"{lay.budget_flops:.6g}", f"{lay.centre_n_params:.6g}", lay.centre_source]
        for p in lay.points:
            writer.writerow([*head, p.candidate.shape.label, p.candidate.n_params, p.n_tokens,
                             f"{p.tokens_per_param:.4g}", ""])
        for label, reason in lay.dropped:
            writer.writerow([*head, label, "", "", "", reason])
    return out.getvalue()


def run_budgets(job: KindRun, corpus_train_tokens: int | None) -> Any:
    """Run every budget's points, smallest budget first, each laid out when its turn comes.

    Logs the grid as run (``scaling_grid.csv``) to the parent run and prints each budget's
    layout (``job.say``).

    Args:
        job: The kind's run.
        corpus_train_tokens: Tokens in the corpus's training split (the epoch limit).

    Returns:
        ``(study, layouts)``: the last Optuna study (or None) and each budget's layout as run.
    """
    ctx, say = job.ctx, job.say
    spec = ctx.spec
    section = scaling_section(spec)
    cands = candidates(spec)
    family = (cands[0].n_params, cands[-1].n_params)
    optima: list[tuple[float, float]] = []
    layouts: list[grid.BudgetLayout] = []
    study = None
    held = ctx.tracking.read_trials()
    for budget in section.budgets:
        centre, source = grid.next_centre(section.recentre, budget, optima)
        lay = grid.layout_budget(spec, budget, cands=cands, centre_n_params=centre,
                                 centre_source=source, corpus_train_tokens=corpus_train_tokens,
                                 device=ctx.device)
        layouts.append(lay)
        if say is not None:
            say_layout(lay, say, plan_warnings(spec, [lay], family))
        ran = run_points(job, ({SCALING_POINT: p.label} for p in lay.points), held)
        if ran is not None:
            study = ran
            held = ctx.tracking.read_trials()  # once per budget run: its optimum, the next
        optimum = _optimum(held, budget)
        if optimum is not None:
            optima.append((budget, optimum))
    ctx.tracking.log_parent_text(grid_csv(layouts), SCALING_GRID_ARTIFACT)
    return study, layouts


def say_layout(lay: grid.BudgetLayout, say: Any, warnings: list[str]) -> None:
    """Print one budget's layout: its centre, dropped shapes and the plan's warnings."""
    say(f"C={lay.budget_flops:.3g}: {len(lay.points)} sizes around N*={lay.centre_n_params:,.0f} "
        f"({lay.centre_source})")
    for label, reason in lay.dropped:
        say(f"  dropped {label}: {reason}")
    if len(lay.points) < 3:
        say(f"  warning: C={lay.budget_flops:.3g} has {len(lay.points)} sizes after "
            "re-centring; its IsoFLOP curve cannot be fitted")
    for line in warnings:
        say(f"  warning: {line}")


def layout_notes(layouts: list[grid.BudgetLayout]) -> list[str]:
    """One line per dropped shape and per budget short of 3 sizes, for the run's summary."""
    notes = []
    for lay in layouts:
        notes += [f"C={lay.budget_flops:.4g}: dropped {label}: {reason}"
                  for label, reason in lay.dropped]
        if len(lay.points) < 3:
            notes.append(f"C={lay.budget_flops:.4g}: {len(lay.points)} sizes; its IsoFLOP curve "
                         "cannot be fitted")
    return notes


def plan_notes(spec: Any, layouts: list[grid.BudgetLayout]) -> list[str]:
    """The plan's warnings for the budgets as run, each as ``warning: ...``.

    Sizes that cannot bracket a budget's (re-centred) optimum and trials of too few optimizer
    steps (`sweep.kinds.scaling.plan_checks`).
    """
    cands = candidates(spec)
    return [f"warning: {w}"
            for w in plan_warnings(spec, layouts, (cands[0].n_params, cands[-1].n_params))]
