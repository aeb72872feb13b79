"""Nelder-Mead on many problems at once: scipy's algorithm, step for step, advanced together.

The steps, coefficients and stopping rule are those of `scipy.optimize.minimize`'s
``method="Nelder-Mead"`` (scipy 1.17 ``_minimize_neldermead``, unbounded, not adaptive: the
coefficients of Nelder & Mead 1965): reflection 1, expansion 2,
contraction 0.5, shrink 0.5; the start simplex moves each coordinate of ``x0`` by 5% (0.00025
from 0); a problem stops when every vertex is within ``xatol`` of the best in every coordinate
and every value within ``fatol`` of the best, or after ``maxiter`` iterations. Each iteration
takes the same branch for a problem as scipy would, so given the same objective values the
simplexes are the same (for two variables, whose centroid is one addition, to the last bit);
what is batched is the objective: one call per step for every problem that takes it (a
VPNLS bootstrap's 100 refits cost some 250 calls of up to 100 rows instead of some 12,000
calls of one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

__all__ = ["TAIL", "BatchedResult", "minimize_batched"]

_RHO, _CHI, _PSI, _SIGMA = 1, 2, 0.5, 0.5  # scipy's non-adaptive coefficients
_NONZDELT, _ZDELT = 0.05, 0.00025  # scipy's start simplex
#: Problems left when the rest are finished one at a time (`minimize_batched`'s ``one``).
TAIL = 4

#: ``objective(rows, x)``: the values, shape ``(m,)``, of problems ``rows`` (shape ``(m,)``, their
#: indices among the starts) at points ``x`` (shape ``(m, N)``).
Objective = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: ``one(r)``: problem ``r``'s objective of one point.
One = Callable[[int], Callable[[np.ndarray], float]]


@dataclass(frozen=True)
class BatchedResult:
    """Each problem's minimum: ``x`` shape ``(R, N)``, ``fun``, ``nit`` and ``success`` ``(R,)``.

    ``success`` is False where ``maxiter`` was reached (scipy's ``warnflag`` 2); ``nit`` counts
    as scipy's ``OptimizeResult.nit`` does.
    """

    x: np.ndarray
    fun: np.ndarray
    nit: np.ndarray
    success: np.ndarray


def _start_simplex(x0: np.ndarray) -> np.ndarray:
    """Shape ``(R, N + 1, N)``: scipy's start simplex around each row of ``x0``."""
    n = x0.shape[1]
    sim = np.repeat(x0[:, None, :], n + 1, axis=1)
    for k in range(n):
        col = x0[:, k]
        sim[:, k + 1, k] = np.where(col != 0, (1 + _NONZDELT) * col, _ZDELT)
    return sim


def _sort(sim: np.ndarray, fsim: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices by value, ties (and NaN, last) in their order, as scipy's ``argsort`` of N+1."""
    ind = np.argsort(fsim, axis=1, kind="stable")
    return np.take_along_axis(sim, ind[:, :, None], axis=1), np.take_along_axis(fsim, ind, axis=1)


def minimize_batched(objective: Objective, starts, *, xatol: float, fatol: float,
                     maxiter: int, one: One | None = None) -> BatchedResult:
    """Minimise ``R`` problems by Nelder-Mead from ``starts`` (shape ``(R, N)``) together.

    A batched call costs about what a few calls of one problem do; so once no more than
    `TAIL` problems are left, each with a finite best value is finished by
    `scipy.optimize.minimize` itself from its simplex (``initial_simplex``), on ``one(r)``, when
    given: the same steps, one problem at a time. A step that gives a problem back its simplex and
    values unchanged would be repeated until ``maxiter`` (`_unchanged`): the problem is given
    its ``maxiter`` at once, at the same point and value scipy ends with.

    Args:
        objective: ``objective(rows, x)`` (`Objective`): the values of problems ``rows`` at
            ``x``; NaN and infinity are allowed, as scipy allows them.
        starts: Shape ``(R, N)``: each problem's ``x0``.
        xatol: scipy's ``xatol``.
        fatol: scipy's ``fatol``.
        maxiter: scipy's ``maxiter`` (``maxfev`` unbounded).
        one: ``one(r)``: problem ``r``'s objective of one point (shape ``(N,)``) to a float, the
            same function as ``objective``'s row ``r``.

    Returns:
        The `BatchedResult`, row ``r`` what ``minimize(f_r, starts[r], method="Nelder-Mead",
        options={xatol, fatol, maxiter})`` returns.
    """
    x0 = np.asarray(starts, dtype=float)
    r, n = x0.shape
    sim = _start_simplex(x0)
    everyone = np.arange(r)
    fsim = np.stack([np.asarray(objective(everyone, sim[:, k]), dtype=float)
                     for k in range(n + 1)], axis=1)
    sim, fsim = _sort(sim, fsim)
    nit = np.ones(r, dtype=np.int64)
    active = np.ones(r, dtype=bool)
    while True:
        idx = np.flatnonzero(active)
        s, f = sim[idx], fsim[idx]
        with np.errstate(invalid="ignore"):  # inf - inf, as in scipy: not close
            close = ((np.max(np.abs(s[:, 1:] - s[:, :1]), axis=(1, 2)) <= xatol)
                     & (np.max(np.abs(f[:, :1] - f[:, 1:]), axis=1) <= fatol))
        go = ~close & (nit[idx] < maxiter)
        active[idx] = go
        if not go.any():
            break
        idx, s, f = idx[go], s[go], f[go]
        if one is not None and idx.size <= TAIL:
            alone = np.isfinite(f[:, 0])  # a finite best never gets stuck
            for r in idx[alone]:
                _finish_alone(one(int(r)), r, sim, fsim, nit, xatol, fatol, maxiter)
            active[idx[alone]] = False
            idx, s, f = idx[~alone], s[~alone], f[~alone]
            if not idx.size:
                break
        s_new, f_new = _sort(*_step(objective, idx, s, f, n))
        nit[idx] += 1
        nit[idx[_unchanged(s, f, s_new, f_new)]] = maxiter
        sim[idx], fsim[idx] = s_new, f_new
    return BatchedResult(x=sim[:, 0].copy(), fun=np.min(fsim, axis=1), nit=nit,
                         success=nit < maxiter)


def _unchanged(s, f, s_new, f_new):
    """Problems whose step gave back the very simplex and values (NaN equal to NaN).

    The steps being deterministic, scipy's next ones would too, until ``maxiter``: a simplex of
    non-finite values shrunk as far as floating point goes, around a start where every design
    is refused, never passes the ``fatol`` test and never moves again.
    """
    same_f = (f_new == f) | (np.isnan(f_new) & np.isnan(f))
    return (s_new == s).all(axis=(1, 2)) & same_f.all(axis=1)


def _finish_alone(f, r, sim, fsim, nit, xatol, fatol, maxiter):
    """Problem ``r`` continued by scipy from its simplex; its rows of the arrays updated.

    scipy counts the given simplex as iteration 1: the iterations left are ``maxiter - nit``.
    """
    res = minimize(f, sim[r, 0], method="Nelder-Mead", options={
        "xatol": xatol, "fatol": fatol, "maxiter": int(maxiter - nit[r] + 1),
        "initial_simplex": sim[r]})
    nit[r] += res.nit - 1
    sim[r, 0], fsim[r] = res.x, res.fun  # all that is read of the problem after


def _step(objective: Objective, idx, s, f, n):
    """One iteration of scipy's loop for problems ``idx`` (simplexes ``s``, values ``f``)."""
    xbar = np.add.reduce(s[:, :-1], 1) / n
    worst = s[:, -1]
    xr = (1 + _RHO) * xbar - _RHO * worst
    fxr = np.asarray(objective(idx, xr), dtype=float)
    new_x, new_f = xr.copy(), fxr.copy()
    expand = fxr < f[:, 0]
    if expand.any():
        xe = (1 + _RHO * _CHI) * xbar[expand] - _RHO * _CHI * worst[expand]
        fxe = np.asarray(objective(idx[expand], xe), dtype=float)
        better = fxe < fxr[expand]
        rows = np.flatnonzero(expand)[better]
        new_x[rows], new_f[rows] = xe[better], fxe[better]
    contract = ~expand & ~(fxr < f[:, -2])
    outside = contract & (fxr < f[:, -1])
    inside = contract & ~outside
    shrink = np.zeros_like(contract)
    if outside.any():
        xc = (1 + _PSI * _RHO) * xbar[outside] - _PSI * _RHO * worst[outside]
        fxc = np.asarray(objective(idx[outside], xc), dtype=float)
        ok = fxc <= fxr[outside]
        rows = np.flatnonzero(outside)
        new_x[rows[ok]], new_f[rows[ok]] = xc[ok], fxc[ok]
        shrink[rows[~ok]] = True
    if inside.any():
        xcc = (1 - _PSI) * xbar[inside] + _PSI * worst[inside]
        fxcc = np.asarray(objective(idx[inside], xcc), dtype=float)
        ok = fxcc < f[inside, -1]
        rows = np.flatnonzero(inside)
        new_x[rows[ok]], new_f[rows[ok]] = xcc[ok], fxcc[ok]
        shrink[rows[~ok]] = True
    s, f = s.copy(), f.copy()
    moved = ~shrink
    s[moved, -1], f[moved, -1] = new_x[moved], new_f[moved]
    if shrink.any():
        for j in range(1, n + 1):
            s[shrink, j] = s[shrink, 0] + _SIGMA * (s[shrink, j] - s[shrink, 0])
            f[shrink, j] = objective(idx[shrink], s[shrink, j])
    return s, f
