import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from sweep.scaling import FitError
from sweep.scaling.isoflop import fit_isoflop

# Hoffmann et al. 2022, eq. 10.
P = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
BUDGETS = (1e18, 1e19, 1e20, 1e21)


def loss_at(n, flops):
    d = flops / (6 * n)
    return P["E"] + P["A"] / n ** P["alpha"] + P["B"] / d ** P["beta"]


def true_n_opt(flops):
    """Independent truth: the minimum of the law along its IsoFLOP line, by line search."""
    res = minimize_scalar(lambda log_n: loss_at(math.exp(log_n), flops),
                          bounds=(math.log(1e5), math.log(1e13)), method="bounded",
                          options={"xatol": 1e-10})
    return math.exp(res.x)


def grid(spread=(0.25, 4.0), k=7):
    c, n, y = [], [], []
    for flops in BUDGETS:
        for size in np.geomspace(spread[0], spread[1], k) * true_n_opt(flops):
            c.append(flops)
            n.append(size)
            y.append(loss_at(size, flops))
    return c, n, y


def test_centred_curves_find_the_true_optimum_and_its_exponents():
    fit = fit_isoflop(*grid())
    assert [k.usable for k in fit.curves] == [True] * 4
    for curve in fit.curves:
        assert curve.n_opt == pytest.approx(true_n_opt(curve.budget_flops), rel=0.03)
        assert curve.position == pytest.approx(0.5, abs=0.05)
    beta_share = P["beta"] / (P["alpha"] + P["beta"])  # Hoffmann eq. 4: N_opt ~ C^a
    assert fit.params["a"] == pytest.approx(beta_share, abs=0.01)
    assert fit.params["a"] + fit.params["b"] == pytest.approx(1.0, abs=1e-9)
    predicted = fit.predict(1e22)
    assert predicted["n_params"] == pytest.approx(true_n_opt(1e22), rel=0.05)
    assert 6 * predicted["n_params"] * predicted["n_tokens"] == pytest.approx(1e22, rel=1e-6)


def test_off_centre_sizes_are_flagged_and_left_out():
    c, n, y = grid()
    # The smallest budget's sizes all above its optimum: its vertex falls at the edge.
    shifted = [(ci, ni * (8.0 if ci == BUDGETS[0] else 1.0)) for ci, ni in zip(c, n, strict=True)]
    c2 = [s[0] for s in shifted]
    n2 = [s[1] for s in shifted]
    y2 = [loss_at(ni, ci) for ci, ni in shifted]
    fit = fit_isoflop(c2, n2, y2)
    flagged = [k for k in fit.curves if not k.usable]
    assert [k.budget_flops for k in flagged] == [BUDGETS[0]]
    assert "smallest sampled size" in flagged[0].warnings[0]
    assert flagged[0].position < 0.1
    assert fit.settings["usable_curves"] == 3


def test_a_curve_that_does_not_open_upwards_is_flagged():
    c, n, y = grid()
    # Loss falling ever faster with N at the largest budget: a concave curve.
    y = [(10 - 0.01 * math.log(ni) ** 2 if ci == BUDGETS[-1] else yi)
         for ci, ni, yi in zip(c, n, y, strict=True)]
    fit = fit_isoflop(c, n, y)
    last = fit.curves[-1]
    assert not last.usable and "does not open upwards" in last.warnings[0]
    assert math.isnan(last.n_opt)


def test_too_few_usable_curves_or_sizes_are_refused():
    c, n, y = grid(spread=(2.0, 16.0))  # every budget sampled above its optimum
    with pytest.raises(FitError, match="0 usable IsoFLOP curves of 4"):
        fit_isoflop(c, n, y)
    with pytest.raises(FitError, match="2 distinct sizes"):
        fit_isoflop([1e18] * 4, [1e6, 1e6, 2e6, 2e6], [3.0, 3.0, 2.9, 2.9])
    with pytest.raises(FitError, match="n_params: every value"):
        fit_isoflop([1e18] * 3, [1e6, -1.0, 2e6], [3.0, 3.0, 2.9])
