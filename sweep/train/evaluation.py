"""Evaluation: the fixed validation windows on the device, their mean loss, the metrics reported.

The windows depend only on the corpus, ``seq_len`` and ``eval_tokens``
(`sweep.data.Corpus.val_batches`), never on a trial's seed, so every trial of a study is scored
on the same tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from sweep.data import Corpus
from sweep.schema import (
    METRIC_LR,
    METRIC_TOKENS_PER_S,
    METRIC_TRAIN_LOSS,
    METRIC_VAL_BPB,
    METRIC_VAL_LOSS,
)

__all__ = ["Batch", "eval_metrics", "mean_loss", "val_tensors"]

#: ``(x, y)``: input ids and next-token targets, each ``(B, T)`` int64.
Batch = tuple[torch.Tensor, torch.Tensor]


def val_tensors(corpus: Corpus, seq_len: int, eval_tokens: int, batch_size: int,
                device: torch.device) -> list[Batch]:
    """`sweep.data.Corpus.val_batches` as tensors on ``device``, each ``(b, seq_len)``."""
    return [(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
            for x, y in corpus.val_batches(seq_len, eval_tokens, batch_size)]


@torch.no_grad()
def mean_loss(model: torch.nn.Module, forward: Callable[..., tuple[Any, torch.Tensor]],
              batches: list[Batch], autocast: Callable[[], AbstractContextManager[Any]],
              device: torch.device) -> float:
    """Mean cross-entropy in nats per target token of ``forward`` over ``batches``.

    Args:
        model: The model ``forward`` runs (itself, or its ``torch.compile`` wrapper); in
            evaluation mode meanwhile, in training mode after.
        forward: ``forward(x, y) -> (logits, loss)``, the loss a mean over ``y``'s tokens.
        batches: From `val_tensors`.
        autocast: A fresh autocast context (or a null one) for each batch.
        device: Where the sum accumulates (the batches' device).
    """
    model.eval()
    total, count = torch.zeros((), device=device), 0
    for x, y in batches:
        with autocast():
            _, loss = forward(x, y)
        total += loss.float() * y.numel()
        count += y.numel()
    model.train()
    return float(total / count)


def eval_metrics(val_loss: float, train_loss: float, tokens_per_s: float, lr: float, *,
                 byte_level: bool) -> dict[str, float]:
    """The metrics an evaluation reports, by their `sweep.schema` names.

    Val and train loss in nats per token, throughput in tokens per second, the learning rate of
    the last step and, for a byte-level corpus, the val loss in bits per byte (val_loss / ln 2).
    """
    metrics = {METRIC_VAL_LOSS: val_loss, METRIC_TRAIN_LOSS: train_loss,
               METRIC_TOKENS_PER_S: tokens_per_s, METRIC_LR: lr}
    if byte_level:
        metrics[METRIC_VAL_BPB] = val_loss / math.log(2)
    return metrics
