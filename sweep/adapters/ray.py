"""Ray's private parts the service uses, in one place. Checked against Ray 2.60.0.

- ``OptunaSearch``'s study and its record of Ray trials (``_ot_study``, ``_ot_trials``,
  ``_completed_trials``, ``_space``, ``_sampler``): telling a trial's real end state, and adding
  an earlier run's trials, have no public API.
- The training session (``ray.train._internal.session.get_session``): whether Ray still runs a
  function trainable's thread (`session_alive`).
- The bootstrap address of a local Ray (``ray._private.services``), to check ``auto``; the
  GCS client (``ray._raylet.GcsClient``), to see a refused token at once (`refused_by_gcs`); and
  the loggers of Ray's job client that report every upload (`CHATTY_LOGGERS`).
- PBT's exploit step (``PopulationBasedTraining._exploit``, its ``_trial_state`` and a trial's
  ``checkpoint_manager._latest_checkpoint_result``): `PinnedPBT` restarts a member from a copy
  of its donor's checkpoint that rotation cannot delete (ray-project/ray#8441).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ray import tune
from ray._private import services
from ray.train import Checkpoint
from ray.train._internal.session import _TrainingResult, get_session
from ray.tune.schedulers import PopulationBasedTraining
from ray.tune.search.optuna import OptunaSearch

__all__ = ["CHATTY_LOGGERS", "PinnedPBT", "bootstrap_address", "completed", "mark_completed",
           "refused_by_gcs", "search_sampler", "search_space", "search_study", "search_trial",
           "session_alive"]

log = logging.getLogger(__name__)

#: Ray's client modules that log every package upload and closed log stream at INFO.
CHATTY_LOGGERS = ("ray.dashboard.modules.dashboard_sdk", "ray.dashboard.modules.job.sdk",
                  "ray._private.runtime_env.packaging")


def search_study(searcher: OptunaSearch) -> Any:
    """The Optuna study ``OptunaSearch`` asks and tells (None before its setup)."""
    return getattr(searcher, "_ot_study", None)


def search_trial(searcher: OptunaSearch, trial_id: str) -> Any:
    """The Optuna trial ``OptunaSearch`` asked for Ray trial ``trial_id``, or None."""
    return searcher._ot_trials.get(trial_id)


def completed(searcher: OptunaSearch, trial_id: str) -> bool:
    """Whether ``OptunaSearch`` has told Ray trial ``trial_id``'s end already."""
    return trial_id in searcher._completed_trials


def mark_completed(searcher: OptunaSearch, trial_id: str) -> None:
    """Record that Ray trial ``trial_id``'s end was told."""
    searcher._completed_trials.add(trial_id)


def search_space(searcher: OptunaSearch) -> Any:
    """The define-by-run function ``OptunaSearch`` was given."""
    return searcher._space


def search_sampler(searcher: OptunaSearch) -> Any:
    """The Optuna sampler ``OptunaSearch`` was given."""
    return searcher._sampler


def session_alive() -> bool:
    """Whether Ray still runs this trial.

    When Ray ends a function trainable (a scheduler stopped it, PBT restarts it from another
    checkpoint) it shuts the session down but lets the training thread run on until the actor
    exits, and `ray.tune.report` then returns without effect; this check keeps that thread from
    writing to the trial's MLflow run.
    """
    return get_session() is not None


def refused_by_gcs(address: str) -> str | None:
    """Why the GCS at ``host:port`` refuses this process's token, or None (one request).

    ``ray.init`` asks a GCS that refuses its token 20 times, a second apart
    (``ray._private.node.Node._init_gcs_client``, ``RAY_NUM_REDIS_GET_RETRIES``), then raises
    a ``ConnectionError`` that no longer says why; the ``GcsClient`` it connects with raises
    ``AuthenticationError`` on the first refusal. Anything else (the GCS accepts, or fails
    otherwise) is left to ``ray.init``: None.
    """
    from ray._raylet import GcsClient  # type: ignore[attr-defined]
    from ray.exceptions import AuthenticationError

    try:
        GcsClient(address=address, cluster_id=None)
    except AuthenticationError as exc:
        return str(exc) or type(exc).__name__
    except Exception:  # noqa: BLE001 (ray.init meets it again and reports it)
        return None
    return None


def bootstrap_address() -> str | None:
    """The address ``auto`` resolves to on this machine (a local Ray's GCS), or None."""
    try:
        return services.canonicalize_bootstrap_address("auto")
    except ConnectionError:
        return None


class PinnedPBT(PopulationBasedTraining):
    """Ray's PBT, each exploit restarting its member from a pinned copy of the donor's checkpoint.

    Args:
        pinned_dir: Folder of the copies (created on first use), or None for Ray's behaviour.
        *args, **kwargs: `ray.tune.schedulers.PopulationBasedTraining`'s.

    Attributes:
        exploits: ``(member trial id, donor trial id, the checkpoint folder copied)`` per exploit.
    """

    def __init__(self, *args: Any, pinned_dir: Path | str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pinned_dir = Path(pinned_dir) if pinned_dir is not None else None
        self.exploits: list[tuple[str, str, str]] = []
        self._pinned: dict[Any, Path] = {}  # member trial -> the copy it restarts from

    def _exploit(self, tune_controller: Any, trial: Any, trial_to_clone: Any) -> None:
        if self.pinned_dir is None:
            return super()._exploit(tune_controller, trial, trial_to_clone)
        donor = self._trial_state[trial_to_clone]
        # Ray resolves a pending save of the donor's before it exploits it: a checkpoint or None.
        source = donor.last_checkpoint
        if not isinstance(source, Checkpoint) or not os.path.isdir(source.path):
            # Deleted since the donor's perturbation (rotation): the donor's latest instead.
            source = trial_to_clone.checkpoint
            if source is None or not os.path.isdir(source.path):
                log.warning("PBT: no checkpoint of %s on disk; %s is not exploited",
                            trial_to_clone.trial_id, trial.trial_id)
                return None
            donor.last_checkpoint = source
        self._release(trial)
        self.pinned_dir.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"{trial.trial_id}-", dir=self.pinned_dir))
        shutil.copytree(source.path, folder, dirs_exist_ok=True)
        super()._exploit(tune_controller, trial, trial_to_clone)
        manager = trial.run_metadata.checkpoint_manager
        cloned = manager._latest_checkpoint_result
        pinned = tune.Checkpoint(path=str(folder), filesystem=source.filesystem)
        manager._latest_checkpoint_result = _TrainingResult(checkpoint=pinned,
                                                            metrics=cloned.metrics)
        self._pinned[trial] = folder
        self.exploits.append((trial.trial_id, trial_to_clone.trial_id, source.path))
        return None

    def _release(self, trial: Any) -> None:
        folder = self._pinned.pop(trial, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        # A member that has a checkpoint of its own no longer restarts from its copy.
        folder = self._pinned.get(trial)
        latest = trial.checkpoint
        if folder is not None and latest is not None and Path(latest.path) != folder:
            self._release(trial)
        return super().on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self._release(trial)
        super().on_trial_complete(tune_controller, trial, result)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._release(trial)
        super().on_trial_error(tune_controller, trial)
