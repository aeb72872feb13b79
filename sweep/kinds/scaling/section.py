"""``scaling``: the spec section of an IsoFLOP study (Hoffmann et al. 2022, section 3.2).

`ScalingSpec` and its parts: the budgets, the size rule (`SizeRuleSpec`, widths as a list or a
`WidthRange`) or the ladder of shapes (`ShapeSpec`), and how the grid is centred and bounded.
The rules across sections live in `sweep.kinds.scaling.rules`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from sweep.spec.schema import Section

__all__ = ["MAX_FAMILY", "AdaptiveSpec", "Budgets", "ScalingSpec", "ShapeSpec", "SizeRuleSpec",
           "WidthRange"]


#: The most shapes a size rule or ladder may hold.
MAX_FAMILY = 1000


def _no_booleans(value: Any) -> Any:
    if isinstance(value, list) and any(isinstance(b, bool) for b in value):
        raise ValueError("budgets are FLOP counts, not true/false")
    return value


def _distinct_budgets(value: list[float]) -> list[float]:
    for b in value:
        if not (math.isfinite(b) and b > 0):
            raise ValueError(f"budget {b!r}: every budget must be a finite FLOP count > 0")
    if len(set(value)) != len(value):
        raise ValueError("budgets must be distinct")
    # Grid-point labels name a budget by 4 significant digits (sweep.space.grid).
    shown = [f"{b:.4g}" for b in value]
    if len(set(shown)) != len(shown):
        same = sorted({s for s in shown if shown.count(s) > 1})
        raise ValueError(f"budgets {', '.join(same)} differ only beyond 4 significant "
                         "digits; give budgets that differ within them")
    return sorted(value)


#: Compute budgets C in FLOPs: finite, > 0, distinct within 4 significant digits (a grid
#: point's label names its budget by them), sorted; the scaling and hparams sections' own.
Budgets = Annotated[list[float], BeforeValidator(_no_booleans), AfterValidator(_distinct_budgets)]


class WidthRange(Section):
    """``scaling.rule.d_model`` as a range: ``min`` to ``max`` (inclusive) in steps of ``step``."""

    min: int = Field(gt=0)
    max: int = Field(gt=0)
    step: int = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> WidthRange:
        if self.max < self.min:
            raise ValueError(f"max={self.max} is below min={self.min}")
        if (self.max - self.min) // self.step + 1 > MAX_FAMILY:
            raise ValueError(f"{(self.max - self.min) // self.step + 1:,} widths: at most "
                             f"{MAX_FAMILY:,} (raise step)")
        return self

    def widths(self) -> list[int]:
        return list(range(self.min, self.max + 1, self.step))


class SizeRuleSpec(Section):
    """``scaling.rule``: a family of shapes from a range of widths.

    Each width ``d_model`` gets ``n_layers = max(1, round(d_model / aspect))`` (a fixed aspect
    ratio, Kaplan et al. 2020 section 3.1 and Hoffmann et al. 2022 table A9 keep
    d_model / n_layers roughly fixed) or the given ``n_layers`` (one depth for every width, or a
    list paired with the widths), ``n_heads = d_model / d_head`` and
    ``d_ff = round(d_ff_ratio * d_model)``.
    """

    d_model: list[int] | WidthRange
    aspect: float | None = Field(default=None, ge=1, allow_inf_nan=False)
    n_layers: int | list[int] | None = None
    d_head: int = Field(default=64, gt=0)
    d_ff_ratio: float = Field(default=4.0, gt=0, le=64, allow_inf_nan=False)

    @field_validator("d_model", mode="before")
    @classmethod
    def _one_form(cls, value: Any) -> Any:
        """A list of widths or a ``{min, max, step}`` range, with one message for either."""
        from pydantic import TypeAdapter, ValidationError

        adapter: TypeAdapter[WidthRange] | TypeAdapter[list[int]]
        if isinstance(value, dict):
            form, adapter = "range {min, max, step}", TypeAdapter(WidthRange)
        elif isinstance(value, list):
            form, adapter = "list of widths", TypeAdapter(list[int])
        else:
            raise ValueError(f"{value!r}: give a list of widths or a range {{min, max, step}}")
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(f"entry {part + 1}" if isinstance(part, int) else str(part)
                             for part in first["loc"])
            raise ValueError(f"{form}: {where + ': ' if where else ''}"
                             f"{first['msg'].removeprefix('Value error, ')}") from None

    @field_validator("d_model")
    @classmethod
    def _widths(cls, value: list[int] | WidthRange) -> list[int] | WidthRange:
        widths = value.widths() if isinstance(value, WidthRange) else value
        if len(widths) < 3 or any(w <= 0 for w in widths) or len(set(widths)) != len(widths):
            raise ValueError(f"{len(widths)} widths: give at least 3 distinct positive widths")
        if len(widths) > MAX_FAMILY:
            raise ValueError(f"{len(widths):,} widths: at most {MAX_FAMILY:,}")
        return value

    @model_validator(mode="after")
    def _depth(self) -> SizeRuleSpec:
        if (self.aspect is None) == (self.n_layers is None):
            raise ValueError("give exactly one of aspect (d_model / n_layers) and n_layers")
        widths = self.widths()
        if isinstance(self.n_layers, list) and len(self.n_layers) != len(widths):
            raise ValueError(f"n_layers has {len(self.n_layers)} entries for {len(widths)} "
                             "widths; give one depth, or one per width")
        depths = self.n_layers if isinstance(self.n_layers, list) else \
            [self.n_layers] if self.n_layers is not None else []
        if any(d < 1 for d in depths):
            raise ValueError("n_layers: every depth must be >= 1")
        bad = [w for w in widths if w % self.d_head]
        if bad:
            raise ValueError(f"d_model {bad} not divisible by d_head={self.d_head}")
        return self

    def widths(self) -> list[int]:
        return self.d_model.widths() if isinstance(self.d_model, WidthRange) \
            else list(self.d_model)

    def parameters(self) -> dict[str, Any]:
        """The rule's settings, as logged on every trial (``scaling.<name>``)."""
        out: dict[str, Any] = {"d_head": self.d_head, "d_ff_ratio": self.d_ff_ratio}
        if self.aspect is not None:
            out["aspect"] = self.aspect
        elif isinstance(self.n_layers, int):
            out["n_layers"] = self.n_layers
        return out


class ShapeSpec(Section):
    """One rung of ``scaling.ladder``: a model shape."""

    d_model: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    d_ff: int = Field(gt=0)

    @model_validator(mode="after")
    def _heads(self) -> ShapeSpec:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by "
                             f"n_heads={self.n_heads}")
        return self


class AdaptiveSpec(Section):
    """``scaling.adaptive``: rounds placed by the fits instead of the whole grid up front.

    The study trains a first round (the two smallest ``budgets``, ``sizes`` points each), then
    after each round refits the law by VPNLS with ``n_bootstrap`` resamples and places the next
    round where it shrinks N_opt's interval at ``target_flops`` the most (a new budget
    ``growth`` times the largest, or replicates of the largest), until the interval (q95 / q05
    of the draws) is at most ``target_rel_ci`` or the next round does not fit in
    ``allowance_flops`` (`sweep.kinds.scaling.adaptive`).
    """

    target_flops: float | None = Field(default=None, gt=0, allow_inf_nan=False, description=(
        "The budget C whose N_opt the study is for, FLOPs (default: 100 x the largest of "
        "budgets)."))
    allowance_flops: float | None = Field(default=None, gt=0, allow_inf_nan=False, description=(
        "The training FLOPs the study may spend in all (default: what the fixed grid of "
        "budgets x sizes_per_budget trains, as sweep validate prices it)."))
    target_rel_ci: float = Field(default=1.5, gt=1, le=1e6, allow_inf_nan=False, description=(
        "Stop when N_opt's interval at the target, q95 / q05 of the bootstrap, is at most "
        "this."))
    sizes: int = Field(default=3, ge=3, le=64, description="Sizes each round trains per budget.")
    growth: float = Field(default=3.0, gt=1, le=1e3, allow_inf_nan=False, description=(
        "A new budget's multiple of the largest so far."))
    n_bootstrap: int = Field(default=16, ge=2, le=1000, description=(
        "Bootstrap refits after each round."))
    span: float | None = Field(default=None, gt=1, le=1e6, allow_inf_nan=False, description=(
        "The first round's span around N* (default: twice scaling.span)."))


class ScalingSpec(Section):
    """``scaling``: an IsoFLOP study (Hoffmann et al. 2022, section 3.2).

    For each FLOP budget in ``budgets`` the service trains ``sizes_per_budget`` shapes from the
    size rule (``rule``) or ``ladder``, log-spaced from N*/``span`` to N* x ``span`` around the
    expected optimum N*, each for tokens = budget / (training FLOPs per token of the cost model).
    N* is where tokens / params equals ``tokens_per_param`` (Hoffmann et al. 2022 find about 20)
    or, with ``recentre`` and budgets run in ascending order, the optimum predicted from the
    earlier budgets' results. Shapes that would train less than one optimizer step, or more than
    ``max_epochs`` passes over the corpus's training split, are dropped with a note (Muennighoff
    et al. 2023, "Scaling Data-Constrained Language Models": up to about 4 epochs of repeated
    data are worth nearly as much as new data).

    With ``branches`` (needs ``train.schedule: wsd`` and ``train.warmup`` in tokens), a shape's
    run at a larger budget continues the stable phase of its run at the next smaller budget
    from a checkpoint and cools down on its own branch: the same final loss as a run from step
    0, for a fraction of the tokens (`sweep.train.branches`, Hagele et al. 2024).

    With ``adaptive`` the study places its rounds from the fits as it runs (`AdaptiveSpec`).
    """

    budgets: Budgets = Field(min_length=1, max_length=64)
    rule: SizeRuleSpec | None = None
    ladder: list[ShapeSpec] | None = Field(default=None, max_length=MAX_FAMILY)
    sizes_per_budget: int = Field(default=7, ge=3, le=64)
    tokens_per_param: float = Field(default=20.0, gt=0, allow_inf_nan=False)
    span: float = Field(default=4.0, gt=1, le=1e6, allow_inf_nan=False)
    recentre: bool = True
    max_epochs: float = Field(default=4.0, gt=0, allow_inf_nan=False)
    branches: bool = False
    adaptive: AdaptiveSpec | None = None

    @model_validator(mode="after")
    def _family(self) -> ScalingSpec:
        if (self.rule is None) == (self.ladder is None):
            raise ValueError("give exactly one of rule (a size rule) and ladder (a list of "
                             "shapes)")
        if self.ladder is not None:
            if len(self.ladder) < 3:
                raise ValueError(f"ladder has {len(self.ladder)} shapes; an IsoFLOP curve needs "
                                 "at least 3")
            if len({tuple(s.model_dump().values()) for s in self.ladder}) != len(self.ladder):
                raise ValueError("ladder lists a shape twice")
        return self

