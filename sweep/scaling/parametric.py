"""Chinchilla approach 3: the parametric law L(N, D) = E + A / N^alpha + B / D^beta.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", section 3.3 and
appendix D.2) fit it by minimising the Huber loss (delta = 1e-3) between the log of the
predicted and observed loss, the prediction written as a log-sum-exp,

    log L(N, D) = LSE(a - alpha log N, b - beta log D, e),   A = e^a, B = e^b, E = e^e,

with L-BFGS from a grid of initialisations (alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5,
..., 1}, a, b in {0, 5, ..., 25}), keeping the best. `compute_optimal` gives their closed form
for the compute-optimal split under C = 6 N D (eq. 4).

The 4,500 L-BFGS runs are advanced together (`minimize_lbfgs_batched`): one numpy evaluation of
the objective and gradient serves every start still running, while each start keeps its own
L-BFGS memory, line search and stopping test (those of scipy's L-BFGS-B with its default
tolerances: memory 10, stop when a step reduces the objective by at most ``ftol * max(|f|,
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
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize
from scipy.special import huber, logsumexp

from sweep.scaling.bootstrap import bootstrap_counts, check_bootstrap_args, percentile_intervals
from sweep.scaling.result import DEFAULT_LEVEL, FitError, FitResult, dropped_note, finite_rows
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS, METRIC_TOKENS_PER_PARAM

__all__ = ["HOFFMANN_GRID", "ParametricFit", "compute_optimal", "fit_parametric",
           "minimize_lbfgs_batched"]

#: Hoffmann et al. 2022, appendix D.2: the initialisations of (alpha, beta, e, a, b).
HOFFMANN_GRID = {
    "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
    "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0),
    "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
}
_NAMES = ("E", "A", "B", "alpha", "beta")
#: Stopping tests of each start's L-BFGS run: scipy L-BFGS-B's defaults (factr 1e7 times machine
#: epsilon, pgtol 1e-5), i.e. Hoffmann's procedure as scipy runs it start by start.
LBFGS_FTOL = 1e7 * np.finfo(float).eps
LBFGS_GTOL = 1e-5
LBFGS_MAXITER = 15_000
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

#: Status codes of `minimize_lbfgs_batched`, one per start.
STATUS = {0: "gradient below gtol", 1: "relative reduction of f below ftol",
          2: "line search failed with an empty memory", 3: "iteration limit reached"}


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
        p = self.params
        n, d = np.asarray(n_params, dtype=float), np.asarray(n_tokens, dtype=float)
        out = p["E"] + p["A"] / n ** p["alpha"] + p["B"] / d ** p["beta"]
        return float(out) if np.ndim(out) == 0 else out


def _objective(theta, log_n, log_d, log_loss, delta):
    """Summed Huber loss of one ``theta = (a, b, e, alpha, beta)`` and its gradient (scipy)."""
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    r = logsumexp(terms, axis=0) - log_loss
    # Gradient of sum(huber(delta, r)) by the chain rule through the log-sum-exp.
    w = np.exp(terms - logsumexp(terms, axis=0))
    dr = np.clip(r, -delta, delta)
    grad = np.array([np.sum(dr * w[0]), np.sum(dr * w[1]), np.sum(dr * w[2]),
                     -np.sum(dr * w[0] * log_n), -np.sum(dr * w[1] * log_d)])
    return float(np.sum(huber(delta, r))), grad


def _batched_objective(theta, log_n, log_d, log_loss, delta, weights=None):
    """`_objective` for many ``theta`` at once.

    Args:
        theta: Shape ``(k, 5)``: ``(a, b, e, alpha, beta)`` per row.
        log_n: Shape ``(n,)``: log N of each point.
        log_d: Shape ``(n,)``: log D.
        log_loss: Shape ``(n,)``: log of the observed loss.
        delta: Huber delta.
        weights: Shape ``(k, n)``: each row's weight per point (a bootstrap's counts), or None.

    Returns:
        The objectives, shape ``(k,)``, and gradients, shape ``(k, 5)``.
    """
    f = np.empty(theta.shape[0])
    grad = np.empty((theta.shape[0], 5))
    # Blocks of rows small enough to stay in cache (several times faster than whole arrays),
    # spread over threads (numpy releases the GIL inside each operation).
    step = max(1, _BLOCK // max(1, log_n.size))
    blocks = [slice(lo, lo + step) for lo in range(0, theta.shape[0], step)]

    def run(block):
        _objective_block(theta[block], log_n, log_d, log_loss, delta,
                         None if weights is None else weights[block], f[block], grad[block])

    if len(blocks) > 1 and _threads() > 1:
        list(_pool().map(run, blocks))
    else:
        for block in blocks:
            run(block)
    return f, grad


_BLOCK = 120_000  # elements per block of `_batched_objective`
_POOL: list[ThreadPoolExecutor] = []


def _threads() -> int:
    return min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else (os.cpu_count() or 1))


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(_threads(), thread_name_prefix="scaling-fit"))
    return _POOL[0]


def _objective_block(theta, log_n, log_d, log_loss, delta, weights, f, grad):
    a, b, e, alpha, beta = (theta[:, i:i + 1] for i in range(5))
    t1 = a - alpha * log_n
    t2 = b - beta * log_d
    top = np.maximum(t1, t2)
    np.maximum(top, e, out=top)
    t1 -= top
    np.exp(t1, out=t1)
    t2 -= top
    np.exp(t2, out=t2)
    total = np.subtract(e, top)
    np.exp(total, out=total)
    total += t1
    total += t2
    r = np.log(total)
    r += top
    r -= log_loss
    dr = np.clip(r, -delta, delta)
    # Huber: r^2 / 2 inside [-delta, delta], delta (|r| - delta / 2) outside, = dr (r - dr / 2).
    r -= 0.5 * dr
    r *= dr
    if weights is not None:
        r *= weights
        dr *= weights
    f[:] = r.sum(axis=1)
    sum_dr = dr.sum(axis=1)
    dr /= total
    t1 *= dr  # dr times the softmax weight of the N term
    t2 *= dr
    grad[:, 0] = t1.sum(axis=1)
    grad[:, 1] = t2.sum(axis=1)
    grad[:, 2] = sum_dr - grad[:, 0] - grad[:, 1]  # the three softmax weights sum to 1
    grad[:, 3] = -np.einsum("kn,n->k", t1, log_n)
    grad[:, 4] = -np.einsum("kn,n->k", t2, log_d)


def minimize_lbfgs_batched(fun: Callable, x0: np.ndarray, *, memory: int = 10,
                           ftol: float = LBFGS_FTOL, gtol: float = LBFGS_GTOL,
                           maxiter: int = LBFGS_MAXITER, max_linesearch: int = 20):
    """Minimise many unconstrained problems at once by L-BFGS, each with its own state.

    L-BFGS (Liu & Nocedal 1989; Nocedal & Wright 2006, "Numerical Optimization", algorithms
    7.4 and 7.5): the two-loop recursion over each start's last ``memory`` pairs (s, y), scaled
    by s'y / y'y of the newest pair, and a line search for the weak Wolfe conditions
    (sufficient decrease 1e-3, curvature 0.9, the constants of scipy's L-BFGS-B line search):
    the first step of a start, or after its memory is cleared, is 1 / ||g|| along -g, later
    steps try 1 first, then shrink by quadratic interpolation or grow by doubling, bisecting
    once bracketed. A pair with s'y <= eps y'y is not stored. A failed line search clears that
    start's memory and retries along -g (as L-BFGS-B does); a second failure stops the start.
    The stopping tests are L-BFGS-B's: ``(f_k - f_k+1) <= ftol * max(|f_k|, |f_k+1|, 1)`` or
    ``max |g| <= gtol``, or ``maxiter`` iterations.

    Args:
        fun: ``fun(x, rows) -> (f, g)``: ``x`` shape ``(k, d)`` holds the points of starts
            ``rows`` (indices into ``x0``, shape ``(k,)``); ``f`` shape ``(k,)``, ``g`` ``(k, d)``.
        x0: Shape ``(S, d)``: the starts.
        memory: Pairs kept per start.
        ftol: Stop when a step's reduction of f is at most ``ftol * max(|f_k|, |f_k+1|, 1)``.
        gtol: Stop when ``max |g| <= gtol``.
        maxiter: Stop after this many iterations.
        max_linesearch: Function evaluations allowed per line search.

    Returns:
        ``(x, f, status, nit, nfev)``: the final points ``(S, d)``, their objectives ``(S,)``,
        a `STATUS` code per start (0 and 1 are convergence), the iterations and the function
        evaluations per start.
    """
    x = np.array(x0, dtype=float)
    n_starts, dim = x.shape
    eps = np.finfo(float).eps
    f, g = fun(x, np.arange(n_starts))
    f = np.array(f, dtype=float)
    g = np.array(g, dtype=float)
    s_mem = np.zeros((n_starts, memory, dim))
    y_mem = np.zeros((n_starts, memory, dim))
    rho = np.zeros((n_starts, memory))
    n_mem = np.zeros(n_starts, dtype=np.int64)
    nit = np.zeros(n_starts, dtype=np.int64)
    nfev = np.ones(n_starts, dtype=np.int64)
    status = np.full(n_starts, -1)
    status[~np.isfinite(f)] = 2
    status[(status < 0) & (np.max(np.abs(g), axis=1) <= gtol)] = 0
    while True:
        act = np.flatnonzero(status < 0)
        if act.size == 0:
            break
        xa, fa, ga = x[act], f[act], g[act]
        direction = _two_loop(ga, s_mem[act], y_mem[act], rho[act], n_mem[act])
        gd = np.einsum("kd,kd->k", ga, direction)
        fresh = (n_mem[act] == 0) | ~(gd < 0)
        if fresh.any():  # steepest descent when the memory is empty or gives no descent
            direction[fresh] = -ga[fresh]
            gd[fresh] = -np.einsum("kd,kd->k", ga[fresh], ga[fresh])
            _clear(act[fresh], s_mem, y_mem, rho, n_mem)
        step0 = np.where(fresh, 1 / np.sqrt(np.maximum(-gd, 1e-300)), 1.0)
        ok, x_new, f_new, g_new, evals = _wolfe_search(fun, act, xa, fa, gd, direction, step0,
                                                       max_linesearch)
        nfev[act] += evals
        failed = act[~ok]
        if failed.size:  # clear the memory and retry along -g; stop a start already fresh
            empty = n_mem[failed] == 0
            status[failed[empty]] = 2
            _clear(failed[~empty], s_mem, y_mem, rho, n_mem)
        moved = act[ok]
        if moved.size == 0:
            continue
        s = x_new[ok] - xa[ok]
        y = g_new[ok] - ga[ok]
        sy = np.einsum("kd,kd->k", s, y)
        yy = np.einsum("kd,kd->k", y, y)
        keep = sy > eps * yy
        upd = moved[keep]
        if upd.size:
            s_mem[upd, :-1] = s_mem[upd, 1:]
            y_mem[upd, :-1] = y_mem[upd, 1:]
            rho[upd, :-1] = rho[upd, 1:]
            s_mem[upd, -1] = s[keep]
            y_mem[upd, -1] = y[keep]
            rho[upd, -1] = 1 / sy[keep]
            n_mem[upd] = np.minimum(n_mem[upd] + 1, memory)
        f_old = fa[ok]
        x[moved], f[moved], g[moved] = x_new[ok], f_new[ok], g_new[ok]
        nit[moved] += 1
        scale = np.maximum(np.maximum(np.abs(f_old), np.abs(f[moved])), 1.0)
        status[moved[(f_old - f[moved]) <= ftol * scale]] = 1
        status[moved[np.max(np.abs(g[moved]), axis=1) <= gtol]] = 0
        status[moved[(status[moved] < 0) & (nit[moved] >= maxiter)]] = 3
    return x, f, status, nit, nfev


def _clear(rows, s_mem, y_mem, rho, n_mem):
    s_mem[rows] = 0.0
    y_mem[rows] = 0.0
    rho[rows] = 0.0
    n_mem[rows] = 0


def _two_loop(g, s_mem, y_mem, rho, n_mem):
    """-H g by the two-loop recursion; empty memory slots (rho = 0) are no-ops."""
    q = g.copy()
    memory = s_mem.shape[1]
    alphas = np.empty((g.shape[0], memory))
    for i in range(memory - 1, -1, -1):
        alphas[:, i] = rho[:, i] * np.einsum("kd,kd->k", s_mem[:, i], q)
        q -= alphas[:, i:i + 1] * y_mem[:, i]
    yy = np.einsum("kd,kd->k", y_mem[:, -1], y_mem[:, -1])
    with np.errstate(divide="ignore", invalid="ignore"):
        gamma = np.where((n_mem > 0) & (yy > 0), 1 / (rho[:, -1] * yy), 1.0)
    r = gamma[:, None] * q
    for i in range(memory):
        b = rho[:, i] * np.einsum("kd,kd->k", y_mem[:, i], r)
        r += s_mem[:, i] * (alphas[:, i] - b)[:, None]
    return -r


def _wolfe_search(fun, rows, x, f, gd, direction, step, max_evals, c1=1e-3, c2=0.9):
    """Weak Wolfe line search for every row at once (see `minimize_lbfgs_batched`)."""
    k = rows.size
    lo = np.zeros(k)
    hi = np.full(k, np.inf)
    step = step.copy()
    ok = np.zeros(k, dtype=bool)
    done = np.zeros(k, dtype=bool)
    have = np.zeros(k, dtype=bool)  # a point meeting sufficient decrease only, for a fallback
    x_new, f_new, g_new = x.copy(), f.copy(), np.zeros_like(x)
    evals = np.zeros(k, dtype=np.int64)
    for _ in range(max_evals):
        todo = np.flatnonzero(~done)
        if todo.size == 0:
            break
        t = step[todo]
        xt = x[todo] + t[:, None] * direction[todo]
        ft, gt = fun(xt, rows[todo])
        evals[todo] += 1
        with np.errstate(invalid="ignore"):
            decrease = np.isfinite(ft) & (ft <= f[todo] + c1 * t * gd[todo])
            curvature = np.einsum("kd,kd->k", gt, direction[todo]) >= c2 * gd[todo]
        accept = decrease & curvature
        short = decrease & ~curvature
        for mask, flag in ((accept, True), (short, False)):
            idx = todo[mask]
            x_new[idx], f_new[idx], g_new[idx] = xt[mask], ft[mask], gt[mask]
            have[idx] = True
            if flag:
                ok[idx] = True
                done[idx] = True
        # Too short: grow (double) until bracketed, then bisect.
        idx = todo[short]
        lo[idx] = step[idx]
        step[idx] = np.where(np.isinf(hi[idx]), 2 * step[idx], 0.5 * (lo[idx] + hi[idx]))
        # Too long: quadratic interpolation while nothing is bracketed below, else bisect.
        long_ = ~decrease
        idx = todo[long_]
        hi[idx] = step[idx]
        t_l, f_l = t[long_], ft[long_]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            quad = -gd[idx] * t_l**2 / (2 * (f_l - f[idx] - gd[idx] * t_l))
        quad = np.where(np.isfinite(quad), np.clip(quad, 0.1 * t_l, 0.5 * t_l), 0.25 * t_l)
        step[idx] = np.where(lo[idx] > 0, 0.5 * (lo[idx] + hi[idx]), quad)
        # A step too small to change x ends the search.
        tiny = todo[(np.abs(step[todo])[:, None] * np.abs(direction[todo])
                     <= _eps_scale(x[todo])).all(axis=1)]
        done[tiny] = True
    ok |= have  # out of evaluations: keep the longest step that met sufficient decrease
    return ok, x_new, f_new, g_new, evals


def _eps_scale(x):
    """The change in ``x`` below which a step does not move it (machine epsilon times |x|)."""
    return np.finfo(float).eps * np.maximum(np.abs(x), 1e-300)


def _starts(grid) -> np.ndarray:
    """The grid's starts as ``(a, b, e, alpha, beta)`` rows, in (alpha, beta, e, a, b) order."""
    rows = [(a, b, e, alpha, beta) for alpha, beta, e, a, b in itertools.product(
        grid["alpha"], grid["beta"], grid["e"], grid["a"], grid["b"])]
    return np.array(rows, dtype=float)


def _params(theta) -> dict[str, float]:
    a, b, e, alpha, beta = (float(v) for v in theta)
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}


def _check_points(n_params, n_tokens, loss):
    (n, d, y), dropped = finite_rows((METRIC_N_PARAMS, METRIC_N_TOKENS, "loss"),
                                     n_params, n_tokens, loss)
    note = dropped_note(dropped)
    if n.size < 6:
        raise FitError(f"{n.size} points{note}: fitting E, A, B, alpha and beta needs at least 6")
    for name, values in ((METRIC_N_PARAMS, n), (METRIC_N_TOKENS, d), ("loss", y)):
        if not np.all(values > 0):
            raise FitError(f"{name}: every value must be finite and > 0")
    for name, values in ((METRIC_N_PARAMS, n), (METRIC_N_TOKENS, d)):
        if np.unique(values).size < 2:
            raise FitError(f"{name} takes one value{note}: its exponent cannot be fitted")
    return n, d, y, dropped


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
            any start.
    """
    n, d, y, dropped = _check_points(n_params, n_tokens, loss)
    check_bootstrap_args(n_bootstrap, level)
    if solver not in ("batched", "scipy"):
        raise FitError(f"solver={solver!r}: must be 'batched' or 'scipy'")
    grid = grid or HOFFMANN_GRID
    keep = np.setdiff1d(np.arange(np.asarray(loss).size), dropped)
    if groups is not None:
        groups = np.asarray(groups).ravel()
        if groups.size != keep.size + len(dropped):
            raise FitError(f"groups has {groups.size} labels for {keep.size + len(dropped)} rows")
        groups = groups[keep]
    log_n, log_d, log_loss = np.log(n), np.log(d), np.log(y)
    starts = _starts(grid)
    solve = _solve_scipy if solver == "scipy" else _solve_batched
    xs, fs, _ = solve(starts, log_n, log_d, log_loss, delta, LBFGS_FTOL, LBFGS_GTOL)
    fs = np.where(np.isfinite(fs), fs, np.inf)
    if not np.isfinite(fs).any():
        raise FitError("no start reached a finite objective: the losses cannot be fitted")
    order = np.argsort(fs, kind="stable")
    near = order[fs[order] <= fs[order[0]] * (1 + POLISH_MARGIN)][:POLISH_MAX]
    xp, fp, sp = solve(xs[near], log_n, log_d, log_loss, delta, POLISH_FTOL, POLISH_GTOL)
    fp = np.where(np.isfinite(fp), fp, np.inf)
    i = int(np.argmin(fp))
    theta, best, code = xp[i], float(fp[i]), int(sp[i])
    success = code in (0, 1, 2)  # 2 in the polish: no step lowers f in floating point
    params = _params(theta)
    residuals = log_loss - np.log(params["E"] + params["A"] / n ** params["alpha"]
                                  + params["B"] / d ** params["beta"])
    settings = {"delta": delta, "starts": int(starts.shape[0]), "solver": solver,
                "ftol": LBFGS_FTOL, "gtol": LBFGS_GTOL, "memory": 10, "polished": int(near.size),
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


def _solve_batched(starts, log_n, log_d, log_loss, delta, ftol, gtol):
    def fun(x, rows):
        return _batched_objective(x, log_n, log_d, log_loss, delta)

    xs, fs, status, _, _ = minimize_lbfgs_batched(fun, starts, ftol=ftol, gtol=gtol)
    return xs, fs, status


def _solve_scipy(starts, log_n, log_d, log_loss, delta, ftol, gtol):
    """Run scipy's L-BFGS-B from each start: final points, objectives and `STATUS` codes."""
    with _one_blas_thread():
        out = [minimize(_objective, start, jac=True, args=(log_n, log_d, log_loss, delta),
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


def _bootstrap(theta, n, d, log_n, log_d, log_loss, delta, n_bootstrap, seed, groups):
    counts = bootstrap_counts(n.size, n_bootstrap, seed, groups=groups).astype(float)

    def fun(x, rows):
        return _batched_objective(x, log_n, log_d, log_loss, delta, counts[rows])

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
    return {name: table[:, i] for i, name in enumerate(_NAMES)}, failed


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
    from sweep.scaling.allocation import closed_form_split  # allocation imports this module

    n_opt, d_opt = closed_form_split(p, flops)
    return {METRIC_N_PARAMS: n_opt, METRIC_N_TOKENS: d_opt, METRIC_TOKENS_PER_PARAM: d_opt / n_opt,
            "loss": fit.predict(n_opt, d_opt)}
