"""A CSV table of points at the edges: values beyond float64's sane range, rows of inf and nan,
and files over the row and size limits, each refused with one message naming what is wrong.
"""

import re

import pytest

from sweep import schema as S
from sweep.scaling.points_csv import MAX_CSV_BYTES, MAX_CSV_ROWS, read_csv_points
from sweep.scaling.runs import PointsError

HEADER = "n_params,n_tokens,loss,budget\n"
GOOD = "1e7,1e9,3.0,6e16\n2e7,5e8,3.1,6e16\n"


RANGE = ", the range a fit accepts"


@pytest.mark.parametrize("row, expected", [
    ("1e7,1e9,1e308,6e16", "column loss, line 4: '1e308' is outside [0, 1000] nats/token" + RANGE),
    ("1e308,1e308,2.0,6e16",
     "column n_params, line 4: '1e308' is outside [1, 1e+20] parameters" + RANGE),
    ("1e7,1e309,3.0,6e16", "column n_tokens, line 4: '1e309' is outside [1, 1e+20] tokens" + RANGE),
    ("0.5,1e9,3.0,6e16", "column n_params, line 4: '0.5' is outside [1, 1e+20] parameters" + RANGE),
    ("1e7,1e9,3.0,1e50", "column budget, line 4: '1e50' is outside [1, 1e+42] FLOPs" + RANGE),
    ("1e7,1e9,-1e308,6e16", "column loss, line 4: '-1e308' is negative"),
])
def test_a_value_beyond_its_range_is_refused_naming_column_line_and_range(tmp_path, row,
                                                                          expected):
    path = tmp_path / "points.csv"
    path.write_text(HEADER + GOOD + row + "\n")
    with pytest.raises(PointsError) as caught:
        read_csv_points(path)
    assert str(caught.value) == f"{path}: {expected}"


def test_a_row_of_inf_and_nan_is_dropped_and_counted_once(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text(HEADER + GOOD + "inf,nan,inf,inf\n,,,\n")
    frame = read_csv_points(path)
    assert list(frame[S.METRIC_N_PARAMS]) == [1e7, 2e7]
    assert frame.attrs["excluded"] == {"non-finite loss": 2}
    assert frame.attrs["n_trials"] == 4


def test_only_rows_of_inf_and_nan_are_refused(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text(HEADER + "inf,nan,inf,inf\nnan,inf,nan,nan\n")
    with pytest.raises(PointsError, match=re.escape("no row has a finite loss and finite, "
                                                    "positive n_params and n_tokens (2 rows "
                                                    "read)")):
        read_csv_points(path)


def test_the_row_limit_is_exact(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text(HEADER + GOOD * (MAX_CSV_ROWS // 2))
    assert len(read_csv_points(path)) == MAX_CSV_ROWS
    with path.open("a") as f:
        f.write("3e7,1e9,3.0,6e16\n")
    with pytest.raises(PointsError, match=f"more than {MAX_CSV_ROWS:,} rows; a table of "
                                          f"points holds at most {MAX_CSV_ROWS:,}"):
        read_csv_points(path)


def test_a_file_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "points.csv"
    row = b"1e7,1e9,3.0,6e16\n"
    with path.open("wb") as f:
        f.write(HEADER.encode() + row * (MAX_CSV_BYTES // len(row) + 1))
    with pytest.raises(PointsError, match=r"points.csv: 64 MiB; a table of points is read up "
                                          r"to 64 MiB and 10,000 rows"):
        read_csv_points(path)
