"""The rules of a scaling study beyond its section's fields.

A scaling study owns the shape and the budget of every trial (its size rule or ladder, and
``scaling.budgets``), lays out each grid point's step count from a fixed batch and sequence
length, and trains every point to the end on one objective, ``val_loss``. With
``scaling.branches`` it needs a WSD schedule whose stable phase every budget shares.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from sweep.schema import METRIC_VAL_LOSS
from sweep.spec.fields import ARCH_FIELDS
from sweep.spec.values import candidates
from sweep.train.config import BUDGET_FIELDS, TrainConfig

if TYPE_CHECKING:
    from sweep.kinds.scaling.section import ScalingSpec
    from sweep.spec.schema import StudySpec

__all__ = ["SCALING_FIXED_TRAIN", "SCALING_OWNED_MODEL", "scaling_problems", "scaling_section"]


def scaling_section(spec: StudySpec) -> ScalingSpec:
    """The ``scaling`` section of a scaling study's spec."""
    return spec.section("scaling")


#: Model fields a scaling study's size rule or ladder sets for every trial (``n_kv_heads``: the
#: rule's and ladder's shapes are multi-head, as their head counts need not share a divisor).
SCALING_OWNED_MODEL = ("preset", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "d_head",
                       "d_ff_ratio")
#: Train fields that fix the batch, from which each grid point's step count is laid out.
SCALING_FIXED_TRAIN = ("batch_size", "grad_accum", "batch_tokens")


def scaling_problems(spec: StudySpec) -> Iterator[str]:
    """A scaling study owns the shape and the budget of every trial, and trains each to the end."""
    section = scaling_section(spec)
    rung = "scaling.rule" if section.rule is not None else "scaling.ladder"
    for name in SCALING_OWNED_MODEL:
        if name in spec.model:
            yield f"model.{name}: a scaling study takes every shape from {rung}; remove it"
    for name in ARCH_FIELDS:
        if name in spec.model and "encoder_decoder" in candidates(spec.model.get("arch")):
            yield (f"model.{name}: a scaling study's shapes are decoder-only ({rung} sets "
                   "n_layers of one stack); encoder-decoder models are not supported there")
            break
    for name in [k for k in BUDGET_FIELDS if k in spec.train]:
        yield (f"train.{name}: a scaling study trains each shape for tokens = budget / FLOPs "
               "per token, from scaling.budgets; remove it")
    for name in SCALING_FIXED_TRAIN:
        if isinstance(spec.train.get(name), dict) or (
                name in spec.train and not isinstance(spec.train[name], (int, float))):
            yield (f"train.{name}: must be fixed in a scaling study (each grid point's step "
                   "count is laid out from it)")
    if "seq_len" in spec.model and not isinstance(spec.model["seq_len"], int):
        yield ("model.seq_len: must be fixed in a scaling study (each grid point's step count "
               "is laid out from it)")
    s = spec.search
    if s.scheduler == "pbt":
        yield ("search.scheduler: pbt mutates trials mid-run and cannot lay out an IsoFLOP "
               "grid; use none (the default for scaling studies)")
    if list(s.objectives) != [METRIC_VAL_LOSS]:
        yield "search.objectives: a scaling study fits val_loss only; remove the others"
    if section.branches:
        yield from _check_branches(spec)
    if section.adaptive is not None:
        yield from _check_adaptive(spec)


def _check_adaptive(spec: StudySpec) -> Iterator[str]:
    """An adaptive study's first round is its two smallest budgets, and must fit its allowance."""
    section = scaling_section(spec)
    ad = section.adaptive
    if ad is None:
        return
    if len(section.budgets) < 2:
        yield ("scaling.adaptive: needs at least 2 scaling.budgets (its first round trains the "
               "two smallest before the first fit)")
        return
    first = sorted(section.budgets)[:2]
    if ad.target_flops is not None and ad.target_flops < first[1]:
        yield (f"scaling.adaptive.target_flops: {ad.target_flops:.4g} is below the first "
               f"round's largest budget {first[1]:.4g}; give the budget whose N_opt you want")
    if ad.allowance_flops is not None and ad.allowance_flops < ad.sizes * sum(first):
        yield (f"scaling.adaptive.allowance_flops: {ad.allowance_flops:.4g} does not buy the "
               f"first round ({ad.sizes} sizes at C={first[0]:.4g} and C={first[1]:.4g}, about "
               f"{ad.sizes * sum(first):.4g} FLOPs)")
    if section.branches:
        yield ("scaling.adaptive: not with scaling.branches (a branch continues the trunk of "
               "the next smaller of scaling.budgets; an adaptive study places its own budgets)")
    seed = spec.train.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        yield ("train.seed: must be a fixed integer in an adaptive scaling study (a replicate "
               "of a point trains with train.seed + its replicate number)")


def _check_branches(spec: StudySpec) -> Iterator[str]:
    """WSD branches share a stable phase across budgets (`sweep.train.branches`)."""
    schedule = spec.train.get("schedule", TrainConfig.schedule)
    if schedule != "wsd":
        yield (f"scaling.branches: needs train.schedule: wsd (a fixed value), got {schedule!r}; "
               "only a warmup-stable-decay schedule has a stable phase that every budget shares")
    warmup = spec.train.get("warmup", TrainConfig.warmup)
    if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or 0 < warmup < 1:
        yield (f"scaling.branches: needs train.warmup fixed in tokens (>= 1) or 0, got "
               f"{warmup!r}; a fraction of the budget would give each budget its own warmup")

    if spec.search.checkpoint_interval is not None:
        yield ("search.checkpoint_interval: a branched grid point continues its shape's "
               "stable-phase trunk (scaling.branches); it takes no checkpoints of its own")
