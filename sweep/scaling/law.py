"""The parametric law L(N, D) = E + A / N^alpha + B / D^beta and its compute-optimal split.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models"): the law is their eq. 2
(section 3.3), the split under C = 6 N D their eq. 4. Shared by the law's two fits
(`sweep.scaling.parametric`, `sweep.scaling.vpnls`), which also share the points they accept
(`check_points`), and by the allocation (`sweep.scaling.allocation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sweep.scaling.result import FitError, dropped_note, finite_rows
from sweep.schema import METRIC_N_PARAMS, METRIC_N_TOKENS

__all__ = ["PARAMS", "check_points", "closed_form_split", "law_loss"]

#: The law's parameters, in the order fits and their bootstrap draws list them.
PARAMS = ("E", "A", "B", "alpha", "beta")


def law_loss(p: Mapping[str, float], n_params: Any, n_tokens: Any) -> Any:
    """L(N, D) = E + A / N^alpha + B / D^beta, nats/token, for parameters ``p``.

    ``n_params`` N and ``n_tokens`` D are numbers or arrays (broadcast); so is the result.
    """
    return p["E"] + p["A"] / n_params ** p["alpha"] + p["B"] / n_tokens ** p["beta"]


def closed_form_split(p: Mapping[str, float], flops: Any) -> tuple[Any, Any]:
    """N_opt, D_opt under C = 6ND for L = E + A/N^alpha + B/D^beta (Hoffmann et al. 2022 eq. 4).

    N_opt = G (C/6)^(beta/(alpha+beta)), D_opt = G^-1 (C/6)^(alpha/(alpha+beta)),
    G = (alpha A / (beta B))^(1/(alpha+beta)). ``flops`` is a number or an array of budgets
    (FLOPs); returns parameters and tokens alike.
    """
    total = p["alpha"] + p["beta"]
    g = (p["alpha"] * p["A"] / (p["beta"] * p["B"])) ** (1 / total)
    n_opt = g * (flops / 6) ** (p["beta"] / total)
    d_opt = (flops / 6) ** (p["alpha"] / total) / g
    return n_opt, d_opt


def check_points(n_params: Any, n_tokens: Any, loss: Any) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray, tuple[int, ...]]:
    """N, D and the loss of the points a fit of the law takes, rows with a NaN or inf dropped.

    Args:
        n_params: Shape ``(n,)``: parameters N of each point.
        n_tokens: Shape ``(n,)``: training tokens D.
        loss: Shape ``(n,)``: final losses, nats/token.

    Returns:
        ``(n, d, loss, dropped)``: the kept rows' columns and the dropped rows' input indices.

    Raises:
        FitError: Shapes that differ, fewer than 6 points (5 parameters need a residual),
            non-positive values, or fewer than 2 distinct values of N or of D.
    """
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
