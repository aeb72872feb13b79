"""Training one config.

`TrainConfig` and its budget, the `Trainer` (loop, evaluation, checkpoints), what it reports
(`Reporter`, `TrialResult`), optimizer, schedule and device.

The config and budget names import without torch, so specs and search spaces can build and
check thousands of configs cheaply; the reporter's and the torch-backed names (`Trainer`,
`run_trial`, ...) are imported on first use (PEP 562), as Ray Tune's ``tune.search`` does for
its backends.
"""

from sweep.lazy import lazy_getattr
from sweep.train.config import (
    BUDGET_FIELDS,
    LIVE_HPARAMS,
    PRECISIONS,
    SCHEDULES,
    Budget,
    TrainConfig,
    resolve_budget,
)

_LAZY = {
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
