"""The end of a study: its trials summarised into the parent run, with the table and plots.

Reads the trial runs back (`sweep.tracking.read_trials`), draws the trials table and the plots
(`sweep.results`), and hands them to `sweep.tracking.StudyTracker.finish`, which logs them and
ends the parent run. Kept here, above both, so that tracking never imports results.
"""

from __future__ import annotations

from typing import Any

from sweep import results
from sweep.tracking import StudyTracker, read_trials, val_loss_histories

__all__ = ["finish_study"]


def finish_study(tracker: StudyTracker, optuna_study: Any = None, *,
                 objective_names: list[str] | None = None,
                 interrupted: str | None = None,
                 data: dict[str, Any] | None = None) -> dict[str, Any]:
    """Summarise the study's trials into its parent run and end it.

    Logs what `StudyTracker.finish` logs, plus ``trials.csv`` (`sweep.results.trials_frame`,
    with the loss over the unigram baseline the parent run logged) and ``plots/*.png``
    (`sweep.results.study_figures`, the baseline dashed on the val-loss curves; a plot that
    fails is logged and skipped).

    Args:
        tracker: The study's parent run.
        optuna_study: The executor's Optuna study, for Optuna's plots; without it they are
            drawn from an in-memory study rebuilt from the trial runs.
        objective_names: Names of the objectives of a multi-objective study.
        interrupted: Why the study stopped early (`StudyTracker.finish`); no plots are drawn
            then, so that it stops within seconds.
        data: The spec's ``data`` section, for ``best_config.yaml`` (`StudyTracker.finish`).

    Returns:
        `StudyTracker.finish`'s summary: best val loss, best trial and run, counts, state.
    """
    context = tracker.context
    trials = read_trials(context.tracking_uri, context.experiment_id, context.parent_run_id)
    frame = results.trials_frame(
        trials, baseline=results.read_baseline(context.tracking_uri, context.parent_run_id))
    histories = val_loss_histories(context.tracking_uri, [t["run_id"] for t in trials],
                                   context.parent_run_id)
    figures = {} if interrupted is not None else results.study_figures(
        frame, histories, optuna_study, objective_names)
    try:
        return tracker.finish(trials, trials_csv=frame.to_csv(index=False), figures=figures,
                              interrupted=interrupted, data=data)
    finally:
        results.close_figures(figures)
