"""Someone else's table made into one of points: its rows filtered, its columns renamed.

`filter_rows` keeps the rows ``--where`` asks for and `map_columns` reads the table's own
column names as the points' (``--columns``), both by `sweep.scaling.options.TableOptions`;
`sweep.scaling.points_csv.read_csv_points` calls them, then checks the values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from sweep.scaling.options import TableOptionError, TableOptions

__all__ = ["filter_rows", "listed", "map_columns"]

# Distinct values named when a filter matches no row.
_SHOWN = 8


def listed(values: Iterable[object], limit: int = _SHOWN) -> str:
    """Up to ``limit`` values joined by commas, then how many more."""
    texts = [str(v) for v in values]
    shown = ", ".join(texts[:limit]) or "none"
    return shown + (f" and {len(texts) - limit} more" if len(texts) > limit else "")


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _matches(values: pd.Series, wanted: list[str]) -> np.ndarray:
    """Rows whose value is one of ``wanted``: the same text (stripped) or the same number."""
    text = values.astype(str).str.strip().to_numpy()
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    match = np.zeros(len(values), dtype=bool)
    for value in wanted:
        match |= text == value
        number = _number(value)
        if number is not None:
            match |= numbers == number
    return match


def filter_rows(path: Path, table: pd.DataFrame, options: TableOptions) -> pd.DataFrame:
    """The rows of ``table`` every ``--where`` filter keeps (its index, the file's rows, kept).

    Filters on one column keep a row holding any of their values; filters on different
    columns must all hold. A column is the table's own name, or a name ``--columns`` maps.

    Raises:
        TableOptionError: A column the table lacks (its columns listed), a filter no row
            matches (the column's values listed), or filters that no row matches together.
    """
    if not options.where:
        return table
    groups: dict[str, list[str]] = {}
    for name, value in options.where:
        groups.setdefault(name, []).append(value)
    keep = np.ones(len(table), dtype=bool)
    for name, wanted in groups.items():
        flag = " ".join(f"--where {name}={v}" for v in wanted)
        header = name if name in table.columns else options.source(name)
        if header not in table.columns:
            raise TableOptionError(f"{flag}: {path} has no column {name!r}; its columns: "
                                   f"{listed(table.columns, 50)}")
        match = _matches(table[header], wanted)
        if not match.any():
            distinct = pd.unique(table[header].astype(str).str.strip())
            raise TableOptionError(f"{flag}: no row of {path} has {name} "
                                   f"{' or '.join(wanted)}; its values: {listed(distinct)}")
        keep &= match
    if not keep.any():
        flags = " ".join(f"--where {n}={v}" for n, v in options.where)
        raise TableOptionError(f"{flags}: no row of {path} matches them all (each column's "
                               "filter alone matches some rows)")
    return table[keep]


def map_columns(path: Path, table: pd.DataFrame, options: TableOptions) -> pd.DataFrame:
    """``table`` with each mapped column under its points name (``--columns``).

    A column of the table that already bears a mapped name is replaced by the mapped one; the
    other columns are kept as they are. One column may be read as two names (its FLOPs as both
    ``flops`` and ``budget``).

    Raises:
        TableOptionError: A mapped column the table lacks (its columns listed).
    """
    if not options.columns:
        return table
    for name, header in options.columns:
        if header not in table.columns:
            raise TableOptionError(f"--columns {name}={header}: {path} has no column "
                                   f"{header!r}; its columns: {listed(table.columns, 50)}")
    out = pd.DataFrame({name: table[header] for name, header in options.columns},
                       index=table.index)
    used = {header for _, header in options.columns}
    for header in table.columns:
        if header not in used and header not in out.columns:
            out[header] = table[header]
    return out
