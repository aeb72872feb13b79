"""What ``sweep validate`` shows of a scaling study: its IsoFLOP grid as the prior lays it out.

One row per grid point (budget, shape, N, tokens, tokens per parameter, memory and the time it
would take at the study's measured throughput), each budget's centre and dropped shapes, and
the problems that make the grid unusable (a budget with fewer than 3 trainable sizes).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from sweep import schema
from sweep.folder import StudyFolder
from sweep.kinds.common import parametrization_line
from sweep.kinds.scaling.layout import BudgetLayout, grid_rows, layout, layout_problems
from sweep.kinds.scaling.rules import scaling_section
from sweep.schema import TrialState
from sweep.spec import StudySpec

__all__ = ["describe_grid"]


def describe_grid(spec: StudySpec, say: Any, warn: Any, *, device: str | None,
                  as_json: bool) -> list[str]:
    """Print the grid (unless ``as_json``); the problems of its layout (exit 2)."""
    layouts = layout(spec, device=device)
    if not as_json:
        _print_grid(spec, layouts, device, say, warn)
    return layout_problems(layouts)


def _measured_flops_per_s(spec: StudySpec) -> tuple[float | None, str]:
    """Median training FLOP/s of the completed trials of this study's own store, if any."""
    folder = StudyFolder.default(spec.name)
    if spec.tracking.uri or not folder.mlflow_db.is_file():
        return None, "no measured throughput (no finished trials of this study yet)"
    from sweep.tracking import find_study, read_trials

    uri = folder.tracking_uri()
    found = find_study(uri, spec.name)
    if found is None:
        return None, "no measured throughput (no finished trials of this study yet)"
    flops, wall = schema.METRIC_TRAIN_FLOPS, schema.METRIC_WALL_S
    rates = [t["metrics"][flops] / t["metrics"][wall] for t in read_trials(uri, *found)
             if t["state"] is TrialState.COMPLETE and t["metrics"].get(wall, 0) > 0
             and flops in t["metrics"]]
    if not rates:
        return None, "no measured throughput (no finished trials of this study yet)"
    rate = sorted(rates)[len(rates) // 2]
    return rate, f"time at {rate:.3g} FLOP/s, the median of {len(rates)} finished trials"


def _print_grid(spec: StudySpec, layouts: list[BudgetLayout], device: str | None, say: Any,
                warn: Any) -> None:
    sc = scaling_section(spec)
    rate, rate_note = _measured_flops_per_s(spec)
    rows = grid_rows(spec, layouts, device=device or "auto", flops_per_s=rate)
    branch = ("from trunk",) if sc.branches else ()
    timed = ("est. time",) if rate is not None else ()  # none without a measured throughput
    table = Table("budget (FLOPs)", "shape", "N", "tokens", *branch, "tokens/N", "memory",
                  *timed, title=f"IsoFLOP grid: {len(rows)} trials")
    for r in rows:
        est = (f"{r['est_seconds']:,.0f} s",) if timed else ()
        reused = (f"{r[schema.METRIC_BRANCH_TOKENS]:,}",) if sc.branches else ()
        table.add_row(f"{r[schema.METRIC_BUDGET_FLOPS]:.3g}", r["shape"],
                      f"{r[schema.METRIC_N_PARAMS]:,}", f"{r[schema.METRIC_N_TOKENS]:,}", *reused,
                      f"{r[schema.METRIC_TOKENS_PER_PARAM]:.1f}",
                      f"{r[schema.METRIC_MEM_ESTIMATE] / 2**20:,.0f} MiB", *est)
    say(table)
    say(parametrization_line(spec, "every size of the grid"))
    if sc.branches:
        total = sum(r[schema.METRIC_N_TOKENS] for r in rows)
        trained = total - sum(r[schema.METRIC_BRANCH_TOKENS] for r in rows)
        n = sum(1 for r in rows if r[schema.METRIC_BRANCH_TOKENS])
        flops = sum(r[schema.METRIC_TRAIN_FLOPS] for r in rows)
        alone = sum(r[schema.METRIC_BUDGET_FLOPS] for r in rows)
        say(f"scaling.branches: {n} of {len(rows)} trials continue their shape's stable-phase "
            f"trunk; {trained:,} tokens trained instead of {total:,} "
            f"({1 - trained / total:.0%} fewer), {flops:.3g} training FLOPs instead of "
            f"{alone:.3g} ({1 - flops / alone:.0%} less)")
    for lay in layouts:
        say(f"C={lay.budget_flops:.3g}: centred on N*={lay.centre_n_params:,.0f} "
            f"({lay.centre_source})")
        for label, reason in lay.dropped:
            say(f"  dropped {label}: {reason}")
    if sc.recentre and len(layouts) > 1:
        say("budgets after the first are re-centred on the earlier results as the study runs "
            "(scaling.recentre), so their shapes may differ from this layout")
    say(f"corpus epochs (scaling.max_epochs={sc.max_epochs:g}) are checked when sweep run "
        f"prepares the corpus; {rate_note}")
    s = spec.search
    for name, value in (("pruner", s.pruner), ("scheduler", s.scheduler)):
        if value != "none":
            warn(f"warning: search.{name}={value}: early stopping removes points an IsoFLOP "
                 "curve needs (a cut at a fraction of the budget leaves no loss at the budget); "
                 f"scaling studies default to {name} none")
