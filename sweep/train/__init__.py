"""Training one config.

`TrainConfig` and its budget, the `Trainer` (loop, evaluation, checkpoints), what it reports
(`Reporter`, `TrialResult`), optimizer, schedule and device.

The config and budget names import without torch, so specs and search spaces can build and
check thousands of configs cheaply; every name but the field choices (`sweep.train.choices`),
the config's as well as the reporter's and the torch-backed ones (`Trainer`, `run_trial`, ...),
is imported on first use (PEP 562), as Ray Tune's ``tune.search`` does for its backends.
"""

from typing import TYPE_CHECKING

from sweep.lazy import lazy_getattr
from sweep.train.choices import BUDGET_FIELDS, LIVE_HPARAMS, PRECISIONS, SCHEDULES

if TYPE_CHECKING:
    from sweep.train.checkpoint import CheckpointError
    from sweep.train.config import Budget, TrainConfig, resolve_budget
    from sweep.train.hardware import pick_device
    from sweep.train.optim import build_adamw
    from sweep.train.reporter import NullReporter, Reporter, TrialResult
    from sweep.train.trainer import Trainer, run_trial

_LAZY = {
    "Budget": "sweep.train.config",
    "TrainConfig": "sweep.train.config",
    "resolve_budget": "sweep.train.config",
    "NullReporter": "sweep.train.reporter",
    "Reporter": "sweep.train.reporter",
    "TrialResult": "sweep.train.reporter",
    "Trainer": "sweep.train.trainer",
    "run_trial": "sweep.train.trainer",
    "CheckpointError": "sweep.train.checkpoint",
    "build_adamw": "sweep.train.optim",
    "pick_device": "sweep.train.hardware",
}

__all__ = [
    "BUDGET_FIELDS",
    "LIVE_HPARAMS",
    "PRECISIONS",
    "SCHEDULES",
    "Budget",
    "CheckpointError",
    "NullReporter",
    "Reporter",
    "TrainConfig",
    "Trainer",
    "TrialResult",
    "build_adamw",
    "pick_device",
    "resolve_budget",
    "run_trial",
]

__getattr__ = lazy_getattr(__name__, _LAZY)
