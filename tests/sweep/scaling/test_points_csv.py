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


def test_a_parquet_table_over_the_row_limit_is_refused_from_its_footer(tmp_path):
    import pandas as pd

    path = tmp_path / "points.parquet"
    rows = MAX_CSV_ROWS + 1
    pd.DataFrame({"n_params": [1e7] * rows, "n_tokens": [1e9] * rows,
                  "loss": [3.0] * rows}).to_parquet(path)
    with pytest.raises(PointsError, match=f"more than {MAX_CSV_ROWS:,} rows"):
        read_csv_points(path)


def test_a_file_named_parquet_that_is_not_is_refused(tmp_path):
    path = tmp_path / "points.parquet"
    path.write_text(HEADER + GOOD)
    with pytest.raises(PointsError, match=re.escape(f"{path}: cannot be read as parquet:")):
        read_csv_points(path)


def test_a_bad_value_of_a_mapped_parquet_column_names_the_column_and_row(tmp_path):
    import pandas as pd

    from sweep.scaling.options import TableOptions

    path = tmp_path / "points.parquet"
    pd.DataFrame({"N": [1e7, 2e7, -5.0], "D": [1e9, 5e8, 1e9],
                  "L": [3.0, 3.1, 3.2]}).to_parquet(path)
    options = TableOptions(columns=(("n_params", "N"), ("n_tokens", "D"), ("loss", "L")))
    with pytest.raises(PointsError) as caught:
        read_csv_points(path, options)
    assert str(caught.value) == f"{path}: column 'N' (read as n_params), row 2: '-5.0' is negative"


def test_n_tokens_derived_outside_its_range_is_refused_naming_the_row(tmp_path):
    from sweep.scaling.options import TableOptions

    path = tmp_path / "points.csv"
    path.write_text("n_params,loss,flops\n1e7,3.0,6e16\n1,3.0,1e30\n")
    with pytest.raises(PointsError) as caught:
        read_csv_points(path, TableOptions(convention="6ND"))
    assert str(caught.value) == (f"{path}: n_tokens derived as flops / (6 n_params), C = 6ND, "
                                 "line 3: 1.66667e+29 is outside [1, 1e+20] tokens, the range "
                                 "a fit accepts")
    path.write_text("n_params,loss,flops,budget\n1e7,3.0,6e16,1e17\n2e7,3.0,,1e17\n")
    frame = read_csv_points(path, TableOptions(convention="6ND"))
    assert list(frame[S.METRIC_N_TOKENS]) == [1e9]  # from flops, the run's own; blank: dropped
    assert frame.attrs["excluded"] == {"non-finite n_tokens": 1}
