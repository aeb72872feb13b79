"""Learning-rate and batch-size laws: eta_opt(C) = a C^b and B_opt(C) = a C^b from runs.

Runs are (budget C in FLOPs, peak learning rate, batch size B in tokens per step, final loss in
nats/token). Two estimators of each law, side by side:

- ``band``: DeepSeek LLM's (Bi et al. 2024, sec. 3.1, fig. 3): at each budget the near-optimal
  runs, those whose loss is within ``band`` (0.25%) of the budget's best, and a power law
  through them, least squares of log value on log C with every budget weighing the same (so
  the line passes through each budget's mean log value of its near-optimal runs).
- ``vertex``: at each budget the vertex of a quadratic in log lr plus one in log B (no cross
  term, `_vertex`) fitted to the runs within two grid steps of the best one on each axis
  (every run when that leaves fewer than 3 values on an axis; a parabola in log lr when B
  takes one value: the IsoFLOP-curve vertex of Hoffmann et al. 2022 sec. 3.2, on a
  hyperparameter), clamped to the values trained, then the least-squares line of log vertex
  on log C.

The verdict (`HparamReport.verdict`) names one estimator per law: ``vertex`` when every budget
has a vertex inside the values trained (it interpolates between the grid's values, where the
band's points are grid values), else ``band``.

Intervals are percentile bootstraps (`sweep.scaling.bootstrap`) of both estimators refitted on
runs resampled within each budget (``strata``), and so are the predictions at target budgets.
A diverged run (loss +inf) is worse than any finite one and enters no fit; a NaN is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sweep.scaling.bootstrap import bootstrap_counts, check_bootstrap_args, percentile_intervals
from sweep.scaling.result import DEFAULT_LEVEL, FitError

__all__ = ["DEFAULT_BAND", "HPARAMS", "METHODS", "HparamLawFit", "HparamReport",
           "fit_hparam_laws"]

#: DeepSeek LLM's near-optimal band: loss within 0.25% of the budget's best (Bi et al. 2024).
DEFAULT_BAND = 0.0025
#: The hyperparameters fitted, in order: the learning rate and the batch size (tokens).
HPARAMS = ("lr", "batch_size")
#: The estimators, in order: DeepSeek's near-optimal band, per-budget parabola vertices.
METHODS = ("band", "vertex")
_WINDOW = 2  # grid steps either side of a budget's best run that its quadratic sees
_INPUTS = ("flops", "lr", "batch_size")


@dataclass(frozen=True)
class HparamLawFit:
    """One law value_opt(C) = ``coef`` C^``exponent`` fitted by one estimator.

    Attributes:
        hparam: ``lr`` (peak learning rate) or ``batch_size`` (tokens per step).
        method: ``band`` or ``vertex`` (module docstring).
        coef: a, in the hyperparameter's unit at C = 1 FLOP.
        exponent: b, unitless.
        points: ``(C, value)`` the line is fitted through: every near-optimal run (``band``) or
            each budget's vertex (``vertex``).
        intervals: Percentile bootstrap interval of ``coef`` and ``exponent`` at ``level``.
        draws: Each one's bootstrap refits, shape ``(n_bootstrap,)``, nan where a refit failed.
        level: Confidence level of ``intervals``.
    """

    hparam: str
    method: str
    coef: float
    exponent: float
    points: tuple[tuple[float, float], ...]
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    draws: dict[str, np.ndarray] = field(default_factory=dict)
    level: float = DEFAULT_LEVEL

    def predict(self, flops: float) -> float:
        """The fitted optimum at budget ``flops`` (C, FLOPs)."""
        return self.coef * flops ** self.exponent

    def interval_at(self, flops: float) -> tuple[float, float] | None:
        """Bootstrap interval of the prediction at ``flops``; None without a bootstrap."""
        if not self.draws:
            return None
        values = self.draws["coef"] * flops ** self.draws["exponent"]
        return percentile_intervals({"v": values}, self.level).get("v")


@dataclass
class HparamReport:
    """Both laws by both estimators, and what they were fitted from.

    Attributes:
        fits: One `HparamLawFit` per (hparam, method) that could be made, in `HPARAMS` x
            `METHODS` order.
        budgets: The distinct budgets C, ascending.
        near_optimal: Shape ``(n,)``: whether each input run is in its budget's band.
        band: The band's width, as a fraction of the budget's best loss.
        targets: The budgets predictions are made at.
        notes: What to keep in mind (budgets without a vertex, a vertex at a grid's edge).
        verdict: The estimator recommended per law fitted (module docstring).
    """

    fits: list[HparamLawFit]
    budgets: list[float]
    near_optimal: np.ndarray
    band: float
    targets: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdict: dict[str, str] = field(default_factory=dict)

    def fit(self, hparam: str, method: str) -> HparamLawFit | None:
        """The fit of ``hparam`` by ``method``, or None when it could not be made."""
        return next((f for f in self.fits if (f.hparam, f.method) == (hparam, method)), None)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (``sweep analyze hparams --json``)."""
        return {"band": self.band, "budgets": self.budgets, "notes": self.notes,
                "verdict": self.verdict,
                "fits": [{"hparam": f.hparam, "method": f.method, "coef": f.coef,
                          "exponent": f.exponent, "level": f.level,
                          "intervals": {k: list(v) for k, v in f.intervals.items()},
                          "points": [list(p) for p in f.points],
                          "predictions": [{"flops": t, "value": f.predict(t),
                                           "interval": _listed(f.interval_at(t))}
                                          for t in self.targets]}
                         for f in self.fits]}


def _listed(pair: tuple[float, float] | None) -> list[float] | None:
    return list(pair) if pair is not None else None


def _columns(flops, lr, batch_size, loss) -> tuple[np.ndarray, ...]:
    """The four columns as float arrays, every value checked (module docstring)."""
    cols = [np.asarray(c, dtype=float).ravel() for c in (flops, lr, batch_size, loss)]
    sizes = {c.size for c in cols}
    if len(sizes) > 1:
        raise FitError(f"columns of different lengths: flops, lr, batch_size, loss have "
                       f"{', '.join(str(c.size) for c in cols)} values")
    for name, col in zip(_INPUTS, cols[:3], strict=True):
        bad = np.flatnonzero(~(np.isfinite(col) & (col > 0)))
        if bad.size:
            raise FitError(f"{name}: row {int(bad[0])} is {float(col[bad[0]])!r}; every run "
                           f"needs a finite {name} > 0")
    loss = cols[3]
    bad = np.flatnonzero(np.isnan(loss) | (loss <= 0) | (loss == -np.inf))
    if bad.size:
        raise FitError(f"loss: row {int(bad[0])} is {float(loss[bad[0]])!r}; a final loss must "
                       "be > 0 (+inf for a diverged run; leave out runs without one)")
    return tuple(cols)


def _line(log_c: np.ndarray, log_v: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """(log a, b) of the weighted least-squares line log v = log a + b log C."""
    keep = weights > 0
    if np.unique(log_c[keep]).size < 2:
        return math.nan, math.nan
    b, log_a = np.polyfit(log_c[keep], log_v[keep], 1, w=np.sqrt(weights[keep]))
    return float(log_a), float(b)


def _band_points(loss: np.ndarray, budget: np.ndarray, weights: np.ndarray,
                 band: float) -> np.ndarray:
    """Each run's weight in the band fit: its count over its budget's band count, else 0."""
    out = np.zeros(loss.size)
    for k in np.unique(budget):
        at = (budget == k) & (weights > 0) & np.isfinite(loss)
        if not at.any():
            continue
        best = loss[at].min()
        inside = at & (loss <= best * (1 + band))
        out[inside] = weights[inside] / weights[inside].sum()
    return out


def _near(log_x: np.ndarray, best: float) -> np.ndarray:
    """Runs within `_WINDOW` grid steps of ``best`` on one axis (steps: the axis's values)."""
    values = np.unique(log_x)
    rank = np.searchsorted(values, log_x)
    return np.abs(rank - np.searchsorted(values, best)) <= _WINDOW


def _vertex(logs: np.ndarray, loss: np.ndarray, weights: np.ndarray) -> np.ndarray | None:
    """The vertex, shape ``(k,)``, of a quadratic in each column of ``logs`` ``(n, k)``.

    loss = c0 + sum_j (c_j x_j + c_jj x_j^2), no cross term: the separable form of the
    DeepSeek-style landscape (`sweep.simulate.law`); with a cross term fitted, a noisy
    interaction estimate against the batch axis's weak curvature moved the learning rate's
    vertex by several e-folds in one fit in fifty at 1% noise. Every axis must hold at least 3
    distinct values among the weighted finite runs; None when one does not, or when an axis's
    parabola does not open upwards.
    """
    use = (weights > 0) & np.isfinite(loss)
    if not use.any():
        return None
    best = int(np.flatnonzero(use)[np.argmin(loss[use])])
    window = use.copy()
    for j in range(logs.shape[1]):
        window &= _near(logs[:, j], logs[best, j])
    chosen = window if all(np.unique(logs[window, j]).size >= 3
                           for j in range(logs.shape[1])) else use
    if any(np.unique(logs[chosen, j]).size < 3 for j in range(logs.shape[1])):
        return None
    x, y, w = logs[chosen], loss[chosen], np.sqrt(weights[chosen])
    design = np.column_stack([np.ones(len(y)), x, x ** 2]) * w[:, None]
    if np.linalg.matrix_rank(design) < design.shape[1]:
        return None
    coef = np.linalg.lstsq(design, y * w, rcond=None)[0]
    k = x.shape[1]
    linear, square = coef[1:1 + k], coef[1 + k:]
    if np.any(square <= 0):
        return None
    return np.clip(-linear / (2 * square), logs[use].min(axis=0), logs[use].max(axis=0))


def _vertices(logs: np.ndarray, loss: np.ndarray, budget: np.ndarray,
              weights: np.ndarray, axes: list[int]) -> dict[int, dict[int, float]]:
    """Budget index -> axis -> its vertex in log value (budgets without one left out)."""
    out = {}
    for k in np.unique(budget):
        at = budget == k
        varying = [j for j in axes if np.unique(logs[at & (weights > 0), j]).size >= 3]
        if not varying:
            continue
        v = _vertex(logs[at][:, varying], loss[at], weights[at])
        if v is not None:
            out[int(k)] = {j: float(x) for j, x in zip(varying, v, strict=True)}
    return out


def _fit_all(log_c: np.ndarray, logs: np.ndarray, loss: np.ndarray, budget: np.ndarray,
             weights: np.ndarray, band: float, axes: list[int], log_budgets: np.ndarray,
             ) -> dict[tuple[int, str], tuple[float, float]]:
    """(axis, method) -> (log a, b) for the runs weighted by ``weights``."""
    out = {}
    in_band = _band_points(loss, budget, weights, band)
    vertices = _vertices(logs, loss, budget, weights, axes)
    for j in axes:
        out[(j, "band")] = _line(log_c, logs[:, j], in_band)
        have = [k for k, v in vertices.items() if j in v]
        out[(j, "vertex")] = _line(log_budgets[have], np.array([vertices[k][j] for k in have]),
                                   np.ones(len(have)))
    return out


def fit_hparam_laws(flops, lr, batch_size, loss, *, band: float = DEFAULT_BAND,
                    targets=(), n_bootstrap: int = 1000, seed: int = 0,
                    level: float = DEFAULT_LEVEL) -> HparamReport:
    """eta_opt(C) and B_opt(C) as power laws, by DeepSeek's band and by parabola vertices.

    Args:
        flops: Shape ``(n,)``: each run's budget C (FLOPs); runs of one budget share it.
        lr: Shape ``(n,)``: peak learning rate.
        batch_size: Shape ``(n,)``: tokens per optimizer step.
        loss: Shape ``(n,)``: final val loss, nats/token (+inf: diverged).
        band: The near-optimal band, a fraction of each budget's best loss, in [0, 1).
        targets: Budgets (FLOPs) to predict both laws at.
        n_bootstrap: Resamples within each budget for the intervals (0: none).
        seed: Seed of the resampling.
        level: Confidence level of the intervals, in (0, 1).

    Returns:
        The `HparamReport`; the batch-size laws are left out (with a note) when every run has
        one batch size.

    Raises:
        FitError: Columns of different lengths; a non-finite or non-positive C, lr or batch
            size; a NaN loss; a band outside [0, 1); runs at fewer than 2 budgets; every run at
            one learning rate; no law that could be fitted by an estimator.
    """
    check_bootstrap_args(n_bootstrap, level)
    if not (isinstance(band, (int, float)) and 0 <= band < 1):
        raise FitError(f"band={band!r}: must be in [0, 1) (a fraction of the best loss)")
    c, lr_, bs, y = _columns(flops, lr, batch_size, loss)
    budgets, budget = np.unique(c, return_inverse=True)
    if budgets.size < 2:
        raise FitError(f"{'one budget' if budgets.size else 'no runs'}"
                       f"{f' (C={budgets[0]:.4g})' if budgets.size else ''}: a law in C needs "
                       "runs at 2 budgets or more")
    if np.unique(lr_).size < 2:
        raise FitError(f"every run has learning rate {lr_[0]:g}: its optimum cannot be found; "
                       "train a grid of learning rates at each budget")
    if not np.isfinite(y).any():
        raise FitError("every run diverged (loss inf): no optimum to fit")
    logs, log_c, log_budgets = np.log(np.column_stack([lr_, bs])), np.log(c), np.log(budgets)
    notes = []
    axes = [0] if np.unique(bs).size < 2 else [0, 1]
    if axes == [0]:
        notes.append(f"every run has batch size {bs[0]:g}: no batch-size law is fitted")
    ones = np.ones(y.size)
    full = _fit_all(log_c, logs, y, budget, ones, band, axes, log_budgets)
    vertices = _vertices(logs, y, budget, ones, axes)
    found, doubtful = _vertex_notes(vertices, budgets, budget, logs, axes)
    notes += found
    draws = _bootstrap(log_c, logs, y, budget, band, axes, log_budgets, n_bootstrap, seed)
    fits = []
    for j in axes:
        for method in METHODS:
            log_a, b = full[(j, method)]
            if not math.isfinite(b):
                notes.append(f"{HPARAMS[j]} by {method}: fewer than 2 budgets to fit")
                continue
            d = draws.get((j, method), {})
            failed = int(np.isnan(d["exponent"]).sum()) if d else 0
            if failed:
                notes.append(f"{HPARAMS[j]} by {method}: {failed} of {n_bootstrap} resamples "
                             "could not be refitted (a budget left without 3 values or a "
                             "vertex); its intervals are from the rest")
            points = _points(j, method, c, logs, y, budget, budgets, band, vertices)
            fits.append(HparamLawFit(HPARAMS[j], method, math.exp(log_a), b, points,
                                     percentile_intervals(d, level) if d else {}, d, level))
    if not any(f.hparam == "lr" for f in fits):
        raise FitError("no learning-rate law could be fitted: " + "; ".join(notes))
    near = _band_points(y, budget, ones, band) > 0
    return HparamReport(fits, [float(b) for b in budgets], near, float(band),
                        [float(t) for t in targets], notes, _verdict(fits, doubtful))


def _vertex_notes(vertices: dict[int, dict[int, float]], budgets: np.ndarray,
                  budget: np.ndarray, logs: np.ndarray,
                  axes: list[int]) -> tuple[list[str], set[str]]:
    """Notes on budgets without a vertex or with one at a grid's edge, and those laws' names."""
    notes: list[str] = []
    doubtful: set[str] = set()
    for j in axes:
        missing = [f"{budgets[k]:.4g}" for k in range(budgets.size)
                   if j not in vertices.get(k, {})]
        if missing:
            doubtful.add(HPARAMS[j])
            notes.append(f"{HPARAMS[j]}: no vertex at C = {', '.join(missing)} (fewer than 3 "
                         "values trained, or the losses do not curve upwards there)")
        for k, v in vertices.items():
            if j in v and v[j] in (logs[budget == k, j].min(), logs[budget == k, j].max()):
                doubtful.add(HPARAMS[j])
                notes.append(f"{HPARAMS[j]}: at C = {budgets[k]:.4g} the vertex is at the "
                             "edge of the values trained; the optimum may lie beyond them")
    return notes, doubtful


def _verdict(fits: list[HparamLawFit], doubtful: set[str]) -> dict[str, str]:
    """Per law fitted, ``vertex`` unless its vertices are in doubt and a band fit exists."""
    made = {(f.hparam, f.method) for f in fits}
    return {h: "band" if (h, "band") in made and (h in doubtful or (h, "vertex") not in made)
            else "vertex" for h in dict.fromkeys(f.hparam for f in fits)}


def _points(j: int, method: str, c: np.ndarray, logs: np.ndarray, y: np.ndarray,
            budget: np.ndarray, budgets: np.ndarray, band: float,
            vertices: dict[int, dict[int, float]]) -> tuple[tuple[float, float], ...]:
    """``(C, value)`` a fit's line goes through (`HparamLawFit.points`)."""
    if method == "band":
        inside = _band_points(y, budget, np.ones(y.size), band) > 0
        return tuple((float(ci), float(math.exp(v))) for ci, v in zip(c[inside],
                                                                       logs[inside, j],
                                                                       strict=True))
    return tuple((float(budgets[k]), float(math.exp(v[j])))
                 for k, v in sorted(vertices.items()) if j in v)


def _bootstrap(log_c: np.ndarray, logs: np.ndarray, y: np.ndarray, budget: np.ndarray,
               band: float, axes: list[int], log_budgets: np.ndarray, n_bootstrap: int,
               seed: int) -> dict[tuple[int, str], dict[str, np.ndarray]]:
    """(axis, method) -> {"coef": draws, "exponent": draws}, refits within budgets."""
    if not n_bootstrap:
        return {}
    counts = bootstrap_counts(y.size, n_bootstrap, seed, strata=budget)
    out: dict[tuple[int, str], dict[str, np.ndarray]] = {
        (j, m): {"coef": np.full(n_bootstrap, np.nan), "exponent": np.full(n_bootstrap, np.nan)}
        for j in axes for m in METHODS}
    for r in range(n_bootstrap):
        for key, (log_a, b) in _fit_all(log_c, logs, y, budget, counts[r].astype(float), band,
                                        axes, log_budgets).items():
            out[key]["coef"][r], out[key]["exponent"][r] = math.exp(log_a), b
    return out
