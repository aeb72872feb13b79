"""Executors run a study's trials: ``optuna`` (processes sharing its storage) or ``ray``.

Chosen by name; each is imported only when used, so ``import sweep`` needs neither.

Every executor exposes ``run(ctx, n_trials, view, *, address=None)``, runs each trial through
`sweep.objective.evaluate`, and so writes the same MLflow layout and results table.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXECUTORS", "get_executor"]

EXECUTORS = {"optuna": "sweep.executors.optuna_executor", "ray": "sweep.executors.ray_executor"}


def get_executor(name: str) -> ModuleType:
    """The executor module called ``name``.

    Raises:
        ValueError: For an unknown name.
    """
    if name not in EXECUTORS:
        raise ValueError(f"executor={name!r} is not one of {', '.join(EXECUTORS)}")
    return importlib.import_module(EXECUTORS[name])
