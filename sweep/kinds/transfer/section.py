"""``transfer``: the spec section of a width-transfer study (one learning-rate grid per width)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from sweep.spec.schema import Section

__all__ = ["MAX_TRANSFER_WIDTHS", "TransferSpec"]


#: The most widths a transfer study may compare.
MAX_TRANSFER_WIDTHS = 16


class TransferSpec(Section):
    """``transfer``: the same learning-rate grid at every width (hyperparameter transfer).

    Every trial is one point of the grid ``widths`` x ``train.lr``'s choices x every other
    searched field's choices (the product, each point trained once, to the end). Each width
    sets ``d_model``, ``n_heads = d_model / d_head`` and ``d_ff = round(d_ff_ratio *
    d_model)``; ``base_d_model`` (muP, CompleteP) stays as the model section fixes it, so the
    widths share one base. A searched ``train.seed`` (``{choice: [0, 1]}``) gives each point
    that many replicates, which ``sweep analyze transfer`` averages. Under muP the best learning
    rate should stay put across the widths (Yang et al. 2022, "Tensor Programs V", sec. 1 and
    Figure 1); ``sweep analyze transfer`` measures how far it moves.
    """

    widths: list[int] = Field(min_length=2, max_length=MAX_TRANSFER_WIDTHS)
    d_head: int = Field(default=32, gt=0)
    d_ff_ratio: float = Field(default=4.0, gt=0, le=64, allow_inf_nan=False)

    @field_validator("widths")
    @classmethod
    def _widths(cls, value: list[int]) -> list[int]:
        if any(w <= 0 for w in value) or len(set(value)) != len(value):
            raise ValueError(f"{value}: give at least 2 distinct positive widths")
        return sorted(value)

    @model_validator(mode="after")
    def _heads(self) -> TransferSpec:
        bad = [w for w in self.widths if w % self.d_head]
        if bad:
            raise ValueError(f"widths {bad} not divisible by d_head={self.d_head}")
        return self

