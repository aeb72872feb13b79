"""L-BFGS for many unconstrained problems at once, each start with its own state.

Chinchilla approach 3 runs L-BFGS from 4,500 starts (`sweep.scaling.parametric`), and its
bootstrap refits one problem per resample. `minimize_lbfgs_batched` advances them together:
one evaluation of the objective and gradient serves every start still running (a numpy call
over all of them), while each start keeps its own L-BFGS memory, line search and stopping test,
those of scipy's L-BFGS-B with its default tolerances. Only the bookkeeping is shared.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["LBFGS_FTOL", "LBFGS_GTOL", "LBFGS_MAXITER", "STATUS", "minimize_lbfgs_batched"]

#: Stopping tests of each start's L-BFGS run: scipy L-BFGS-B's defaults (factr 1e7 times machine
#: epsilon, pgtol 1e-5), i.e. Hoffmann's procedure as scipy runs it start by start.
LBFGS_FTOL = 1e7 * np.finfo(float).eps
LBFGS_GTOL = 1e-5
LBFGS_MAXITER = 15_000

#: Status codes of `minimize_lbfgs_batched`, one per start.
STATUS = {0: "gradient below gtol", 1: "relative reduction of f below ftol",
          2: "line search failed with an empty memory", 3: "iteration limit reached"}


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
    f, g = fun(x, np.arange(n_starts))
    f = np.array(f, dtype=float)
    g = np.array(g, dtype=float)
    pairs = _Memory(n_starts, memory, dim)
    nit = np.zeros(n_starts, dtype=np.int64)
    nfev = np.ones(n_starts, dtype=np.int64)
    status = np.full(n_starts, -1)
    status[~np.isfinite(f)] = 2
    status[(status < 0) & (np.max(np.abs(g), axis=1) <= gtol)] = 0
    while (act := np.flatnonzero(status < 0)).size:
        xa, fa, ga = x[act], f[act], g[act]
        direction, gd, fresh = pairs.direction(act, ga)
        step0 = np.where(fresh, 1 / np.sqrt(np.maximum(-gd, 1e-300)), 1.0)
        ok, x_new, f_new, g_new, evals = _wolfe_search(fun, act, xa, fa, gd, direction, step0,
                                                       max_linesearch)
        nfev[act] += evals
        failed = act[~ok]
        if failed.size:  # clear the memory and retry along -g; stop a start already fresh
            empty = pairs.count[failed] == 0
            status[failed[empty]] = 2
            pairs.clear(failed[~empty])
        moved = act[ok]
        if moved.size == 0:
            continue
        pairs.push(moved, x_new[ok] - xa[ok], g_new[ok] - ga[ok])
        f_old = fa[ok]
        x[moved], f[moved], g[moved] = x_new[ok], f_new[ok], g_new[ok]
        nit[moved] += 1
        _stopping_tests(status, moved, f_old, f[moved], g[moved], nit[moved], ftol, gtol, maxiter)
    return x, f, status, nit, nfev


class _Memory:
    """Each start's last pairs (s, y), newest last, and rho = 1 / s'y (0 in an empty slot)."""

    def __init__(self, n_starts: int, size: int, dim: int) -> None:
        self.s = np.zeros((n_starts, size, dim))
        self.y = np.zeros((n_starts, size, dim))
        self.rho = np.zeros((n_starts, size))
        self.count = np.zeros(n_starts, dtype=np.int64)

    def clear(self, rows: np.ndarray) -> None:
        self.s[rows] = 0.0
        self.y[rows] = 0.0
        self.rho[rows] = 0.0
        self.count[rows] = 0

    def direction(self, rows: np.ndarray,
                  g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row's search direction at gradient ``g``, g'direction, and which rows start afresh.

        The two-loop direction -H g; steepest descent -g (its memory cleared) where the memory
        is empty or the two-loop direction does not descend.
        """
        direction = _two_loop(g, self.s[rows], self.y[rows], self.rho[rows], self.count[rows])
        gd = np.einsum("kd,kd->k", g, direction)
        fresh = (self.count[rows] == 0) | ~(gd < 0)
        if fresh.any():
            direction[fresh] = -g[fresh]
            gd[fresh] = -np.einsum("kd,kd->k", g[fresh], g[fresh])
            self.clear(rows[fresh])
        return direction, gd, fresh

    def push(self, rows: np.ndarray, s: np.ndarray, y: np.ndarray) -> None:
        """Store each row's newest pair over its oldest, unless s'y <= eps y'y."""
        sy = np.einsum("kd,kd->k", s, y)
        yy = np.einsum("kd,kd->k", y, y)
        keep = sy > np.finfo(float).eps * yy
        upd = rows[keep]
        if upd.size:
            self.s[upd, :-1] = self.s[upd, 1:]
            self.y[upd, :-1] = self.y[upd, 1:]
            self.rho[upd, :-1] = self.rho[upd, 1:]
            self.s[upd, -1] = s[keep]
            self.y[upd, -1] = y[keep]
            self.rho[upd, -1] = 1 / sy[keep]
            self.count[upd] = np.minimum(self.count[upd] + 1, self.s.shape[1])


def _stopping_tests(status, rows, f_old, f_new, g_new, nit, ftol, gtol, maxiter):
    """L-BFGS-B's tests after a step of ``rows``: `STATUS` codes 1, then 0, then 3."""
    scale = np.maximum(np.maximum(np.abs(f_old), np.abs(f_new)), 1.0)
    status[rows[(f_old - f_new) <= ftol * scale]] = 1
    status[rows[np.max(np.abs(g_new), axis=1) <= gtol]] = 0
    status[rows[(status[rows] < 0) & (nit >= maxiter)]] = 3


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

