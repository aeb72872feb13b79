"""Run a transfer study: every point of its width x learning-rate grid, smallest width first.

The points (`sweep.space.transfer.points`) go to the executor as ``ctx.points``, which queues
and runs exactly those, so both the trial path and the MLflow layout are the ones of any study.
A resumed study skips the points whose trials already ended (any final state: a diverged point
is a result, the learning rate was too high), matched by `sweep.space.transfer.point_key`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sweep.space import transfer
from sweep.study.trial import StudyContext
from sweep.tracking import read_trials

__all__ = ["run_transfer"]


def run_transfer(executor: Any, ctx: StudyContext, view: Any, *, address: str | None = None,
                 say: Any = None) -> Any:
    """Run the grid points not yet trained with ``executor``.

    Args:
        executor: The study's executor (`sweep.executors.Executor`).
        ctx: The study context (``ctx.spec.transfer`` set).
        view: The progress view.
        address: Ray address (unused by the optuna executor, the one a transfer study takes).
        say: A callable printing one line (the grid's size); None: silent.

    Returns:
        The Optuna study (or None when every point was already trained).
    """
    spec = ctx.spec
    t = ctx.tracking
    held = read_trials(t.tracking_uri, t.experiment_id, t.parent_run_id)
    done = {transfer.point_key(spec, trial["params"]) for trial in held if trial["state"].finished}
    every = transfer.points(spec)
    todo = tuple(p for p in every if transfer.point_key(spec, p) not in done)
    if say is not None:
        say(f"transfer grid: {len(spec.transfer.widths)} widths x "
            f"{len(every) // len(spec.transfer.widths)} points each = {len(every)} trials"
            + (f", {len(every) - len(todo)} already trained" if len(todo) < len(every) else ""))
    if not todo:
        return None
    return executor.run(dataclasses.replace(ctx, points=todo), len(todo), view,
                        address=address)
