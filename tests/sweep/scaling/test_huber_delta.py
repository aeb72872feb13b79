"""Approach 3's Huber delta: a large one makes the fit least squares on log loss, and the delta
used is in every report.

Independent truth: scipy's ``least_squares`` (trust-region reflective) on the residuals of log
loss, started from the law the points are drawn from (`testsupport.isoflop_frame`): with a
delta above every residual, the Huber loss is half the squared residual and both minimise the
same sum.
"""

import numpy as np
import pytest
from scipy.optimize import least_squares
from testsupport import CHINCHILLA, isoflop_frame

from sweep.scaling.options import TableOptionError
from sweep.scaling.report import analyze
from sweep.scaling.report_json import report_json


def least_squares_on_log_loss(points):
    n, d, y = (points[c].to_numpy() for c in ("n_params", "n_tokens", "loss"))

    def residuals(theta):
        e, a, b, alpha, beta = theta
        return np.log(y) - np.log(np.exp(e) + np.exp(a) * n ** -alpha + np.exp(b) * d ** -beta)

    start = [np.log(CHINCHILLA["E"]), np.log(CHINCHILLA["A"]), np.log(CHINCHILLA["B"]),
             CHINCHILLA["alpha"], CHINCHILLA["beta"]]
    fit = least_squares(residuals, start, xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=10_000)
    e, a, b, alpha, beta = fit.x
    return {"E": np.exp(e), "A": np.exp(a), "B": np.exp(b), "alpha": alpha, "beta": beta}


def test_a_large_delta_is_least_squares_on_log_loss():
    points = isoflop_frame(noise=0.01, seed=3)
    truth = least_squares_on_log_loss(points)
    report = analyze(points, approaches=("3",), huber_delta=1e9)
    fitted = report.results["3"].params
    for name in ("alpha", "beta"):
        assert fitted[name] == pytest.approx(truth[name], abs=1e-5), name
    for name in ("E", "A", "B"):
        assert fitted[name] == pytest.approx(truth[name], rel=1e-4), name
    hoffmann = analyze(points, approaches=("3",)).results["3"].params
    assert abs(hoffmann["alpha"] - truth["alpha"]) > 0.01  # the delta reached the fit
    out = report_json(report)["3"]
    assert out["huber_delta"] == 1e9
    assert out["alpha"] == fitted["alpha"]


@pytest.mark.parametrize("delta", [0.0, -1.0, float("nan"), float("inf"), 1e-7, 2e9, True])
def test_a_delta_outside_its_range_is_refused(delta):
    with pytest.raises(TableOptionError, match=r"--huber-delta .*: must be a number in "
                                               r"\[1e-06, 1e\+09\]"):
        analyze(isoflop_frame(), approaches=("3",), huber_delta=delta)
