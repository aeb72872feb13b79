"""The options of a scaling analysis the CLI checks before numpy or pandas load.

- The FLOP convention (`FLOP_CONVENTION`, one home for it): C = 6ND, the training FLOPs of a
  dense transformer of N parameters on D tokens, the forward pass 2ND and the backward 4ND
  (Kaplan et al. 2020, section 2.1; Hoffmann et al. 2022, section 3). Every budget, every
  compute-optimal split and every ``n_tokens`` derived from a FLOPs column uses it.
- Approach 3's Huber delta (`DEFAULT_HUBER_DELTA`, Hoffmann et al. 2022 appendix D.2, and the
  range `HUBER_DELTA_RANGE`).
- How a table of someone else's is read (`TableOptions`): a column mapping (``--columns``),
  row filters (``--where``) and the convention that derives ``n_tokens`` (``--convention``).

Pure Python: `sweep analyze scaling` refuses a bad flag here in a fraction of a second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from sweep.errors import InputError
from sweep.schema import METRIC_N_PARAMS, METRIC_N_PARAMS_NON_EMBEDDING, METRIC_N_TOKENS

__all__ = ["CONVENTIONS", "DEFAULT_HUBER_DELTA", "FLOPS_PER_PARAM_TOKEN", "FLOP_CONVENTION",
           "HUBER_DELTA_RANGE", "TABLE_COLUMNS", "TABLE_SUFFIXES", "TableOptionError",
           "TableOptions", "check_huber_delta", "parse_columns", "parse_convention",
           "parse_where"]

#: How FLOPs relate to parameters N and tokens D in every budget and allocation here.
FLOP_CONVENTION = "C = 6ND"
#: The 6 of `FLOP_CONVENTION`: training FLOPs per parameter per token.
FLOPS_PER_PARAM_TOKEN = 6
#: ``--convention`` names -> the convention (only 6ND: the one every fit here assumes).
CONVENTIONS = {"6ND": FLOP_CONVENTION}
#: Approach 3's Huber delta on log loss (Hoffmann et al. 2022, appendix D.2).
DEFAULT_HUBER_DELTA = 1e-3
#: The deltas accepted. Down to 1e-6 (nearly an L1 fit) the fit converges as at 1e-3; any
#: delta above the largest residual in log loss (a few units at most within the loss's range)
#: makes the Huber loss half the squared residual: least squares on log loss.
HUBER_DELTA_RANGE = (1e-6, 1e9)
#: The columns of a table of points, by the names ``--columns`` maps onto.
TABLE_COLUMNS = (METRIC_N_PARAMS, METRIC_N_TOKENS, "loss", "flops", "budget",
                 METRIC_N_PARAMS_NON_EMBEDDING)
#: File name endings -> the format read.
TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


class TableOptionError(InputError, ValueError):
    """A ``--columns``, ``--where``, ``--convention`` or ``--huber-delta`` that cannot be used."""


@dataclass(frozen=True)
class TableOptions:
    """How a table is read into points.

    Attributes:
        columns: ``(name, header)`` pairs: the table's column ``header`` is read as the points'
            ``name`` (one of `TABLE_COLUMNS`).
        where: ``(header, value)`` filters: a row is kept when, for every header named, its
            value equals one of the values given for that header (as written, or as the same
            number).
        convention: A key of `CONVENTIONS`: derive ``n_tokens`` from the ``flops`` column
            (else ``budget``) as D = C / (6N); None: the table gives ``n_tokens``.
    """

    columns: tuple[tuple[str, str], ...] = ()
    where: tuple[tuple[str, str], ...] = ()
    convention: str | None = None

    def source(self, name: str) -> str:
        """The table's header read as ``name`` (``name`` itself unless mapped)."""
        return dict(self.columns).get(name, name)


def _pairs(flag: str, values: Iterable[str] | None) -> list[tuple[str, str]]:
    """``KEY=VALUE`` arguments split at the first ``=``, stripped; refuses one without a key."""
    pairs = []
    for raw in values or ():
        key, sep, value = str(raw).partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise TableOptionError(f"{flag} {raw!r}: must be NAME=COLUMN, e.g. "
                                   + ('n_params="Model Size"' if flag == "--columns"
                                      else "condition=raw_loss"))
        pairs.append((key, value))
    return pairs


def parse_columns(values: Iterable[str] | None) -> tuple[tuple[str, str], ...]:
    """``--columns NAME=HEADER`` (repeated) -> ``(name, header)`` pairs.

    Raises:
        TableOptionError: A value without ``=``, a name not in `TABLE_COLUMNS`, an empty
            header, or a name mapped twice (the flag, the value and the rule named).
    """
    pairs = _pairs("--columns", values)
    seen: set[str] = set()
    for name, header in pairs:
        if name not in TABLE_COLUMNS:
            raise TableOptionError(f"--columns {name}={header}: {name!r} is no column of a "
                                   f"table of points; map one of {', '.join(TABLE_COLUMNS)}")
        if not header:
            raise TableOptionError(f"--columns {name}=: give the table's column to read as "
                                   f"{name}")
        if name in seen:
            raise TableOptionError(f"--columns {name}: mapped twice; give each name once")
        seen.add(name)
    return tuple(pairs)


def parse_where(values: Iterable[str] | None) -> tuple[tuple[str, str], ...]:
    """``--where COLUMN=VALUE`` (repeated) -> ``(column, value)`` pairs.

    Raises:
        TableOptionError: A value without ``=`` or without a column.
    """
    return tuple(_pairs("--where", values))


def parse_convention(value: str | None) -> str | None:
    """``--convention`` -> a key of `CONVENTIONS` (None when not given).

    Raises:
        TableOptionError: An unknown convention (the known ones named).
    """
    if value is None:
        return None
    key = str(value).strip().upper()
    if key not in CONVENTIONS:
        known = ", ".join(f"{k} ({v})" for k, v in CONVENTIONS.items())
        raise TableOptionError(f"--convention {value!r}: unknown; choose {known}")
    return key


def check_huber_delta(value: float | str) -> float:
    """``--huber-delta`` (a number, or its text) as a float within `HUBER_DELTA_RANGE`.

    Raises:
        TableOptionError: A value that is no number or lies outside the range.
    """
    lo, hi = HUBER_DELTA_RANGE
    try:
        delta = float(value)
    except (TypeError, ValueError):
        delta = math.nan
    if isinstance(value, bool) or not (math.isfinite(delta) and lo <= delta <= hi):
        shown = f"{value:g}" if isinstance(value, float) else str(value).strip()
        raise TableOptionError(
            f"--huber-delta {shown}: must be a number in [{lo:g}, {hi:g}] (Hoffmann's "
            f"{DEFAULT_HUBER_DELTA:g}; a large one, e.g. 1e9, makes approach 3 least squares "
            "on log loss)")
    return delta
