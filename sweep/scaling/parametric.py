"""Chinchilla approach 3: the parametric law L(N, D) = E + A / N^alpha + B / D^beta.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", section 3.3 and
appendix D.2) fit it by minimising the Huber loss (delta = 1e-3) between the log of the
predicted and observed loss, the prediction written as a log-sum-exp,

    log L(N, D) = LSE(a - alpha log N, b - beta log D, e),   A = e^a, B = e^b, E = e^e,

with L-BFGS from a grid of initialisations (alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5,
..., 1}, a, b in {0, 5, ..., 25}), keeping the best. The objective is `sweep.scaling.huber`'s;
`compute_optimal` gives their closed form for the compute-optimal split under C = 6 N D (eq. 4,
`sweep.scaling.law`).

The 4,500 L-BFGS runs are advanced together (`sweep.scaling.lbfgs.minimize_lbfgs_batched`),
each start with its own L-BFGS state and the stopping tests of scipy's L-BFGS-B with its default
tolerances (memory 10, stop when a step reduces the objective by at most ``ftol * max(|f|,
1)`` or the largest gradient component is at most ``gtol``). The procedure is Hoffmann's; only
the bookkeeping is shared. The starts that end within 0.1% of the best are then run on to
tight tolerances (the polish, `POLISH_FTOL`), and the best of those kept: scipy's default
tolerances, meant for objectives of order 1, stop early on this one (of order 1e-3).
``solver="scipy"`` runs scipy's L-BFGS-B start by start instead (the reference the tests compare
with).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize

from sweep.scaling.bootstrap import (
    bootstrap_counts,
    check_bootstrap_args,
    kept_groups,
    percentile_intervals,
)
from sweep.scaling.huber import batched_objective, objective
from sweep.scaling.law import PARAMS, check_points, closed_form_split, law_loss
from sweep.scaling.lbfgs import (
    LBFGS_FTOL,
    LBFGS_GTOL,
    LBFGS_MAXITER,
    STATUS,
    minimize_lbfgs_batched,
)
from sweep.scaling.result import DEFAULT_LEVEL, FitError, FitResult
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS, METRIC_TOKENS_PER_PARAM

__all__ = ["HOFFMANN_GRID", "ParametricFit", "compute_optimal", "fit_parametric"]

#: Hoffmann et al. 2022, appendix D.2: the initialisations of (alpha, beta, e, a, b).
HOFFMANN_GRID = {
    "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
    "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0),
    "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
}
#: The polish: starts within this relative margin of the best (at most `POLISH_MAX` of them)
#: are run on with `POLISH_FTOL` and `POLISH_GTOL`, as is every bootstrap refit. With the floor
#: of 1 in max(|f|, 1), scipy's ftol stops a run once a step gains 2.2e-9, while the summed
#: Huber loss of a real fit is of order 1e-3 and its valley (E, A, alpha together) nearly flat:
#: bootstrap refits started at the full fit's optimum then stopped a few iterations out, and
#: their spread of alpha came out 6 times too narrow (240 noisy points, against full-grid
#: refits of the same resamples, which the polished refits match). The polish has no test on
#: the gain of a step (ftol 0): it runs until the largest gradient component is below 1e-10 or
#: no step lowers the objective in floating point (a line search failing with an empty memory:
#: the precision floor, counted as converged), or `LBFGS_MAXITER` iterations (not converged).
POLISH_FTOL = 0.0
POLISH_GTOL = 1e-10
POLISH_MARGIN = 1e-3
POLISH_MAX = 64


@dataclass(frozen=True, kw_only=True)
class ParametricFit(FitResult):
    """The fit of L(N, D) = E + A / N^alpha + B / D^beta (`FitResult` fields).

    ``params`` are ``E`` (nats/token), ``A``, ``B``, ``alpha``, ``beta``; ``residuals`` are in
    log loss (observed minus fitted); ``objective`` is the summed Huber loss; ``settings`` hold
    the Huber delta, the number of starts, the solver and its tolerances, and the bootstrap's
    count, seed and failures. ``stderr`` is empty (the Huber fit defines none; use the
    bootstrap ``intervals``).
    """

    method: str = "Hoffmann et al. 2022 approach 3: Huber on log loss, L-BFGS from a grid"

    def predict(self, n_params, n_tokens):
        """The fitted loss (nats/token) at ``n_params`` N and ``n_tokens`` D (arrays broadcast)."""
        n, d = np.asarray(n_params, dtype=float), np.asarray(n_tokens, dtype=float)
        out = law_loss(self.params, n, d)
        return float(out) if np.ndim(out) == 0 else out


def _starts(grid) -> np.ndarray:
    """The grid's starts as ``(a, b, e, alpha, beta)`` rows, in (alpha, beta, e, a, b) order."""
    rows = [(a, b, e, alpha, beta) for alpha, beta, e, a, b in itertools.product(
        grid["alpha"], grid["beta"], grid["e"], grid["a"], grid["b"])]
    return np.array(rows, dtype=float)


def _params(theta) -> dict[str, float]:
    a, b, e, alpha, beta = (float(v) for v in theta)
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}


def fit_parametric(n_params, n_tokens, loss, *, delta: float = 1e-3,
                   grid: dict[str, tuple[float, ...]] | None = None, n_bootstrap: int = 0,
                   seed: int = 0, level: float = DEFAULT_LEVEL, groups=None,
                   solver: str = "batched") -> ParametricFit:
    """Fit L(N, D) = E + A / N^alpha + B / D^beta as Hoffmann et al. 2022 (approach 3).

    Every start of ``grid`` is run by L-BFGS to convergence (scipy's default tolerances); the
    starts within 0.1% of the best objective (at most 64) are run on to tight tolerances and
    the lowest objective kept (module docstring). Rows with a NaN or infinite value are dropped
    and listed in ``dropped`` (and counted in ``settings["dropped"]``).

    Bootstrap: ``n_bootstrap`` refits on resampled points (or whole ``groups``, e.g. a label
    per IsoFLOP budget or per training run), each a single L-BFGS run (tight tolerances)
    started from the full fit's optimum rather than from the whole grid (a resample moves the
    optimum little, and 4,500 starts per refit would cost 4,500 times as much); the refits are
    advanced together as the grid's starts are. ``intervals`` are their percentile intervals
    at ``level``; ``draws`` keep them.

    Args:
        n_params: Shape ``(n,)``: parameters N of each point (> 0).
        n_tokens: Shape ``(n,)``: training tokens D (> 0).
        loss: Shape ``(n,)``: final losses, nats/token (> 0).
        delta: The Huber loss's delta (the paper's 1e-3).
        grid: Initialisations of ``alpha``, ``beta``, ``e``, ``a``, ``b``; default
            `HOFFMANN_GRID` (4,500 starts).
        n_bootstrap: Bootstrap refits (0: none).
        seed: Seed of the resampling.
        level: Confidence level of ``intervals``, in (0, 1).
        groups: Shape ``(n,)``: a label per point; resample whole groups. None: points.
        solver: ``"batched"`` (`minimize_lbfgs_batched`, all starts together) or ``"scipy"``
            (scipy's L-BFGS-B start by start, and for the polish: the reference
            implementation, the same procedure, 25 times slower in bench/scaling_fit.py).

    Returns:
        The `ParametricFit` of the best start; ``converged`` is False when its polish ran out
        of iterations (``message`` says so).

    Raises:
        FitError: Shapes that differ, fewer than 6 points after dropping non-finite rows (5
            parameters need a residual), non-positive values, fewer than 2 distinct values of N
            or of D, a bad ``n_bootstrap``, ``level`` or ``solver``, or no finite objective at
            any start, or a ``delta`` that is not a finite number > 0.
    """
    n, d, y, dropped = check_points(n_params, n_tokens, loss)
    check_bootstrap_args(n_bootstrap, level)
    if not (math.isfinite(delta) and delta > 0):
        raise FitError(f"delta={delta!r}: the Huber delta must be a finite number > 0")
    if solver not in _SOLVERS:
        raise FitError(f"solver={solver!r}: must be 'batched' or 'scipy'")
    groups = kept_groups(groups, n.size + len(dropped), dropped)
    log_n, log_d, log_loss = np.log(n), np.log(d), np.log(y)
    starts = _starts(grid or HOFFMANN_GRID)
    theta, best, code, polished = _best_start(_SOLVERS[solver], starts, log_n, log_d, log_loss,
                                              delta)
    success = code in (0, 1, 2)  # 2 in the polish: no step lowers f in floating point
    params = _params(theta)
    residuals = log_loss - np.log(law_loss(params, n, d))
    settings = {"delta": delta, "starts": int(starts.shape[0]), "solver": solver,
                "ftol": LBFGS_FTOL, "gtol": LBFGS_GTOL, "memory": 10, "polished": polished,
                "polish_ftol": POLISH_FTOL, "polish_gtol": POLISH_GTOL,
                "dropped": len(dropped), "n_bootstrap": n_bootstrap, "seed": seed}
    fit = ParametricFit(params=params, residuals=residuals, objective=best, converged=success,
                        n_points=int(n.size), settings=settings, level=level, dropped=dropped,
                        message="" if success else f"best start stopped: {STATUS[code]}")
    if not n_bootstrap:
        return fit
    draws, failed = _bootstrap(theta, n, d, log_n, log_d, log_loss, delta, n_bootstrap, seed,
                               groups)
    return replace(fit, draws=draws, intervals=percentile_intervals(draws, level),
                   settings={**settings, "bootstrap_start": "full-fit optimum",
                             "bootstrap_failed": failed})


def _best_start(solve, starts, log_n, log_d, log_loss, delta):
    """Every start run at scipy's default tolerances, then the polish of those near the best.

    Returns:
        The best polished point ``(a, b, e, alpha, beta)``, its objective, its `STATUS` code,
        and how many starts were polished.

    Raises:
        FitError: No start reached a finite objective.
    """
    xs, fs, _ = solve(starts, log_n, log_d, log_loss, delta, LBFGS_FTOL, LBFGS_GTOL)
    fs = np.where(np.isfinite(fs), fs, np.inf)
    if not np.isfinite(fs).any():
        raise FitError("no start reached a finite objective: the losses cannot be fitted")
    order = np.argsort(fs, kind="stable")
    near = order[fs[order] <= fs[order[0]] * (1 + POLISH_MARGIN)][:POLISH_MAX]
    xp, fp, sp = solve(xs[near], log_n, log_d, log_loss, delta, POLISH_FTOL, POLISH_GTOL)
    fp = np.where(np.isfinite(fp), fp, np.inf)
    i = int(np.argmin(fp))
    return xp[i], float(fp[i]), int(sp[i]), int(near.size)


def _solve_batched(starts, log_n, log_d, log_loss, delta, ftol, gtol):
    def fun(x, rows):
        return batched_objective(x, log_n, log_d, log_loss, delta)

    xs, fs, status, _, _ = minimize_lbfgs_batched(fun, starts, ftol=ftol, gtol=gtol)
    return xs, fs, status


def _solve_scipy(starts, log_n, log_d, log_loss, delta, ftol, gtol):
    """Run scipy's L-BFGS-B from each start: final points, objectives and `STATUS` codes."""
    with _one_blas_thread():
        out = [minimize(objective, start, jac=True, args=(log_n, log_d, log_loss, delta),
                        method="L-BFGS-B", options={"ftol": ftol, "gtol": gtol,
                                                    "maxiter": LBFGS_MAXITER})
               for start in starts]
    xs = np.array([sol.x for sol in out])
    fs = np.array([sol.fun for sol in out], dtype=float)
    grads = np.array([np.max(np.abs(sol.jac)) for sol in out])
    status = np.where(np.array([sol.success for sol in out]), np.where(grads <= gtol, 0, 1),
                      np.where(np.array([sol.nit for sol in out]) >= LBFGS_MAXITER, 3, 2))
    return xs, fs, status


def _one_blas_thread():
    """Limit BLAS to one thread where threadpoolctl is installed (a no-op otherwise).

    scipy's L-BFGS-B makes many tiny BLAS calls; on a loaded machine a multi-threaded BLAS
    made them 35 times slower (75 s against 2.2 s for 72 starts on 48 points).
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


#: ``solver`` of `fit_parametric`: how each start's L-BFGS run is made.
_SOLVERS = {"batched": _solve_batched, "scipy": _solve_scipy}


def _bootstrap(theta, n, d, log_n, log_d, log_loss, delta, n_bootstrap, seed, groups):
    counts = bootstrap_counts(n.size, n_bootstrap, seed, groups=groups).astype(float)

    def fun(x, rows):
        return batched_objective(x, log_n, log_d, log_loss, delta, counts[rows])

    xs, _, status, _, _ = minimize_lbfgs_batched(fun, np.tile(theta, (n_bootstrap, 1)),
                                                 ftol=POLISH_FTOL, gtol=POLISH_GTOL)
    # A resample with one distinct N or D cannot fix that exponent: no draw.
    drawn = counts > 0
    usable = np.array([np.unique(n[m]).size > 1 and np.unique(d[m]).size > 1 for m in drawn])
    bad = ~usable | ~np.isfinite(xs).all(axis=1)
    table = np.column_stack([np.exp(xs[:, 2]), np.exp(xs[:, 0]), np.exp(xs[:, 1]),
                             xs[:, 3], xs[:, 4]])
    table[bad] = np.nan
    failed = {"degenerate": int(np.sum(~usable)), "not_converged": int(np.sum(status == 3))}
    return {name: table[:, i] for i, name in enumerate(PARAMS)}, failed


def compute_optimal(fit: ParametricFit, flops: float) -> dict[str, float]:
    """The compute-optimal model for a budget of ``flops`` under C = 6 N D.

    Hoffmann et al. 2022, eq. 4: N_opt = G (C/6)^(beta/(alpha+beta)), D_opt = G^-1
    (C/6)^(alpha/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta)).

    Returns:
        ``n_params`` (N_opt), ``n_tokens`` (D_opt), ``tokens_per_param`` and ``loss`` (the fit's
        prediction there, nats/token).

    Raises:
        FitError: A budget that is not a finite number > 0, or a fit with an exponent <= 0.
    """
    if not (isinstance(flops, (int, float)) and math.isfinite(flops) and flops > 0):
        raise FitError(f"flops={flops!r}: must be a finite number > 0")
    p = fit.params
    if p["alpha"] <= 0 or p["beta"] <= 0:
        raise FitError(f"alpha={p['alpha']:.3g}, beta={p['beta']:.3g}: the compute-optimal "
                       "split needs both exponents > 0")
    n_opt, d_opt = closed_form_split(p, flops)
    return {METRIC_N_PARAMS: n_opt, METRIC_N_TOKENS: d_opt, METRIC_TOKENS_PER_PARAM: d_opt / n_opt,
            "loss": fit.predict(n_opt, d_opt)}
