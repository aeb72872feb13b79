"""Rich tables that never cut a number (``13,539,3…``) to fit a narrow terminal.

Rich shrinks every column of a table wider than the terminal and ends a cut cell with an
ellipsis. `keep_numbers_whole` lets it shrink only the columns of words: a column whose cells
are numbers (counts, losses, ``5 MiB``, ``2.70 [2.61, 2.79]``) gets the width of its widest
cell, its header wrapping inside it, and any cell that must still give way folds onto a second
line instead of losing its end.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported where a table is made, not with this module
    from rich.table import Table

__all__ = ["WORDS_MIN", "is_number", "keep_numbers_whole"]

#: The width a column of words keeps, at least (or its widest cell, if narrower).
WORDS_MIN = 10

_NUMBER = re.compile(r"[-+~]?(\d[\d,]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?[kMGTP%]?")
#: Words a number cell may carry beside its numbers: units and separators.
_UNITS = {"", "-", "/", "x", "s", "B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB",
          "FLOPs", "FLOP/s", "nats", "bits", "to", "->"}


def _plain(cell: Any) -> str:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        try:
            return Text.from_markup(cell).plain
        except Exception:  # noqa: BLE001 (text that only looks like markup)
            return cell
    return ""


def is_number(cell: str) -> bool:
    """Whether ``cell`` holds numbers only, with units, signs and brackets.

    ``1,234``, ``3e+11``, ``5 MiB``, ``12 / 4``, ``2.70 [2.61, 2.79]``; not ``-`` alone (a
    missing number) nor a label such as ``d64-L2-h8-ff256``.
    """
    words = [w.strip("()[],;") for w in cell.split()]
    return (any(ch.isdigit() for ch in cell)
            and all(_NUMBER.fullmatch(w) or w in _UNITS for w in words))


def _width(table: Table, widths: list[int]) -> int:
    """The width ``table`` takes with columns of content ``widths``: padding and borders."""
    left, right = table.padding[3], table.padding[1]
    return sum(widths) + len(widths) * (left + right) + (len(widths) + 1 if table.box else 0)


def keep_numbers_whole(table: Table, width: int) -> Table:
    """Make ``table`` fit ``width`` columns by shrinking its columns of words, not of numbers.

    Every column folds what does not fit rather than ending it in an ellipsis. Where the table
    is wider than ``width``, each column of numbers (`is_number`, every cell; ``-`` for a
    missing one) is fixed at its widest cell, and at its header's longest word where that
    leaves room; rich then wraps the other columns, each kept `WORDS_MIN` characters wide where
    there is room. A table whose numbers alone leave too little room is left to rich, which
    folds what it must.

    Returns:
        ``table``, changed in place.
    """
    natural, cells, headers, numbers = [], [], [], []
    for column in table.columns:
        if column.overflow == "ellipsis":
            column.overflow = "fold"
        plain = [_plain(c) for c in column.cells]
        header = _plain(column.header)
        natural.append(max([len(header), *(len(c) for c in plain)]))
        cells.append(max([len(c) for c in plain] or [1]))
        headers.append(max([len(w) for w in header.split()] or [0]))
        numbers.append(column.width is None and all(
            is_number(c) for c in plain if c.strip() not in ("", "-")))
    if _width(table, natural) <= width:
        return table
    for whole_headers, words_min in ((True, WORDS_MIN), (True, 4), (False, 4)):
        fixed = [max(c, h) if whole_headers else c for c, h in zip(cells, headers, strict=True)]
        wanted = [f if number else min(n, words_min)
                  for f, n, number in zip(fixed, natural, numbers, strict=True)]
        if _width(table, wanted) <= width:
            for column, f, number in zip(table.columns, fixed, numbers, strict=True):
                if number:
                    column.width = f
            break
    return table
