"""Results of a study read back from MLflow as a pandas table, one row per trial.

Params under dotted columns, cost metrics, state, best and final val loss, the best loss over
the corpus's unigram baseline and in bits per byte: for scripted analyses.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd

from sweep import tracking
from sweep.errors import InputError
from sweep.folder import find_store, missing_store
from sweep.schema import (
    METRIC_BASELINE,
    METRIC_BEST_VAL_LOSS,
    METRIC_BUDGET_FLOPS,
    METRIC_FINAL_VAL_LOSS,
    METRIC_FLOPS_PER_TOKEN,
    METRIC_FLOPS_PER_TOKEN_DENSE,
    METRIC_FLOPS_PER_TOKEN_TRAIN,
    METRIC_MEM_ESTIMATE,
    METRIC_N_PARAMS,
    METRIC_N_PARAMS_NON_EMBEDDING,
    METRIC_N_TOKENS,
    METRIC_TOKENS,
    METRIC_TOKENS_PER_PARAM,
    METRIC_TOKENS_PER_S,
    METRIC_TRAIN_FLOPS,
    METRIC_VAL_BPB,
    METRIC_VAL_LOSS,
    METRIC_WALL_S,
    TrialState,
)
from sweep.store_files import sqlite_file

log = logging.getLogger(__name__)


#: ``best_val_loss / baseline_unigram_loss``: below 1 where a trial beat the best model that
#: ignores context.
LOSS_OVER_BASELINE = "loss_over_baseline"
#: ``best_val_loss / ln 2``, bits per byte, for trials on byte-level corpora (those that logged
#: ``val_bpb``): nats per token are nats per byte there.
BEST_VAL_BPB = "best_val_bpb"
#: What ``frame.attrs["baseline_unigram_loss"]`` is.
BASELINE_ABOUT = ("the unigram baseline: entropy of the val split's token frequencies in nats "
                  "per token, the loss of the best model that ignores context")

LEAD_COLUMNS = (
    "trial",
    "state",
    METRIC_BEST_VAL_LOSS,
    LOSS_OVER_BASELINE,
    BEST_VAL_BPB,
    METRIC_FINAL_VAL_LOSS,
    METRIC_TOKENS,
    METRIC_N_PARAMS,
    METRIC_N_PARAMS_NON_EMBEDDING,
    METRIC_FLOPS_PER_TOKEN,
    METRIC_FLOPS_PER_TOKEN_DENSE,
    METRIC_FLOPS_PER_TOKEN_TRAIN,
    METRIC_TRAIN_FLOPS,
    METRIC_MEM_ESTIMATE,
    METRIC_TOKENS_PER_S,
    METRIC_WALL_S,
    "fail_reason",
    "retry_of",
    "run_id",
)
#: A scaling study's trials add these (after `LEAD_COLUMNS`).
SCALING_COLUMNS = (METRIC_BUDGET_FLOPS, METRIC_N_TOKENS, METRIC_TOKENS_PER_PARAM)


class StudyNotFoundError(InputError, LookupError):
    """No study store or experiment matches the name or folder given."""


def _checked(db: Path, source: str) -> str:
    """``db``'s tracking URI once `sweep.tracking.stores.check_store` accepts it for reading."""
    from sweep.tracking.stores import check_store

    if not db.is_file():
        raise StudyNotFoundError(f"{source}: no store there ({db} does not exist)")
    return check_store(db, reading=True)


def resolve_study(study_or_dir: str | Path, tracking_uri: str | None = None) -> tuple[str, str]:
    """Find the tracking URI and study (experiment) name for a study name or output folder.

    Without ``tracking_uri``: ``study_or_dir`` is a folder holding ``mlflow.db``, the ``.db``
    file itself, or a study name whose store is ``./runs/<name>/mlflow.db``. With it,
    ``study_or_dir`` is the experiment name in that store, or the study's output folder
    (its name, or the store's only study).

    A SQLite store is checked first (`sweep.tracking.stores.check_store`): a file that is not
    an MLflow store, or whose schema this MLflow would migrate, is refused and left as it is;
    the study is then read through a read-only connection.

    Returns:
        ``(tracking_uri, study_name)``.

    Raises:
        StudyNotFoundError: Naming ``study_or_dir`` (and the studies the store holds).
        sweep.tracking.UnreachableStoreError: ``tracking_uri`` is a server that does not answer.
        sweep.tracking.stores.ForeignStoreError: The SQLite file is not an MLflow store.
        sweep.tracking.stores.StoreSchemaError: Its schema is not this MLflow's.
    """
    name = str(study_or_dir)
    if tracking_uri is None:
        db = find_store(study_or_dir)
        if db is None:
            raise StudyNotFoundError(missing_store(study_or_dir))
        tracking_uri = _checked(db, name)
        studies = tracking.list_studies(tracking_uri)
        for candidate in (name, db.resolve().parent.name):
            if candidate in studies:
                return tracking_uri, candidate
        if len(studies) == 1:
            return tracking_uri, studies[0]
        raise StudyNotFoundError(f"{db} holds studies {studies}; none is named {name!r}; "
                                 f"name one: --tracking-uri {tracking_uri} STUDY")
    tracking_uri = tracking.absolute_uri(tracking_uri)
    tracking.check_reachable(tracking_uri, "--tracking-uri")
    db = sqlite_file(tracking_uri)
    if db is not None:
        tracking_uri = _checked(db, "--tracking-uri")
    studies = tracking.list_studies(tracking_uri)
    for candidate in (name, Path(name).name):
        if candidate in studies:
            return tracking_uri, candidate
    if len(studies) == 1 and Path(name).is_dir():
        return tracking_uri, studies[0]
    raise StudyNotFoundError(f"no study {name!r} in {tracking_uri} (it holds {studies})")


def trials_frame(trials: list[dict[str, Any]], baseline: float | None = None) -> pd.DataFrame:
    """One row per trial from `sweep.tracking.read_trials` records.

    Columns: `LEAD_COLUMNS`, a scaling study's `SCALING_COLUMNS` (``budget_flops``,
    ``n_tokens``, ``tokens_per_param``), then the params (``model.*``, ``train.*``, sorted).
    Sorted by ``best_val_loss`` ascending with NaN (failed, diverged, infeasible) last, then
    trial number. ``final_val_loss`` is the runner's ``final_val_loss`` metric, else the last
    ``val_loss`` of a COMPLETE, PRUNED or RUNNING trial (NaN otherwise); ``tokens`` the tokens
    trained; ``retry_of`` the number of the ``INTERRUPTED`` trial a trial retries (None if
    none); ``loss_over_baseline`` ``best_val_loss / baseline`` (NaN without a finite
    ``baseline``); ``best_val_bpb`` ``best_val_loss / ln 2`` for a trial that logged ``val_bpb``
    (a byte-level corpus), else NaN.

    Args:
        trials: `sweep.tracking.read_trials` records.
        baseline: The corpus's unigram baseline, nats per token (`read_baseline`); kept in
            ``frame.attrs["baseline_unigram_loss"]`` (NaN when None).
    """
    baseline = math.nan if baseline is None else float(baseline)
    rows = []
    for trial in trials:
        metrics = trial["metrics"]
        row = {c: metrics.get(c, math.nan) for c in LEAD_COLUMNS}
        best = metrics.get(METRIC_BEST_VAL_LOSS, math.nan)
        row.update(
            trial=trial["trial"],
            state=trial["state"],
            fail_reason=trial["fail_reason"],
            retry_of=trial.get("retry_of"),
            run_id=trial["run_id"],
            final_val_loss=metrics.get(
                METRIC_FINAL_VAL_LOSS,
                metrics.get(METRIC_VAL_LOSS, math.nan) if TrialState(trial["state"]).trained
                else math.nan,
            ),
            **{LOSS_OVER_BASELINE: best / baseline if baseline > 0 else math.nan,
               BEST_VAL_BPB: best / math.log(2) if METRIC_VAL_BPB in metrics else math.nan},
        )
        if METRIC_BUDGET_FLOPS in metrics:  # a scaling study's trial
            row.update({name: metrics.get(name, math.nan) for name in SCALING_COLUMNS})
        row.update(trial["params"])
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(LEAD_COLUMNS))
    if rows:
        frame = pd.DataFrame(rows)
        scaling = [c for c in SCALING_COLUMNS if c in frame.columns]
        params = sorted(c for c in frame.columns if c not in LEAD_COLUMNS and c not in scaling)
        frame = frame[list(LEAD_COLUMNS) + scaling + params]
    frame = frame.sort_values([METRIC_BEST_VAL_LOSS, "trial"], na_position="last", kind="stable")
    frame = frame.reset_index(drop=True)
    frame.attrs[METRIC_BASELINE] = baseline
    return frame


def read_baseline(tracking_uri: str, parent_run_id: str) -> float:
    """The unigram baseline the study's parent run logged (nats per token), NaN if none."""
    metrics = tracking.read_parent_metrics(tracking_uri, parent_run_id)
    return float(metrics.get(METRIC_BASELINE, math.nan))


def load_results(study_or_dir: str | Path, tracking_uri: str | None = None) -> pd.DataFrame:
    """Trials of a study as a DataFrame (see `trials_frame`), best first.

    ``frame.attrs`` holds ``tracking_uri``, ``study``, ``experiment_id``, ``parent_run_id``,
    ``baseline_unigram_loss`` (the corpus's unigram baseline, nats per token; NaN if the study
    logged none), ``baseline_about`` (`BASELINE_ABOUT`, what that number is) and
    ``byte_level`` (whether the trials logged ``val_bpb``, so ``best_val_bpb`` is filled) and
    ``searched`` (the param columns the study searched, as its spec names them: `searched`).

    Raises:
        StudyNotFoundError: If no such study exists (see `resolve_study`).
    """
    trials, attrs = read_study(study_or_dir, tracking_uri)
    frame = trials_frame(trials, baseline=attrs[METRIC_BASELINE])
    frame.attrs.update(attrs, baseline_about=BASELINE_ABOUT,
                       byte_level=any(METRIC_VAL_BPB in t["metrics"] for t in trials))
    frame.attrs["searched"] = searched(frame, tracking.read_searched(attrs["tracking_uri"],
                                                                     attrs["parent_run_id"]))
    return frame


def searched(frame: pd.DataFrame, names: list[str] | None) -> list[str]:
    """The param columns of ``frame`` a study searched.

    Args:
        frame: `trials_frame`'s table.
        names: The study's searched params (tag ``sweep.searched``); None for a study from
            before the tag, whose ``model.*`` and ``train.*`` columns that vary are taken.
    """
    if names is not None:
        return [name for name in names if name in frame.columns]
    return [c for c in frame.columns if c.startswith(("model.", "train."))
            and frame[c].astype(str).nunique() > 1]


def read_study(study_or_dir: str | Path,
               tracking_uri: str | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A study's trial records (`sweep.tracking.read_trials`) and where they come from.

    Returns:
        ``(trials, attrs)``; ``attrs`` holds ``tracking_uri``, ``study``, ``experiment_id``,
        ``parent_run_id``, ``baseline_unigram_loss`` (`read_baseline`) and ``simulated`` (the
        law of a simulated study, `sweep.tracking.read_simulated`; None for a trained one).

    Raises:
        StudyNotFoundError: No such study (see `resolve_study`), or its experiment has no
            parent run.
    """
    tracking_uri, study = resolve_study(study_or_dir, tracking_uri)
    found = tracking.find_study(tracking_uri, study)
    if found is None:
        raise StudyNotFoundError(f"study {study!r} in {tracking.shown_uri(tracking_uri)} has no "
                                 "parent run")
    experiment_id, parent_run_id = found
    trials = tracking.read_trials(tracking_uri, experiment_id, parent_run_id)
    return trials, {"tracking_uri": tracking_uri, "study": study,
                    "experiment_id": experiment_id, "parent_run_id": parent_run_id,
                    METRIC_BASELINE: read_baseline(tracking_uri, parent_run_id),
                    "simulated": tracking.read_simulated(tracking_uri, parent_run_id)}
