"""A scaling study's trials as the points the fits take: one row per trained trial.

`load_runs` reads a study back from MLflow (final losses, for approaches 2 and 3) and
`load_curves` every evaluation of the trained trials (for approach 1, the lower envelope);
`sweep.scaling.points_csv` reads a plain table of points into the same frame. Rows that cannot
enter a fit (failed, diverged, infeasible, pruned or interrupted trials, non-finite values) are
dropped and counted in ``frame.attrs["excluded"]``, never silently.

MLflow and the results table are imported inside the functions that read a store, so
``import sweep.scaling`` stays light.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sweep.errors import InputError
from sweep.schema import (
    METRIC_BUDGET_FLOPS,
    METRIC_FINAL_VAL_LOSS,
    METRIC_FLOPS_PER_TOKEN_TRAIN,
    METRIC_N_PARAMS,
    METRIC_N_PARAMS_NON_EMBEDDING,
    METRIC_N_TOKENS,
    METRIC_TOKENS,
    METRIC_TRAIN_FLOPS,
    METRIC_VAL_LOSS,
    TrialState,
)

__all__ = ["COUNTS", "LOSS", "NEEDED", "N_PARAMS_CONVENTIONS", "POINT_COLUMNS", "PointsError",
           "column", "drop_unusable", "load_curves", "load_runs", "load_study"]

#: The fitted loss column: a trial's final validation loss, nats/token.
LOSS = "loss"
#: Parameter-count conventions by name, each the metric `n_params` is taken from.
N_PARAMS_CONVENTIONS = {"total": METRIC_N_PARAMS, "non-embedding": METRIC_N_PARAMS_NON_EMBEDDING}
#: The columns every points frame has, in this order (then the config columns).
POINT_COLUMNS = ("trial", "run_id", "state", METRIC_N_PARAMS, METRIC_N_PARAMS_NON_EMBEDDING,
                 METRIC_N_TOKENS, METRIC_TRAIN_FLOPS, METRIC_BUDGET_FLOPS, LOSS)
# The param holding a trial's FLOP budget when no budget metric was logged.
_BUDGET_PARAM = "train.flops"
#: Columns a fit needs finite, and which of them must be > 0 (the counts).
NEEDED = (LOSS, METRIC_N_PARAMS, METRIC_N_TOKENS)
COUNTS = (METRIC_N_PARAMS, METRIC_N_TOKENS)


class PointsError(InputError, ValueError):
    """A table of points that cannot be fitted: a missing column or no usable row."""


def column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """Column ``name`` of a points or curves frame as floats, nan where a value is no number."""
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _param_metric(convention: str) -> str:
    try:
        return N_PARAMS_CONVENTIONS[convention]
    except KeyError:
        raise ValueError(f"n_params={convention!r}: choose one of "
                         f"{', '.join(N_PARAMS_CONVENTIONS)}") from None


def drop_unusable(frame: pd.DataFrame, columns: tuple[str, ...], positive: tuple[str, ...],
                   excluded: Counter) -> pd.DataFrame:
    """Rows whose ``columns`` are finite (and > 0 for ``positive``); the others counted.

    A dropped row is counted once, as ``non-finite <column>`` or ``non-positive <column>`` of
    the first column that fails.
    """
    keep = pd.Series(True, index=frame.index)
    for column in columns:
        values = pd.to_numeric(frame[column], errors="coerce")
        checks = [(f"non-finite {column}", np.isfinite(values))]
        if column in positive:
            checks.append((f"non-positive {column}", values > 0))
        for label, ok in checks:
            bad = keep & ~ok
            if bad.any():
                excluded[label] += int(bad.sum())
            keep &= ok
    return frame[keep].reset_index(drop=True)


def _row(trial: dict, count_metric: str) -> dict[str, Any]:
    metrics, params = trial["metrics"], trial["params"]
    tokens = _number(metrics.get(METRIC_TOKENS))
    if not math.isfinite(tokens):
        tokens = _number(metrics.get(METRIC_N_TOKENS))
    train_flops = _number(metrics.get(METRIC_TRAIN_FLOPS))
    if not math.isfinite(train_flops):
        train_flops = tokens * _number(metrics.get(METRIC_FLOPS_PER_TOKEN_TRAIN))
    budget = _number(metrics.get(METRIC_BUDGET_FLOPS, params.get(_BUDGET_PARAM)))
    row = {
        "trial": trial["trial"],
        "run_id": trial["run_id"],
        "state": str(trial["state"]),
        METRIC_N_PARAMS: _number(metrics.get(count_metric)),
        METRIC_N_PARAMS_NON_EMBEDDING: _number(metrics.get(METRIC_N_PARAMS_NON_EMBEDDING)),
        METRIC_N_TOKENS: tokens,
        METRIC_TRAIN_FLOPS: train_flops,
        METRIC_BUDGET_FLOPS: budget,
        LOSS: _number(metrics.get(METRIC_FINAL_VAL_LOSS)),
    }
    row.update(params)
    return row


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(POINT_COLUMNS))
    if rows:
        frame = pd.DataFrame(rows)
        config = sorted(c for c in frame.columns if c not in POINT_COLUMNS)
        frame = frame[list(POINT_COLUMNS) + config]
    return frame.sort_values("trial", kind="stable").reset_index(drop=True)


def load_runs(study_or_store: str | Path, *, tracking_uri: str | None = None,
              n_params: str = "total") -> pd.DataFrame:
    """The trials of a study that trained to the end, one row each, as fit points.

    Only ``COMPLETE`` trials are kept: failed, diverged and infeasible ones have no final loss,
    and pruned, interrupted or still-running ones stopped before their budget, so their last
    loss would sit above the law. A kept trial without a finite final loss, parameter count or
    token count is dropped too. Every dropped row is counted in ``frame.attrs["excluded"]``,
    keyed by its state or by ``non-finite <column>``, e.g. ``{"FAILED": 1, "non-finite loss":
    2}``.

    The parameter count is a named convention because the two founding papers differ:
    Hoffmann et al. 2022 (Chinchilla) count all parameters, Kaplan et al. 2020 leave out the
    embeddings, and Pearce & Song 2024 ("Reconciling Kaplan and Chinchilla scaling laws")
    show that the non-embedding count at small scale is what moves Kaplan's exponents away
    from Chinchilla's. The default is ``"total"``, Chinchilla's, which the C = 6ND allocation
    of approaches 2 and 3 assumes.

    Args:
        study_or_store: A study name (``./runs/<name>``), its output folder or its ``mlflow.db``
            (see `sweep.results.resolve_study`); with ``tracking_uri``, the experiment name.
        tracking_uri: An MLflow tracking URI (a server) to read from.
        n_params: ``"total"`` or ``"non-embedding"`` (`N_PARAMS_CONVENTIONS`): which count
            the ``n_params`` column holds.

    Returns:
        Columns `POINT_COLUMNS`, then the trial's params (``model.d_model``, ``train.flops``,
        ``scaling.point``, ... decoded), sorted by trial number. ``n_params`` is the chosen
        count and ``n_params_non_embedding`` always the non-embedding one (parameters);
        ``n_tokens`` the tokens trained (the ``tokens`` total, else the planned
        ``n_tokens``); ``train_flops`` the training FLOPs logged (else tokens x
        ``flops_per_token_train``); ``budget_flops`` the trial's FLOP budget (the
        ``budget_flops`` metric, else the ``train.flops`` param, else NaN: a study that is
        not a scaling study still loads); ``loss`` the final validation loss, nats/token.
        ``frame.attrs`` holds ``tracking_uri``, ``study``, ``experiment_id``,
        ``parent_run_id``, ``n_trials`` (all trials read), ``excluded`` and
        ``n_params_convention``.

    Raises:
        ValueError: An unknown ``n_params`` convention.
        sweep.results.StudyNotFoundError: No such study.
        sweep.tracking.UnreachableStoreError: ``tracking_uri`` is a server that does not answer.
    """
    count_metric = _param_metric(n_params)
    from sweep.results.table import read_study  # MLflow only when a study is read

    trials, attrs = read_study(study_or_store, tracking_uri)
    return _points(trials, attrs, count_metric, n_params)


def _points(trials: list[dict], attrs: dict, count_metric: str, n_params: str) -> pd.DataFrame:
    excluded: Counter = Counter()
    rows = []
    for trial in trials:
        if trial["state"] != TrialState.COMPLETE:
            excluded[str(trial["state"])] += 1
            continue
        rows.append(_row(trial, count_metric))
    frame = drop_unusable(_frame(rows), NEEDED, COUNTS, excluded)
    frame.attrs.update(attrs, n_trials=len(trials), excluded=dict(excluded),
                       n_params_convention=n_params)
    return frame


def load_curves(study_or_store: str | Path, *, tracking_uri: str | None = None,
                n_params: str = "total",
                states: tuple[TrialState, ...] = (TrialState.COMPLETE, TrialState.PRUNED),
                ) -> pd.DataFrame:
    """Every evaluation of the trained trials: the training curves approach 1 takes.

    Hoffmann et al. 2022, section 3.1 (approach 1) take, at each FLOP count, the lowest loss
    over all training curves. A pruned trial's curve is as valid as a complete one's up to
    where it stopped, so both are kept by default; diverged trials are not (their curve ends
    in instability). A warmup-stable-decay run (``train.schedule: wsd``) is a point of the
    envelope only where it has cooled down, at its end (Hagele et al. 2024: its stable-phase
    losses lie above a run decayed there), so only a complete WSD trial's final evaluation is
    kept (the others counted as ``wsd stable phase`` in ``excluded``).

    Args:
        study_or_store: As `load_runs`.
        tracking_uri: As `load_runs`.
        n_params: As `load_runs`.
        states: The trial states whose curves are kept.

    Returns:
        One row per evaluation: ``run_id``, ``trial``, ``n_params`` (the chosen count,
        parameters), ``tokens`` (tokens seen), ``flops`` (tokens x ``flops_per_token_train``,
        the cost model's training FLOPs per token), ``val_loss`` (nats/token); sorted by trial
        then tokens; ``flops`` is NaN for a trial without ``flops_per_token_train``.
        ``frame.attrs`` as `load_runs` (``excluded`` counts trials by state and evaluation
        points by ``non-finite <column>``).

    Raises:
        As `load_runs`.
    """
    count_metric = _param_metric(n_params)
    from sweep.results.table import read_study  # MLflow only when a study is read

    trials, attrs = read_study(study_or_store, tracking_uri)
    return _curves(trials, attrs, count_metric, n_params, states)


def _curves(trials: list[dict], attrs: dict, count_metric: str, n_params: str,
            states: tuple[TrialState, ...]) -> pd.DataFrame:
    from sweep.tracking import val_loss_histories

    excluded: Counter = Counter()
    kept = []
    for trial in trials:
        if trial["state"] in states:
            kept.append(trial)
        else:
            excluded[str(trial["state"])] += 1
    histories = val_loss_histories(attrs["tracking_uri"], [t["run_id"] for t in kept])
    rows = []
    for trial in kept:
        n = _number(trial["metrics"].get(count_metric))
        per_token = _number(trial["metrics"].get(METRIC_FLOPS_PER_TOKEN_TRAIN))
        curve = histories[trial["run_id"]]
        if trial["params"].get("train.schedule") == "wsd":
            end = trial["metrics"].get(METRIC_TOKENS) if trial["state"] is TrialState.COMPLETE \
                else None
            cooled = [(tokens, loss) for tokens, loss in curve if tokens == end]
            excluded["wsd stable phase"] += len(curve) - len(cooled)
            curve = cooled
        rows += [{"run_id": trial["run_id"], "trial": trial["trial"], METRIC_N_PARAMS: n,
                  METRIC_TOKENS: tokens, "flops": tokens * per_token, METRIC_VAL_LOSS: loss}
                 for tokens, loss in curve]
    columns = ["run_id", "trial", METRIC_N_PARAMS, METRIC_TOKENS, "flops", METRIC_VAL_LOSS]
    frame = pd.DataFrame(rows, columns=columns)
    frame = frame.sort_values(["trial", METRIC_TOKENS], kind="stable")
    frame = drop_unusable(frame, (METRIC_VAL_LOSS, METRIC_N_PARAMS, METRIC_TOKENS),
                           (METRIC_N_PARAMS, METRIC_TOKENS), excluded)
    frame.attrs.update(attrs, n_trials=len(trials), excluded=dict(excluded),
                       n_params_convention=n_params)
    return frame


def load_study(study_or_store: str | Path, *, tracking_uri: str | None = None,
               n_params: str = "total", curves: bool = True,
               ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """`load_runs` and `load_curves` (default states) from one read of the study's runs.

    Args:
        study_or_store: As `load_runs`.
        tracking_uri: As `load_runs`.
        n_params: As `load_runs`.
        curves: Whether to read the curves (every trained trial's metric history) too.

    Returns:
        ``(points, curves)``; ``curves`` is None when not asked for.

    Raises:
        As `load_runs`.
    """
    count_metric = _param_metric(n_params)
    from sweep.results.table import read_study  # MLflow only when a study is read

    trials, attrs = read_study(study_or_store, tracking_uri)
    points = _points(trials, attrs, count_metric, n_params)
    if not curves:
        return points, None
    return points, _curves(trials, attrs, count_metric, n_params,
                           (TrialState.COMPLETE, TrialState.PRUNED))
