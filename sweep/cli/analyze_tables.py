"""The tables ``sweep analyze`` prints, for a scaling report and for a transfer study.

A scaling report's fits, compute-optimal models and recommended shapes; a transfer study's best
learning rate per width and its drift. Numbers in four significant digits, intervals as
``[lo, hi]``, ``-`` for a missing value. On a terminal the tables fold to its width; to a file
or a pipe they are printed whole (`report_console`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.cli import common
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS

if TYPE_CHECKING:
    from sweep.scaling.report import ScalingReport
    from sweep.scaling.transfer import TransferReport

__all__ = ["excluded_text", "print_scaling_report", "print_transfer_reports", "report_console"]

_PIPE_WIDTH = 160  # characters a line when printing to a file or pipe


def report_console() -> Console:
    """The console for a report: the terminal's, else one that never folds a table's lines."""
    return common.console if common.console.is_terminal else Console(width=_PIPE_WIDTH)


def excluded_text(counts: dict[str, int]) -> str:
    """Rows left out by reason, as ``reason n, ...`` (sorted by reason)."""
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items()))


def _num(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _interval(interval: tuple[float, float] | None) -> str:
    """``[lo, hi]`` (escaped for rich), or ``-``."""
    return rf"\[{_num(interval[0])}, {_num(interval[1])}]" if interval else "-"


def _with_interval(value: float, interval: tuple[float, float] | None) -> str:
    return f"{_num(value)} {_interval(interval)}" if interval else _num(value)


def print_scaling_report(report: ScalingReport, out: Console) -> None:
    """Each approach's fit, compute-optimal models and notes, then the recommended shapes."""
    from sweep.scaling.report import FLOP_CONVENTION
    from sweep.scaling.runs import LOSS

    excluded = excluded_text(report.excluded)
    derived = report.points.attrs.get("n_tokens_from")
    if report.points.attrs.get("simulated"):
        out.print(f"SIMULATED study: every loss drawn from a law "
                  f"({report.points.attrs['simulated']}); no model trained", highlight=False,
                  markup=False, style="bold")
    out.print(f"{report.source}: {len(report.points)} points"
              f"{f' (excluded: {excluded})' if excluded else ''}; parameter count N: "
              f"{report.n_params_convention}; FLOPs: {FLOP_CONVENTION}"
              f"{f'; n_tokens = {derived}' if derived else ''}", highlight=False, markup=False)
    _print_verdict(report, out)
    for key, result in report.results.items():
        out.print(f"\napproach {key}: {result.approach.title}", highlight=False,
                  style="bold", markup=False)
        fit = result.fit
        if fit is None:
            out.print(f"no fit: {result.error}", highlight=False, markup=False)
            continue
        level = f"{result.level:.0%} interval" if result.intervals else "interval"
        delta = fit.settings.get("delta")
        out.print(f"{fit.n_points} points; {fit.method}"
                  f"{f'; Huber delta {delta:g}' if delta is not None else ''}", highlight=False,
                  markup=False)
        table = Table()
        table.add_column("parameter")
        table.add_column("value", justify="right")
        table.add_column(level, justify="right")
        for name, value in result.params.items():
            table.add_row(name, _num(value), _interval(result.intervals.get(name)))
        out.print(table)
        optimal = Table(title="compute-optimal models")
        for header in ("C (FLOPs)", "N_opt (params)", "D_opt (tokens)", "D/N", "loss"):
            optimal.add_column(header, justify="right")
        for row in result.optimal:
            optimal.add_row(
                _num(row.budget_flops) + (" *" if row.extrapolated else ""),
                _with_interval(row.n_params, row.intervals.get(METRIC_N_PARAMS)),
                _with_interval(row.n_tokens, row.intervals.get(METRIC_N_TOKENS)),
                _num(row.tokens_per_param),
                _with_interval(row.loss, row.intervals.get(LOSS)))
        out.print(optimal)
        out.print(f"{FLOP_CONVENTION}; [{level}] where the bootstrap gives one"
                  + ("; * beyond the largest budget fitted" if any(
                      row.extrapolated for row in result.optimal) else ""),
                  highlight=False, markup=False)
        for note in result.notes:
            out.print(f"note: {note}", highlight=False, markup=False)
    _print_recommendations(report.recommendations, out)


def _print_verdict(report: ScalingReport, out: Console) -> None:
    """The verdict (one estimate per budget, and why) and the notes, before the approaches."""
    from sweep.scaling.runs import LOSS

    verdict = report.verdict
    if verdict is not None:
        level = f"{verdict.level:.0%} interval" if math.isfinite(verdict.level) else "interval"
        table = Table(title=f"verdict: approach {verdict.approach} [{level}]")
        for header in ("C (FLOPs)", "N_opt (params)", "D_opt (tokens)", "loss",
                       "approach 2's N_opt"):
            table.add_column(header, justify="right")
        for row in verdict.rows:
            table.add_row(_num(row.budget_flops) + (" *" if row.extrapolated else ""),
                          _with_interval(row.n_params, row.intervals.get(METRIC_N_PARAMS)),
                          _with_interval(row.n_tokens, row.intervals.get(METRIC_N_TOKENS)),
                          _with_interval(row.loss, row.intervals.get(LOSS)),
                          _with_interval(row.cross_check, row.cross_interval)
                          + (" (parts)" if row.parted else ""))
        out.print(table)
        out.print(f"why: {verdict.why}", highlight=False, markup=False)
        out.print(f"rule: {verdict.rule}; shapes to train: the recommended shapes below",
                  highlight=False, markup=False)
    for note in report.notes:
        out.print(f"note [{note.code}, approach {note.subject}]: {note.text}"
                  if note.subject != "data" else f"note [{note.code}]: {note.text}",
                  highlight=False, markup=False)


def _print_recommendations(rows: list[dict[str, Any]], out: Console) -> None:
    """Recommended model shapes per target budget (`ScalingReport.recommendations`), if any."""
    if not rows:
        return
    table = Table(title="recommended shapes (nearest to N_opt on the study's size rule)")
    columns = [c for c in dict.fromkeys(k for row in rows for k in row) if c != "spec_fragment"]
    for column in columns:
        table.add_column(escape(str(column)))
    for row in rows:
        table.add_row(*(_num(v) if isinstance(v, float) else escape(str(v if v is not None
                                                                        else "-"))
                        for v in (row.get(c) for c in columns)))
    out.print(table)
    seen = set()
    for row in rows:  # the shape nearest N_opt at each budget, ready to train
        budget = row["C (FLOPs)"]
        if budget in seen:
            continue
        seen.add(budget)
        nearest = min((r for r in rows if r["C (FLOPs)"] == budget),
                      key=lambda r: abs(math.log(r["N"] / r["N_opt"])))
        out.print(f"\nspec fragment for C={budget:.3g} ({nearest['shape']}; merge into the "
                  "study's spec in place of its scaling section):", highlight=False,
                  markup=False)
        out.print(nearest["spec_fragment"].rstrip(), highlight=False, markup=False)


def print_transfer_reports(reports: list[TransferReport], out: Console) -> None:
    """Per group of a transfer study, the best learning rate per width and its drift."""
    for rep in reports:
        table = Table(title=f"{rep.group}: best learning rate per width")
        for header in ("d_model", "best lr (grid)", "grid index", "lr* (vertex)",
                       "final val loss"):
            table.add_column(header, justify="right")
        for c in rep.curves:
            table.add_row(str(c.width), f"{c.lr_best:.4g}", str(c.best_index),
                          f"{c.lr_vertex:.4g}", _num(c.losses[c.best_index]))
        out.print(table)
        level = f"{rep.level:.0%} interval"
        out.print(f"{rep.group}: the best grid point moves {rep.grid_steps} grid step(s) "
                  f"(x{rep.grid_ratio:.3g} each) across widths; drift "
                  f"{rep.drift:+.3f} doublings of lr* per doubling of width "
                  + (f"[{level} {_num(rep.interval[0])}, {_num(rep.interval[1])}]"
                     if rep.interval else "(no bootstrap)")
                  + f"; on the grid {rep.drift_grid:+.3f}"
                  + (f"; each point the mean of {rep.replicates} seeds" if rep.replicates > 1
                     else ""), highlight=False, markup=False)
        for note in rep.notes:
            out.print(f"note: {note}", highlight=False, markup=False)
