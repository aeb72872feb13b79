"""VPNLS: L(N, D) = E + A / N^alpha + B / D^beta by variable projection with non-negative LS.

For fixed exponents (alpha, beta) the law is linear in (E, A, B): the loss is the design
``[1, N^-alpha, D^-beta]`` times ``(E, A, B)``, solved by non-negative least squares
(`scipy.optimize.nnls`, Lawson & Hanson 1974), which keeps E, A, B >= 0. What is left, the
residual sum of squares as a function of (alpha, beta) alone (the variable projection of Golub &
Pereyra 1973), is minimised by a coarse grid, then Nelder-Mead from the grid's best point. This
follows Czech 2026 ("Problems with Chinchilla Approach 2", Open-Athena/scaling-law-analysis,
``fit_vpnls`` in ``src/scaling_law_analysis/chinchilla.py``):

- residuals in loss (not log loss): RSS = sum (L - E - A N^-alpha - B D^-beta)^2;
- the grid alpha, beta in ``linspace(0.05, 0.95, 32)`` each (`VPNLS_GRID`, 1,024 points);
- Nelder-Mead with ``xatol = 1e-10``, ``fatol = 1e-15``, ``maxiter = 10,000``
  (`NELDER_MEAD_OPTIONS`), unbounded;
- checked afterwards: the grid's best point at a grid edge, alpha or beta within 1e-6 of the
  bounds (0.01, 0.99), or E, A or B below 1e-6 (NNLS clamped it) flag the fit (``converged``
  False with the reason in ``message``), as do Nelder-Mead failures; a non-finite result is a
  `FitError`.

The grid is evaluated exactly but in closed form: from the weighted Gram matrix of the three
columns, each of the 8 active sets' least-squares solution, the NNLS optimum being the best
one that is non-negative (the KKT conditions of a 3-variable NNLS); the fit's refinement and every
final coefficient use `scipy.optimize.nnls` itself. Refits (a bootstrap's resamples,
`weighted_refits`) run their Nelder-Mead searches together, scipy's steps on that closed-form
objective for every resample at once (`sweep.scaling.vpnls_rows`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize, nnls

from sweep.scaling.bootstrap import (
    bootstrap_counts,
    check_bootstrap_args,
    kept_groups,
    percentile_intervals,
)
from sweep.scaling.law import PARAMS, check_points
from sweep.scaling.parametric import ParametricFit
from sweep.scaling.result import DEFAULT_LEVEL, FitError
from sweep.scaling.vpnls_rows import MAX_COND, MAX_ENTRY, refine_rows

__all__ = ["NELDER_MEAD_OPTIONS", "VPNLSFit", "VPNLS_BOUNDS", "VPNLS_GRID", "fit_vpnls",
           "weighted_refits"]

#: Czech 2026 (Open-Athena/scaling-law-analysis): the start grid of alpha and of beta.
VPNLS_GRID = tuple(float(v) for v in np.linspace(0.05, 0.95, 32))
#: Their bounds on alpha and beta, checked after the (unbounded) refinement.
VPNLS_BOUNDS = (0.01, 0.99)
#: Their Nelder-Mead options.
NELDER_MEAD_OPTIONS = {"xatol": 1e-10, "fatol": 1e-15, "maxiter": 10_000}
_TINY = 1e-6  # a coefficient below this was clamped by NNLS; an exponent this near a bound


@dataclass(frozen=True, kw_only=True)
class VPNLSFit(ParametricFit):
    """The VPNLS fit of L(N, D) = E + A / N^alpha + B / D^beta (`ParametricFit`'s ``predict``).

    ``params`` are ``E`` (nats/token), ``A``, ``B``, ``alpha``, ``beta``; ``residuals`` are in
    loss (observed minus fitted); ``objective`` is the residual sum of squares; ``stderr`` the
    Gauss-Newton standard errors (residual variance RSS / (n - 5) times (J^T J)^-1, J the
    Jacobian of the prediction in the five parameters at the optimum).
    """

    method: str = ("VPNLS (Czech 2026): NNLS for E, A, B inside a grid and Nelder-Mead search "
                   "over alpha, beta; least squares on loss")


def _design(alpha, beta, log_n, log_d, root_w):
    """Shape ``(n, 3)``: ``[1, N^-alpha, D^-beta]`` times ``root_w`` row by row.

    Filled in place: Nelder-Mead calls this some 10^4 times a fit, where stacking the columns
    cost as much as the NNLS solve.
    """
    x = np.empty((log_n.size, 3))
    x[:, 0] = root_w
    np.multiply(np.exp(-alpha * log_n), root_w, out=x[:, 1])
    np.multiply(np.exp(-beta * log_d), root_w, out=x[:, 2])
    return x


def _solvable(x, b) -> bool:
    """Whether ``nnls(x, b)`` is safe: entries finite and at most `MAX_ENTRY`, bounded condition.

    Entries up to `MAX_ENTRY` keep every square and sum of squares nnls forms finite. The
    condition number kappa is that of the 3 columns scaled to unit norm (scaling a column
    changes neither which NNLS solution is optimal nor the residual; an all-zero column, an
    underflowed power, counts as a unit column orthogonal to the others, which leaves kappa as
    it is). Their Gram matrix G has trace 3, so its eigenvalues are at most 3 and the smallest
    is at least det(G) / 9, whence kappa^2 <= 27 / det(G): a determinant of at least
    27 / `MAX_COND`^2 bounds kappa by `MAX_COND`.
    """
    largest = max(float(np.max(np.abs(x))), float(np.max(np.abs(b))))
    if not largest <= MAX_ENTRY:  # also False for nan
        return False
    g = (x.T @ x).tolist()
    norm = [math.sqrt(g[i][i]) or 1.0 for i in range(3)]
    c01, c02, c12 = (g[i][j] / (norm[i] * norm[j]) for i, j in ((0, 1), (0, 2), (1, 2)))
    det = 1 + 2 * c01 * c02 * c12 - c01**2 - c02**2 - c12**2
    return det * MAX_COND**2 >= 27


def _nnls(alpha, beta, log_n, log_d, y, root_w):
    """(RSS, (E, A, B)) at fixed exponents; ``root_w`` the square roots of the weights.

    Exponents whose design `_solvable` refuses (overflowing, or numerically singular) give an
    infinite RSS, which Nelder-Mead steps away from; nnls itself never sees them.
    """
    with np.errstate(over="ignore", under="ignore"):
        x = _design(alpha, beta, log_n, log_d, root_w)
    b = y * root_w
    if not _solvable(x, b):
        return math.inf, np.full(3, math.nan)
    try:
        coef, rnorm = nnls(x, b)
    except (RuntimeError, ValueError):  # nnls' iteration limit
        return math.inf, np.full(3, math.nan)
    return float(rnorm) ** 2, coef


def _grid_rss(pn, pd, y, weights):
    """Exact NNLS residual sum of squares at every grid point, for every weight row.

    Args:
        pn: Shape ``(n, I)``: N^-alpha at each grid alpha.
        pd: Shape ``(n, J)``: D^-beta at each grid beta.
        y: Shape ``(n,)``: losses.
        weights: Shape ``(R, n)``.

    Returns:
        Shape ``(R, I, J)``.
    """
    w = weights
    s0 = w.sum(axis=1)[:, None, None]
    wy = w * y
    ty = wy.sum(axis=1)[:, None, None]
    yy = (wy * y).sum(axis=1)[:, None, None]
    s_n = (w @ pn)[:, :, None]
    s_d = (w @ pd)[:, None, :]
    s_nn = (w @ pn**2)[:, :, None]
    s_dd = (w @ pd**2)[:, None, :]
    t_n = (wy @ pn)[:, :, None]
    t_d = (wy @ pd)[:, None, :]
    s_nd = np.matmul((w[:, :, None] * pn[None]).transpose(0, 2, 1), pd)  # (R, I, J)
    shape = np.broadcast_shapes(s0.shape, s_n.shape, s_d.shape)
    g = {(0, 0): s0, (0, 1): s_n, (0, 2): s_d, (1, 1): s_nn, (1, 2): s_nd, (2, 2): s_dd}
    t = (ty, t_n, t_d)

    def gram(i, j):
        return np.broadcast_to(g[(min(i, j), max(i, j))], shape)

    best = np.broadcast_to(yy, shape).copy()  # the empty active set: all coefficients 0
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(3):  # one column
            c = t[i] / gram(i, i)
            best = np.where(c >= 0, np.minimum(best, yy - c * t[i]), best)
        for i, j in ((0, 1), (0, 2), (1, 2)):  # two columns, by Cramer's rule
            det = gram(i, i) * gram(j, j) - gram(i, j) ** 2
            ci = (t[i] * gram(j, j) - t[j] * gram(i, j)) / det
            cj = (t[j] * gram(i, i) - t[i] * gram(i, j)) / det
            ok = (ci >= 0) & (cj >= 0) & (det > 0)
            best = np.where(ok, np.minimum(best, yy - ci * t[i] - cj * t[j]), best)
        m = [[gram(i, j) for j in range(3)] for i in range(3)]  # three columns
        cof = [[m[(i + 1) % 3][(j + 1) % 3] * m[(i + 2) % 3][(j + 2) % 3]
                - m[(i + 1) % 3][(j + 2) % 3] * m[(i + 2) % 3][(j + 1) % 3] for j in range(3)]
               for i in range(3)]
        det = m[0][0] * cof[0][0] + m[0][1] * cof[0][1] + m[0][2] * cof[0][2]
        c = [(cof[0][k] * t[0] + cof[1][k] * t[1] + cof[2][k] * t[2]) / det for k in range(3)]
        ok = (c[0] >= 0) & (c[1] >= 0) & (c[2] >= 0) & (det > 0)
        best = np.where(ok, np.minimum(best, yy - c[0] * t[0] - c[1] * t[1] - c[2] * t[2]), best)
    return best


def _refine(start, log_n, log_d, y, root_w, options=None):
    def objective(x):
        return _nnls(x[0], x[1], log_n, log_d, y, root_w)[0]

    return minimize(objective, start, method="Nelder-Mead",
                    options=options or NELDER_MEAD_OPTIONS)


def _fit_one(log_n, log_d, y, weights, pn, pd, grid_a, grid_b, rss_grid=None, options=None):
    """Grid then Nelder-Mead for one weight vector: (theta, rss, coef, sol, diagnostics)."""
    if rss_grid is None:
        rss_grid = _grid_rss(pn, pd, y, weights[None])[0]
    i, j = np.unravel_index(int(np.argmin(rss_grid)), rss_grid.shape)
    diagnostics = []
    for name, k, values in (("alpha", i, grid_a), ("beta", j, grid_b)):
        if k in (0, len(values) - 1):
            diagnostics.append(f"the grid's best {name}={values[k]:.4g} is at its edge "
                               f"[{values[0]:.3g}, {values[-1]:.3g}]")
    rows = weights > 0
    root_w = np.sqrt(weights[rows])
    sol = _refine(np.array([grid_a[i], grid_b[j]]), log_n[rows], log_d[rows], y[rows], root_w,
                  options)
    alpha, beta = (float(v) for v in sol.x)
    rss, coef = _nnls(alpha, beta, log_n[rows], log_d[rows], y[rows], root_w)
    return alpha, beta, rss, coef, sol, diagnostics


def fit_vpnls(n_params, n_tokens, loss, *, alpha_grid=VPNLS_GRID, beta_grid=VPNLS_GRID,
              bounds: tuple[float, float] = VPNLS_BOUNDS, n_bootstrap: int = 0, seed: int = 0,
              level: float = DEFAULT_LEVEL, groups=None) -> VPNLSFit:
    """Fit L(N, D) = E + A / N^alpha + B / D^beta by VPNLS (Czech 2026; module docstring).

    Rows with a NaN or infinite value are dropped and listed in ``dropped``. Bootstrap:
    ``n_bootstrap`` refits on resampled points (or whole ``groups``), each the whole procedure
    (grid, then Nelder-Mead) on the resample, all resamples at once (`_refit_rows`).

    Args:
        n_params: Shape ``(n,)``: parameters N (> 0).
        n_tokens: Shape ``(n,)``: training tokens D (> 0).
        loss: Shape ``(n,)``: losses, nats/token (> 0).
        alpha_grid: The start grid of alpha (at least 3 values).
        beta_grid: The start grid of beta (at least 3 values).
        bounds: ``(lo, hi)`` for alpha and beta, checked on the result.
        n_bootstrap: Bootstrap refits (0: none).
        seed: Seed of the resampling.
        level: Confidence level of ``intervals``, in (0, 1).
        groups: Shape ``(n,)``: a label per point; resample whole groups. None: points.

    Returns:
        The `VPNLSFit`; ``converged`` False (with ``message``) when Nelder-Mead failed, the
        grid's best point is at an edge, an exponent is at a bound, or a coefficient was
        clamped to 0.

    Raises:
        FitError: Shapes that differ, fewer than 6 points after dropping non-finite rows,
            non-positive values, fewer than 2 distinct N or D, a grid of fewer than 3 values,
            a bad ``n_bootstrap`` or ``level``, or a non-finite result.
    """
    n, d, y, dropped = check_points(n_params, n_tokens, loss)
    check_bootstrap_args(n_bootstrap, level)
    grid_a = np.asarray(alpha_grid, dtype=float)
    grid_b = np.asarray(beta_grid, dtype=float)
    if grid_a.size < 3 or grid_b.size < 3:
        raise FitError(f"grids of {grid_a.size} and {grid_b.size} exponents: each needs 3")
    groups = kept_groups(groups, n.size + len(dropped), dropped)
    log_n, log_d = np.log(n), np.log(d)
    pn = np.exp(-np.outer(log_n, grid_a))
    pd = np.exp(-np.outer(log_d, grid_b))
    ones = np.ones(n.size)
    alpha, beta, rss, coef, sol, diagnostics = _fit_one(log_n, log_d, y, ones, pn, pd,
                                                        grid_a, grid_b)
    e, a, b = (float(v) for v in coef)
    if not all(math.isfinite(v) for v in (e, a, b, alpha, beta, rss)):
        raise FitError(f"VPNLS reached non-finite values (E={e}, A={a}, B={b}, alpha={alpha}, "
                       f"beta={beta}): the losses cannot be fitted by this law")
    if not sol.success:
        diagnostics.insert(0, f"Nelder-Mead stopped: {sol.message}")
    lo, hi = bounds
    for name, v in (("alpha", alpha), ("beta", beta)):
        if v - lo < _TINY or hi - v < _TINY:
            diagnostics.append(f"{name}={v:.6g} is at or beyond the bounds [{lo}, {hi}]")
    for name, v in (("E", e), ("A", a), ("B", b)):
        if v < _TINY:
            diagnostics.append(f"{name}={v:.3g}: NNLS clamped it to (near) zero")
    params = {"E": e, "A": a, "B": b, "alpha": alpha, "beta": beta}
    fitted = e + a * np.exp(-alpha * log_n) + b * np.exp(-beta * log_d)
    residuals = y - fitted
    settings = {"grid": (grid_a.size, grid_b.size), "grid_range": (
        (float(grid_a[0]), float(grid_a[-1])), (float(grid_b[0]), float(grid_b[-1]))),
        "bounds": bounds, "nelder_mead": dict(NELDER_MEAD_OPTIONS), "nit": int(sol.nit),
        "dropped": len(dropped), "n_bootstrap": n_bootstrap, "seed": seed}
    fit = VPNLSFit(params=params, residuals=residuals, objective=rss,
                   converged=not diagnostics, n_points=int(n.size), settings=settings,
                   stderr=_stderr(params, log_n, log_d, residuals), level=level,
                   dropped=dropped, message="; ".join(diagnostics))
    if not n_bootstrap:
        return fit
    draws, failed = _bootstrap(n, d, log_n, log_d, y, pn, pd, grid_a, grid_b, n_bootstrap, seed,
                               groups)
    return replace(fit, draws=draws, intervals=percentile_intervals(draws, level),
                   settings={**settings, "bootstrap_failed": failed})


def _stderr(p, log_n, log_d, residuals):
    """Gauss-Newton standard errors of (E, A, B, alpha, beta) (nan when singular)."""
    dof = residuals.size - 5
    tn = np.exp(-p["alpha"] * log_n)
    td = np.exp(-p["beta"] * log_d)
    jac = np.column_stack([np.ones_like(tn), tn, td, -p["A"] * log_n * tn, -p["B"] * log_d * td])
    sigma2 = float(residuals @ residuals) / dof
    try:
        cov = np.linalg.inv(jac.T @ jac) * sigma2
    except np.linalg.LinAlgError:
        return dict.fromkeys(PARAMS, math.nan)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return {name: float(v) for name, v in zip(PARAMS, se, strict=True)}


def _refit_rows(log_n, log_d, y, weights, pn, pd, grid_a, grid_b, options):
    """The whole procedure once per row of ``weights`` (shape ``(R, n)``), the rows together.

    Each row's grid (`_grid_rss`, in chunks that bound its memory), then Nelder-Mead from its
    best point for all rows at once (`sweep.scaling.vpnls_rows.refine_rows`, scipy's steps; the
    last few rows finished one by one on `_nnls`), then ``(E, A, B)`` by `_nnls` at each row's
    exponents, as `_fit_one` does for one.

    Returns:
        Shape ``(R, 5)``: ``E, A, B, alpha, beta`` (`PARAMS` order), and shape ``(R,)``: whether
        each row's Nelder-Mead converged.
    """
    starts = np.empty((weights.shape[0], 2))
    chunk = max(1, 200_000 // (grid_a.size * grid_b.size))
    for start in range(0, weights.shape[0], chunk):
        grids = _grid_rss(pn, pd, y, weights[start:start + chunk])
        best = np.argmin(grids.reshape(grids.shape[0], -1), axis=1)
        i, j = np.unravel_index(best, grids.shape[1:])
        starts[start:start + chunk] = np.column_stack([grid_a[i], grid_b[j]])
    def one(r):
        kept = weights[r] > 0
        args = (log_n[kept], log_d[kept], y[kept], np.sqrt(weights[r][kept]))
        return lambda x: _nnls(x[0], x[1], *args)[0]

    sol = refine_rows(starts, log_n, log_d, y, weights, options, one)
    out = np.empty((weights.shape[0], 5))
    for k, ((alpha, beta), row) in enumerate(zip(sol.x, weights, strict=True)):
        kept = row > 0
        _, coef = _nnls(alpha, beta, log_n[kept], log_d[kept], y[kept], np.sqrt(row[kept]))
        out[k] = (*coef, alpha, beta)
    return out, sol.success


def _bootstrap(n, d, log_n, log_d, y, pn, pd, grid_a, grid_b, n_bootstrap, seed, groups):
    counts = bootstrap_counts(n.size, n_bootstrap, seed, groups=groups).astype(float)
    table = np.full((n_bootstrap, 5), np.nan)
    drawn = counts > 0
    fine = np.array([np.unique(n[k]).size >= 2 and np.unique(d[k]).size >= 2 for k in drawn],
                    dtype=bool)
    failed = {"degenerate": int((~fine).sum()), "not_converged": 0}
    if fine.any():
        table[fine], success = _refit_rows(log_n, log_d, y, counts[fine], pn, pd, grid_a,
                                           grid_b, NELDER_MEAD_OPTIONS)
        failed["not_converged"] = int((~success).sum())
    return {name: table[:, i] for i, name in enumerate(PARAMS)}, failed


def weighted_refits(n_params, n_tokens, loss, weights, *,
                    xatol: float = NELDER_MEAD_OPTIONS["xatol"],
                    fatol: float = NELDER_MEAD_OPTIONS["fatol"]) -> np.ndarray:
    """The whole VPNLS procedure (grid, then Nelder-Mead) once per row of ``weights``.

    The rows' searches run together (`_refit_rows`), each taking the steps it would alone.

    Args:
        n_params: Shape ``(n,)``: parameters N (finite, > 0).
        n_tokens: Shape ``(n,)``: training tokens D (finite, > 0).
        loss: Shape ``(n,)``: losses, nats/token.
        weights: Shape ``(R, n)``: each refit's weight per point (0 leaves a point out, as a
            leave-one-out refit does).
        xatol: Nelder-Mead's tolerance on alpha and beta (the fit's own by default; looser
            for refits that need a's change to 1e-4, not 1e-10).
        fatol: Nelder-Mead's tolerance on the residual sum of squares (looser for refits
            whose RSS, of order 1e-3, is not resolved to 1e-15 by NNLS's rounding).

    Returns:
        Shape ``(R, 5)``: ``E, A, B, alpha, beta`` (`PARAMS` order) of each refit.
    """
    n, d, y = (np.asarray(v, dtype=float) for v in (n_params, n_tokens, loss))
    weights = np.asarray(weights, dtype=float)
    grid_a = grid_b = np.asarray(VPNLS_GRID)
    log_n, log_d = np.log(n), np.log(d)
    pn, pd = np.exp(-np.outer(log_n, grid_a)), np.exp(-np.outer(log_d, grid_b))
    options = {**NELDER_MEAD_OPTIONS, "xatol": xatol, "fatol": fatol}
    return _refit_rows(log_n, log_d, y, weights, pn, pd, grid_a, grid_b, options)[0]
