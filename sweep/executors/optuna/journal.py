"""A damaged Optuna storage found before a resume, and the journal rebuilt from the MLflow runs.

Before the driver writes anything (`sweep.study.driver`), `check_journal` compares the study's
Optuna storage with its MLflow store, which holds one run per trial with its number, params,
state and values:

- a journal file cut mid-record (a crash during a write), with changed bytes (not UTF-8, not
  JSON), or one Optuna cannot replay, is damaged: Optuna would crash on it, or append after a
  cut record and crash on every later read;
- a storage that lacks trial numbers the MLflow store has runs of (an emptied, cut or replaced
  journal) would number new trials again from where it stops, so two runs would share a number.

Either is refused (`JournalError`, exit 2) naming what is wrong and the recovery: ``sweep run
SPEC --rebuild-journal`` moves the journal aside (``optuna.journal.damaged-<UTC time>``, kept)
and writes a new one from the MLflow runs (`rebuild_journal`): one Optuna trial per number, in
order, with the run's params and what `sweep.study.policy` tells the sampler of its state; an
interrupted (or dead ``RUNNING``) run is a failed trial marked ``INTERRUPTED``, which the
resume's reconcile retries as usual. The resume then continues with the next numbers, and no
finished trial is trained again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState as OptunaState

from sweep import space
from sweep.adapters import optuna as private
from sweep.errors import InputError
from sweep.executors.optuna.storage import make_storage
from sweep.schema import (
    ATTR_BEST_VAL_LOSS,
    ATTR_CONSTRAINTS,
    ATTR_REASON,
    ATTR_RETRY_OF,
    ATTR_RUN_ID,
    ATTR_STATE,
    METRIC_BEST_VAL_LOSS,
    TrialState,
)
from sweep.spec import StudySpec
from sweep.study import policy
from sweep.tracking import find_study, read_trials, shown_uri
from sweep.tracking.stores import ensure_store
from sweep.tracking.uris import sqlite_path

__all__ = ["JournalError", "check_journal", "journal_damage", "rebuild_journal"]


class JournalError(InputError, RuntimeError):
    """The study's Optuna storage is damaged or lacks trials its MLflow store has."""


def journal_damage(path: Path) -> str | None:
    """What is wrong with the Optuna journal file ``path``, or None if every record is whole.

    Each line must end with a newline and be one UTF-8 JSON object with an integer
    ``op_code`` (Optuna's ``JournalFileBackend`` writes exactly that).
    """
    with path.open("rb") as f:
        for n, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                return f"its last record (line {n}) is cut short"
            try:
                record = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError:
                return f"line {n} is not UTF-8 text (bytes were changed)"
            except ValueError:
                return f"line {n} is not a JSON record (cut or changed)"
            if not isinstance(record, dict) or type(record.get("op_code")) is not int:
                return f"line {n} is not an Optuna journal record"
    return None


def _mlflow_trials(tracking_uri: str, experiment: str) -> list[dict[str, Any]]:
    """The study's trial runs (`sweep.tracking.read_trials`); none where the store is new."""
    db = sqlite_path(tracking_uri)
    if db is not None and not db.is_file():
        return []
    ensure_store(tracking_uri)  # refuses a schema of another MLflow version
    found = find_study(tracking_uri, experiment)
    return read_trials(tracking_uri, *found) if found else []


def _optuna_numbers(spec: StudySpec, url: str) -> set[int]:
    """Trial numbers the storage holds for the study (none if it holds no such study)."""
    storage = make_storage(url)
    if not any(s.study_name == spec.name for s in optuna.get_all_study_summaries(storage)):
        return set()
    study = optuna.load_study(study_name=spec.name, storage=storage)
    return {t.number for t in study.get_trials(deepcopy=False)}


def _ranges(numbers: list[int]) -> str:
    """``0-3, 7`` for ``[0, 1, 2, 3, 7]``."""
    parts: list[list[int]] = []
    for n in numbers:
        if parts and n == parts[-1][-1] + 1:
            parts[-1].append(n)
        else:
            parts.append([n])
    return ", ".join(f"{p[0]}-{p[-1]}" if len(p) > 1 else str(p[0]) for p in parts)


def _problem(spec: StudySpec, url: str, runs: list[dict[str, Any]]) -> str | None:
    """What is wrong with the storage at ``url`` against the MLflow ``runs``, or None."""
    path = Path(url) if "://" not in url else None
    if path is not None and not path.is_file():
        numbers: set[int] = set()
    else:
        damage = journal_damage(path) if path is not None else None
        if damage is not None:
            return damage
        try:
            numbers = _optuna_numbers(spec, url)
        except Exception as exc:  # noqa: BLE001 (any replay error means a damaged record)
            return f"Optuna cannot replay it ({type(exc).__name__}: {str(exc)[:200]})"
    missing = sorted({int(r["trial"]) for r in runs} - numbers)
    if not missing:
        return None
    return (f"it holds {len(numbers)} trial(s) but the MLflow store has runs of trial(s) "
            f"{_ranges(missing)} that it lacks (it was emptied, cut or replaced), so new trials "
            "would take numbers already used")


def check_journal(spec: StudySpec, out: Path, tracking_uri: str, *, baseline: float,
                  rebuild: bool = False) -> str | None:
    """Refuse a damaged Optuna storage, or rebuild it from the MLflow runs (module docstring).

    Args:
        spec: The study spec (its storage, sampler and objectives).
        out: The study folder (the default journal's place).
        tracking_uri: The study's MLflow store.
        baseline: The corpus's unigram loss, nats/token (what an infeasible trial is told).
        rebuild: ``--rebuild-journal``: rebuild a damaged journal instead of refusing it.

    Returns:
        A note saying what was rebuilt; None when nothing was.

    Raises:
        JournalError: The storage is damaged or lacks trials (naming the file, what is wrong
            and ``--rebuild-journal``); or ``rebuild`` where there is nothing to rebuild or
            the storage is a database, not a journal file.
    """
    url = spec.storage_url(out)
    shown = shown_uri(url)
    runs = _mlflow_trials(tracking_uri, spec.tracking.experiment or spec.name)
    problem = _problem(spec, url, runs)
    if problem is None:
        if rebuild:
            raise JournalError(f"--rebuild-journal: the Optuna storage {shown} is whole and "
                               f"holds every trial of the MLflow store's {len(runs)} run(s); "
                               "nothing to rebuild (run without --rebuild-journal)")
        return None
    what = f"study {spec.name}: the Optuna storage {shown}: {problem}"
    if "://" in url:
        raise JournalError(f"{what}; restore the database from a backup (--rebuild-journal "
                           "rebuilds journal files only)")
    if not rebuild:
        raise JournalError(
            f"{what}; rebuild it from the {len(runs)} trial run(s) of the MLflow store: run the "
            "same command with --rebuild-journal (the present file is kept beside it as "
            f"{Path(url).name}.damaged-<time>)")
    aside = rebuild_journal(spec, Path(url), runs, baseline=baseline)
    return (f"rebuilt the Optuna journal {url} from {len(runs)} MLflow trial run(s) "
            f"({problem}); the damaged one is kept as {aside}")


def rebuild_journal(spec: StudySpec, path: Path, runs: list[dict[str, Any]], *,
                    baseline: float) -> Path | None:
    """Move the journal ``path`` aside and write the study anew from its MLflow ``runs``.

    Returns:
        Where the old journal now is (``<path>.damaged-<UTC time>``), None if there was none.
    """
    aside = None
    if path.exists():
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = path.with_name(f"{path.name}.damaged-{stamp}")
        os.replace(path, aside)
    study = optuna.create_study(study_name=spec.name, storage=make_storage(str(path)),
                                sampler=space.make_sampler(spec),
                                directions=list(spec.search.directions or ["minimize"]))
    by_number: dict[int, dict[str, Any]] = {}
    for run in runs:  # of two runs of one number (an old duplicate), the finished one counts
        held = by_number.get(int(run["trial"]))
        if held is None or (not held["state"].finished and run["state"].finished):
            by_number[int(run["trial"])] = run
    for number in range(max(by_number, default=-1) + 1):
        study.add_trial(_trial(spec, study.sampler, by_number.get(number), baseline))
    return aside


def _sampled(spec: StudySpec, params: Mapping[str, Any]) -> tuple[dict, dict]:
    """``(params, distributions)`` the space samples, from a run's params; empty if it cannot."""
    fixed = optuna.trial.FixedTrial(dict(params))
    try:
        space.define_by_run(spec)(fixed)
    except ValueError:
        return {}, {}
    return {k: params[k] for k in fixed.distributions}, dict(fixed.distributions)


def _trial(spec: StudySpec, sampler: Any, run: dict[str, Any] | None,
           baseline: float) -> optuna.trial.FrozenTrial:
    """The Optuna trial of one MLflow run (a failed placeholder where the number has none)."""
    if run is None:
        return optuna.trial.create_trial(state=OptunaState.FAIL, user_attrs={
            ATTR_STATE: TrialState.FAILED.value, ATTR_REASON: "no MLflow run of this number"})
    params, distributions = _sampled(spec, run["params"])
    user: dict[str, Any] = {ATTR_STATE: run["state"].value, ATTR_RUN_ID: run["run_id"]}
    if run["retry_of"] is not None:
        user[ATTR_RETRY_OF] = int(run["retry_of"])
    if run["fail_reason"]:
        user[ATTR_REASON] = str(run["fail_reason"])[:500]
    system = private.grid_attrs(sampler, params)
    if not run["state"].finished:  # interrupted, or RUNNING in a process that is gone
        user[ATTR_STATE] = TrialState.INTERRUPTED.value
        told = policy.Told(OptunaState.FAIL)
    else:
        told = policy.told_from_run(spec, run, baseline=baseline)
        if METRIC_BEST_VAL_LOSS in run["metrics"]:
            user[ATTR_BEST_VAL_LOSS] = run["metrics"][METRIC_BEST_VAL_LOSS]
        if told.constraints is not None:
            system |= private.constraint_attrs(space.CONSTRAINT_NAMES, told.constraints)
            user[ATTR_CONSTRAINTS] = list(told.constraints)
    multi = len(spec.search.objectives) > 1
    return optuna.trial.create_trial(
        state=told.state, params=params, distributions=distributions,
        value=told.values[0] if not multi and told.values else None,
        values=told.values if multi and told.values else None,
        user_attrs=user, system_attrs=system)
