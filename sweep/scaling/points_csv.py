"""A CSV table of points, read into the frame the fits take (`sweep analyze scaling --csv`).

The file is checked before it is parsed and read only as far as the limits: at most
`MAX_CSV_BYTES` bytes and `MAX_CSV_ROWS` rows, so a huge file is refused in bounded time and
memory. A fit takes one row per trained run (Hoffmann et al. 2022 fitted approach 3 to about
400 runs), and its time grows with the rows times the bootstrap resamples (on one core, about
a minute for 1,000 rows and 1,000 resamples, eight for 5,000), so the limits are far above any
study yet keep a refusal instant. Every value is checked against its column's rule and range
(`sweep.scaling.limits`) before any fit sees it.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from sweep.scaling.limits import LIMITS, out_of_range
from sweep.scaling.runs import COUNTS, LOSS, NEEDED, POINT_COLUMNS, PointsError, drop_unusable
from sweep.schema import METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, METRIC_N_TOKENS, METRIC_TRAIN_FLOPS

__all__ = ["MAX_CSV_BYTES", "MAX_CSV_ROWS", "read_csv_points"]

#: The most rows (points) a CSV table may hold.
MAX_CSV_ROWS = 10_000
#: The largest CSV file read, bytes (64 MiB: 6.7 kB per row at the row limit).
MAX_CSV_BYTES = 64 * 2**20
# Optional CSV columns: points column -> its spellings, the CSV's own first; the second is what
# `load_runs` writes, so a points frame saved with ``to_csv`` reads back.
_CSV_OPTIONAL = {METRIC_TRAIN_FLOPS: ("flops", METRIC_TRAIN_FLOPS),
                 METRIC_BUDGET_FLOPS: ("budget", METRIC_BUDGET_FLOPS)}
# The numeric columns by every spelling, read as text so that a refusal quotes the file.
_NUMERIC = POINT_COLUMNS[3:] + tuple(s for spellings in _CSV_OPTIONAL.values() for s in spellings)
# How a missing or non-finite value may be written; such a value is dropped and counted.
_BLANK = ("", "nan", "inf", "-inf", "+inf", "infinity")


def _numbers(path: Path, raw: pd.Series, name: str) -> pd.Series:
    """A column, read as text, as floats; refuses text that is no number and breaks of its rules.

    Empty, nan and inf are kept, to be dropped and counted as non-finite; a number written
    out that overflows float64 (``1e309``) is out of range, not missing.
    """
    values = pd.to_numeric(raw, errors="coerce")
    text = raw.astype(str).str.strip().str.lower()
    blank = raw.isna() | text.isin(_BLANK)
    overflow = np.isinf(values.to_numpy(dtype=float)) & ~blank.to_numpy()
    limit = LIMITS[name].rule() if name in LIMITS else ""
    for mask, rule in ((values.isna() & ~blank, "is not a number"),
                       (values < 0, "is negative"),
                       ((values == 0) & (name != LOSS), "is zero (a count must be > 0)"),
                       (out_of_range(name, values.to_numpy(dtype=float)) | overflow, limit)):
        mask = np.asarray(mask, dtype=bool)
        if mask.any():
            row = int(np.flatnonzero(mask)[0])
            raise PointsError(f"{path}: column {name}, line {row + 2}: "
                              f"'{str(raw.iloc[row]).strip()}' {rule}")
    return values


def _read_table(path: Path) -> pd.DataFrame:
    """The CSV's first `MAX_CSV_ROWS` rows; refuses a file over either limit before parsing it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise PointsError(f"{path}: no such file") from None
    except OSError as exc:
        raise PointsError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if size > MAX_CSV_BYTES:
        raise PointsError(f"{path}: {size / 2**20:,.0f} MiB; a table of points is read up to "
                          f"{MAX_CSV_BYTES // 2**20} MiB and {MAX_CSV_ROWS:,} rows (one row "
                          "per trained run)")
    try:
        table = pd.read_csv(path, nrows=MAX_CSV_ROWS + 1, dtype=dict.fromkeys(_NUMERIC, str))
    except (OSError, ValueError) as exc:  # pandas' ParserError and EmptyDataError are these
        raise PointsError(f"{path}: cannot be read as CSV: {exc}") from None
    if len(table) > MAX_CSV_ROWS:
        raise PointsError(f"{path}: more than {MAX_CSV_ROWS:,} rows; a table of points holds "
                          f"at most {MAX_CSV_ROWS:,} (one row per trained run: aggregate or "
                          "sample the runs)")
    return table


def read_csv_points(path: str | Path) -> pd.DataFrame:
    """Points from a CSV table, for fitting without a study.

    Args:
        path: A CSV file with columns ``n_params`` (parameters), ``n_tokens`` (training
            tokens) and ``loss`` (nats/token), and optionally ``flops`` (the run's training
            FLOPs) and ``budget`` (its FLOP budget: the IsoFLOP group of approach 2).
            ``train_flops`` and ``budget_flops`` are read as ``flops`` and ``budget``, so a
            `load_runs` frame written with ``to_csv`` reads back. Empty, ``nan`` and ``inf``
            values count as non-finite. At most `MAX_CSV_BYTES` bytes and `MAX_CSV_ROWS` rows.

    Returns:
        Columns `POINT_COLUMNS` (``trial`` the row number, ``run_id`` and ``state`` empty,
        ``train_flops`` and ``budget_flops`` NaN where the file lacks them,
        ``n_params_non_embedding`` NaN unless given), then the file's other columns. Rows
        with a non-finite loss or a non-finite or non-positive count are dropped and counted
        in ``frame.attrs["excluded"]``; ``frame.attrs["source"]`` is the path and
        ``frame.attrs["n_params_convention"]`` ``"as given"``.

    Raises:
        PointsError: The file cannot be read, is over either limit, lacks required columns
            (every missing one is named), holds text that is no number, a negative (or, for
            a count, zero) value or a value outside its column's range
            (`sweep.scaling.limits.LIMITS`) in a numeric column (the column, line and value
            named), or has no row whose required values are all usable.
    """
    path = Path(path)
    table = _read_table(path)
    table.columns = [str(c).strip() for c in table.columns]
    missing = [c for c in NEEDED if c not in table.columns]
    if missing:
        raise PointsError(f"{path}: missing column(s) {', '.join(missing)}; it has "
                          f"{', '.join(table.columns) or 'none'} (required: "
                          f"{', '.join(NEEDED)}; optional: flops, budget)")
    frame = pd.DataFrame({"trial": np.arange(len(table)), "run_id": None, "state": None})
    for column in POINT_COLUMNS[3:]:
        spellings = _CSV_OPTIONAL.get(column, (column,))
        given = next((s for s in spellings if s in table.columns), None)
        frame[column] = (_numbers(path, table[given], given) if given is not None
                         else math.nan)
    spelled = {s for spellings in _CSV_OPTIONAL.values() for s in spellings}
    others = [c for c in table.columns if c not in frame.columns and c not in spelled]
    frame = pd.concat([frame, table[others]], axis=1)
    excluded: Counter = Counter()
    kept = drop_unusable(frame, NEEDED, COUNTS, excluded)
    if kept.empty:
        raise PointsError(f"{path}: no row has a finite {LOSS} and finite, positive "
                          f"{METRIC_N_PARAMS} and {METRIC_N_TOKENS} ({len(table)} rows read)")
    kept.attrs.update(source=str(path), n_trials=len(table), excluded=dict(excluded),
                      n_params_convention="as given")
    return kept
