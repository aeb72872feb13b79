import math

import numpy as np
import pytest
from scipy.optimize import nnls
from testsupport import CHINCHILLA, law, same_3_digits

from sweep.scaling import FitError
from sweep.scaling.bootstrap import bootstrap_counts
from sweep.scaling.parametric import compute_optimal
from sweep.scaling.vpnls import VPNLS_GRID, VPNLSFit, _grid_rss, fit_vpnls

# Hoffmann et al. 2022, eq. 10 (rounded), and the grid of /work/shared/reference/cost_vectors.md
# ("Scaling laws"): 8 x 8, N from 7e7 to 1.6e10, D from 5e9 to 5e11.
N8, D8 = (a.ravel() for a in np.meshgrid(np.geomspace(7e7, 1.6e10, 8),
                                         np.geomspace(5e9, 5e11, 8)))


def test_noise_free_reference_grid_gives_the_published_law_to_3_digits():
    fit = fit_vpnls(N8, D8, law(N8, D8))
    assert isinstance(fit, VPNLSFit) and fit.converged and fit.message == ""
    for name, value in CHINCHILLA.items():
        assert same_3_digits(fit.params[name], value), (name, fit.params[name])
        assert fit.params[name] == pytest.approx(value, rel=1e-6), name
    assert np.max(np.abs(fit.residuals)) < 1e-9
    assert fit.predict(1e9, 1e11) == pytest.approx(law(1e9, 1e11), rel=1e-9)
    opt = compute_optimal(fit, 5.88e23)  # cost_vectors.md: N_opt 3.249e10, D_opt 3.016e12
    assert same_3_digits(opt["n_params"], 3.249e10) and same_3_digits(opt["n_tokens"], 3.016e12)
    assert fit.settings["grid"] == (32, 32) and fit.settings["dropped"] == 0


def test_the_closed_form_grid_is_scipys_nnls():
    rng = np.random.default_rng(0)
    grid = np.array(VPNLS_GRID)
    log_n, log_d = np.log(N8), np.log(D8)
    pn, pd = np.exp(-np.outer(log_n, grid)), np.exp(-np.outer(log_d, grid))
    weights = bootstrap_counts(N8.size, 3, 1).astype(float)
    # Noisy, exact, and a loss falling with N and D (coefficients clamped at 0 by NNLS).
    for y in (law(N8, D8) + rng.normal(0, 0.01, N8.size), law(N8, D8), 3 - law(N8, D8)):
        table = _grid_rss(pn, pd, y, weights)
        for b in range(3):
            for i in range(0, 32, 5):
                for j in range(0, 32, 3):
                    root = np.sqrt(weights[b])
                    x = np.column_stack([np.ones(N8.size), pn[:, i], pd[:, j]]) * root[:, None]
                    _, rnorm = nnls(x, y * root)
                    assert table[b, i, j] == pytest.approx(rnorm**2, rel=1e-6, abs=1e-12)


def test_standard_errors_match_the_spread_of_refits_on_fresh_noise():
    rng = np.random.default_rng(1)
    alphas, stderrs = [], []
    for _ in range(60):
        fit = fit_vpnls(N8, D8, law(N8, D8) + rng.normal(0, 0.005, N8.size))
        alphas.append(fit.params["alpha"])
        stderrs.append(fit.stderr["alpha"])
    # The Gauss-Newton standard error estimates that spread (within 35% on 60 refits).
    assert np.median(stderrs) == pytest.approx(np.std(alphas), rel=0.35)


def test_bootstrap_intervals_are_reproducible_and_refit_the_whole_procedure():
    y = law(N8, D8) + np.random.default_rng(2).normal(0, 0.01, N8.size)
    a = fit_vpnls(N8, D8, y, n_bootstrap=30, seed=3)
    assert a.intervals == fit_vpnls(N8, D8, y, n_bootstrap=30, seed=3).intervals
    assert a.draws["beta"].shape == (30,) and a.level == 0.9
    assert a.settings["bootstrap_failed"] == {"degenerate": 0, "not_converged": 0}
    # Independent truth for one draw: VPNLS on the resampled points themselves.
    rows = np.repeat(np.arange(N8.size), bootstrap_counts(N8.size, 30, 3)[4])
    refit = fit_vpnls(N8[rows], D8[rows], y[rows])
    for name in CHINCHILLA:
        assert a.draws[name][4] == pytest.approx(refit.params[name], rel=1e-6), name
    by_row = fit_vpnls(N8, D8, y, n_bootstrap=30, seed=3, groups=np.arange(N8.size) // 8)
    assert by_row.intervals != a.intervals


@pytest.mark.slow
def test_nominal_90_percent_intervals_cover_the_true_exponents_in_most_seeds():
    seeds = range(40)
    covered = {"alpha": 0, "beta": 0}
    for s in seeds:
        y = law(N8, D8) + np.random.default_rng(1000 + s).normal(0, 0.01, N8.size)
        fit = fit_vpnls(N8, D8, y, n_bootstrap=100, seed=s, level=0.9)
        for name in covered:
            lo, hi = fit.intervals[name]
            covered[name] += lo <= CHINCHILLA[name] <= hi
    for name, k in covered.items():
        assert k >= 0.8 * len(seeds), (name, k)


def test_a_coefficient_clamped_to_zero_is_flagged():
    y = law(N8, D8, CHINCHILLA | {"E": 0.0})
    fit = fit_vpnls(N8, D8, y)
    assert not fit.converged and "E=" in fit.message and "clamped" in fit.message


def test_an_exponent_outside_the_grid_is_flagged():
    y = law(N8, D8, CHINCHILLA | {"alpha": 1.3})
    fit = fit_vpnls(N8, D8, y)
    assert not fit.converged
    assert "grid's best alpha" in fit.message and "bounds" in fit.message


def test_non_finite_rows_are_dropped_and_reported():
    y = law(N8, D8)
    y[[0, 7]] = [math.nan, -math.inf]
    fit = fit_vpnls(N8, D8, y)
    assert fit.dropped == (0, 7) and fit.settings["dropped"] == 2 and fit.n_points == 62
    assert fit.params["alpha"] == pytest.approx(0.34, rel=1e-6)


@pytest.mark.parametrize("n, d, loss, rule", [
    ([1e8, 1e9, 1e10, 1e8, 1e9], [1e10, 1e11] * 2 + [1e10], [3.0, 2.8, 2.6, 2.9, 2.7],
     "5 points: .* at least 6"),
    ([1e8, 1e9, 1e10, 1e8, 1e9, math.nan], [1e10, 1e11] * 3, [3.0, 2.8, 2.6, 2.9, 2.7, 2.5],
     "5 points after dropping 1 non-finite row"),
    ([1e9] * 6, [1e10, 1e11] * 3, [3.0, 2.8, 2.6, 2.9, 2.7, 2.5], "n_params takes one value"),
    ([1e8, 1e9, 1e10, 1e8, 1e9, 1e10], [1e10] * 6, [3.0] * 6, "n_tokens takes one value"),
    ([1e8, 1e9, 1e10, 1e8, 1e9, 0.0], [1e10, 1e11] * 3, [3.0] * 6, "n_params: every value"),
])
def test_bad_points_are_refused_with_the_rule(n, d, loss, rule):
    with pytest.raises(FitError, match=rule):
        fit_vpnls(n, d, loss)


def test_bad_arguments_are_refused():
    with pytest.raises(FitError, match="each needs 3"):
        fit_vpnls(N8, D8, law(N8, D8), alpha_grid=(0.3, 0.4))
    with pytest.raises(FitError, match="level"):
        fit_vpnls(N8, D8, law(N8, D8), n_bootstrap=3, level=0.0)
