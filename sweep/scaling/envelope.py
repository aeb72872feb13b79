"""Chinchilla approach 1: the lower envelope of training curves, then N_opt and D_opt in C.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", section 3.1): for each
of a set of log-spaced FLOP values C, the run with the lowest loss at that compute (each run's
loss curve interpolated at C), whose size is N_opt(C) and whose tokens seen by then are
D_opt(C); then N_opt = k_N C^a and D_opt = k_D C^b by least squares on the logs. Here a run's
loss is interpolated linearly in log C between its evaluation points (the paper smooths the
curves first; pass smoothed losses for that), and only inside the span of its evaluations. A
budget is left out of the power laws (and flagged in `EnvelopePoint.edge`) when its winner is
the smallest or the largest size among the runs that reach it (the optimum may lie beyond the
sizes trained) or fewer than 3 sizes reach it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from sweep.scaling.bootstrap import (
    bootstrap_counts,
    check_bootstrap_args,
    kept_groups,
    percentile_intervals,
)
from sweep.scaling.isoflop import fit_loglog_line
from sweep.scaling.result import DEFAULT_LEVEL, FitError, FitResult, dropped_note, finite_rows
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS

__all__ = ["EnvelopeFit", "EnvelopePoint", "fit_envelope"]


@dataclass(frozen=True)
class EnvelopePoint:
    """The lower envelope at one FLOP value.

    Attributes:
        flops: The compute C (FLOPs).
        run: The id of the run with the lowest loss at C.
        n_params: That run's parameters, N_opt(C).
        n_tokens: Its tokens at C: interpolated from ``tokens`` when given, else C / (6 N).
        loss: Its interpolated loss at C, nats/token.
        candidates: Distinct sizes among the runs that reach C.
        edge: Whether the point is left out of the power laws (winner at the smallest or
            largest size reaching C, or fewer than 3 sizes reaching it).
    """

    flops: float
    run: object
    n_params: float
    n_tokens: float
    loss: float
    candidates: int
    edge: bool


@dataclass(frozen=True, kw_only=True)
class EnvelopeFit(FitResult):
    """N_opt = k_N C^a and D_opt = k_D C^b from the lower envelope (`FitResult` fields).

    ``params`` are ``a``, ``k_n``, ``b``, ``k_d``, and ``alpha_c``, ``k_l`` of the envelope's
    loss, L_opt = k_L C^-alpha_C (Kaplan et al. 2020 eq. 1.3's form); ``residuals`` are log
    N_opt observed minus
    fitted at each budget used; ``objective`` their sum of squares. ``stderr`` is empty: the
    envelope's points are neither independent nor continuous (N_opt steps between trained
    sizes), so least-squares standard errors would mislead; use the bootstrap over runs.

    Attributes:
        envelope: The `EnvelopePoint` of every budget, used or not.
    """

    envelope: list[EnvelopePoint]
    method: str = ("Hoffmann et al. 2022 approach 1: lower envelope of loss against compute, "
                   "then power laws")

    def predict(self, flops: float) -> dict[str, float]:
        """``n_params`` (N_opt) and ``n_tokens`` (D_opt) for a budget of ``flops``."""
        p = self.params
        return {METRIC_N_PARAMS: p["k_n"] * flops ** p["a"],
                METRIC_N_TOKENS: p["k_d"] * flops ** p["b"]}


def _tables(code, n, c, y, tok, n_runs, log_budgets):
    """Each run's loss and tokens at every budget (nan outside its evaluated span)."""
    loss = np.full((n_runs, log_budgets.size), np.nan)
    tokens = np.full_like(loss, np.nan)
    sizes = np.empty(n_runs)
    for r in range(n_runs):
        at = np.flatnonzero(code == r)
        sizes[r] = n[at[0]]
        order = at[np.argsort(c[at], kind="stable")]
        log_c, first = np.unique(np.log(c[order]), return_index=True)
        rows = order[first]
        loss[r] = np.interp(log_budgets, log_c, y[rows], left=np.nan, right=np.nan)
        if tok is not None:
            tokens[r] = np.exp(np.interp(log_budgets, log_c, np.log(tok[rows]), left=np.nan,
                                         right=np.nan))
    return loss, tokens, sizes


def _envelope(loss, tokens, sizes, budgets, use_tokens):
    """Winner per budget, its N and D, and the edge flags, over the runs in ``loss``."""
    reach = np.isfinite(loss)
    filled = np.where(reach, loss, np.inf)
    win = np.argmin(filled, axis=0)
    cols = np.arange(budgets.size)
    has = reach.any(axis=0)
    n_opt = sizes[win]
    d_opt = tokens[win, cols] if use_tokens else budgets / (6 * n_opt)
    lo = np.where(reach, sizes[:, None], np.inf).min(axis=0)
    hi = np.where(reach, sizes[:, None], -np.inf).max(axis=0)
    _, size_code = np.unique(sizes, return_inverse=True)
    by_size = np.zeros((size_code.max() + 1, budgets.size))
    np.add.at(by_size, size_code, reach)
    distinct = (by_size > 0).sum(axis=0)
    edge = ~has | (n_opt <= lo) | (n_opt >= hi) | (distinct < 3)
    return win, n_opt, d_opt, filled[win, cols], distinct, edge, has


def _plain(value):
    """A numpy scalar as its Python value; a Python object (an MLflow run id) as is."""
    return value.item() if isinstance(value, np.generic) else value


def fit_envelope(run_id, n_params, flops, loss, *, tokens=None, budgets=None,
                 n_budgets: int = 1500, n_bootstrap: int = 0, seed: int = 0,
                 level: float = DEFAULT_LEVEL, groups=None) -> EnvelopeFit:
    """Fit approach 1 to every evaluation point of every run.

    Rows with a NaN or infinite value are dropped and listed in ``dropped``.

    Args:
        run_id: Shape ``(n,)``: which run each evaluation point belongs to (its curve).
        n_params: Shape ``(n,)``: the run's parameters N (> 0, one value per run).
        flops: Shape ``(n,)``: cumulative training FLOPs at the evaluation point (> 0).
        loss: Shape ``(n,)``: the evaluation loss there, nats/token.
        tokens: Shape ``(n,)``: tokens seen at the point (> 0), for D_opt; None: D = C / (6 N).
        budgets: The FLOP values C of the envelope; None: ``n_budgets`` log-spaced values from
            the first evaluation of any run to the last (Hoffmann et al. used 1,500).
        n_budgets: How many, when ``budgets`` is None.
        n_bootstrap: Bootstrap refits, each on runs resampled with replacement (0: none).
        seed: Seed of the resampling.
        level: Confidence level of ``intervals``, in (0, 1).
        groups: Shape ``(n,)``: resample these groups of points instead of runs (e.g. a label
            per model size, to keep a size's runs together); each group must hold whole runs.

    Returns:
        The `EnvelopeFit` (not ``converged`` when a power law is near-vertical, so its
        prefactor overflows); a resample whose envelope has fewer than 2 usable budgets or one
        size, or whose power laws overflow, gives nan draws (counted in
        ``settings["bootstrap_failed"]``: ``too_few_budgets``, ``degenerate``).

    Raises:
        FitError: Shapes that differ, non-positive N, FLOPs or tokens, a run with several N,
            fewer than 2 usable budgets or a single N_opt among them (every budget's winner at
            an edge: train sizes beyond the optimum on both sides), bad budgets, or a bad
            ``n_bootstrap`` or ``level``.
    """
    run = np.asarray(run_id).ravel()
    n, c, y, tok, dropped = _check_inputs(run, n_params, flops, loss, tokens, n_bootstrap, level)
    note = dropped_note(dropped)
    run = run[np.setdiff1d(np.arange(run.size), dropped)]
    run_ids, code = np.unique(run, return_inverse=True)
    for r in range(run_ids.size):
        if np.unique(n[code == r]).size > 1:
            raise FitError(f"run {run_ids[r]!r} has several n_params values: one run, one size")
    budgets = _budgets(budgets, n_budgets, c)
    table, tok_table, sizes = _tables(code, n, c, y, tok, run_ids.size, np.log(budgets))
    win, n_opt, d_opt, env_loss, distinct, edge, has = _envelope(table, tok_table, sizes, budgets,
                                                                 tok is not None)
    envelope = [EnvelopePoint(float(budgets[k]), _plain(run_ids[win[k]]),
                              float(n_opt[k]), float(d_opt[k]), float(env_loss[k]),
                              int(distinct[k]), bool(edge[k]))
                for k in range(budgets.size) if has[k]]
    use = ~edge
    if use.sum() < 2 or np.unique(n_opt[use]).size < 2:
        raise FitError(_too_few(budgets, sizes, table, n_opt, use, distinct, has, note))
    params, residuals = _power_laws(budgets[use], n_opt[use], d_opt[use], env_loss[use])
    settings: dict[str, object] = {
        "budgets": int(budgets.size), "usable_budgets": int(use.sum()), "runs": int(run_ids.size),
        "tokens": "given" if tok is not None else "C / (6N)",
        "interpolation": "linear in log C", "dropped": len(dropped), "n_bootstrap": n_bootstrap,
        "seed": seed}
    finite = all(math.isfinite(v) for v in params.values())
    fit = EnvelopeFit(params=params, residuals=residuals,
                      objective=float(np.sum(residuals**2)), converged=finite,
                      n_points=int(n.size), envelope=envelope, settings=settings, level=level,
                      dropped=dropped)
    if not n_bootstrap:
        return fit
    labels = _run_groups(groups, code, run_ids, n.size + len(dropped), dropped)
    # Resample runs (or groups of runs): a point's count is its run's.
    first = np.array([np.flatnonzero(code == r)[0] for r in range(run_ids.size)])
    counts = bootstrap_counts(n.size, n_bootstrap, seed, groups=labels)[:, first]
    draws, failed = _bootstrap(counts, table, tok_table, sizes, budgets, tok is not None)
    return replace(fit, draws=draws, intervals=percentile_intervals(draws, level),
                   settings={**settings, "bootstrap_failed": failed})


def _too_few(budgets, sizes, table, n_opt, use, distinct, has, note) -> str:
    """Why the envelope gives no power law: what approach 1 needs and what it found."""
    reach = np.isfinite(table)
    lo = np.where(reach, sizes[:, None], np.inf).min(axis=0)
    hi = np.where(reach, sizes[:, None], -np.inf).max(axis=0)
    few = has & (distinct < 3)
    small = has & ~few & (n_opt <= lo)
    large = has & ~few & ~small & (n_opt >= hi)
    won = ", ".join(f"{v:.4g}" for v in np.unique(n_opt[use])[:5]) or "none"
    return (f"approach 1 needs 2 or more compute levels whose lowest loss belongs to a size "
            f"strictly between the smallest and largest reaching that compute, won by 2 or more "
            f"sizes; of {budgets.size} compute levels{note}, {int(use.sum())} qualify, won by "
            f"{np.unique(n_opt[use]).size} distinct N_opt (N = {won}); {int(small.sum())} are "
            f"won by the smallest size reaching them, {int(large.sum())} by the largest, "
            f"{int(few.sum())} are reached by fewer than 3 sizes. Train sizes on both sides of "
            "the optimum, each long enough that a larger size overtakes a smaller one as "
            "compute grows, or use approaches 2, 3 or vpnls")


def _check_inputs(run, n_params, flops, loss, tokens, n_bootstrap, level):
    """The evaluation points' columns, non-finite rows dropped: ``(n, c, y, tokens, dropped)``.

    Raises:
        FitError: Shapes that differ, a bad ``n_bootstrap`` or ``level``, non-positive N, FLOPs
            or tokens, or no point left.
    """
    columns = [n_params, flops, loss] + ([] if tokens is None else [tokens])
    names = (METRIC_N_PARAMS, "flops", "loss", METRIC_N_TOKENS)[:len(columns)]
    if run.size != np.asarray(loss).size:
        raise FitError(f"run_id has {run.size} values but loss has {np.asarray(loss).size}")
    (n, c, y, *rest), dropped = finite_rows(names, *columns)
    tok = rest[0] if rest else None
    check_bootstrap_args(n_bootstrap, level)
    for name, values in ((METRIC_N_PARAMS, n), ("flops", c)) + (
            () if tok is None else ((METRIC_N_TOKENS, tok),)):
        if not np.all(values > 0):
            raise FitError(f"{name}: every value must be finite and > 0")
    if n.size == 0:
        raise FitError(f"no points{dropped_note(dropped)}: approach 1 needs training curves")
    return n, c, y, tok, dropped


def _budgets(budgets, n_budgets, c):
    """The envelope's FLOP values: ``budgets``, or ``n_budgets`` log-spaced over ``c``'s span."""
    if budgets is None:
        if not (isinstance(n_budgets, int) and n_budgets >= 2):
            raise FitError(f"n_budgets={n_budgets!r}: must be an integer >= 2")
        budgets = np.geomspace(c.min(), c.max(), n_budgets)
    budgets = np.asarray(budgets, dtype=float).ravel()
    if budgets.size < 2 or not np.all(np.isfinite(budgets) & (budgets > 0)):
        raise FitError("budgets: need 2 or more FLOP values, each finite and > 0")
    return budgets


def _run_groups(groups, code, run_ids, n_rows, dropped):
    """The bootstrap's labels: each point's run, or its group when every run is in one group."""
    labels = kept_groups(groups, n_rows, dropped)
    if labels is None:
        return code
    for r in range(run_ids.size):
        if np.unique(labels[code == r]).size > 1:
            raise FitError(f"run {run_ids[r]!r} is split across groups: a group must hold "
                           "whole runs")
    return labels


_LAW_NAMES = ("a", "k_n", "b", "k_d", "alpha_c", "k_l")


def _power_laws(budgets, n_opt, d_opt, loss):
    """N_opt = k_N C^a, D_opt = k_D C^b and the envelope's loss L_opt = k_L C^-alpha_C.

    The loss law is Kaplan et al. 2020's L(C_min) = (C_c / C)^alpha_C (eq. 1.3), in logs.
    """
    log_c = np.log(budgets)
    a, log_kn, _, _, residuals = fit_loglog_line(log_c, np.log(n_opt))
    b, log_kd, *_ = fit_loglog_line(log_c, np.log(d_opt))
    slope, log_kl, *_ = fit_loglog_line(log_c, np.log(loss))
    with np.errstate(over="ignore"):  # a near-vertical line overflows: inf, flagged by callers
        k_n, k_d, k_l = (float(np.exp(v)) for v in (log_kn, log_kd, log_kl))
    return ({"a": float(a), "k_n": k_n, "b": float(b), "k_d": k_d,
             "alpha_c": float(-slope), "k_l": k_l}, residuals)


def _bootstrap(counts, table, tok_table, sizes, budgets, use_tokens):
    out = np.full((counts.shape[0], len(_LAW_NAMES)), np.nan)
    failed = degenerate = 0
    for i, times in enumerate(counts):
        drawn = times > 0
        _, n_opt, d_opt, env_loss, _, edge, _ = _envelope(table[drawn], tok_table[drawn],
                                                          sizes[drawn], budgets, use_tokens)
        use = ~edge
        if use.sum() < 2 or np.unique(n_opt[use]).size < 2:
            failed += 1
            continue
        p, _ = _power_laws(budgets[use], n_opt[use], d_opt[use], env_loss[use])
        values = tuple(p[k] for k in _LAW_NAMES)
        if not all(math.isfinite(v) for v in values):
            degenerate += 1
            continue
        out[i] = values
    return ({name: out[:, k] for k, name in enumerate(_LAW_NAMES)},
            {"too_few_budgets": failed, "degenerate": degenerate})
