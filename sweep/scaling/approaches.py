"""The scaling-law approaches in one table (`APPROACHES`): each one's fit of a study's points.

The approaches (Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models",
section 3), one entry each:

- ``1``: the lower envelope of the training curves (section 3.1);
- ``2``: IsoFLOP parabolas, then N_opt and D_opt as power laws of C (section 3.2);
- ``3``: the parametric L(N, D) = E + A / N^alpha + B / D^beta by Huber on log loss (3.3);
- ``vpnls``: the same law by variable projection (Czech 2026, "Problems with Chinchilla
  Approach 2"): E, A, B by non-negative least squares at each (alpha, beta), the exponents
  by a grid, then Nelder-Mead, on the loss itself.

Each entry's fit reads the points (and for approach 1 the training curves) and raises
`FitError` when it cannot be made; `sweep.scaling.report.analyze` runs the ones asked for.
The fits (scipy) are imported inside the functions that run them, so that the CLI can check an
approach's name (`parse_approaches`) before loading them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sweep.scaling.law import PARAMS
from sweep.scaling.options import DEFAULT_HUBER_DELTA
from sweep.scaling.result import FitError, FitResult
from sweep.scaling.runs import LOSS, column
from sweep.schema import (
    METRIC_BUDGET_FLOPS,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    METRIC_TOKENS,
    METRIC_VAL_LOSS,
)

__all__ = ["ALL", "APPROACHES", "Approach", "FitInputs", "parse_approaches"]

#: ``--approach all``.
ALL = "all"


@dataclass(frozen=True)
class FitInputs:
    """What an approach's fit reads: the points, the training curves, the bootstrap settings.

    Attributes:
        points: One row per trial (`sweep.scaling.runs.POINT_COLUMNS`).
        curves: One row per evaluation (`sweep.scaling.runs.load_curves`), or None.
        n_bootstrap: Bootstrap refits asked for (0: none).
        seed: Seed of the resampling.
        huber_delta: Approach 3's Huber delta on log loss.
    """

    points: pd.DataFrame
    curves: pd.DataFrame | None
    n_bootstrap: int
    seed: int
    huber_delta: float = DEFAULT_HUBER_DELTA


@dataclass(frozen=True)
class Approach:
    """One way of fitting a scaling law, as `sweep.scaling.report.analyze` runs it.

    Its compute-optimal split comes from `sweep.scaling.allocation.optimal_allocation`, which
    knows every fit type.

    Attributes:
        key: Its ``--approach`` name.
        title: What it is, for reports.
        fit: Makes the fit from the inputs; raises `FitError` when it cannot.
        shown: The fitted parameters a report lists, in order (then ``a`` and ``b``).
    """

    key: str
    title: str
    fit: Callable[[FitInputs], FitResult]
    shown: tuple[str, ...]


def _fit_isoflop(inputs: FitInputs) -> FitResult:
    from sweep.scaling.isoflop import fit_isoflop

    budget = column(inputs.points, METRIC_BUDGET_FLOPS)
    if not np.isfinite(budget).any():
        raise FitError(f"needs each trial's FLOP budget ({METRIC_BUDGET_FLOPS}; with --csv, a "
                       "budget column): the IsoFLOP curves are grouped by it")
    at = np.isfinite(budget)
    return fit_isoflop(budget[at], column(inputs.points, METRIC_N_PARAMS)[at],
                       column(inputs.points, LOSS)[at], n_bootstrap=inputs.n_bootstrap,
                       seed=inputs.seed)


def _fit_law(function: Callable[..., FitResult], inputs: FitInputs, **options) -> FitResult:
    """A fit of L(N, D) = E + A / N^alpha + B / D^beta to the points by ``function``."""
    p = inputs.points
    return function(column(p, METRIC_N_PARAMS), column(p, METRIC_N_TOKENS), column(p, LOSS),
                    n_bootstrap=inputs.n_bootstrap, seed=inputs.seed, **options)


def _fit_parametric(inputs: FitInputs) -> FitResult:
    from sweep.scaling.parametric import fit_parametric

    return _fit_law(fit_parametric, inputs, delta=inputs.huber_delta)


def _fit_vpnls(inputs: FitInputs) -> FitResult:
    from sweep.scaling.vpnls import fit_vpnls

    return _fit_law(fit_vpnls, inputs)


def _fit_envelope(inputs: FitInputs) -> FitResult:
    """Approach 1 on the training curves, compute counted as C = 6 N x tokens seen.

    The curves' ``flops`` column (the cost model's training FLOPs) is not used, so that the
    envelope's budgets are in the same C = 6ND as the other approaches' and the targets.
    """
    from sweep.scaling.envelope import fit_envelope

    if inputs.curves is None or inputs.curves.empty:
        raise FitError("needs the trials' training curves (their val_loss at every "
                       "evaluation), which a study has and a --csv table does not")
    c = inputs.curves
    stable = c.attrs.get("excluded", {}).get("wsd stable phase", 0)
    if stable and c.groupby("run_id").size().max() < 2:
        raise FitError(f"needs training curves, and a warmup-stable-decay study's runs are "
                       f"points only at their cooled-down ends ({stable} stable-phase "
                       "evaluations left out); use approaches 2, 3 or vpnls")
    n = column(c, METRIC_N_PARAMS)
    # Runs as integer codes: `fit_envelope` labels its points with numpy scalars' ``item()``.
    runs, _ = pd.factorize(c["run_id"])
    return fit_envelope(runs, n, 6 * n * column(c, METRIC_TOKENS),
                        column(c, METRIC_VAL_LOSS), n_bootstrap=inputs.n_bootstrap,
                        seed=inputs.seed)


#: Every approach by ``--approach`` name; adding one is one entry.
APPROACHES: dict[str, Approach] = {a.key: a for a in (
    Approach("1", "Chinchilla approach 1 (lower envelope of the training curves)",
             _fit_envelope, ("k_n", "k_d")),
    Approach("2", "Chinchilla approach 2 (IsoFLOP parabolas)", _fit_isoflop, ("k_n", "k_d")),
    Approach("3", "Chinchilla approach 3 (parametric L(N, D), Huber on log loss)",
             _fit_parametric, PARAMS),
    Approach("vpnls", "Parametric L(N, D) by variable projection (VPNLS)", _fit_vpnls, PARAMS),
)}


def parse_approaches(text: str) -> tuple[str, ...]:
    """``"all"``, one key of `APPROACHES` or several joined by commas -> the keys, in order.

    Raises:
        ValueError: Naming an unknown approach and the known ones.
    """
    keys = [k.strip() for k in str(text).split(",") if k.strip()]
    if not keys:
        raise ValueError(f"--approach {text!r}: name one of {', '.join(APPROACHES)} or {ALL}")
    if ALL in keys:
        return tuple(APPROACHES)
    unknown = [k for k in keys if k not in APPROACHES]
    if unknown:
        raise ValueError(f"--approach {', '.join(unknown)}: unknown; choose from "
                         f"{', '.join(APPROACHES)} or {ALL} (several joined by commas)")
    return tuple(dict.fromkeys(keys))
