"""Search domains of a spec's ``model`` and ``train`` keys.

``{float: ...}``, ``{int: ...}``, ``{choice: ...}`` or a fixed value, and `SpecParam`, one key with
its domain. ``train.lr`` may also be ``{from_study: ..., width: ...}`` (`FromStudyDomain`: a
learning rate from an hparams study's fit, `sweep.spec.from_study`).

A domain with ``when`` is only sampled while every named field takes one of the listed values.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)


# ----------------------------------------------------------------------------------- domains
def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _identity(value: Any) -> str:
    """A choice as JSON, so that 1, 1.0 and true differ and equal lists agree."""
    import json  # only for a spec with choices

    try:
        return json.dumps(value, sort_keys=True, default=repr)
    except TypeError:  # a mapping with keys of several types cannot be sorted
        return repr(value)


def _two_bounds(value: Any) -> Any:
    """``[lo, hi]`` as given, or a message saying so (not pydantic's per-item ones)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"give the range as [lo, hi], two numbers; got {value!r}")
    return value


class _Domain(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    when: dict[str, list[Any]] | None = None

    @field_validator("when", mode="before")
    @classmethod
    def _when_lists(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _as_list(v) for k, v in value.items()}
        return value

    @field_validator("when")
    @classmethod
    def _when_nonempty(cls, value: dict[str, list[Any]] | None) -> Any:
        if value is not None and (not value or any(not v for v in value.values())):
            raise ValueError("when needs at least one field with at least one value")
        return value


class FloatDomain(_Domain):
    """``{float: [lo, hi], log: bool, step: x}``: a real interval (Optuna FloatDistribution)."""

    bounds: tuple[float, float] = Field(alias="float")
    log: bool = False
    step: float | None = Field(default=None, gt=0)

    _pair = field_validator("bounds", mode="before")(_two_bounds)

    @model_validator(mode="after")
    def _check(self) -> FloatDomain:
        lo, hi = self.bounds
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"bounds must be finite, got [{lo}, {hi}]")
        if lo > hi:
            raise ValueError(f"lo={lo} > hi={hi}")
        if self.log and lo <= 0:
            raise ValueError(f"log: true needs lo > 0, got lo={lo}")
        if self.log and self.step is not None:
            raise ValueError("log: true cannot be combined with step")
        return self


class IntDomain(_Domain):
    """``{int: [lo, hi], step: k, log: bool}``: integers lo, lo+k, ..., hi (IntDistribution)."""

    bounds: tuple[int, int] = Field(alias="int")
    step: int = Field(default=1, ge=1)
    log: bool = False

    _pair = field_validator("bounds", mode="before")(_two_bounds)

    @model_validator(mode="after")
    def _check(self) -> IntDomain:
        lo, hi = self.bounds
        if lo > hi:
            raise ValueError(f"lo={lo} > hi={hi}")
        if self.log and lo <= 0:
            raise ValueError(f"log: true needs lo > 0, got lo={lo}")
        if self.log and self.step != 1:
            raise ValueError("log: true needs step 1")
        if (hi - lo) % self.step:
            raise ValueError(f"hi - lo = {hi - lo} is not a multiple of step={self.step}")
        return self

    def values(self) -> range:
        lo, hi = self.bounds
        return range(lo, hi + 1, self.step)


class ChoiceDomain(_Domain):
    """``{choice: [a, b, ...]}``: one of the listed values (CategoricalDistribution)."""

    options: list[Any] = Field(alias="choice", min_length=1)

    @field_validator("options")
    @classmethod
    def _unique(cls, value: list[Any]) -> list[Any]:
        """Refuse a value listed twice, compared as JSON: 1, 1.0 and true are three choices.

        Linear in the number of choices; lists and mappings (unhashable) compare by content.
        """
        counts = Counter(_identity(v) for v in value)
        dup = sorted(s for s, n in counts.items() if n > 1)
        if dup:
            raise ValueError(f"duplicate choice(s): {', '.join(dup)}")
        return value


#: Keys of a searched range that ``from_study`` replaces (its range is the law's).
_RANGE_KEYS = ("float", "int", "choice", "low", "high", "log", "step")


class LrLaw(BaseModel):
    """eta_opt(C) = ``coef`` C^``exponent`` as an hparams study's analysis fitted it.

    Set by `sweep.spec.from_study.resolve_lr` (read from the source's ``analysis/hparams.json``
    or from the study's stored law), never by hand; kept in the spec copy the study stores.

    Attributes:
        coef: a, a learning rate at C = 1 FLOP.
        exponent: b, unitless.
        estimator: ``band`` or ``vertex`` (`sweep.scaling.hparam_laws`).
        exponent_interval: Its bootstrap interval of b, or None without one.
        budgets: The smallest and largest budget C (FLOPs) the fit saw.
        source: The analysis file read, an absolute path.
        sha256: That file's SHA-256 when it was read.
        study: The source study's name, as its analysis names it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    coef: float = Field(gt=0, allow_inf_nan=False)
    exponent: float = Field(allow_inf_nan=False)
    estimator: Literal["band", "vertex"]
    exponent_interval: tuple[float, float] | None = None
    budgets: tuple[float, float]
    source: str
    sha256: str
    study: str = ""

    def lr_opt(self, flops: float) -> float:
        """eta_opt at budget ``flops`` (C, FLOPs): ``coef * flops ** exponent``."""
        return self.coef * flops ** self.exponent


class FromStudyDomain(BaseModel):
    """``train.lr``: eta_opt(C) of an hparams study's fit x a factor in [1/width, width].

    ``{from_study: NAME_OR_FOLDER, width: 2, estimator: band|vertex}``. Each trial's learning
    rate is eta_opt(C) x factor: eta_opt(C) = a C^b, the fit of the
    hparams study ``from_study`` (``runs/NAME`` or a folder; its ``analysis/hparams.json``
    from ``sweep analyze hparams``), at the trial's budget C = 6 N D; the factor log-uniform
    in [1/width, width] as the sampler draws it (``lr.factor``; 1 for a scaling study's
    points). ``estimator`` defaults to the analysis's verdict; ``law`` is written by ``sweep
    run`` (the law the study started with, kept for its resume). Not with ``float``, ``low``
    or ``high``: `sweep.spec.from_study`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    from_study: str = Field(min_length=1)
    width: float = Field(default=2.0, gt=1, allow_inf_nan=False)
    estimator: Literal["band", "vertex"] | None = None
    law: LrLaw | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_range(cls, value: Any) -> Any:
        given = [k for k in _RANGE_KEYS if isinstance(value, dict) and k in value]
        if given:
            raise ValueError(f"from_study takes the range from the study's fit (eta_opt(C) / "
                             f"width to eta_opt(C) x width); remove {', '.join(given)}")
        return value

Domain = FloatDomain | IntDomain | ChoiceDomain


def _param_kind(value: Any) -> str:
    if isinstance(value, dict):
        if "from_study" in value:
            return "<from_study>"
        kinds = [k for k in ("float", "int", "choice") if k in value]
        if len(kinds) == 1:
            return f"<{kinds[0]}>"
        return "<bad>"
    return "<fixed>"


Param = Annotated[
    Annotated[FloatDomain, Tag("<float>")]
    | Annotated[IntDomain, Tag("<int>")]
    | Annotated[ChoiceDomain, Tag("<choice>")]
    | Annotated[FromStudyDomain, Tag("<from_study>")]
    | Annotated[Any, Tag("<fixed>")],
    Discriminator(
        _param_kind,
        custom_error_type="param",
        custom_error_message="expected a fixed value or exactly one of {float: [lo, hi]}, "
        "{int: [lo, hi]}, {choice: [...]} (train.lr also {from_study: ...})",
    ),
]


# ------------------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class SpecParam:
    """One ``model`` or ``train`` key: its dotted ``path`` and a domain or fixed ``value``."""

    section: str
    name: str
    value: Any

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def domain(self) -> Domain | None:
        return self.value if isinstance(self.value, (FloatDomain, IntDomain, ChoiceDomain)) \
            else None

    @property
    def when(self) -> dict[str, list[Any]]:
        return dict(self.domain.when or {}) if self.domain is not None else {}
