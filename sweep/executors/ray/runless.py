"""Every trial of a study's Tune experiments has an MLflow run, one per trial number.

A Ray trial opens its MLflow run in its worker (`sweep.study.trial.open_trial`). When the store
does not answer then, the trial errors before it has a run, and the driver's callback
(`sweep.executors.ray.callback.StudyCallback`) cannot create one while the store is down; a
driver stopped while a trial waited to start leaves that trial without a run too. Tune saves
each experiment of the study under ``<out>/ray/`` (its experiment state: every trial's config,
with its trial number `sweep.schema.CONFIG_TRIAL_NUMBER`), so `record_experiments` reads them
all and gives each trial whose number has no run one, ended ``INTERRUPTED`` with its params,
number and ``sweep.retry_of`` (`sweep.study.resume.record_runless`), once: a number that has a
run is left alone.

`sweep.executors.ray.tuning.fit` calls it before it reads what the study holds (a resume, or the
driver's next attempt after a fault, which then trains the trial again as any interrupted one)
and once its experiment has ended. A PBT member's config holds no trial number (the experiment's
first number plus its index), so members are left out.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from sweep.executors.ray.reporting import trial_params
from sweep.schema import CONFIG_RETRY_OF, CONFIG_TRIAL_NUMBER
from sweep.study.resume import Runless, record_runless
from sweep.tracking.faults import infrastructure_fault

__all__ = ["experiment_trials", "record_experiments"]

log = logging.getLogger(__name__)


def _reason(trial: Any, stopped_by: str | None) -> str:
    """Why a trial of an experiment state has no run, for its ``sweep.fail_reason``."""
    if trial.status == "ERROR":
        exc = None
        with contextlib.suppress(Exception):  # no error file, or one that does not unpickle
            exc = trial.get_pickled_error()
        cause = getattr(exc, "cause", None)
        what = infrastructure_fault(cause if isinstance(cause, BaseException) else exc) \
            if isinstance(exc, BaseException) else None
        if what is not None:
            return f"interrupted: {what}"
        return "interrupted: it errored before its run was created"
    why = f"{stopped_by} stopped the study" if stopped_by else "its driver stopped"
    return f"interrupted: {why} before its run was created (Ray: {trial.status})"


def experiment_trials(folder: Path, stopped_by: str | None = None) -> list[Runless]:
    """The searched trials the Tune experiments under ``folder`` (``<out>/ray``) hold.

    One per trial number (the first experiment's, oldest first). An experiment folder without
    a saved state, or one Tune cannot read, is passed over with a warning. ``stopped_by``: the
    signal that stopped the study now, named in the reason of trials that never started.
    """
    from ray.tune import ExperimentAnalysis

    found: dict[int, Runless] = {}
    states = sorted(folder.glob("*/experiment_state-*.json")) if folder.is_dir() else []
    for experiment in sorted({p.parent for p in states}):
        analysis = logging.getLogger("ray.tune.analysis.experiment_analysis")
        level = analysis.level
        analysis.setLevel(logging.ERROR)  # a trial that reported nothing has no results
        try:
            trials = ExperimentAnalysis(str(experiment)).trials
        except Exception as exc:  # noqa: BLE001 (a damaged state: the other ones still count)
            log.warning("Tune experiment %s not read (%s: %s); its trials without a run stay "
                        "without one", experiment, type(exc).__name__, exc)
            continue
        finally:
            analysis.setLevel(level)
        for trial in trials:
            number = (trial.config or {}).get(CONFIG_TRIAL_NUMBER)
            if number is None or int(number) in found:
                continue
            retry_of = trial.config.get(CONFIG_RETRY_OF)
            found[int(number)] = Runless(int(number), trial_params(trial.config),
                                         int(retry_of) if retry_of is not None else None,
                                         _reason(trial, stopped_by))
    return list(found.values())


def record_experiments(ctx: Any, stopped_by: str | None = None) -> list[int]:
    """Give each trial of the study's Tune experiments that has no MLflow run one (docstring).

    Args:
        ctx: The study context (`sweep.study.trial.StudyContext`).
        stopped_by: The signal that stopped the study now (``SIGINT``), or None.

    Returns:
        The trial numbers recorded now, ``INTERRUPTED``.

    Raises:
        Exception: The store's error when it does not answer (an infrastructure fault: the
            driver waits and tries again).
    """
    return record_runless(ctx, experiment_trials(Path(ctx.out_dir) / "ray", stopped_by))
