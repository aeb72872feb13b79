"""Whether an IsoFLOP plan can give its answer, and what it costs: ``sweep validate``'s checks.

Two traps pass a grid that is otherwise valid:

- a budget whose sizes do not bracket its optimum. Approach 2 reads N_opt off the vertex of a
  parabola in log N (Hoffmann et al. 2022, section 3.2); with every size on one side of the
  optimum the vertex is an extrapolation, and off-centre sizes bias the fitted exponent
  (Czech 2026, "Problems with Chinchilla Approach 2"). `bracket_warning` fires when the
  centre N* lies at or beyond the geometric midpoint of the two outermost sizes on one side
  (so that at most one size lies beyond it);
- a trial of fewer than `MIN_STEPS` optimizer steps, whose warmup and decay take most of the
  run, so its loss is not the loss of a trained model of its size (`short_run_warnings`).

`study_compute` is the study's training FLOPs from the cost model the grid is priced with;
`device_time` and `gpu_time` turn it into wall time on this device and on a named GPU.
"""

from __future__ import annotations

import math
from typing import Any

from sweep.kinds.scaling.layout import BudgetLayout
from sweep.kinds.scaling.rules import scaling_section
from sweep.schema import (
    METRIC_BRANCH_TOKENS,
    METRIC_MFU,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    METRIC_TRAIN_FLOPS,
)
from sweep.spec import StudySpec
from sweep.train import TrainConfig
from sweep.train.peaks import NamedGpu, named_gpu

__all__ = ["MIN_STEPS", "bracket_warning", "device_time", "duration", "gpu_time",
           "plan_warnings", "short_run_warnings", "study_compute"]

#: Fewer optimizer steps than this and a trial's loss is mostly its schedule's (a rule of thumb:
#: warmup alone is often 5-10% of a run, and the loss still falls steeply over the first tens).
MIN_STEPS = 50


def bracket_warning(spec: StudySpec, lay: BudgetLayout, family_n: tuple[int, int]) -> str | None:
    """The warning for a budget whose sizes cannot bracket its centre N*, or None.

    Args:
        spec: A scaling study.
        lay: One budget's layout (its centre, prior or re-centred, and its sizes).
        family_n: The smallest and largest N the size rule or ladder makes.

    Returns:
        None for a budget with fewer than 3 sizes (a problem of its own) or a centred one.
    """
    sizes = [p.candidate.n_params for p in lay.points]
    if len(sizes) < 3:
        return None
    n_star = lay.centre_n_params
    low, high = math.sqrt(sizes[0] * sizes[1]), math.sqrt(sizes[-2] * sizes[-1])
    if low < n_star < high:
        return None
    below = n_star <= low
    edge = sizes[0] if below else sizes[-1]
    outer = lay.points[0] if below else lay.points[-1]
    if (n_star <= edge) if below else (n_star >= edge):
        where = f"at or {'below the smallest' if below else 'above the largest'} size it trains"
        so = "cannot bracket its optimum and approach 2 extrapolates its vertex"
    else:
        where = (f"at the {'low' if below else 'high'} edge of its sizes (only "
                 f"{outer.candidate.shape.label}, N={edge:,}, lies {'below' if below else 'above'}"
                 " it)")
        so = "barely brackets its optimum and one size fixes that side of approach 2's parabola"
    reach = f"the size rule makes N from {family_n[0]:,} to {family_n[1]:,}"
    if lay.trainable_n is not None and lay.trainable_n != family_n:
        reach += f", {lay.trainable_n[0]:,} to {lay.trainable_n[1]:,} at this budget"
    return (f"C={lay.budget_flops:.4g}: N_opt {n_star:,.0f} ({lay.centre_source}) is {where}; "
            f"its sizes run from {sizes[0]:,} to {sizes[-1]:,} and {reach}, so this budget "
            f"{so}. Fix: " + _bracket_fix(spec, lay, family_n, below))


def _bracket_fix(spec: StudySpec, lay: BudgetLayout, family_n: tuple[int, int],
                 below: bool) -> str:
    sc = scaling_section(spec)
    if sc.rule is not None:
        widths = sc.rule.widths()
        more = (f"widths below {min(widths)} in scaling.rule.d_model" if below
                else f"widths above {max(widths)} in scaling.rule.d_model")
    else:
        more = f"{'smaller' if below else 'larger'} shapes in scaling.ladder"
    if below:
        return f"add {more}, or raise this budget (or drop it)"
    fix = f"add {more}, or lower this budget (or drop it)"
    if lay.trainable_n is not None and lay.trainable_n[1] < family_n[1]:
        fix += ("; larger shapes of the family train less than one optimizer step here, so a "
                "smaller train.batch_size lets them in")
    return fix


def short_run_warnings(spec: StudySpec, layouts: list[BudgetLayout],
                       min_steps: int = MIN_STEPS) -> list[str]:
    """One warning per budget with sizes that train fewer than ``min_steps`` optimizer steps."""
    out = []
    for lay in layouts:
        short = [p for p in lay.points if p.steps < min_steps]
        if not short:
            continue
        named = ", ".join(f"{p.candidate.shape.label} (N={p.candidate.n_params:,}): "
                          f"{p.steps} steps" for p in short)
        fewest = min(p.steps for p in short)
        out.append(f"C={lay.budget_flops:.4g}: {len(short)} of {len(lay.points)} sizes train "
                   f"fewer than {min_steps} optimizer steps ({named}); warmup and decay take "
                   "most of such a run, so its loss is not that of a trained model of its size. "
                   f"Fix: a smaller train.batch_size (or batch_tokens), or a budget about "
                   f"{min_steps / fewest:.2g}x larger")
    return out


def plan_warnings(spec: StudySpec, layouts: list[BudgetLayout],
                  family_n: tuple[int, int]) -> list[str]:
    """`bracket_warning` of every budget, then `short_run_warnings`."""
    brackets = [bracket_warning(spec, lay, family_n) for lay in layouts]
    return [w for w in brackets if w] + short_run_warnings(spec, layouts)


def study_compute(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The study's training FLOPs from `sweep.kinds.scaling.layout.grid_rows`'s rows.

    Returns:
        ``train_flops``: the sum of each trial's trained tokens x the cost model's training
        FLOPs per token (`sweep_models.cost.flops_per_token(train=True)`, attention included);
        ``flops_6nd``: the same tokens priced at 6N FLOPs each (Kaplan et al. 2020 eq. 2.1);
        ``n_trials``.
    """
    trained = [(r[METRIC_N_PARAMS], r[METRIC_N_TOKENS] - r[METRIC_BRANCH_TOKENS]) for r in rows]
    return {"n_trials": len(rows),
            METRIC_TRAIN_FLOPS: float(sum(r[METRIC_TRAIN_FLOPS] for r in rows)),
            "flops_6nd": float(sum(6 * n * d for n, d in trained))}


def gpu_time(flops: float, gpu: NamedGpu, precision: str) -> dict[str, Any]:
    """Seconds ``flops`` take on ``gpu`` at its MFU, one trial after another.

    The peak is ``precision``'s (``train.precision``: ``fp32`` takes the FP32 rate).
    """
    at = named_gpu(gpu.name, gpu.mfu, precision)
    return {"gpu": at.name, "precision": at.precision, "peak_flops": at.peak_flops,
            METRIC_MFU: at.mfu, "source": at.source, "seconds": at.seconds(flops)}


def device_time(flops: float, train: TrainConfig, *, device: str | None, mfu: float,
                measured: float | None, measured_note: str) -> dict[str, Any]:
    """Seconds ``flops`` take on this device, and what that assumes.

    From the measured training FLOP/s of this study's finished trials when there are any;
    else, on a CUDA device with a datasheet peak (`sweep.train.hardware.peak_flops`), peak x
    ``mfu``; else no estimate (a CPU has no datasheet peak), with the reason. ``device`` is
    ``--device`` (None: ``train.device``).
    """
    if measured:
        return {"device": "this device", "flops_per_s": measured, "seconds": flops / measured,
                "assumes": measured_note}
    requested = device or train.device
    from sweep.train.cuda_probe import no_cuda_driver

    def no_peak(name: str) -> dict[str, Any]:
        return {"device": name, "flops_per_s": None, "seconds": None,
                "assumes": f"no datasheet peak for {name} and no finished trials of this "
                           "study to measure one; sweep run measures it, and validate uses it "
                           "once trials have finished"}

    if requested == "cpu" or not requested.startswith(("cuda", "auto")) or no_cuda_driver():
        return no_peak("cpu" if requested == "auto" else requested)
    import torch

    from sweep.train import hardware

    dev = hardware.pick_device(requested)
    if dev.type != "cuda":
        return no_peak(dev.type)
    name = torch.cuda.get_device_name(dev)
    peak = hardware.peak_flops(dev, hardware.autocast_dtype(train.precision, dev))
    if peak is None:
        return no_peak(name)
    return {"device": name, "flops_per_s": peak * mfu, "seconds": flops / (peak * mfu),
            "assumes": f"its datasheet peak {peak / 1e12:,.4g} TFLOP/s x MFU {mfu:g} (--mfu)"}


def duration(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it above 1 (ms, s, min, h, days)."""
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1e3:.3g} ms"

