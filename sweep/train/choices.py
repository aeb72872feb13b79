"""The training config's fixed names, without `sweep.train.config.TrainConfig` itself.

The choices of its string fields (the ``Literal`` aliases that annotate them), the budget fields
and the hyperparameters a live trainer can change: what a study spec's fields are checked by, so
that a spec refused at its fields never builds the config's dataclasses.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["BUDGET_FIELDS", "LIVE_HPARAMS", "PRECISIONS", "SCHEDULES", "BudgetKind", "Precision",
           "Schedule"]

Schedule = Literal["cosine", "linear", "constant", "wsd"]
Precision = Literal["auto", "fp32", "bf16"]
#: The budget fields, exactly one of which a config sets.
BudgetKind = Literal["tokens", "flops", "steps", "seconds"]

SCHEDULES: tuple[str, ...] = get_args(Schedule)
PRECISIONS: tuple[str, ...] = get_args(Precision)
BUDGET_FIELDS: tuple[str, ...] = get_args(BudgetKind)
#: Hyperparameters a live `sweep.train.Trainer` can change between steps without changing any
#: tensor's shape (population-based training), with the config section each belongs to.
LIVE_HPARAMS = {"lr": "train", "weight_decay": "train", "betas": "train", "grad_clip": "train",
                "dropout": "model", "attn_temperature": "model"}
