"""How far the best learning rate moves with width: the analysis of a transfer study.

A transfer study (spec section ``transfer``) trains one learning-rate grid at every width. For
each width (and each value of the grid's other fields, e.g. the parametrization) this module
finds the best learning rate in two ways:

- on the grid: the learning rate of the lowest final val loss (a diverged point counts as
  worse than any finite one). "Moves by at most one grid step" is read off these: the spread,
  largest grid index minus smallest, across widths.
- between grid points: the vertex of a parabola in log2(lr) through the best grid point and its
  finite neighbours within two grid steps (every finite point when fewer than three distinct
  ones are that near; the IsoFLOP-curve vertex of Hoffmann et al. 2022, sec. 3.2, on learning
  rate instead of size), clamped to the grid's range; the best grid point itself when the
  parabola does not open upwards.

Seeds are replicates, not groups: when the grid searches ``train.seed`` (e.g. ``{choice: [0,
1]}``), each (width, lr) point's loss is the mean over its seeds (a diverged seed makes it
+inf), as Yang et al. 2022 average their transfer curves over seeds (Figure 1); one seed's
noise, 0.02-0.1 nats between neighbouring rates in a short run, is what moves a single curve's
best point by a grid step.

The drift is the least-squares slope of log2(lr*) against log2(width): how many doublings the
best learning rate moves per doubling of width (0 under hyperparameter transfer; about -1 for
SP's hidden layers under Adam, whose best rate scales like 1/width, Yang et al. 2022, "Tensor
Programs V", sec. 3 and Table 3). Its interval is the percentile bootstrap of the drift
refitted on the grid points (seed-averaged) resampled within each width's curve
(`sweep.scaling.bootstrap`, ``strata``), as the IsoFLOP fit resamples points within each budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sweep.plotting import colours, pyplot
from sweep.scaling.bootstrap import bootstrap_counts, check_bootstrap_args, percentile_intervals
from sweep.scaling.result import DEFAULT_LEVEL
from sweep.schema import METRIC_FINAL_VAL_LOSS, TrialState

__all__ = ["TransferCurve", "TransferReport", "analyze_transfer", "transfer_figure",
           "transfer_points"]

_WINDOW = 2  # grid steps either side of the best point that the parabola sees
WIDTH, LR, LOSS, GROUP, SEED = "width", "lr", "loss", "group", "seed"
#: The grid field whose values are replicates of a point, averaged instead of grouped.
SEED_FIELD = "train.seed"


def transfer_points(trials: list[dict[str, Any]], grid_fields: list[str]) -> pd.DataFrame:
    """One row per trained grid point of a transfer study's trials.

    Args:
        trials: `sweep.tracking.read_trials` records.
        grid_fields: The grid's searched fields (dotted), ``train.lr`` among them
            (`sweep.kinds.transfer.grid.grid_fields`).

    Returns:
        Columns ``group`` (the other grid fields' values, e.g. ``parametrization=mup``; ``all``
        when there are none; ``train.seed`` is not one of them), ``width`` (d_model), ``lr``,
        ``seed`` (the trial's ``train.seed`` when the grid searches it, else None) and ``loss``
        (final val loss, nats/token; +inf for a DIVERGED trial), one row per COMPLETE or
        DIVERGED trial.
    """
    others = [f for f in grid_fields if f not in ("train.lr", SEED_FIELD)]
    seeded = SEED_FIELD in grid_fields
    rows = []
    for t in trials:
        if t["state"] not in (TrialState.COMPLETE, TrialState.DIVERGED):
            continue
        p = t["params"]
        loss = (t["metrics"].get(METRIC_FINAL_VAL_LOSS, math.nan)
                if t["state"] is TrialState.COMPLETE else math.inf)
        group = ", ".join(f"{f.split('.', 1)[1]}={p.get(f)}" for f in others) or "all"
        rows.append({GROUP: group, WIDTH: int(p["model.d_model"]), LR: float(p["train.lr"]),
                     SEED: p.get(SEED_FIELD) if seeded else None,
                     LOSS: float(loss) if loss is not None else math.nan})
    return pd.DataFrame(rows, columns=[GROUP, WIDTH, LR, SEED, LOSS])


@dataclass(frozen=True)
class TransferCurve:
    """Loss against learning rate at one width.

    Attributes:
        width: d_model.
        lrs: The grid's learning rates, ascending.
        losses: Final val loss at each, the mean over its seeds (nan: not trained; inf: a seed
            diverged), nats/token.
        best_index: Index of the best grid point.
        lr_best: Its learning rate.
        lr_vertex: The parabola's vertex in log2(lr), as a learning rate, clamped to the grid.
    """

    width: int
    lrs: tuple[float, ...]
    losses: tuple[float, ...]
    best_index: int
    lr_best: float
    lr_vertex: float


@dataclass
class TransferReport:
    """One group's drift of the best learning rate across widths.

    Attributes:
        group: The grid's other fields' values (``all`` when none).
        curves: One per width, ascending.
        grid_steps: The spread of the best grid index across widths (largest - smallest).
        drift: Doublings of lr* (the vertex) per doubling of width (the log2-log2 slope).
        drift_grid: Of the best grid point's lr, the same slope.
        interval: Bootstrap percentile interval of ``drift`` at ``level`` (None: no bootstrap).
        level: The interval's confidence level.
        grid_ratio: The grid's step, as a factor of learning rate (geometric mean).
        notes: What to keep in mind (a best point at the grid's edge).
        replicates: Seeds averaged per point (the fewest any trained point has; 1 when the
            grid does not search ``train.seed``).
    """

    group: str
    curves: list[TransferCurve]
    grid_steps: int
    drift: float
    drift_grid: float
    interval: tuple[float, float] | None
    level: float
    grid_ratio: float
    notes: list[str] = field(default_factory=list)
    replicates: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "grid_steps": self.grid_steps, "drift": self.drift,
                "drift_grid": self.drift_grid, "interval": self.interval, "level": self.level,
                "grid_ratio": self.grid_ratio, "notes": self.notes,
                "replicates": self.replicates,
                "widths": [{"width": c.width, "lr_best": c.lr_best, "lr_vertex": c.lr_vertex,
                            "best_index": c.best_index, "lrs": list(c.lrs),
                            "losses": [x if math.isfinite(x) else None for x in c.losses]}
                           for c in self.curves]}


def _vertex(log_lr: np.ndarray, loss: np.ndarray, weights: np.ndarray) -> tuple[int, float]:
    """(best grid index, log2 vertex) of one curve, each point weighted by its count."""
    present = weights > 0
    ranked = np.where(present & ~np.isnan(loss), loss, np.inf)
    best = int(np.argmin(ranked))
    usable = present & np.isfinite(loss)
    near = (np.abs(np.arange(len(loss)) - best) <= _WINDOW) & usable
    if np.unique(log_lr[near]).size < 3:  # a resample that left out the neighbours
        near = usable
    lo, hi = log_lr[0], log_lr[-1]
    if np.unique(log_lr[near]).size < 3 or not np.isfinite(ranked[best]):
        return best, float(log_lr[best])
    c2, c1, _ = np.polyfit(log_lr[near], loss[near], 2, w=np.sqrt(weights[near]))
    if c2 <= 0:
        return best, float(log_lr[best])
    return best, float(np.clip(-c1 / (2 * c2), lo, hi))


def _slope(log_width: np.ndarray, log_lr: np.ndarray) -> float:
    return float(np.polyfit(log_width, log_lr, 1)[0])


def _group_report(group: str, rows: pd.DataFrame, n_bootstrap: int, seed: int,
                  level: float) -> TransferReport:
    lrs = np.array(sorted(rows[LR].unique()), dtype=float)
    widths = sorted(int(w) for w in rows[WIDTH].unique())
    log_lr = np.log2(lrs)
    table = np.full((len(widths), len(lrs)), np.nan)
    # one value per point: the mean over its seeds (+inf when any diverged)
    means = rows.groupby([WIDTH, LR], sort=False)[LOSS].agg(["mean", "size"])
    for (width, lr), (loss, _) in means.iterrows():
        table[widths.index(int(width)), int(np.searchsorted(lrs, lr))] = loss
    replicates = int(means["size"].min())
    ones = np.ones(len(lrs))
    curves, vertices, best = [], [], []
    for i, w in enumerate(widths):
        b, v = _vertex(log_lr, table[i], (~np.isnan(table[i])).astype(float) * ones)
        curves.append(TransferCurve(w, tuple(lrs), tuple(table[i]), b, float(lrs[b]),
                                    float(2.0 ** v)))
        vertices.append(v)
        best.append(b)
    log_w = np.log2(np.array(widths, dtype=float))
    drift = _slope(log_w, np.array(vertices))
    drift_grid = _slope(log_w, log_lr[best])
    interval = None
    if n_bootstrap:
        flat = table.ravel()
        trained = ~np.isnan(flat)
        strata = np.repeat(np.arange(len(widths)), len(lrs))[trained]
        counts = bootstrap_counts(int(trained.sum()), n_bootstrap, seed, strata=strata)
        draws = np.empty(n_bootstrap)
        for k in range(n_bootstrap):
            weights = np.zeros(flat.size)
            weights[np.flatnonzero(trained)] = counts[k]
            weights = weights.reshape(table.shape)
            draws[k] = _slope(log_w, np.array([_vertex(log_lr, table[i], weights[i])[1]
                                               for i in range(len(widths))]))
        interval = percentile_intervals({"drift": draws}, level).get("drift")
    notes = [f"width {c.width}: the best learning rate {c.lr_best:.4g} is at the grid's "
             f"{'top' if c.best_index == len(lrs) - 1 else 'bottom'}; the optimum may lie "
             "beyond it" for c in curves if c.best_index in (0, len(lrs) - 1)]
    ratio = float(2.0 ** np.mean(np.diff(log_lr))) if len(lrs) > 1 else math.nan
    return TransferReport(group, curves, int(max(best) - min(best)), drift, drift_grid,
                          interval, level, ratio, notes, replicates)


def analyze_transfer(points: pd.DataFrame, *, n_bootstrap: int = 1000, seed: int = 0,
                     level: float = DEFAULT_LEVEL) -> list[TransferReport]:
    """The drift of the best learning rate across widths, per group (`transfer_points`).

    Args:
        points: `transfer_points`'s rows.
        n_bootstrap: Bootstrap resamples for the drift's interval (0: none).
        seed: Seed of the resampling.
        level: Confidence level of the interval, in (0, 1).

    Returns:
        One `TransferReport` per group with at least two widths, in the points' order.

    Raises:
        sweep.scaling.FitError: A negative ``n_bootstrap`` or a level outside (0, 1).
    """
    check_bootstrap_args(n_bootstrap, level)
    return [_group_report(str(group), rows, n_bootstrap, seed, level)
            for group, rows in points.groupby(GROUP, sort=False)
            if rows[WIDTH].nunique() >= 2]


def transfer_figure(reports: list[TransferReport], path: Any = None) -> Any:
    """Final val loss against learning rate, a line per width, a panel per group.

    The best grid point of each width is marked; diverged points are left out (a gap).

    Args:
        reports: `analyze_transfer`'s reports.
        path: Where to save it as PNG; None: not saved.

    Returns:
        The ``matplotlib.figure.Figure``, drawn with `sweep.plotting`'s backend (Agg unless
        pyplot is already in use).

    Raises:
        OSError: The PNG cannot be written.
    """
    plt = pyplot()
    fig, axes = plt.subplots(1, max(len(reports), 1), squeeze=False, sharey=True,
                             figsize=(4.2 * max(len(reports), 1), 3.6))
    for ax, rep in zip(axes[0], reports, strict=False):
        for colour, c in zip(colours(len(rep.curves)), rep.curves, strict=True):
            loss = np.array(c.losses, dtype=float)
            loss[~np.isfinite(loss)] = np.nan
            ax.plot(c.lrs, loss, marker="o", ms=3, color=colour, label=f"d_model {c.width}")
            ax.plot([c.lr_best], [loss[c.best_index]], marker="*", ms=11, color=colour)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("learning rate")
        ax.set_title(f"{rep.group}\ndrift {rep.drift:+.2f} doublings / width doubling",
                     fontsize=9)
    axes[0][0].set_ylabel("final val loss (nats/token)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
