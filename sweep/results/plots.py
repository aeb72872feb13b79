"""The plots a study's parent run keeps.

Val-loss curves (with the corpus's unigram baseline as a dashed line) and Optuna's history,
importance, slice and Pareto plots, drawn with matplotlib from the trials table.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping
from typing import Any

import pandas as pd

from sweep.plotting import line_collection, pyplot
from sweep.results.table import LEAD_COLUMNS
from sweep.schema import METRIC_BASELINE, METRIC_BEST_VAL_LOSS, TrialState

log = logging.getLogger(__name__)


def _val_loss_figure(frame: pd.DataFrame, histories: Mapping[str, list[tuple]],
                     baseline: float | None) -> Any:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    best = frame["run_id"].iloc[0] if len(frame) else None
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # The other trials' curves in one collection: a study of 1,000 trials draws one artist,
    # not 1,000 (each line artist costs its own layout and rendering).
    others: list[list[tuple]] = []
    for run_id, trial, state in zip(frame["run_id"], frame["trial"], frame["state"], strict=True):
        points = histories.get(run_id) or []
        if not points:
            continue
        if run_id == best and state == TrialState.COMPLETE:
            tokens, losses = zip(*points, strict=True)
            ax.plot(tokens, losses, lw=2.0, color=colours[0], label=f"trial {trial} (best)")
        else:
            others.append(list(points))
    if others:
        ax.add_collection(line_collection(
            others, linewidths=0.8, alpha=0.5,
            colors=[colours[(i + 1) % len(colours)] for i in range(len(others))]))
        ax.autoscale_view()
    if baseline is not None and math.isfinite(baseline):
        ax.axhline(baseline, color="0.3", ls="--", lw=1.0,
                   label=f"unigram baseline {baseline:.3f}")
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("val loss (nats/token)")
    ax.set_title("Validation loss of all trials")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return fig  # laid out with the others (`study_figures`)


def _study_from_frame(frame: pd.DataFrame) -> Any:
    """An in-memory Optuna study of the COMPLETE trials, for Optuna's plots (no sampling)."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    done = frame[(frame["state"] == TrialState.COMPLETE) & frame[METRIC_BEST_VAL_LOSS].notna()]
    params = [c for c in frame.columns if c not in LEAD_COLUMNS]
    distributions: dict[str, FloatDistribution | CategoricalDistribution] = {}
    for name in params:
        values = done[name].dropna()
        if values.astype(str).nunique() < 2:
            continue
        numeric = pd.to_numeric(values, errors="coerce")
        if numeric.notna().all() and not values.map(lambda v: isinstance(v, bool)).any():
            distributions[name] = FloatDistribution(float(numeric.min()), float(numeric.max()))
        else:
            distributions[name] = CategoricalDistribution(sorted(values.astype(str).unique()))
    study = optuna.create_study(direction="minimize")
    for _, row in done.iterrows():
        values = {}
        for name, dist in distributions.items():
            if pd.isna(row[name]):
                continue
            is_float = isinstance(dist, FloatDistribution)
            values[name] = float(row[name]) if is_float else str(row[name])
        study.add_trial(
            optuna.trial.create_trial(
                params=values,
                distributions={k: distributions[k] for k in values},
                value=float(row[METRIC_BEST_VAL_LOSS]),
            )
        )
    return study


def study_figures(
    frame: pd.DataFrame,
    histories: Mapping[str, list[tuple]],
    optuna_study: Any = None,
    objective_names: list[str] | None = None,
    baseline: float | None = None,
) -> dict[str, Any]:
    """Matplotlib figures of a study, by file stem; a plot that cannot be drawn is skipped.

    ``val_loss_curves`` (from the MLflow histories, `sweep.tracking.val_loss_histories`; the
    unigram baseline a dashed horizontal line), and Optuna's
    ``optimization_history``, ``param_importances`` and ``parallel_coordinate`` (both need >= 2
    complete trials) and, for a multi-objective study, ``pareto_front``
    (`optuna.visualization.matplotlib`). Drawn with the Agg backend unless pyplot is in use.

    Args:
        frame: `trials_frame` of the study.
        histories: ``run_id -> [(tokens, val_loss), ...]``.
        optuna_study: The executor's study; default: rebuilt from ``frame``.
        objective_names: Names of the objectives of a multi-objective study.
        baseline: The corpus's unigram baseline, nats per token; default
            ``frame.attrs["baseline_unigram_loss"]`` (`trials_frame`), no line when NaN or
            absent.
    """
    pyplot()  # the backend, chosen before Optuna's plots import pyplot
    import optuna
    from optuna.visualization import matplotlib as ovm

    figures: dict[str, Any] = {}
    study = optuna_study if optuna_study is not None else _study_from_frame(frame)
    multi = len(study.directions) > 1
    first = {"target": (lambda t: t.values[0]), "target_name": (objective_names or ["0"])[0]}
    kw = first if multi else {"target_name": METRIC_BEST_VAL_LOSS}
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    # (fewest complete trials, draw): below these counts Optuna draws empty or uniform plots.
    plots = {
        "val_loss_curves": (0, lambda: _val_loss_figure(
            frame, histories, frame.attrs.get(METRIC_BASELINE) if baseline is None else baseline)),
        "optimization_history": (1, lambda: ovm.plot_optimization_history(study, **kw)),
        "param_importances": (2, lambda: ovm.plot_param_importances(study, **kw)),
        "parallel_coordinate": (2, lambda: ovm.plot_parallel_coordinate(study, **kw)),
    }
    if multi:
        plots["pareto_front"] = (
            1,
            lambda: ovm.plot_pareto_front(study, target_names=objective_names),
        )
    for name, (fewest, draw) in plots.items():
        try:
            if len(complete) < fewest:
                raise ValueError(
                    f"needs >= {fewest} complete trials, the study has {len(complete)}"
                )
            with warnings.catch_warnings():
                # Optuna's experimental and small-sample notices are not the user's problem.
                warnings.simplefilter("ignore")
                drawn = draw()
            figure = getattr(drawn, "figure", drawn)
            figure.tight_layout()
            figures[name] = figure
        except Exception as exc:  # a plot is a convenience; never fail a study over one
            log.warning("plot %s skipped: %s: %s", name, type(exc).__name__, exc)
    return figures


def close_figures(figures: Mapping[str, Any]) -> None:
    """Release the figures of `study_figures`."""
    plt = pyplot()

    for figure in figures.values():
        plt.close(figure)
