"""AdamW with decoupled weight decay on matrices only, and the parametrization's per-group rates.

Decay groups follow GPT-2/nanoGPT practice (``configure_optimizers``): weight decay shrinks the
matrices of linear layers; embeddings, norm gains and biases are left alone (Loshchilov & Hutter
2019 for the decoupled decay). The fused CUDA kernel is used on CUDA, the multi-tensor
(``foreach``) one elsewhere.

Under muP and CompleteP (`sweep_models.parametrization`) parameters of different roles learn at
different rates: each parameter group carries ``lr_mult`` and ``wd_mult``, the factors of its
learning rate and weight decay over the trial's (tuned) ones, and `set_group_hparams` sets
``lr = base lr * lr_mult`` (the schedule's factor folded into the base) and ``weight_decay =
base weight decay * wd_mult`` on every group at once. The trainer sets both through it only,
every step and on population-based training's live changes, so the groups stay consistent
whatever changes the base values (microsoft/mup's ``MuAdam`` scales ``lr`` once, when it is
built, and loses the scaling when a scheduler or PBT sets it again). Under ``sp`` there are
exactly two groups, decayed then not, each with multipliers 1.
"""

from __future__ import annotations

from typing import Any

import torch

from sweep.train.config import TrainConfig
from sweep_models import parametrization
from sweep_models.transformer import LanguageModel

__all__ = ["build_adamw", "decay_groups", "param_groups", "set_group_hparams"]


def _is_matrix(module: torch.nn.Module, name: str) -> bool:
    return isinstance(module, torch.nn.Linear) and name == "weight"


def decay_groups(model: torch.nn.Module) -> tuple[list[torch.nn.Parameter],
                                                  list[torch.nn.Parameter]]:
    """Split parameters into (decay, no decay): Linear weights vs everything else.

    A tied output projection shares the embedding's tensor and is listed once, as an embedding.
    """
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            (decay if _is_matrix(module, name) else no_decay).append(p)
    return decay, no_decay


def param_groups(model: LanguageModel, train: TrainConfig) -> list[dict[str, Any]]:
    """AdamW parameter groups: decay or not, split further by the parametrization's multipliers.

    Args:
        model: A `sweep_models.transformer.Transformer` (its ``config`` and ``param_roles``
            give each parameter's multipliers).
        train: The base ``lr`` and ``weight_decay``.

    Returns:
        Groups with ``params``, ``lr``, ``weight_decay``, ``lr_mult`` and ``wd_mult``
        (``wd_mult`` is 0 for the groups that do not decay): decayed groups first, each kind
        in the order its first parameter appears. Under ``sp``: [decay, no decay].
    """
    decay, _ = decay_groups(model)
    decayed = {id(p) for p in decay}
    config = model.config
    groups: dict[tuple[bool, float, float], list[torch.nn.Parameter]] = {}
    for _, p, role in model.param_roles():
        if not p.requires_grad:
            continue
        is_decayed = id(p) in decayed
        key = (is_decayed, parametrization.lr_mult(config, role),
               parametrization.wd_mult(config, role) if is_decayed else 0.0)
        groups.setdefault(key, []).append(p)
    ordered = sorted(groups.items(), key=lambda item: not item[0][0])  # stable: decayed first
    return [{"params": params, "lr": train.lr * lr_mult, "lr_mult": lr_mult,
             "weight_decay": train.weight_decay * wd_mult, "wd_mult": wd_mult}
            for (_, lr_mult, wd_mult), params in ordered]


def set_group_hparams(
    optimizer: torch.optim.Optimizer, *, lr: float | None = None,
    weight_decay: float | None = None,
) -> None:
    """Set each group's ``lr`` to ``lr * lr_mult``, ``weight_decay`` to ``weight_decay * wd_mult``.

    Args:
        optimizer: An optimizer from `build_adamw`.
        lr: The base learning rate (the schedule's factor already applied); ``None``: unchanged.
        weight_decay: The base weight decay; ``None``: unchanged.
    """
    for group in optimizer.param_groups:
        if lr is not None:
            group["lr"] = lr * group["lr_mult"]
        if weight_decay is not None:
            group["weight_decay"] = weight_decay * group["wd_mult"]


def build_adamw(
    model: LanguageModel, train: TrainConfig, device: torch.device
) -> torch.optim.AdamW:
    """AdamW over ``model`` with the groups of `param_groups`.

    Epsilon is the parametrization's (`sweep_models.parametrization.adamw_eps`: torch's 1e-8 except
    under CompleteP).
    """
    cuda = device.type == "cuda"
    return torch.optim.AdamW(
        param_groups(model, train), lr=train.lr, betas=train.betas,
        eps=parametrization.adamw_eps(model.config), fused=cuda or None,
        foreach=None if cuda else True,
    )
