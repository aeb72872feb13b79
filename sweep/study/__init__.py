"""A study.

The one trial path every executor runs, the driver behind ``sweep run``, its preflight checks and
its live progress view.

Names are imported from their modules on first use (PEP 562 ``__getattr__``), so that the light
modules (`sweep.study.overrides`, `sweep.study.preflight`'s `check_inputs` and `check_space`)
answer without loading the driver, and with it torch, MLflow and Optuna: ``sweep run`` refuses
bad input with them before it imports the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "OpenTrial": "trial",
    "PreflightError": "preflight",
    "ProgressView": "progress",
    "StudyContext": "trial",
    "StudySummary": "driver",
    "TrialOutcome": "trial",
    "TrialRow": "progress",
    "algorithm_name": "driver",
    "check_inputs": "preflight",
    "check_space": "preflight",
    "evaluate": "trial",
    "finish_study": "summary",
    "format_params": "progress",
    "objective_values": "policy",
    "open_trial": "trial",
    "run_study": "driver",
    "train_trial": "trial",
    "with_overrides": "overrides",
}

#: ``preflight`` is the module `sweep.study.preflight` (its function: ``preflight.preflight``);
#: a package attribute of the same name as a submodule would be replaced by the module as soon
#: as the submodule is imported.
__all__ = sorted([*_EXPORTS, "preflight"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
