"""The objective of Chinchilla approach 3: the Huber loss between predicted and observed log loss.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", section 3.3 and
appendix D.2) write the prediction of L(N, D) = E + A / N^alpha + B / D^beta as a log-sum-exp,

    log L(N, D) = LSE(a - alpha log N, b - beta log D, e),   A = e^a, B = e^b, E = e^e,

and minimise the summed Huber loss (their delta 1e-3) of its residual against the observed log
loss over ``theta = (a, b, e, alpha, beta)``. `objective` gives it and its gradient for one
``theta`` (scipy's L-BFGS-B), `batched_objective` for many at once (every start of the grid, or
every bootstrap refit with its resample's counts as weights).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.special import huber, logsumexp

__all__ = ["batched_objective", "objective"]

_BLOCK = 120_000  # elements per block of `batched_objective`
_POOL: list[ThreadPoolExecutor] = []


def objective(theta, log_n, log_d, log_loss, delta):
    """Summed Huber loss of one ``theta = (a, b, e, alpha, beta)`` and its gradient (scipy)."""
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    lse = _logsumexp(terms)
    r = lse - log_loss
    # Gradient of sum(huber(delta, r)) by the chain rule through the log-sum-exp.
    w = np.exp(terms - lse)
    dr = np.clip(r, -delta, delta)
    grad = np.array([np.sum(dr * w[0]), np.sum(dr * w[1]), np.sum(dr * w[2]),
                     -np.sum(dr * w[0] * log_n), -np.sum(dr * w[1] * log_d)])
    return float(np.sum(huber(delta, r))), grad


def _logsumexp(terms):
    """``log(sum(exp(terms), axis=0))``, shifted by the column maxima so that no exp overflows.

    The same as ``scipy.special.logsumexp(terms, axis=0)`` to rounding, at a tenth of its cost
    on these small arrays (its array-API dispatch dominates; scipy's L-BFGS-B calls this once
    per evaluation); scipy's handles a column with an infinite maximum.
    """
    top = terms.max(axis=0)
    if not np.isfinite(top).all():
        return logsumexp(terms, axis=0)
    return top + np.log(np.exp(terms - top).sum(axis=0))


def batched_objective(theta, log_n, log_d, log_loss, delta, weights=None):
    """`objective` for many ``theta`` at once.

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
