"""Tables at 80 columns: numbers whole, words wrapped (`sweep.tables.keep_numbers_whole`)."""

import io

import pytest
from rich.console import Console
from rich.table import Table

from sweep.tables import is_number, keep_numbers_whole

#: Rows of the IsoFLOP grid ``sweep validate`` printed for studies/scaling-wsd.yaml, which
#: rich alone cut at 80 columns ("13,539,3…").
ROWS = [["3e+12", "d32-L2-h4-ff128", "35,712", "13,539,328", "3,609,600", "379.1", "9 MiB", "-"],
        ["3e+12", "d112-L2-h14-ff448", "340,032", "1,452,032", "0", "4.3", "23 MiB", "-"]]


def _table():
    table = Table("budget (FLOPs)", "shape", "N", "tokens", "from trunk", "tokens/N", "memory",
                  "est. time")
    for row in ROWS:
        table.add_row(*row)
    return table


def _render(table, width=80):
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    return out.getvalue()


def test_rich_alone_cuts_the_numbers_of_this_table():
    text = _render(_table())
    assert "…" in text and "13,539,328" not in text and "3,609,600" not in text


@pytest.mark.parametrize("width", [80, 100])
def test_every_number_is_printed_whole_and_the_words_wrap(width):
    text = _render(keep_numbers_whole(_table(), width), width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    for number in (cell for row in ROWS for i, cell in enumerate(row) if i != 1):
        assert number in text, (number, text)
    shapes = "".join(line.split("│")[2].strip() for line in text.splitlines()
                     if line.startswith("│"))
    assert shapes == "".join(row[1] for row in ROWS)  # folded onto more lines, not cut


def test_a_table_that_fits_is_left_as_it_is():
    table = Table("trial", "val_loss")
    table.add_row("0", "3.1552")
    assert _render(keep_numbers_whole(table, 80)) == _render(table)
    assert all(column.width is None for column in table.columns)


@pytest.mark.parametrize("cell,number", [
    ("13,539,328", True), ("1e+11", True), ("599k", True), ("5 MiB", True), ("12 / 4", True),
    ("2.70 [2.61, 2.79]", True), ("-", False), ("d64-L2-h8-ff256", False),
    ("COMPLETE", False), ("lr=0.001", False)])
def test_what_counts_as_a_number(cell, number):
    assert is_number(cell) is number
