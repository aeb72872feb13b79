"""Ray Tune executor: a `Tuner` with `OptunaSearch` and a trial scheduler, trials in Ray actors.

The searched study's experiment is `sweep.executors.ray.search`'s plan, run by
`sweep.executors.ray.tuning.fit` (what every Tune run of a study shares: the trials held in
MLflow, the numbering, the callback, interrupts). GPUs per trial are requested only when the
cluster has GPUs; a fraction of one (``resources.gpus_per_trial: 0.25``) packs that many trials
on each GPU, each held to its share of the GPU's memory by the constraints
(`sweep.space.memory_limit`).
"""

from __future__ import annotations

import optuna

from sweep.executors.ray.search import search_plan
from sweep.executors.ray.tuning import fit
from sweep.study.progress import ProgressView
from sweep.study.trial import StudyContext

__all__ = ["run"]


def run(ctx: StudyContext, n_trials: int, view: ProgressView, *,
        address: str | None = None) -> optuna.Study | None:
    """Run the study's searched trials with Ray Tune until the study holds ``n_trials``.

    Args:
        ctx: The study context.
        n_trials: Trials the study should hold at the end; a resumed study runs the rest,
            numbered after the trials it holds. With ``ctx.points``, exactly those points run
            (``OptunaSearch``'s points_to_evaluate).
        view: Progress display, updated from Ray's trial events.
        address: Ray cluster address; default ``RAY_ADDRESS``, else a local Ray.

    Returns:
        ``OptunaSearch``'s Optuna study (for plots), or None when no trial ran.

    Raises:
        sweep.study.resume.StudyInterrupted: A signal stopped the study.
    """
    return fit(ctx, n_trials, view, search_plan, address=address)
