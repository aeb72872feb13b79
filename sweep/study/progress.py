"""Live progress of a study in the terminal (rich), the same for every executor.

Executors turn their trial records into `TrialRow`s and call `ProgressView.update`; the view
shows one row per running trial (key params, tokens done, current val loss) and a summary line
(done / pruned / failed / infeasible / diverged counts, best so far), and prints one line per
trial as it finishes. Without a terminal (a log file, a Ray job's log) it also prints a
heartbeat every ``progress_every_s`` seconds (`heartbeat`: the counts, then each running
trial's tokens and current val loss), so a log shows that a study is alive between finished
trials, and what it is doing.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sweep.schema import METRIC_VAL_LOSS, TrialState
from sweep.study.eta import Eta, format_eta
from sweep.tables import keep_numbers_whole

__all__ = ["DEFAULT_PROGRESS_EVERY_S", "ProgressView", "TrialRow", "format_params"]

#: Seconds between heartbeat lines when the output is not a terminal (``--progress-every``).
DEFAULT_PROGRESS_EVERY_S = 30.0

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
        mutated: Params population-based training changed, with their current values; the
            trial's lines show both (``lr=0.001->0.0031``), as the study's summary does.
    """

    number: int
    state: TrialState
    params: dict = field(default_factory=dict)
    tokens: int = 0
    val_loss: float = math.nan
    best_val_loss: float = math.nan
    reason: str | None = None
    mutated: dict = field(default_factory=dict)


def _fmt(v: object) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def format_params(params: dict, limit: int = 6, mutated: dict | None = None) -> str:
    """``name=value`` pairs of the first ``limit`` params (section prefixes dropped).

    A param in ``mutated`` (changed during training by population-based training) shows its
    initial and current value: ``lr=0.001->0.0031``.
    """
    mutated = mutated or {}
    items = [f"{k.split('.', 1)[-1]}={_fmt(v)}"
             + (f"->{_fmt(mutated[k])}" if k in mutated and mutated[k] != v else "")
             for k, v in params.items()]
    return " ".join(items[:limit]) + (" ..." if len(items) > limit else "")


def _changed(row: TrialRow) -> str:
    """``, lr->0.0031`` for the params PBT changed on a running trial, else empty."""
    changed = [f"{k.split('.', 1)[-1]}->{_fmt(v)}" for k, v in row.mutated.items()
               if row.params.get(k) != v]
    return (", " + " ".join(changed)) if changed else ""


def _loss(v: float) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.4f}"


class ProgressView:
    """A live table of running trials; use as a context manager around the study.

    Args:
        study_name: Shown in the title.
        n_trials: Trials the run aims for.
        quiet: Show nothing.
        console: Where to draw (default: stdout).
        progress_every_s: Seconds between heartbeat lines when ``console`` is not a terminal;
            0 turns them off.
        eta: The study's time left (`sweep.study.eta.Eta`), shown in the summary line once
            some training has been measured; None: not shown.
    """

    def __init__(self, study_name: str, n_trials: int, *, quiet: bool = False,
                 console: Console | None = None,
                 progress_every_s: float = DEFAULT_PROGRESS_EVERY_S,
                 eta: Eta | None = None) -> None:
        self.study_name, self.n_trials, self.quiet, self.eta = study_name, n_trials, quiet, eta
        self.console = console or Console()
        self.progress_every_s = progress_every_s
        self._announced: set[int] = set()
        self._rows: list[TrialRow] = []
        self._live: Live | None = None
        self._stop = threading.Event()
        self._beats: threading.Thread | None = None
        self._started = time.monotonic()

    def __enter__(self) -> ProgressView:
        if self.quiet:
            return self
        if self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=2,
                              transient=True)
            self._live.__enter__()
        elif self.progress_every_s > 0:
            self._stop.clear()
            self._beats = threading.Thread(target=self._beat, daemon=True,
                                           name="progress-heartbeat")
            self._beats.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
        if self._beats is not None:
            self._stop.set()
            self._beats.join(timeout=5)
            self._beats = None

    def _beat(self) -> None:
        while not self._stop.wait(self.progress_every_s):
            self.console.print(self.heartbeat(), highlight=False, soft_wrap=True, markup=False)

    def heartbeat(self) -> str:
        """One line: time since the start, `summary`, then each running trial's progress.

        ``[  2m30s] 3/10 done: ...; running: trial 4 (tokens 120,000, val_loss 3.1234),
        trial 5 (tokens 0, val_loss -)``.
        """
        elapsed = int(time.monotonic() - self._started)
        running = [r for r in self._rows if r.state == TrialState.RUNNING]
        trials = ", ".join(f"trial {r.number} (tokens {r.tokens:,}, {METRIC_VAL_LOSS} "
                           f"{_loss(r.val_loss)}{_changed(r)})" for r in running)
        return (f"[{elapsed // 60:>3}m{elapsed % 60:02d}s] {self.summary()}"
                + (f"; running: {trials}" if trials else ""))

    def update(self, rows: list[TrialRow]) -> None:
        """Show the current state of all trials; print newly finished ones."""
        self._rows = sorted(rows, key=lambda r: r.number)
        if self.quiet:
            return
        if self.eta is not None:
            self.eta.observe(self._rows)
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
            format_params(row.params, mutated=row.mutated),
        )
        if row.reason:
            text.append(f"  ({row.reason})", style="dim")
        self.console.print(text, highlight=False, soft_wrap=True)

    def summary(self) -> str:
        """One line: counts per state, the best val loss so far and, once measured, the ETA."""
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
                f"{counts[TrialState.RUNNING]} running; best val_loss {best}" + self._eta())

    def _eta(self) -> str:
        left = self.eta.seconds_left() if self.eta is not None else None
        return f"; ETA {format_eta(left)}" if left is not None else ""

    def _render(self) -> Group:
        table = Table(title=f"study {self.study_name}", expand=False)
        for column in ("trial", "params", "tokens", METRIC_VAL_LOSS, "state"):
            table.add_column(column)
        for row in self._rows:
            if row.state == TrialState.RUNNING:
                table.add_row(str(row.number), format_params(row.params, mutated=row.mutated),
                              f"{row.tokens:,}",
                              _loss(row.val_loss), row.state)
        return Group(keep_numbers_whole(table, self.console.width), Text(self.summary()))
