"""A table of points, CSV or parquet, read into the frame the fits take (``--csv``).

The file is checked before it is parsed and read only as far as the limits: at most
`MAX_CSV_BYTES` bytes and `MAX_CSV_ROWS` rows (a parquet file's row count and unpacked size read
from its footer first), so a huge file is refused in bounded time and memory. A fit takes one
row per trained run (Hoffmann et al. 2022 fitted approach 3 to about 400 runs), and its time
grows with the rows times the bootstrap resamples (on one core, about a minute for 1,000 rows
and 1,000 resamples, eight for 5,000), so the limits are far above any study yet keep a refusal
instant. Every value is checked against its column's rule and range (`sweep.scaling.limits`)
before any fit sees it.

A table of someone else's is read through `sweep.scaling.options.TableOptions`: its rows
filtered and its columns renamed (`sweep.scaling.table_rows`), and ``n_tokens`` derived from a
FLOPs column as D = C / (6N) (`sweep.scaling.options.FLOP_CONVENTION`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from sweep.scaling.limits import LIMITS, out_of_range
from sweep.scaling.options import (
    CONVENTIONS,
    FLOPS_PER_PARAM_TOKEN,
    TABLE_SUFFIXES,
    TableOptionError,
    TableOptions,
)
from sweep.scaling.runs import COUNTS, LOSS, NEEDED, POINT_COLUMNS, PointsError, drop_unusable
from sweep.scaling.table_rows import filter_rows, map_columns
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
# The columns ``--convention`` derives n_tokens from, the first given.
_DERIVE_FROM = (METRIC_TRAIN_FLOPS, METRIC_BUDGET_FLOPS)
# A row of the table by its index, in a message: a CSV's line, a parquet file's row.
_Place = Callable[[int], str]


def _numbers(path: Path, raw: pd.Series, name: str, place: _Place, shown: str) -> pd.Series:
    """A column, read as text, as floats; refuses text that is no number and breaks of its rules.

    Empty, nan and inf are kept, to be dropped and counted as non-finite; a number written
    out that overflows float64 (``1e309``) is out of range, not missing. ``name`` is the
    points' name (its rule), ``shown`` the column as the file calls it.
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
            raise PointsError(f"{path}: column {shown}, {place(raw.index[row])}: "
                              f"'{str(raw.iloc[row]).strip()}' {rule}")
    return values


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        raise PointsError(f"{path}: no such file") from None
    except OSError as exc:
        raise PointsError(f"{path}: cannot be read: {exc.strerror or exc}") from None


def _too_big(path: Path, mib: float, what: str = "") -> PointsError:
    return PointsError(f"{path}: {mib:,.0f} MiB{what}; a table of points is read up to "
                       f"{MAX_CSV_BYTES // 2**20} MiB and {MAX_CSV_ROWS:,} rows (one row per "
                       "trained run)")


def _too_long(path: Path) -> PointsError:
    return PointsError(f"{path}: more than {MAX_CSV_ROWS:,} rows; a table of points holds at "
                       f"most {MAX_CSV_ROWS:,} (one row per trained run: aggregate or sample "
                       "the runs)")


def _read_parquet(path: Path) -> pd.DataFrame:
    """A parquet file's rows; its footer's row count and unpacked size checked first."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise PointsError(f"{path}: cannot be read as parquet: {exc}") from None
    unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if unpacked > MAX_CSV_BYTES:
        raise _too_big(path, unpacked / 2**20, " unpacked")
    if meta.num_rows > MAX_CSV_ROWS:
        raise _too_long(path)
    try:
        # The file's own index (if it kept one) gives way to its rows, numbered from 0.
        return pd.read_parquet(path, engine="pyarrow").reset_index(drop=True)
    except (OSError, ValueError) as exc:
        raise PointsError(f"{path}: cannot be read as parquet: {exc}") from None


def _read_table(path: Path, text: tuple[str, ...]) -> tuple[pd.DataFrame, _Place]:
    """The table's rows, and how a row is named; refuses a file over a limit before parsing it.

    A parquet file (by its ending, `TABLE_SUFFIXES`) is read whole once its footer shows it
    within the limits; anything else as CSV, its first `MAX_CSV_ROWS` rows, the ``text``
    columns as text so that a refusal quotes the file.
    """
    size = _size(path)
    if size > MAX_CSV_BYTES:
        raise _too_big(path, size / 2**20)
    if TABLE_SUFFIXES.get(path.suffix.lower()) == "parquet":
        return _read_parquet(path), lambda row: f"row {row}"
    try:
        table = pd.read_csv(path, nrows=MAX_CSV_ROWS + 1, dtype=dict.fromkeys(text, str))
    except (OSError, ValueError) as exc:  # pandas' ParserError and EmptyDataError are these
        raise PointsError(f"{path}: cannot be read as CSV: {exc}") from None
    if len(table) > MAX_CSV_ROWS:
        raise _too_long(path)
    return table, lambda row: f"line {row + 2}"


def _text_columns(options: TableOptions) -> tuple[str, ...]:
    """The columns a CSV is read as text: every numeric spelling, mapped and filtered column."""
    mapped = tuple(header for _, header in options.columns)
    filtered = tuple(options.source(name) for name, _ in options.where)
    return tuple(dict.fromkeys(_NUMERIC + mapped + filtered))


def _check_columns(path: Path, table: pd.DataFrame, options: TableOptions) -> None:
    """Refuses a table without the required columns, or one ``--convention`` cannot apply to."""
    has = set(table.columns)
    sources = [s for column in _DERIVE_FROM for s in _CSV_OPTIONAL[column] if s in has]
    if options.convention is not None:
        flag = f"--convention {options.convention}"
        if METRIC_N_TOKENS in has:
            raise TableOptionError(f"{flag}: {path} has an {METRIC_N_TOKENS} column "
                                   f"({options.source(METRIC_N_TOKENS)}); the convention "
                                   "derives n_tokens for a table without one (drop the flag "
                                   "to use the column)")
        if not sources:
            raise TableOptionError(f"{flag}: derives n_tokens from a flops or budget column, "
                                   f"and {path} has neither (map one, e.g. --columns "
                                   "flops=\"Training FLOP\")")
    needed = [c for c in NEEDED if not (c == METRIC_N_TOKENS and options.convention)]
    missing = [c for c in needed if c not in has]
    if not missing:
        return
    hints = ["map the table's own names with --columns NAME=COLUMN"]
    if missing == [METRIC_N_TOKENS] and sources:
        hints.append(f"derive n_tokens from its {sources[0]} column with --convention 6ND")
    raise PointsError(f"{path}: missing column(s) {', '.join(missing)}; it has "
                      f"{', '.join(map(str, table.columns)) or 'none'} (required: "
                      f"{', '.join(NEEDED)}; optional: flops, budget); {' or '.join(hints)}")


def _derive_tokens(path: Path, frame: pd.DataFrame, given: dict[str, str], place: _Place,
                   options: TableOptions) -> str:
    """``n_tokens`` = C / (6N) from the ``flops`` column, else ``budget`` (``--convention``).

    Returns what was derived from what, for the report; refuses a result outside its range.
    """
    source = next(c for c in _DERIVE_FROM if c in given)
    derived = (f"{given[source]} / ({FLOPS_PER_PARAM_TOKEN} n_params), "
               f"{CONVENTIONS[str(options.convention)]}")
    tokens = frame[source] / (FLOPS_PER_PARAM_TOKEN * frame[METRIC_N_PARAMS])
    hits = np.flatnonzero(out_of_range(METRIC_N_TOKENS, tokens.to_numpy(dtype=float)))
    if hits.size:
        row = frame.index[hits[0]]
        raise PointsError(f"{path}: n_tokens derived as {derived}, {place(row)}: "
                          f"{tokens[row]:.6g} {LIMITS[METRIC_N_TOKENS].rule()}")
    frame[METRIC_N_TOKENS] = tokens
    return derived


def _shown(spelling: str, options: TableOptions) -> str:
    """A column as the file calls it, with the points name it is read as when mapped."""
    header = options.source(spelling)
    return f"'{header}' (read as {spelling})" if header != spelling else spelling


def read_csv_points(path: str | Path, options: TableOptions | None = None) -> pd.DataFrame:
    """Points from a CSV or parquet table, for fitting without a study.

    Args:
        path: A CSV file, or a parquet file (``.parquet``, ``.pq``), with columns
            ``n_params`` (parameters), ``n_tokens`` (training tokens) and ``loss``
            (nats/token), and optionally ``flops`` (the run's training FLOPs) and ``budget``
            (its FLOP budget: the IsoFLOP group of approach 2). ``train_flops`` and
            ``budget_flops`` are read as ``flops`` and ``budget``, so a `load_runs` frame
            written with ``to_csv`` reads back. Empty, ``nan`` and ``inf`` values count as
            non-finite. At most `MAX_CSV_BYTES` bytes (a parquet file's unpacked size too) and
            `MAX_CSV_ROWS` rows.
        options: Rows kept (``where``, before the columns are mapped), the table's names for
            the columns (``columns``) and the convention that derives ``n_tokens`` from
            ``flops`` (else ``budget``) as C / (6N) (`sweep.scaling.options.TableOptions`).

    Returns:
        Columns `POINT_COLUMNS` (``trial`` the file's data row from 0, ``run_id`` and
        ``state`` empty, ``train_flops`` and ``budget_flops`` NaN where the file lacks them,
        ``n_params_non_embedding`` NaN unless given), then the file's other columns. Rows
        with a non-finite loss or a non-finite or non-positive count are dropped and counted
        in ``frame.attrs["excluded"]``, rows ``where`` leaves out as ``--where``;
        ``frame.attrs["source"]`` is the path, ``frame.attrs["n_params_convention"]``
        ``"as given"`` and ``frame.attrs["n_tokens_from"]`` how n_tokens was derived (None
        when the table gives it).

    Raises:
        PointsError: The file cannot be read, is over either limit, lacks required columns
            (every missing one is named), holds text that is no number, a negative (or, for
            a count, zero) value or a value outside its column's range
            (`sweep.scaling.limits.LIMITS`) in a numeric column (the column, line and value
            named), or has no row whose required values are all usable.
        TableOptionError: A mapped or filtered column the table lacks, a filter no row
            matches, or a convention with nothing to derive from or an ``n_tokens`` column.
    """
    options = options or TableOptions()
    path = Path(path)
    table, place = _read_table(path, _text_columns(options))
    table.columns = [str(c).strip() for c in table.columns]
    n_rows = len(table)
    table = map_columns(path, filter_rows(path, table, options), options)
    _check_columns(path, table, options)
    frame = pd.DataFrame({"trial": table.index, "run_id": None, "state": None},
                         index=table.index)
    given: dict[str, str] = {}
    for column in POINT_COLUMNS[3:]:
        spelling = next((s for s in _CSV_OPTIONAL.get(column, (column,)) if s in table.columns),
                        None)
        frame[column] = math.nan
        if spelling is not None:
            given[column] = spelling
            frame[column] = _numbers(path, table[spelling], spelling, place,
                                     _shown(spelling, options))
    derived = (_derive_tokens(path, frame, given, place, options)
               if options.convention is not None else None)
    spelled = {s for spellings in _CSV_OPTIONAL.values() for s in spellings}
    others = [c for c in table.columns if c not in frame.columns and c not in spelled]
    frame = pd.concat([frame, table[others]], axis=1)
    excluded: Counter = Counter()
    if len(table) < n_rows:
        excluded["--where"] = n_rows - len(table)
    kept = drop_unusable(frame, NEEDED, COUNTS, excluded)
    if kept.empty:
        raise PointsError(f"{path}: no row has a finite {LOSS} and finite, positive "
                          f"{METRIC_N_PARAMS} and {METRIC_N_TOKENS} ({len(table)} rows read)")
    kept.attrs.update(source=str(path), n_trials=n_rows, excluded=dict(excluded),
                      n_params_convention="as given", n_tokens_from=derived)
    return kept
