"""The values the scaling fits accept: within ranges that keep their float64 arithmetic finite.

The fits form squares, products and powers of their inputs (6 N D, sums of squared losses,
N^-alpha in a design matrix), so an input near float64's largest number (1.8e308) overflows to
inf inside a solver. The ranges below are far wider than any model trained (about 2e12
parameters, 3e13 tokens and 5e25 FLOPs in 2025), yet keep every such product finite: with N and D
at most 1e20, 6 N D is at most 6e40, and a loss of at most 1e3 nats/token squares to 1e6 (a
model whose loss is e^-1000 per token from the truth is no language model: the log of even a
1e12-token vocabulary is 27.6 nats). A count below 1 is no count of parameters or tokens.

`check_limits` holds the fits to them (`sweep.scaling.result.finite_rows` calls it);
`sweep.scaling.points_csv.read_csv_points` refuses a CSV value outside them, naming its line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sweep.schema import METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, METRIC_N_TOKENS, METRIC_TRAIN_FLOPS

__all__ = ["LIMITS", "Limit", "check_limits", "out_of_range"]


@dataclass(frozen=True)
class Limit:
    """The closed range ``[lo, hi]`` a column's finite values must lie in, and their unit."""

    lo: float
    hi: float
    unit: str

    def rule(self) -> str:
        """The rule in words: ``is outside [1, 1e+20] parameters, the range a fit accepts``."""
        return f"is outside [{self.lo:g}, {self.hi:g}] {self.unit}, the range a fit accepts"


_COUNT_N = Limit(1.0, 1e20, "parameters")
_COUNT_D = Limit(1.0, 1e20, "tokens")
_FLOPS = Limit(1.0, 1e42, "FLOPs")
#: Each fitted column's range, by every name it goes by (points column, CSV spelling, fit input).
LIMITS: dict[str, Limit] = {
    METRIC_N_PARAMS: _COUNT_N, METRIC_N_TOKENS: _COUNT_D,
    METRIC_TRAIN_FLOPS: _FLOPS, "flops": _FLOPS, METRIC_BUDGET_FLOPS: _FLOPS, "budget": _FLOPS,
    "loss": Limit(0.0, 1e3, "nats/token"),
    "x": Limit(0.0, 1e42, "(parameters, tokens or FLOPs)"),
}


def out_of_range(name: str, values: np.ndarray) -> np.ndarray:
    """Which values of column ``name`` lie outside its `LIMITS` range: a boolean array.

    Non-finite values are not judged here (the fits drop them, and count them), nor are
    values <= 0 (each fit's and the CSV reader's own rules refuse those, in their words); a
    name without a limit has none outside.
    """
    values = np.asarray(values, dtype=float)
    limit = LIMITS.get(name)
    if limit is None:
        return np.zeros(values.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (values > 0) & ((values < limit.lo) | (values > limit.hi))


def check_limits(names: tuple[str, ...], columns: list[np.ndarray], error: type[Exception]):
    """Raise ``error`` naming the first value outside its column's range (`LIMITS`).

    Args:
        names: A name per column.
        columns: Arrays of shape ``(n,)``, in the caller's input order.
        error: The exception type raised.

    Raises:
        error: ``<name>: row <i>: <value> is outside [lo, hi] <unit>, the range a fit accepts``.
    """
    for name, values in zip(names, columns, strict=True):
        hits = np.flatnonzero(out_of_range(name, values))
        if hits.size:
            row = int(hits[0])
            raise error(f"{name}: row {row}: {float(values[row]):.6g} {LIMITS[name].rule()}")
