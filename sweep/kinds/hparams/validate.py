"""What ``sweep validate`` shows of an hparams study: its grid per budget and its compute.

One row per budget (the shape trained, N, tokens D = C / 6N, D / N, the learning rates and
batch sizes, the points), the study's compute in FLOPs (C per point, C = 6ND, and the cost
model's training FLOPs per token x tokens, attention included), and where the near-optimal
band and the fits come from.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from sweep import schema
from sweep.kinds.base import Described
from sweep.kinds.hparams.grid import HparamsPoint, batch_values, hparams_section, points
from sweep.spec import StudySpec

__all__ = ["describe_grid", "grid_rows"]


def grid_rows(spec: StudySpec) -> list[dict[str, Any]]:
    """One row per budget of the grid.

    Keys ``budget_flops``, ``shape``, ``n_params``, ``n_tokens``, ``tokens_per_param``, ``lrs``,
    ``batch_tokens`` (None: the spec's batch), ``n_points``, ``flops_6nd`` (the points' C) and
    ``train_flops`` (the cost model's).
    """
    by_budget: dict[float, list[HparamsPoint]] = {}
    for p in points(spec):
        by_budget.setdefault(p.budget_flops, []).append(p)
    rows = []
    for budget, pts in by_budget.items():
        cand, tokens = pts[0].candidate, pts[0].n_tokens
        rows.append({schema.METRIC_BUDGET_FLOPS: budget, "shape": cand.shape.label,
                     schema.METRIC_N_PARAMS: cand.n_params, schema.METRIC_N_TOKENS: tokens,
                     schema.METRIC_TOKENS_PER_PARAM: tokens / cand.n_params,
                     "lrs": hparams_section(spec).lr.values(),
                     "batch_tokens": batch_values(spec), "n_points": len(pts),
                     "flops_6nd": len(pts) * 6.0 * cand.n_params * tokens,
                     schema.METRIC_TRAIN_FLOPS: len(pts) * cand.flops_per_token_train * tokens})
    return rows


def describe_grid(spec: StudySpec, say: Any, *, as_json: bool) -> Described:
    """Print the grid and its compute (unless ``as_json``).

    Returns:
        For ``--json``, the grid (``grid``: `grid_rows`) and its compute (``compute``:
        ``n_trials``, ``flops_6nd``, ``train_flops``).
    """
    rows = grid_rows(spec)
    compute = {"n_trials": sum(r["n_points"] for r in rows),
               "flops_6nd": sum(r["flops_6nd"] for r in rows),
               schema.METRIC_TRAIN_FLOPS: sum(r[schema.METRIC_TRAIN_FLOPS] for r in rows)}
    if not as_json:
        section = hparams_section(spec)
        batches = batch_values(spec)
        table = Table("budget (FLOPs)", "shape", "N", "tokens", "tokens/N", "points",
                      title=f"hparams grid: {compute['n_trials']} trials")
        for r in rows:
            table.add_row(f"{r[schema.METRIC_BUDGET_FLOPS]:.3g}", r["shape"],
                          f"{r[schema.METRIC_N_PARAMS]:,}", f"{r[schema.METRIC_N_TOKENS]:,}",
                          f"{r[schema.METRIC_TOKENS_PER_PARAM]:.1f}", str(r["n_points"]))
        say(table)
        say(f"learning rates (hparams.lr): {', '.join(f'{v:.4g}' for v in section.lr.values())}")
        say("batch sizes (hparams.batch_size, tokens per step): "
            + (", ".join(f"{b:,}" for b in batches) if batches else
               "the spec's fixed batch (no batch-size law is fitted)"))
        say(f"each budget's shape: the rule's nearest to N* = sqrt(C / (6 x "
            f"{section.shape.tokens_per_param:g})) (the prior D / N = "
            f"{section.shape.tokens_per_param:g}); tokens D = C / (6 N)")
        say(f"compute: {compute['flops_6nd']:.3g} FLOPs as 6ND in {compute['n_trials']} trials "
            f"({compute[schema.METRIC_TRAIN_FLOPS]:.3g} training FLOPs by the cost model, "
            "attention included)")
        say(f"sweep analyze hparams fits eta_opt(C) and B_opt(C) from the runs within "
            f"{section.band:.2%} of each budget's best (hparams.band) and from per-budget "
            "parabola vertices")
    return Described(record={"grid": rows, "compute": compute})
