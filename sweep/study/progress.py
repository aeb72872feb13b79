"""Live progress of a study in the terminal (rich), the same for every executor.

Executors turn their trial records into `TrialRow`s and call `ProgressView.update`; the view
shows one row per running trial (key params, tokens done, current val loss) and a summary line
(done / pruned / failed / infeasible / diverged counts, best so far), and prints one line per
trial as it finishes, so a log without a terminal still tells the story.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sweep.schema import METRIC_VAL_LOSS, TrialState

__all__ = ["ProgressView", "TrialRow", "format_params"]

_FINAL = TrialState.final()


@dataclass
class TrialRow:
    """What the view shows of one trial.

    Attributes:
        number: Trial number.
        state: ``RUNNING`` or a final state.
        params: The trial's sampled params (dotted names).
        tokens: Training tokens done so far.
        val_loss: Latest val loss, nats/token (nan before the first evaluation).
        best_val_loss: Best val loss of a finished trial (nan if none).
        reason: Why it was infeasible, diverged or failed.
    """

    number: int
    state: str
    params: dict = field(default_factory=dict)
    tokens: int = 0
    val_loss: float = math.nan
    best_val_loss: float = math.nan
    reason: str | None = None


def format_params(params: dict, limit: int = 6) -> str:
    """``name=value`` pairs of the first ``limit`` params (section prefixes dropped)."""

    def fmt(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    items = [f"{k.split('.', 1)[-1]}={fmt(v)}" for k, v in params.items()]
    return " ".join(items[:limit]) + (" ..." if len(items) > limit else "")


def _loss(v: float) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.4f}"


class ProgressView:
    """A live table of running trials; use as a context manager around the study.

    Args:
        study_name: Shown in the title.
        n_trials: Trials the run aims for.
        quiet: Show nothing.
        console: Where to draw (default: stdout).
    """

    def __init__(self, study_name: str, n_trials: int, *, quiet: bool = False,
                 console: Console | None = None) -> None:
        self.study_name, self.n_trials, self.quiet = study_name, n_trials, quiet
        self.console = console or Console()
        self._announced: set[int] = set()
        self._rows: list[TrialRow] = []
        self._live: Live | None = None

    def __enter__(self) -> ProgressView:
        if not self.quiet and self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=2,
                              transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def update(self, rows: list[TrialRow]) -> None:
        """Show the current state of all trials; print newly finished ones."""
        self._rows = sorted(rows, key=lambda r: r.number)
        if self.quiet:
            return
        for row in self._rows:
            if row.state in _FINAL and row.number not in self._announced:
                self._announced.add(row.number)
                self._print_finished(row)
        if self._live is not None:
            self._live.update(self._render())

    def note(self, line: str) -> None:
        """Print one line about the study (not a trial), unless quiet."""
        if not self.quiet:
            self.console.print(line, highlight=False, soft_wrap=True, markup=False)

    def _print_finished(self, row: TrialRow) -> None:
        colour = {TrialState.COMPLETE: "green", TrialState.PRUNED: "yellow",
                  TrialState.INFEASIBLE: "magenta"}.get(
            row.state, "red")
        text = Text.assemble(
            f"trial {row.number:>3} ", (f"{row.state:<10}", colour),
            f" best val_loss {_loss(row.best_val_loss):>8}  tokens {row.tokens:>9,}  ",
            format_params(row.params),
        )
        if row.reason:
            text.append(f"  ({row.reason})", style="dim")
        self.console.print(text, highlight=False, soft_wrap=True)

    def summary(self) -> str:
        """One line: counts per state and the best val loss so far."""
        counts = {s: 0 for s in (TrialState.RUNNING,) + _FINAL}
        for row in self._rows:
            counts[row.state] = counts.get(row.state, 0) + 1
        done = sum(counts[s] for s in _FINAL)
        finite = [r.best_val_loss for r in self._rows
                  if r.state == TrialState.COMPLETE and math.isfinite(r.best_val_loss)]
        best = _loss(min(finite)) if finite else "-"
        return (f"{done}/{self.n_trials} done: {counts[TrialState.COMPLETE]} complete, "
                f"{counts[TrialState.PRUNED]} pruned, {counts[TrialState.FAILED]} failed, "
                f"{counts[TrialState.INFEASIBLE]} infeasible, "
                f"{counts[TrialState.DIVERGED]} diverged; "
                f"{counts[TrialState.RUNNING]} running; best val_loss {best}")

    def _render(self) -> Group:
        table = Table(title=f"study {self.study_name}", expand=False)
        for column in ("trial", "params", "tokens", METRIC_VAL_LOSS, "state"):
            table.add_column(column)
        for row in self._rows:
            if row.state == TrialState.RUNNING:
                table.add_row(str(row.number), format_params(row.params), f"{row.tokens:,}",
                              _loss(row.val_loss), row.state)
        return Group(table, Text(self.summary()))
