"""Results of a study read back from MLflow: a pandas table, the study's plots, the MLflow UI.

`load_results` gives one row per trial (params under dotted columns, cost metrics, state, best
and final val loss) for scripted analyses; `study_figures` draws the plots the parent run keeps;
`start_ui` serves a study's store with ``mlflow server`` on 127.0.0.1. The MLflow schema itself
lives in `sweep.tracking`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from sweep import tracking

__all__ = [
    "StudyNotFoundError",
    "close_figures",
    "load_results",
    "resolve_study",
    "start_ui",
    "stop_ui",
    "study_figures",
    "trials_frame",
    "ui_command",
]

log = logging.getLogger(__name__)

LEAD_COLUMNS = (
    "trial",
    "state",
    "best_val_loss",
    "final_val_loss",
    "tokens",
    "n_params",
    "n_params_non_embedding",
    "flops_per_token",
    "flops_per_token_dense",
    "flops_per_token_train",
    "train_flops",
    "mem_estimate_bytes",
    "tokens_per_s",
    "wall_s",
    "fail_reason",
    "run_id",
)


# States whose last logged val_loss is the trial's final one (a diverged trial's is not).
_TRAINED = ("COMPLETE", "PRUNED", "RUNNING")


class StudyNotFoundError(LookupError):
    """No study store or experiment matches the name or folder given."""


def _is_mlflow_store(db: Path) -> bool:
    """Whether the SQLite file ``db`` holds MLflow's tables; opened read-only, never changed."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db.resolve()}?mode=ro", uri=True)) as con:
            rows = con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    except sqlite3.DatabaseError:
        return False
    return ("experiments",) in rows


def resolve_study(study_or_dir: str | Path, tracking_uri: str | None = None) -> tuple[str, str]:
    """Find the tracking URI and study (experiment) name for a study name or output folder.

    Without ``tracking_uri``: ``study_or_dir`` is a folder holding ``mlflow.db``, the ``.db``
    file itself, or a study name whose store is ``./runs/<name>/mlflow.db``. With it,
    ``study_or_dir`` is the experiment name in that store, or the study's output folder
    (its name, or the store's only study).

    Returns:
        ``(tracking_uri, study_name)``.

    Raises:
        StudyNotFoundError: Naming ``study_or_dir`` (and the studies the store holds).
        sweep.tracking.UnreachableStoreError: ``tracking_uri`` is a server that does not answer.
    """
    name = str(study_or_dir)
    if tracking_uri is None:
        path = Path(study_or_dir)
        for db in (path, path / "mlflow.db", Path("runs") / name / "mlflow.db"):
            if db.is_file() and db.suffix == ".db":
                break
        else:
            raise StudyNotFoundError(
                f"no study {name!r}: neither {path / 'mlflow.db'} nor "
                f"{Path('runs') / name / 'mlflow.db'} exists"
            )
        if not _is_mlflow_store(db):
            raise StudyNotFoundError(f"{db} is not an MLflow store (no experiments table)")
        tracking_uri = f"sqlite:///{db.resolve()}"
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
    studies = tracking.list_studies(tracking_uri)
    for candidate in (name, Path(name).name):
        if candidate in studies:
            return tracking_uri, candidate
    if len(studies) == 1 and Path(name).is_dir():
        return tracking_uri, studies[0]
    raise StudyNotFoundError(f"no study {name!r} in {tracking_uri} (it holds {studies})")


def trials_frame(trials: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per trial from `sweep.tracking.read_trials` records.

    Columns: `LEAD_COLUMNS`, then the params (``model.*``, ``train.*``, sorted). Sorted by
    ``best_val_loss`` ascending with NaN (failed, diverged, infeasible) last, then trial number.
    ``final_val_loss`` is the runner's ``final_val_loss`` metric, else the last ``val_loss`` of a
    COMPLETE, PRUNED or RUNNING trial (NaN otherwise); ``tokens`` the tokens trained.
    """
    rows = []
    for trial in trials:
        metrics = trial["metrics"]
        row = {c: metrics.get(c, math.nan) for c in LEAD_COLUMNS}
        row.update(
            trial=trial["trial"],
            state=trial["state"],
            fail_reason=trial["fail_reason"],
            run_id=trial["run_id"],
            final_val_loss=metrics.get(
                "final_val_loss",
                metrics.get("val_loss", math.nan) if trial["state"] in _TRAINED else math.nan,
            ),
        )
        row.update(trial["params"])
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(LEAD_COLUMNS))
    if rows:
        frame = pd.DataFrame(rows)
        params = sorted(c for c in frame.columns if c not in LEAD_COLUMNS)
        frame = frame[list(LEAD_COLUMNS) + params]
    frame = frame.sort_values(["best_val_loss", "trial"], na_position="last", kind="stable")
    return frame.reset_index(drop=True)


def load_results(study_or_dir: str | Path, tracking_uri: str | None = None) -> pd.DataFrame:
    """Trials of a study as a DataFrame (see `trials_frame`), best first.

    ``frame.attrs`` holds ``tracking_uri``, ``study``, ``experiment_id`` and ``parent_run_id``.

    Raises:
        StudyNotFoundError: If no such study exists (see `resolve_study`).
    """
    tracking_uri, study = resolve_study(study_or_dir, tracking_uri)
    experiment_id, parent_run_id = tracking.find_study(tracking_uri, study)
    frame = trials_frame(tracking.read_trials(tracking_uri, experiment_id, parent_run_id))
    frame.attrs.update(
        tracking_uri=tracking_uri,
        study=study,
        experiment_id=experiment_id,
        parent_run_id=parent_run_id,
    )
    return frame


def _use_agg() -> None:
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")


def _val_loss_figure(frame: pd.DataFrame, histories: Mapping[str, list[tuple]]) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    best = frame["run_id"].iloc[0] if len(frame) else None
    for run_id, trial, state in zip(frame["run_id"], frame["trial"], frame["state"], strict=True):
        points = histories.get(run_id) or []
        if not points:
            continue
        tokens, losses = zip(*points, strict=True)
        is_best = run_id == best and state == "COMPLETE"
        ax.plot(
            tokens,
            losses,
            lw=2.0 if is_best else 0.8,
            alpha=1.0 if is_best else 0.5,
            label=f"trial {trial} (best)" if is_best else None,
        )
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("val loss (nats/token)")
    ax.set_title("Validation loss of all trials")
    if best is not None and ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    return fig


def _study_from_frame(frame: pd.DataFrame) -> Any:
    """An in-memory Optuna study of the COMPLETE trials, for Optuna's plots (no sampling)."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    done = frame[(frame["state"] == "COMPLETE") & frame["best_val_loss"].notna()]
    params = [c for c in frame.columns if c not in LEAD_COLUMNS]
    distributions = {}
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
                value=float(row["best_val_loss"]),
            )
        )
    return study


def study_figures(
    frame: pd.DataFrame,
    histories: Mapping[str, list[tuple]],
    optuna_study: Any = None,
    objective_names: list[str] | None = None,
) -> dict[str, Any]:
    """Matplotlib figures of a study, by file stem; a plot that cannot be drawn is skipped.

    ``val_loss_curves`` (from the MLflow histories), and Optuna's
    ``optimization_history``, ``param_importances`` and ``parallel_coordinate`` (both need >= 2
    complete trials) and, for a multi-objective study, ``pareto_front``
    (`optuna.visualization.matplotlib`). Drawn with the Agg backend unless pyplot is in use.

    Args:
        frame: `trials_frame` of the study.
        histories: ``run_id -> [(tokens, val_loss), ...]``.
        optuna_study: The executor's study; default: rebuilt from ``frame``.
        objective_names: Names of the objectives of a multi-objective study.
    """
    import optuna
    from optuna.visualization import matplotlib as ovm

    _use_agg()
    figures: dict[str, Any] = {}
    study = optuna_study if optuna_study is not None else _study_from_frame(frame)
    multi = len(study.directions) > 1
    first = {"target": (lambda t: t.values[0]), "target_name": (objective_names or ["0"])[0]}
    kw = first if multi else {"target_name": "best_val_loss"}
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    # (fewest complete trials, draw): below these counts Optuna draws empty or uniform plots.
    plots = {
        "val_loss_curves": (0, lambda: _val_loss_figure(frame, histories)),
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
    import matplotlib.pyplot as plt

    for figure in figures.values():
        plt.close(figure)


def ui_command(tracking_uri: str, *, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """The ``mlflow server`` command serving ``tracking_uri`` (one worker; local artifacts)."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri]
    cmd += ["--host", host, "--port", str(port), "--workers", "1"]
    if tracking_uri.startswith("sqlite:///"):
        store_dir = Path(tracking_uri[len("sqlite:///") :]).resolve().parent
        cmd += ["--artifacts-destination", (store_dir / "mlartifacts").as_uri()]
    return cmd


def start_ui(
    tracking_uri: str,
    *,
    host: str = "127.0.0.1",
    port: int = 5000,
    timeout_s: float = 90.0,
    log_path: Path | None = None,
) -> subprocess.Popen:
    """Start the MLflow UI for a store in its own process group and wait until it answers.

    Args:
        tracking_uri: Store to serve.
        host: Interface to bind; keep 127.0.0.1 unless the network is trusted.
        port: TCP port.
        timeout_s: Seconds to wait for ``GET /health``.
        log_path: File for the server's output (default: discarded).

    Returns:
        The server process; stop it with `stop_ui`.

    Raises:
        RuntimeError: If the server exits or does not answer within ``timeout_s``.
    """
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        ui_command(tracking_uri, host=host, port=port),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://{host}:{port}/health"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return proc
        except (urllib.error.URLError, OSError):
            time.sleep(0.25)
    stop_ui(proc)
    raise RuntimeError(f"mlflow server did not answer on {url} within {timeout_s:.0f} s")


def stop_ui(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Stop a server from `start_ui` and its workers (its process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue
