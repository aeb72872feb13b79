"""The ``simulate`` section of a study spec, and `Section`, the base of every section model.

A simulated study draws every trial's losses from a law (`sweep.simulate`) instead of training;
the section names the law (a name of `sweep.simulate.law.LAWS` or its numbers), the seed noise
and the seed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = ["HparamLawSpec", "LawSpec", "Section", "SimulateSpec"]


def _laws() -> tuple[str, ...]:
    """The names of `sweep.simulate.law.LAWS` (imported only for a spec with a law)."""
    from sweep.simulate.law import LAWS

    return tuple(LAWS)


class Section(BaseModel):
    """A section of a study spec: unknown keys refused, frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class HparamLawSpec(Section):
    """A hyperparameter's law: optimum ``coef * C^exponent``, loss ``curvature`` around it.

    `sweep.simulate.law.HparamLaw`: a factor e off the optimum costs ``curvature`` of the loss.
    """

    coef: float = Field(gt=0)
    exponent: float
    curvature: float = Field(gt=0)


class LawSpec(Section):
    """A simulated law: (E + A / N^alpha + B / D^beta) (1 + lr and batch penalties).

    Nats/token (`sweep.simulate.law.SimulatedLaw`; Hoffmann et al. 2022 eq. 2).
    """

    E: float = Field(ge=0)
    A: float = Field(gt=0)
    B: float = Field(gt=0)
    alpha: float = Field(gt=0)
    beta: float = Field(gt=0)
    lr: HparamLawSpec | None = None
    batch_size: HparamLawSpec | None = None


class SimulateSpec(Section):
    """``simulate``: every trial's loss drawn from a law instead of training (`sweep.simulate`).

    ``law`` is a name (``chinchilla``, ``asymmetric``, ``chinchilla-lr``) or the law's
    numbers; N is the trial's parameter count (cost model), D its tokens, the lr its peak
    ``train.lr`` and the batch its tokens per step. ``noise`` is the sigma of the log-normal
    seed noise on each trial's loss (one draw per trial, from ``seed`` and its number). The
    study runs through the executors, MLflow and the analysis as any other, tagged
    ``sweep.simulated``.
    """

    law: str | LawSpec = "chinchilla"
    noise: float = Field(default=0.01, ge=0, le=0.5)
    seed: int = 0

    @field_validator("law", mode="before")
    @classmethod
    def _law_numbers(cls, value: Any) -> Any:
        """A mapping validated as a `LawSpec` here, so its errors name its fields alone."""
        if isinstance(value, str | LawSpec):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{value!r}: a law's name ({', '.join(_laws())}) or a mapping of "
                             "E, A, B, alpha, beta (lr, batch_size optional)")
        try:
            return LawSpec.model_validate(value)
        except ValidationError as exc:
            raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                       for e in exc.errors())) from None

    @field_validator("law")
    @classmethod
    def _known_law(cls, value: str | LawSpec) -> str | LawSpec:
        if isinstance(value, str) and value not in _laws():
            raise ValueError(f"{value!r}: unknown law; choose from {', '.join(_laws())} or give "
                             "{E, A, B, alpha, beta}")
        return value
