import math

import numpy as np
import pytest

from sweep.scaling import FitError, fit_power_law

# Hoffmann et al. 2022 (Chinchilla), eq. 10: E = 1.69, A = 406.4, alpha = 0.34; the N term alone.
TRUE = {"E": 1.69, "A": 406.4, "alpha": 0.34}
N = np.geomspace(1e7, 1e10, 12)


def law(n):
    return TRUE["E"] + TRUE["A"] / n ** TRUE["alpha"]


def test_exact_points_give_the_published_parameters_back():
    fit = fit_power_law(N, law(N))
    assert fit.converged
    for name, value in TRUE.items():
        assert fit.params[name] == pytest.approx(value, rel=1e-6), name
    assert np.max(np.abs(fit.residuals)) < 1e-9
    assert fit.predict(1e11) == pytest.approx(law(1e11), rel=1e-9)


def test_standard_errors_match_the_spread_of_refits_on_fresh_noise():
    rng = np.random.default_rng(1)
    noise = 0.01
    alphas, stderrs = [], []
    for _ in range(200):
        fit = fit_power_law(N, law(N) + rng.normal(0, noise, N.size))
        alphas.append(fit.params["alpha"])
        stderrs.append(fit.stderr["alpha"])
    spread = float(np.std(alphas))
    # The Gauss-Newton standard error is an estimate of that spread (within 30%).
    assert np.median(stderrs) == pytest.approx(spread, rel=0.3)
    assert np.mean(alphas) == pytest.approx(TRUE["alpha"], abs=3 * spread / math.sqrt(200) + 0.01)


@pytest.mark.slow  # 40 fits of 200 bootstrap refits each: 8 s
def test_bootstrap_intervals_cover_the_truth_at_about_their_level():
    rng = np.random.default_rng(2)
    covered = 0
    trials = 40
    for i in range(trials):
        fit = fit_power_law(N, law(N) + rng.normal(0, 0.01, N.size), n_bootstrap=200, seed=i,
                            level=0.9)
        lo, hi = fit.intervals["alpha"]
        covered += lo <= TRUE["alpha"] <= hi
    # Percentile bootstrap on 12 points under-covers a little; a 90% interval covers most.
    assert 0.7 * trials <= covered <= trials


def test_same_seed_same_intervals_other_seed_other_intervals():
    y = law(N) + np.random.default_rng(3).normal(0, 0.01, N.size)
    a = fit_power_law(N, y, n_bootstrap=50, seed=0).intervals
    b = fit_power_law(N, y, n_bootstrap=50, seed=0).intervals
    c = fit_power_law(N, y, n_bootstrap=50, seed=1).intervals
    assert a == b and a != c


@pytest.mark.parametrize("x, loss, rule", [
    ([1e6, 1e7, 1e8], [3.0, 2.5, 2.2], "at least 4"),
    ([1e6, 1e7, 1e8, 1e9], [3.0, 2.5, 2.2], "x 4, loss 3"),
    ([1e6, 1e7, -1.0, 1e9], [3.0, 2.5, 2.2, 2.0], "finite and > 0"),
    ([1e6, 1e7, 1e8, 1e9], [3.0, math.nan, 2.2, 2.0], "3 points after dropping 1 non-finite"),
    ([1e6, 1e6, 1e7, 1e7], [3.0, 3.1, 2.5, 2.4], "2 distinct"),
])
def test_bad_points_are_refused_with_the_rule(x, loss, rule):
    with pytest.raises(FitError, match=rule):
        fit_power_law(x, loss)


def test_non_finite_rows_are_dropped_and_reported():
    y = law(N)
    y[[1, 5]] = [math.nan, math.inf]
    fit = fit_power_law(N, y)
    assert fit.dropped == (1, 5) and fit.settings["dropped"] == 2 and fit.n_points == N.size - 2
    assert fit.params["alpha"] == pytest.approx(TRUE["alpha"], rel=1e-6)


def test_bootstrap_keeps_its_draws_and_can_resample_groups():
    y = law(N) + np.random.default_rng(4).normal(0, 0.01, N.size)
    fit = fit_power_law(N, y, n_bootstrap=40, seed=0, level=0.8)
    assert fit.draws["alpha"].shape == (40,) and fit.level == 0.8
    lo, hi = np.percentile(fit.draws["alpha"][np.isfinite(fit.draws["alpha"])], [10, 90])
    assert fit.intervals["alpha"] == pytest.approx((lo, hi))
    pairs = fit_power_law(N, y, n_bootstrap=40, seed=0, level=0.8, groups=np.arange(N.size) // 2)
    assert pairs.intervals != fit.intervals


def test_predict_refuses_non_positive_x():
    fit = fit_power_law(N, law(N))
    with pytest.raises(FitError, match="x > 0"):
        fit.predict(0.0)
