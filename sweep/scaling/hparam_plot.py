"""An hparams study's runs as the fits take them, and its figure in DeepSeek LLM's fig. 3 style.

`hparam_points`: one row per trained grid point (budget C, learning rate, batch in tokens per
step, final loss). `hparam_figure`: per budget the runs in (batch size, learning rate), coloured
by their loss over the budget's best, the near-optimal band circled (Bi et al. 2024, fig. 3),
then eta_opt and B_opt against C with each estimator's points and fitted line.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from sweep.plotting import colours, pyplot
from sweep.scaling.hparam_laws import METHODS, HparamReport
from sweep.schema import METRIC_BUDGET_FLOPS, METRIC_FINAL_VAL_LOSS, TrialState

__all__ = ["hparam_figure", "hparam_points"]

_COLUMNS = ["flops", "lr", "batch_size", "loss"]
_MARKERS = {"band": "o", "vertex": "s"}


def hparam_points(trials: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per COMPLETE or DIVERGED trial of an hparams study.

    Args:
        trials: `sweep.tracking.read_trials` records.

    Returns:
        Columns ``flops`` (the trial's budget C, metric ``budget_flops``), ``lr``,
        ``batch_size`` (tokens per optimizer step: ``train.batch_tokens``, else
        ``train.batch_size x model.seq_len x train.grad_accum``) and ``loss`` (final val loss,
        nats/token; +inf for a DIVERGED trial).
    """
    rows = []
    for t in trials:
        if t["state"] not in (TrialState.COMPLETE, TrialState.DIVERGED):
            continue
        p, m = t["params"], t["metrics"]
        if METRIC_BUDGET_FLOPS not in m or "train.lr" not in p:
            continue
        batch = p.get("train.batch_tokens")
        if batch is None:
            batch = (int(p["train.batch_size"]) * int(p["model.seq_len"])
                     * int(p.get("train.grad_accum") or 1))
        loss = m.get(METRIC_FINAL_VAL_LOSS, math.nan) if t["state"] is TrialState.COMPLETE \
            else math.inf
        rows.append([float(m[METRIC_BUDGET_FLOPS]), float(p["train.lr"]), float(batch),
                     float(loss)])
    return pd.DataFrame(rows, columns=_COLUMNS)


def _budget_panel(ax: Any, rows: pd.DataFrame, near: np.ndarray, budget: float,
                  report: HparamReport) -> Any:
    finite = np.isfinite(rows["loss"].to_numpy())
    best = rows["loss"][finite].min()
    excess = (rows["loss"] / best - 1) * 100
    art = ax.scatter(rows["batch_size"][finite], rows["lr"][finite], c=excess[finite],
                     cmap="viridis_r", s=28, vmin=0, vmax=max(float(excess[finite].max()), 1e-9))
    ax.scatter(rows["batch_size"][~finite], rows["lr"][~finite], marker="x", c="grey", s=20)
    ax.scatter(rows["batch_size"][near], rows["lr"][near], facecolors="none",
               edgecolors="red", s=80, linewidths=1.2,
               label=f"within {report.band:.2%} of the best")
    for fit in report.fits:
        y = fit.predict(budget)
        if fit.hparam == "lr":
            ax.axhline(y, color="black", ls="--" if fit.method == "band" else ":", lw=0.8)
        else:
            ax.axvline(y, color="black", ls="--" if fit.method == "band" else ":", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(f"C = {budget:.3g} FLOPs", fontsize=9)
    ax.set_xlabel("batch size (tokens)")
    return art


def _law_panel(ax: Any, report: HparamReport, hparam: str, label: str) -> None:
    budgets = np.array(report.budgets + report.targets, dtype=float)
    line = np.geomspace(budgets.min(), budgets.max(), 50)
    for colour, method in zip(colours(len(METHODS)), METHODS, strict=True):
        fit = report.fit(hparam, method)
        if fit is None:
            continue
        c, v = zip(*fit.points, strict=True) if fit.points else ((), ())
        ax.scatter(c, v, color=colour, marker=_MARKERS[method], s=18, alpha=0.7)
        ax.plot(line, fit.coef * line ** fit.exponent, color=colour,
                label=f"{method}: {fit.coef:.3g} C^{fit.exponent:+.3f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("C (FLOPs)")
    ax.set_ylabel(label)
    ax.legend(fontsize=7)


def hparam_figure(points: pd.DataFrame, report: HparamReport, path: Any = None) -> Any:
    """The runs per budget with the near-optimal band, then the fitted laws against C.

    Args:
        points: The rows `sweep.scaling.hparam_laws.fit_hparam_laws` was given, in that order
            (`hparam_points`).
        report: Its report.
        path: Where to save it as PNG; None: not saved.

    Returns:
        The ``matplotlib.figure.Figure`` (`sweep.plotting`'s backend).

    Raises:
        OSError: The PNG cannot be written.
    """
    plt = pyplot()
    budgets = report.budgets
    laws = [h for h in ("lr", "batch_size") if any(f.hparam == h for f in report.fits)]
    cols = max(len(budgets), len(laws))
    fig, axes = plt.subplots(2, cols, squeeze=False, figsize=(3.2 * cols + 1.2, 6.8),
                             layout="constrained")
    art = None
    for ax, budget in zip(axes[0], budgets, strict=False):
        at = (points["flops"] == budget).to_numpy()
        art = _budget_panel(ax, points[at], report.near_optimal[at], budget, report)
    axes[0][0].set_ylabel("learning rate")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="outside lower center")
    if art is not None:
        fig.colorbar(art, ax=list(axes[0]), label="loss over the budget's best (%)", shrink=0.8)
    for ax, hparam in zip(axes[1], laws, strict=False):
        _law_panel(ax, report, hparam, "eta_opt" if hparam == "lr" else "B_opt (tokens)")
    for ax in [*axes[0][len(budgets):], *axes[1][len(laws):]]:
        ax.set_visible(False)
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
