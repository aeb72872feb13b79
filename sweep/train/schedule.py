"""Learning-rate schedules: linear warmup, then cosine, linear or constant decay.

The schedule is a pure function of how far training has gone, so it has no state to save: a
run resumed from a checkpoint at the same token count gets the same learning rate.

Cosine decay to a floor follows Loshchilov & Hutter 2017 ("SGDR", eq. 5, one cycle without
restarts) as used by GPT-3 (Brown et al. 2020, appendix B) and nanoGPT's ``get_lr``: the rate
rises linearly to ``lr`` over the warmup, then falls to ``min_lr_ratio * lr`` at the end of the
budget.

Warmup-stable-decay (``wsd``; Hagele et al. 2024, "Scaling Laws and Compute-Optimal Training
Beyond Fixed Training Durations", section 3; Hu et al. 2024, "MiniCPM") holds the peak rate
after warmup and cools down only over the last ``decay_fraction`` of the budget, with their
best cooldown shape, 1 - sqrt(progress through the cooldown), to ``min_lr_ratio * lr``. Its
loss at the end matches cosine's at the same length (their figures 3-4); the stable phase does
not depend on where training will stop, which is what lets one run serve several lengths by
cooling down from a stable-phase checkpoint. The trade-off: the loss during the stable phase is
above cosine's at equal tokens, so only the cooled-down end of each run is a valid point of a
scaling curve, and a cooldown of 10-20% is part of every budget's cost.
"""

from __future__ import annotations

import math

from sweep.train.config import Budget, Schedule, TrainConfig

__all__ = ["budget_lr_factor", "lr_factor", "wsd_cooldown_start", "wsd_stable_end"]


def wsd_cooldown_start(total: float, warmup: float, decay_fraction: float) -> float:
    """Where a ``wsd`` schedule's cooldown starts: ``max(warmup, total * (1 - decay_fraction))``.

    Up to this point the rate is the peak (after warmup) whatever ``total`` is, so a run
    stopped here can be continued to any longer budget with the same warmup
    (`sweep.train.branches`). Units are those of ``total`` (tokens, or seconds).
    """
    return max(warmup, total * (1.0 - decay_fraction))


def wsd_stable_end(total_tokens: int, step_tokens: int, warmup_tokens: int,
                   decay_fraction: float) -> int:
    """The last step boundary at or before the cooldown start, in tokens.

    Every step that ends there or earlier runs at the rate any longer budget's run would use,
    so a checkpoint there can be continued by any of them (`sweep.train.branches`).
    """
    start = wsd_cooldown_start(total_tokens, warmup_tokens, decay_fraction)
    return int(math.floor(start / step_tokens)) * step_tokens


def lr_factor(
    schedule: Schedule,
    done: float,
    total: float,
    warmup: float,
    min_lr_ratio: float,
    *,
    decay_fraction: float = 0.2,
) -> float:
    """Multiplier of the peak learning rate for the step that ends at ``done``.

    Args:
        schedule: ``cosine``, ``linear``, ``constant`` or ``wsd``.
        done: Progress at the end of this step (tokens, or seconds for time budgets).
        total: Progress at the end of the budget, same unit.
        warmup: Warmup length, same unit; 0 for none.
        min_lr_ratio: Floor of the decay as a fraction of the peak.
        decay_fraction: ``wsd``: the cooldown's share of ``total``, in (0, 1].

    Returns:
        A factor in (0, 1]: ``done / warmup`` during warmup, then the decay.
    """
    if warmup > 0 and done < warmup:
        return max(done, 0.0) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    if schedule == "wsd":
        start = wsd_cooldown_start(total, warmup, decay_fraction)
        if done <= start:
            return 1.0
        frac = min(1.0, (done - start) / (total - start))
        return min_lr_ratio + (1.0 - min_lr_ratio) * (1.0 - math.sqrt(frac))
    frac = min(1.0, max(0.0, (done - warmup) / (total - warmup)))
    if schedule == "linear":
        decay = 1.0 - frac
    else:
        decay = 0.5 * (1.0 + math.cos(math.pi * frac))
    return min_lr_ratio + (1.0 - min_lr_ratio) * decay


def budget_lr_factor(train: TrainConfig, budget: Budget, tokens: int, seconds: float) -> float:
    """`lr_factor` of ``train``'s schedule at the end of a step, within ``budget``.

    A seconds budget runs its schedule in seconds (``warmup`` a fraction of them), any other
    in tokens.

    Args:
        train: The schedule, its warmup, floor and cooldown share.
        budget: ``train``'s budget resolved against the model (`resolve_budget`).
        tokens: Tokens seen at the end of the step.
        seconds: Seconds spent in training steps at the end of the step.
    """
    if budget.seconds is not None:
        return lr_factor(train.schedule, seconds, budget.seconds, train.warmup * budget.seconds,
                         train.min_lr_ratio, decay_fraction=train.decay_fraction)
    # resolve_budget sets both for every budget but seconds
    assert budget.total_tokens is not None and budget.warmup_tokens is not None
    return lr_factor(train.schedule, tokens, budget.total_tokens, budget.warmup_tokens,
                     train.min_lr_ratio, decay_fraction=train.decay_fraction)
