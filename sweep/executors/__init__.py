"""Executors run a study's trials: ``optuna`` (processes sharing its storage) or ``ray``.

Chosen by name through `get_executor`; each is imported only when used, so ``import sweep``
needs neither Optuna's storages nor Ray. Every executor implements `Executor` and runs each
trial through the one trial path, `sweep.study.trial`, so both write the same MLflow layout
and results table.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from sweep.study.progress import ProgressView
    from sweep.study.trial import StudyContext

__all__ = ["EXECUTORS", "Executor", "get_executor"]

EXECUTORS = {"optuna": "sweep.executors.optuna", "ray": "sweep.executors.ray"}


class Executor(Protocol):
    """What the driver calls: one function that runs a study's remaining trials."""

    def run(self, ctx: StudyContext, n_trials: int, view: ProgressView, *,
            address: str | None = None) -> Any:
        """Run trials until the study holds ``n_trials``; return an Optuna study or None.

        The Optuna study (the executor's own, or Ray's ``OptunaSearch`` one) feeds Optuna's
        plots; None where there is none (population-based training).
        """


def get_executor(name: str) -> Executor:
    """The executor called ``name`` (its package, imported now).

    Raises:
        ValueError: For an unknown name.
    """
    if name not in EXECUTORS:
        raise ValueError(f"executor={name!r} is not one of {', '.join(EXECUTORS)}")
    return cast(Executor, importlib.import_module(EXECUTORS[name]))
