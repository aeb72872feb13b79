"""Run a scaling study: its IsoFLOP grid budget by budget, smallest first.

Each budget is laid out (`sweep.space.grid.layout_budget`) when its turn comes: from the
tokens-per-param prior for the first, and with ``scaling.recentre`` re-centred on the optimum
the earlier budgets' trained points predict (`sweep.space.grid.recentre`) for the later ones.
Its points are handed to the executor as ``ctx.points`` (the executor runs exactly those,
queued in order), so both executors, the trial path and the MLflow layout are the ones of any
study. A resumed study skips the points whose trials already ended (any final state), and
re-centres from the same stored results, so it lays out the same grid again.

The grid as laid out, dropped shapes and their reasons included, goes to the parent run as
``scaling_grid.csv`` and is printed unless quiet.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from typing import Any

from sweep.schema import (
    METRIC_BUDGET_FLOPS,
    METRIC_FINAL_VAL_LOSS,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    METRIC_TOKENS_PER_PARAM,
    SCALING_GRID_ARTIFACT,
    TrialState,
)
from sweep.space import grid
from sweep.study.trial import StudyContext
from sweep.tracking import read_trials

__all__ = ["grid_csv", "layout_notes", "run_scaling"]


def _held(ctx: StudyContext) -> list[dict[str, Any]]:
    t = ctx.tracking
    return read_trials(t.tracking_uri, t.experiment_id, t.parent_run_id)


def _optimum(trials: list[dict[str, Any]], budget: float) -> float | None:
    """The optimum N of one budget's COMPLETE trials (`sweep.space.grid.curve_optimum`)."""
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


def run_scaling(executor: Any, ctx: StudyContext, view: Any, *, address: str | None,
                corpus_train_tokens: int, client: Any = None, say: Any = None) -> Any:
    """Run every budget's points with ``executor``.

    Args:
        executor: The study's executor (`sweep.executors.Executor`).
        ctx: The study context.
        view: The progress view.
        address: Ray address for the ``ray`` executor.
        corpus_train_tokens: Tokens in the corpus's training split (the epoch limit).
        client: An ``MlflowClient`` to log ``scaling_grid.csv`` to the parent run (None: not
            logged).
        say: A callable printing one line (dropped shapes, re-centring); None: silent.

    Returns:
        ``(study, layouts)``: the last Optuna study (or None) and each budget's layout as run.
    """
    spec = ctx.spec
    cands = grid.candidates(spec)
    optima: list[tuple[float, float]] = []
    layouts: list[grid.BudgetLayout] = []
    study = None
    held = _held(ctx)
    for budget in spec.scaling.budgets:
        centre = source = None
        if spec.scaling.recentre and optima:
            centre = grid.recentre(budget, optima)
            source = (f"re-centred on the optimum of {len(optima)} earlier budget(s)")
        lay = grid.layout_budget(spec, budget, cands=cands, centre_n_params=centre,
                                 centre_source=source, corpus_train_tokens=corpus_train_tokens,
                                 device=ctx.device)
        layouts.append(lay)
        if say is not None:
            say(f"C={budget:.3g}: {len(lay.points)} sizes around N*={lay.centre_n_params:,.0f} "
                f"({lay.centre_source})")
            for label, reason in lay.dropped:
                say(f"  dropped {label}: {reason}")
            if len(lay.points) < 3:
                say(f"  warning: C={budget:.3g} has {len(lay.points)} sizes after re-centring; "
                    "its IsoFLOP curve cannot be fitted")
        done = {str(t["params"].get(grid.SCALING_POINT)) for t in held if t["state"].finished}
        todo = [p for p in lay.points if p.label not in done]
        if todo:
            points = tuple({grid.SCALING_POINT: p.label} for p in todo)
            study = executor.run(dataclasses.replace(ctx, points=points), len(points), view,
                                 address=address) or study
            held = _held(ctx)  # read once per budget run, for its optimum and the next budget
        optimum = _optimum(held, budget)
        if optimum is not None:
            optima.append((budget, optimum))
    if client is not None:
        client.log_text(ctx.tracking.parent_run_id, grid_csv(layouts), SCALING_GRID_ARTIFACT)
    return study, layouts


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
