"""``hparams``: the spec section of a learning-rate and batch-size law study.

`HparamsSpec` and its parts: the budgets, the learning-rate grid (`LrGrid`), the batch-size
grid (`BatchGrid`, tokens per optimizer step), the near-optimal band and the shape trained at
each budget (`HparamsShape`). The rules across sections live in `sweep.kinds.hparams.rules`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from sweep.kinds.scaling.section import Budgets, SizeRuleSpec
from sweep.spec.schema import Section

__all__ = ["MAX_HPARAM_AXIS", "BatchGrid", "HparamsShape", "HparamsSpec", "LrGrid"]

#: The most values an axis of the grid (learning rates, batch sizes) may hold.
MAX_HPARAM_AXIS = 64


class LrGrid(Section):
    """``hparams.lr``: ``n`` peak learning rates log-spaced from ``low`` to ``high``."""

    low: float = Field(gt=0, allow_inf_nan=False)
    high: float = Field(gt=0, allow_inf_nan=False)
    n: int = Field(ge=3, le=MAX_HPARAM_AXIS)

    @model_validator(mode="after")
    def _ordered(self) -> LrGrid:
        if not self.high > self.low:
            raise ValueError(f"high={self.high:g} must be above low={self.low:g}")
        return self

    def values(self) -> list[float]:
        """The learning rates, ascending (4 significant digits, as labels name them)."""
        ratio = (self.high / self.low) ** (1 / (self.n - 1))
        return [float(f"{self.low * ratio ** i:.4g}") for i in range(self.n)]


class BatchGrid(Section):
    """``hparams.batch_size``: tokens per optimizer step, as ``values`` or ``{low, high, n}``.

    A range is ``n`` values log-spaced from ``low`` to ``high``, each rounded to the nearest
    multiple of tokens per micro-batch (``train.batch_size * model.seq_len``,
    `sweep.kinds.hparams.grid.batch_values`); listed values must be such multiples already.
    """

    values: list[int] | None = Field(default=None, min_length=1, max_length=MAX_HPARAM_AXIS)
    low: int | None = Field(default=None, gt=0)
    high: int | None = Field(default=None, gt=0)
    n: int | None = Field(default=None, ge=2, le=MAX_HPARAM_AXIS)

    @model_validator(mode="after")
    def _one_form(self) -> BatchGrid:
        ranged = (self.low, self.high, self.n)
        if (self.values is None) == all(v is None for v in ranged):
            raise ValueError("give values: [...] or low, high and n, not both")
        if self.values is not None:
            if any(v <= 0 for v in self.values) or len(set(self.values)) != len(self.values):
                raise ValueError(f"values {self.values}: give distinct token counts > 0")
        elif any(v is None for v in ranged):
            raise ValueError("a range needs low, high and n")
        elif not self.high > self.low:  # type: ignore[operator]
            raise ValueError(f"high={self.high} must be above low={self.low}")
        return self


class HparamsShape(Section):
    """``hparams.shape``: the model trained at each budget.

    At budget C the shape of ``rule`` nearest (in log N) to the compute-optimal N* of the
    prior the scaling kind centres its grids on, D / N = ``tokens_per_param`` (Hoffmann et al.
    2022 find about 20), with C = 6ND: N* = sqrt(C / (6 tokens_per_param)).
    """

    rule: SizeRuleSpec
    tokens_per_param: float = Field(default=20.0, gt=0, allow_inf_nan=False)


class HparamsSpec(Section):
    """``hparams``: learning-rate and batch-size laws (DeepSeek LLM, Bi et al. 2024, sec. 3.1).

    At each budget of ``budgets`` the study trains the compute-optimal shape (``shape``) over
    the grid ``lr`` x ``batch_size``, each trial for D = C / (6 N) tokens (N: its parameters),
    to the end. ``sweep analyze hparams`` fits eta_opt(C) = a C^b and B_opt(C) = a C^b from the
    runs within ``band`` of each budget's best loss (DeepSeek's 0.25%) and from per-budget
    parabola vertices (`sweep.scaling.hparam_laws`). Without ``batch_size`` every trial takes
    the spec's fixed batch and only the learning-rate law is fitted.
    """

    budgets: Budgets = Field(min_length=2, max_length=32)
    lr: LrGrid
    batch_size: BatchGrid | None = None
    band: float = Field(default=0.0025, ge=0, lt=1, allow_inf_nan=False)
    shape: HparamsShape

