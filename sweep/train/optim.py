"""AdamW with decoupled weight decay on matrices only.

Decay groups follow GPT-2/nanoGPT practice (``configure_optimizers``): weight decay shrinks the
matrices of linear layers; embeddings, norm gains and biases are left alone (Loshchilov & Hutter
2019 for the decoupled decay). The fused CUDA kernel is used on CUDA, the multi-tensor
(``foreach``) one elsewhere.
"""

from __future__ import annotations

import torch

from sweep.train.config import TrainConfig

__all__ = ["build_adamw", "decay_groups"]


def decay_groups(model: torch.nn.Module) -> tuple[list, list]:
    """Split parameters into (decay, no decay): Linear weights vs everything else.

    A tied output projection shares the embedding's tensor and is listed once, as an embedding.
    """
    decay, no_decay, seen = [], [], set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            is_matrix = isinstance(module, torch.nn.Linear) and name == "weight"
            (decay if is_matrix else no_decay).append(p)
    return decay, no_decay


def build_adamw(
    model: torch.nn.Module, train: TrainConfig, device: torch.device
) -> torch.optim.AdamW:
    """AdamW over ``model``: group 0 decays with ``train.weight_decay``, group 1 does not."""
    decay, no_decay = decay_groups(model)
    cuda = device.type == "cuda"
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": train.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=train.lr, betas=train.betas, fused=cuda or None, foreach=None if cuda else True,
    )
