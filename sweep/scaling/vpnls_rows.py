"""VPNLS's Nelder-Mead for many weight rows at once: a bootstrap's refits, leave-one-out refits.

`sweep.scaling.vpnls` fits one weight vector by grid, then Nelder-Mead over (alpha, beta) of the
NNLS residual sum of squares. Its refits (a bootstrap's resamples, `weighted_refits`) run the same
search for every row together (`sweep.scaling.nelder_mead.minimize_batched`, scipy's steps), the
objective evaluated for all rows in one pass: at fixed exponents the NNLS optimum of the three
columns ``[1, N^-alpha, D^-beta]`` (times the root weights) is the best non-negative
least-squares solution over the 7 non-empty active sets and the empty one (the KKT conditions of
a 3-variable NNLS, Lawson & Hanson 1974 ch. 23), each solved from the Gram matrix of the columns
scaled to unit norm by Cramer's rule and its residual sum of squares taken from the residuals
themselves (not ``b.b - c.t``, which loses digits to cancellation). A design `sweep.scaling.vpnls`
would not give nnls (an entry over `MAX_ENTRY`, a condition number over `MAX_COND`, the same
bound on the same Gram) gives infinity there too.
"""

from __future__ import annotations

import itertools

import numpy as np

from sweep.scaling.nelder_mead import BatchedResult, One, minimize_batched

__all__ = ["MAX_COND", "MAX_ENTRY", "nnls_rss_rows", "refine_rows"]

MAX_ENTRY = 1e150  # the largest design or loss entry nnls is given: its square is finite
MAX_COND = 1e7  # the largest condition number of a design nnls is given (its Gram's: 1e14)
_SETS = [s for k in (1, 2, 3) for s in itertools.combinations(range(3), k)]


def _solve(c, t, subset):
    """Coefficients ``(m, k)`` of ``c[S, S] u = t[S]`` by Cramer's rule, and its determinant."""
    if len(subset) == 1:
        (i,) = subset
        det = c[:, i, i]
        return [t[:, i] / det], det
    if len(subset) == 2:
        i, j = subset
        det = c[:, i, i] * c[:, j, j] - c[:, i, j] ** 2
        ui = (t[:, i] * c[:, j, j] - t[:, j] * c[:, i, j]) / det
        uj = (t[:, j] * c[:, i, i] - t[:, i] * c[:, i, j]) / det
        return [ui, uj], det
    cof = [[c[:, (i + 1) % 3, (j + 1) % 3] * c[:, (i + 2) % 3, (j + 2) % 3]
            - c[:, (i + 1) % 3, (j + 2) % 3] * c[:, (i + 2) % 3, (j + 1) % 3] for j in range(3)]
           for i in range(3)]
    det = c[:, 0, 0] * cof[0][0] + c[:, 0, 1] * cof[0][1] + c[:, 0, 2] * cof[0][2]
    return [(cof[0][k] * t[:, 0] + cof[1][k] * t[:, 1] + cof[2][k] * t[:, 2]) / det
            for k in range(3)], det


def nnls_rss_rows(alpha, beta, log_n, log_d, y, weights) -> np.ndarray:
    """NNLS residual sum of squares of (E, A, B) at each row's exponents (module docstring).

    Args:
        alpha: Shape ``(m,)``: each row's exponent of N.
        beta: Shape ``(m,)``: each row's exponent of D.
        log_n: Shape ``(n,)``: log N.
        log_d: Shape ``(n,)``: log D.
        y: Shape ``(n,)``: losses, nats/token.
        weights: Shape ``(m, n)``: each row's weight per point (0 leaves a point out).

    Returns:
        Shape ``(m,)``: the RSS, infinite where the design is refused.
    """
    kept = weights > 0
    root_w = np.sqrt(weights)
    with np.errstate(all="ignore"):
        x = np.stack([root_w, np.exp(-alpha[:, None] * log_n) * root_w,
                      np.exp(-beta[:, None] * log_d) * root_w], axis=1)  # (m, 3, n)
        x = np.where(kept[:, None, :], x, 0.0)
        b = np.where(kept, y * root_w, 0.0)
        largest = np.maximum(np.max(np.abs(x), axis=(1, 2)), np.max(np.abs(b), axis=1))
        fine = largest <= MAX_ENTRY  # also False for nan
        x[~fine] = 0.0
        g = np.einsum("mik,mjk->mij", x, x)
        norm = np.sqrt(np.diagonal(g, axis1=1, axis2=2))
        norm = np.where(norm == 0, 1.0, norm)
        c = g / (norm[:, :, None] * norm[:, None, :])
        c01, c02, c12 = c[:, 0, 1], c[:, 0, 2], c[:, 1, 2]
        det = 1 + 2 * c01 * c02 * c12 - c01**2 - c02**2 - c12**2
        solvable = fine & (det * MAX_COND**2 >= 27)
        z = x / norm[:, :, None]
        t = np.einsum("mik,mk->mi", z, b)
        # The three columns' least squares, when non-negative, is the NNLS optimum itself (no
        # active set does better): the other sets only for the rows where it is not.
        best, ok = _set_rss(c, t, z, b, _SETS[-1])
        rest = np.flatnonzero(~ok)
        if rest.size:
            c, t, z, b = c[rest], t[rest], z[rest], b[rest]
            low = np.einsum("mk,mk->m", b, b)  # the empty active set: all coefficients 0
            for subset in _SETS[:-1]:
                rss, ok = _set_rss(c, t, z, b, subset)
                low = np.where(ok & (rss < low), rss, low)
            best[rest] = low
    return np.where(solvable, best, np.inf)


def _set_rss(c, t, z, b, subset):
    """Each row's residual sum of squares on the active set ``subset``, and whether it counts.

    It counts when the set's least-squares coefficients are all non-negative, its Gram block
    non-singular and the sum finite.
    """
    u, d = _solve(c, t, subset)
    r = b.copy()
    ok = d > 0
    for i, ui in zip(subset, u, strict=True):
        r -= ui[:, None] * z[:, i]
        ok &= ui >= 0
    rss = np.einsum("mk,mk->m", r, r)
    return rss, ok & np.isfinite(rss)


def refine_rows(starts, log_n, log_d, y, weights, options, one: One) -> BatchedResult:
    """Nelder-Mead over (alpha, beta) from ``starts`` (shape ``(m, 2)``) for each weight row.

    ``options`` are scipy's (``xatol``, ``fatol``, ``maxiter``); row ``r`` of the result is what
    ``scipy.optimize.minimize`` gives on the objective `nnls_rss_rows` of ``weights[r]``;
    ``one(r)`` is that objective of one point, for the last rows (`minimize_batched`).
    """
    weights = np.asarray(weights, dtype=float)

    def objective(rows, x):
        return nnls_rss_rows(x[:, 0], x[:, 1], log_n, log_d, y, weights[rows])

    return minimize_batched(objective, starts, xatol=options["xatol"], fatol=options["fatol"],
                            maxiter=options["maxiter"], one=one)
