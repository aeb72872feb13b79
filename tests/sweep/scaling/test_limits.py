"""Numbers at the edge of float64: every fit refuses a value outside its column's range with a
`FitError` naming the column and row, and VPNLS never hands scipy's nnls an overflowing or
numerically singular design (checked with the real nnls, wrapped to record what it is given).
"""

import math
import re

import numpy as np
import pytest
from testsupport import law

from sweep.scaling import vpnls
from sweep.scaling.envelope import fit_envelope
from sweep.scaling.isoflop import fit_isoflop
from sweep.scaling.limits import LIMITS, check_limits
from sweep.scaling.parametric import fit_parametric
from sweep.scaling.powerlaw import fit_power_law
from sweep.scaling.result import FitError

N = np.repeat(np.geomspace(1e7, 1e9, 4), 3)  # 4 sizes x 3 budgets
C = np.tile([1e17, 1e18, 1e19], 4)
D = C / (6 * N)


def _with(values, row, value):
    values = np.array(values, dtype=float)
    values[row] = value
    return values


#: Each fit on (N, D, loss), and the name it gives the N column.
FITS = {
    "vpnls": (lambda n, d, y: vpnls.fit_vpnls(n, d, y), "n_params"),
    "approach 3": (lambda n, d, y: fit_parametric(n, d, y), "n_params"),
    "approach 2": (lambda n, d, y: fit_isoflop(C, n, y), "n_params"),
    "approach 1": (lambda n, d, y: fit_envelope(np.arange(n.size), n, C, y), "n_params"),
    "power law": (lambda n, d, y: fit_power_law(n, y), "x"),
}


def test_the_message_names_column_row_value_and_range():
    with pytest.raises(FitError) as caught:
        vpnls.fit_vpnls(N, D, _with(law(N, D), 5, 1e308))
    assert str(caught.value) == ("loss: row 5: 1e+308 is outside [0, 1000] nats/token, the "
                                 "range a fit accepts")


@pytest.mark.parametrize("fit", FITS)
@pytest.mark.parametrize("column, value", [("loss", 1e308), ("loss", 1001.0), ("n", 1e308),
                                           ("n", 1e21), ("n", 0.5)])
def test_every_fit_refuses_a_value_outside_its_range_naming_column_and_row(fit, column, value):
    function, n_name = FITS[fit]
    n, y = N, law(N, D)
    if column == "n":
        n = _with(n, 5, value)
    else:
        y = _with(y, 5, value)
    name = n_name if column == "n" else "loss"
    if name == "x" and value <= 1e42:  # a power law's x is N, D or C: any scale up to 1e42
        assert function(n, D, y).n_points == N.size
        return
    expected = f"{name}: row 5: {value:.6g} {LIMITS[name].rule()}"
    with pytest.raises(FitError, match=re.escape(expected)):
        function(n, D, y)


def test_a_row_of_inf_and_nan_is_dropped_and_listed_not_refused():
    n, d, y = _with(N, 2, math.inf), _with(D, 2, math.nan), _with(law(N, D), 2, math.inf)
    fit = vpnls.fit_vpnls(n, d, y)
    assert fit.dropped == (2,) and fit.n_points == N.size - 1


def test_check_limits_names_the_first_value_outside_and_ignores_others():
    check_limits(("loss", "unknown"), [np.array([0.0, 1e3, math.inf, -5.0]),
                                       np.array([1e300])], FitError)
    with pytest.raises(FitError, match=r"n_tokens: row 1: 1e\+21 is outside \[1, 1e\+20\]"):
        check_limits(("n_tokens",), [np.array([1e9, 1e21, 1e22])], FitError)
    assert LIMITS["budget"] is LIMITS["budget_flops"] and LIMITS["flops"].hi == 1e42


@pytest.fixture
def nnls_calls(monkeypatch):
    """Every (design, loss) pair VPNLS hands scipy's nnls, which still does the solving."""
    calls = []
    real = vpnls.nnls

    def recording(x, b):
        calls.append((np.array(x), np.array(b)))
        return real(x, b)

    monkeypatch.setattr(vpnls, "nnls", recording)
    return calls


def _condition(x):
    """Condition number of the columns scaled to unit norm (an all-zero column left out)."""
    norms = np.linalg.norm(x, axis=0)
    return float(np.linalg.cond(x[:, norms > 0] / norms[norms > 0]))


RNG = np.random.default_rng(0)
EDGE_DATA = {
    # No dependence on N: alpha drifts to 0, where N^-alpha is the ones column again.
    "flat in N": (np.geomspace(1, 1e20, 12), np.geomspace(1e20, 1, 12),
                  2.0 + RNG.normal(0, 1e-3, 12)),
    # Losses over the whole range, unrelated to N and D: both exponents drift.
    "noise": (np.geomspace(1, 1e20, 12), np.geomspace(1, 1e20, 12),
              RNG.uniform(1e-3, 1e3, 12)),
}


@pytest.mark.parametrize("data", EDGE_DATA)
def test_nnls_gets_only_finite_bounded_well_conditioned_designs(nnls_calls, data):
    n, d, y = EDGE_DATA[data]
    vpnls.fit_vpnls(n, d, y)
    assert len(nnls_calls) > 50  # Nelder-Mead's whole search went through the guard
    for x, b in nnls_calls:
        assert np.all(np.isfinite(x)) and np.all(np.isfinite(b))
        assert max(np.abs(x).max(), np.abs(b).max()) <= vpnls.MAX_ENTRY
        assert _condition(x) <= vpnls.MAX_COND


def test_an_overflowing_design_gives_an_infinite_rss_without_calling_nnls(nnls_calls):
    log_n, log_d = np.log(np.geomspace(1e7, 1e20, 8)), np.log(np.geomspace(1e9, 1e12, 8))
    y, w = np.full(8, 3.0), np.ones(8)
    rss, coef = vpnls._nnls(-40.0, 0.3, log_n, log_d, y, w)  # N^40 = 1e800 overflows
    assert rss == math.inf and np.isnan(coef).all() and nnls_calls == []
    rss, _ = vpnls._nnls(0.34, 0.28, log_n, log_d, y, w)
    assert math.isfinite(rss) and len(nnls_calls) == 1


def test_an_isoflop_parabola_whose_minimum_loss_is_not_positive_is_not_used():
    # Loss = -1 + 2 (log N - log 1e8)^2 at 4 sizes around 1e8: all positive, the vertex at -1.
    sizes = 1e8 * np.exp([-2.0, -1.0, 1.0, 2.0])
    odd = -1 + 2 * np.log(sizes / 1e8) ** 2
    good = [np.geomspace(3e7, 3e9, 5) * k for k in (1, 3, 10)]
    c = np.concatenate([np.full(4, 1e18)] + [np.full(5, b) for b in (1e19, 1e20, 1e21)])
    n = np.concatenate([sizes, *good])
    y = np.concatenate([odd] + [law(s, b / (6 * s)) for s, b in zip(good, (1e19, 1e20, 1e21),
                                                                    strict=True)])
    fit = fit_isoflop(c, n, y, n_bootstrap=20, seed=0)
    odd_curve = fit.curves[0]
    assert odd_curve.warnings == ["C=1e+18: the parabola's minimum loss -1 is not > 0; the "
                                  "sizes do not trace a minimum"]
    assert fit.settings["usable_curves"] == 3
    assert all(math.isfinite(v) for v in fit.params.values())
