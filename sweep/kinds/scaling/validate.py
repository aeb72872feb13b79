"""What ``sweep validate`` shows of a scaling study: its IsoFLOP grid as the prior lays it out.

One row per grid point (budget, shape, N, tokens, tokens per parameter, memory and the time it
would take at the study's measured throughput), each budget's centre and dropped shapes, the
study's training compute and its wall time on this device and on a named GPU
(`sweep.kinds.scaling.plan_checks`); the problems that make the grid unusable (a budget with
fewer than 3 trainable sizes) and the warnings of a plan that runs but cannot give its answer
(sizes that cannot bracket a budget's optimum, trials of too few optimizer steps, early
stopping).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.table import Table

from sweep import schema
from sweep.folder import StudyFolder
from sweep.kinds.base import Described
from sweep.kinds.common import parametrization_line
from sweep.kinds.scaling.adaptive import describe_design, settings_of
from sweep.kinds.scaling.adaptive_driver import first_layouts
from sweep.kinds.scaling.layout import BudgetLayout, grid_rows, layout, layout_problems
from sweep.kinds.scaling.plan_checks import (
    device_time,
    duration,
    gpu_time,
    plan_warnings,
    study_compute,
)
from sweep.kinds.scaling.rules import scaling_section
from sweep.kinds.scaling.shapes import candidates, configs
from sweep.schema import TrialState
from sweep.spec import StudySpec
from sweep.train.peaks import NamedGpu

__all__ = ["describe_grid"]


def describe_grid(spec: StudySpec, say: Any, *, device: str | None, as_json: bool,
                  gpu: NamedGpu) -> Described:
    """Print the grid and its cost (unless ``as_json``).

    Returns:
        The problems of its layout (exit 2), the plan's warnings, and for ``--json`` the grid
        (``grid``: `grid_rows`) and its cost (``compute``: training FLOPs, 6ND, the wall time
        on this device and on ``gpu``).
    """
    cands = candidates(spec)
    adaptive = scaling_section(spec).adaptive is not None
    layouts = first_layouts(spec, device=device) if adaptive else layout(spec, device=device)
    rate, rate_note = _measured_flops_per_s(spec)
    rows = grid_rows(spec, layouts, device=device or "auto", flops_per_s=rate)
    compute: dict[str, Any] = study_compute(rows)
    train = configs(spec, cands[0].shape, scaling_section(spec).budgets[0])[1]
    compute["this_device"] = device_time(compute[schema.METRIC_TRAIN_FLOPS], train, device=device,
                                         mfu=gpu.mfu, measured=rate, measured_note=rate_note)
    compute["named_gpu"] = gpu_time(compute[schema.METRIC_TRAIN_FLOPS], gpu, train.precision)
    warnings = plan_warnings(spec, layouts, (cands[0].n_params, cands[-1].n_params))
    warnings += _early_stopping(spec)
    record: dict[str, Any] = {"grid": rows, "compute": compute}
    if adaptive:
        settings = settings_of(spec)
        record["adaptive"] = dataclasses.asdict(settings)
    if not as_json:
        _print_grid(spec, layouts, rows, say)
        _print_compute(compute, say)
        for line in describe_design(spec, settings) if adaptive else []:
            say(line)
    return Described(layout_problems(layouts), warnings, record)


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
    return rate, (f"{rate:.3g} training FLOP/s measured: the median of {len(rates)} finished "
                  "trials of this study")


def _print_grid(spec: StudySpec, layouts: list[BudgetLayout], rows: list[dict[str, Any]],
                say: Any) -> None:
    sc = scaling_section(spec)
    branch = ("from trunk",) if sc.branches else ()
    # none without a measured throughput
    timed = ("est. time",) if rows and rows[0]["est_seconds"] is not None else ()
    table = Table("budget (FLOPs)", "shape", "N", "tokens", *branch, "tokens/N", "memory",
                  *timed, title=f"{'first round' if sc.adaptive else 'IsoFLOP grid'}: "
                  f"{len(rows)} trials")
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
        "prepares the corpus")


def _print_compute(compute: dict[str, Any], say: Any) -> None:
    flops = compute[schema.METRIC_TRAIN_FLOPS]
    say(f"compute: {flops:.3g} training FLOPs in {compute['n_trials']} trials (the cost "
        "model's training FLOPs per token x tokens, attention included; 6ND gives "
        f"{compute['flops_6nd']:.3g})")
    here = compute["this_device"]
    took = "no estimate" if here["seconds"] is None else duration(here["seconds"])
    say(f"time on {here['device']}: {took} ({here['assumes']})")
    gpu = compute["named_gpu"]
    say(f"time on one {gpu['gpu']} at MFU {gpu[schema.METRIC_MFU]:g}: "
        f"{duration(gpu['seconds'])} (its {gpu['precision']} peak "
        f"{gpu['peak_flops'] / 1e12:,.4g} TFLOP/s, {gpu['source']}; trials one after another; "
        "an MFU large models reach, small ones less; --gpu, --mfu)"
        if flops else f"time on one {gpu['gpu']}: nothing to train")


def _early_stopping(spec: StudySpec) -> list[str]:
    s = spec.search
    return [f"search.{name}={value}: early stopping removes points an IsoFLOP curve needs (a "
            "cut at a fraction of the budget leaves no loss at the budget); scaling studies "
            f"default to {name} none"
            for name, value in (("pruner", s.pruner), ("scheduler", s.scheduler))
            if value != "none"]
