"""The rules of a transfer study: a grid of widths x one learning-rate grid x choices."""

from __future__ import annotations

from collections.abc import Iterator

from sweep.schema import METRIC_VAL_LOSS
from sweep.spec.domains import ChoiceDomain
from sweep.spec.schema import StudySpec

__all__ = ["TRANSFER_OWNED_MODEL", "transfer_problems"]


#: Model fields a transfer study's widths set for every trial.
TRANSFER_OWNED_MODEL = ("preset", "d_model", "n_heads", "n_kv_heads", "d_ff", "d_head",
                        "d_ff_ratio")


def transfer_problems(spec: StudySpec) -> Iterator[str]:
    """A transfer study is a grid: the widths x one shared learning-rate grid x choices."""
    for name in TRANSFER_OWNED_MODEL:
        if name in spec.model:
            yield (f"model.{name}: a transfer study takes every width from transfer.widths "
                   "(d_model, n_heads = d_model / transfer.d_head, d_ff from "
                   "transfer.d_ff_ratio); remove it")
    lr = spec.train.get("lr")
    if not (isinstance(lr, ChoiceDomain) and len(lr.options) >= 3):
        yield ("train.lr: a transfer study runs one learning-rate grid at every width; give "
               "{choice: [...]} with at least 3 rates")
    for param in spec.searched():
        if not isinstance(param.domain, ChoiceDomain):
            yield (f"{param.path}: a transfer study trains the product of its grids, so every "
                   "searched field must be a {choice: [...]}")
        elif param.when:
            yield f"{param.path}.when: conditions are not supported in a transfer study"
    s = spec.search
    if s.executor != "optuna":
        yield "search.executor: a transfer study runs on the optuna executor"
    for name in ("pruner", "scheduler"):
        if getattr(s, name) != "none":
            yield (f"search.{name}: every point of a transfer grid trains to the end (a "
                   "stopped point has no final loss to compare); use none (the default)")
    if list(s.objectives) != [METRIC_VAL_LOSS]:
        yield "search.objectives: a transfer study compares val_loss only; remove the others"
