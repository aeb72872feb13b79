import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from testsupport import CHINCHILLA, law, same_3_digits

from sweep.scaling import FitError
from sweep.scaling.bootstrap import bootstrap_counts
from sweep.scaling.huber import batched_objective as _batched_objective
from sweep.scaling.huber import objective as _objective
from sweep.scaling.lbfgs import minimize_lbfgs_batched
from sweep.scaling.parametric import HOFFMANN_GRID, compute_optimal, fit_parametric

# Hoffmann et al. 2022, eq. 10 (approach 3 fit on MassiveText).
N, D = np.meshgrid(np.geomspace(1e7, 1e10, 6), np.geomspace(1e9, 1e12, 6))
N, D = N.ravel(), D.ravel()
# The grid of /work/shared/reference/cost_vectors.md, "Scaling laws": 8 x 8, N 7e7..1.6e10,
# D 5e9..5e11.
N8, D8 = (a.ravel() for a in np.meshgrid(np.geomspace(7e7, 1.6e10, 8),
                                         np.geomspace(5e9, 5e11, 8)))
SMALL_GRID = {"alpha": (0.0, 1.0), "beta": (0.0, 1.0), "e": (-1.0, 1.0), "a": (0.0, 10.0, 20.0),
              "b": (0.0, 10.0, 20.0)}  # 72 starts, for the comparison with scipy


@pytest.fixture(scope="module")
def exact_fit():
    return fit_parametric(N, D, law(N, D))  # the paper's whole grid of 4,500 starts


def test_the_papers_procedure_gives_the_published_parameters_back(exact_fit):
    assert exact_fit.settings["delta"] == 1e-3 and exact_fit.settings["starts"] == 4500
    assert exact_fit.converged and exact_fit.message == ""
    for name, value in CHINCHILLA.items():
        assert exact_fit.params[name] == pytest.approx(value, rel=2e-3), name
    assert np.max(np.abs(exact_fit.residuals)) < 1e-4


def test_the_reference_grid_gives_the_published_parameters_to_3_digits():
    fit = fit_parametric(N8, D8, law(N8, D8))
    for name, value in CHINCHILLA.items():
        assert same_3_digits(fit.params[name], value), (name, fit.params[name])
    # Hoffmann eq. 4 at C = 5.88e23 with the rounded law: N_opt 3.249e10, D_opt 3.016e12.
    opt = compute_optimal(fit, 5.88e23)
    assert same_3_digits(opt["n_params"], 3.249e10) and same_3_digits(opt["n_tokens"], 3.016e12)


def test_compute_optimal_split_is_the_minimum_along_the_isoflop_line(exact_fit):
    for flops in (1e21, 5.76e23):
        opt = compute_optimal(exact_fit, flops)
        # Independent truth: minimise the fitted loss over N with D = C / (6 N).
        def along(log_n, flops=flops):
            return exact_fit.predict(math.exp(log_n), flops / (6 * math.exp(log_n)))

        line = minimize_scalar(along,
                               bounds=(math.log(1e6), math.log(1e13)), method="bounded",
                               options={"xatol": 1e-9})
        assert opt["n_params"] == pytest.approx(math.exp(line.x), rel=1e-4)
        assert 6 * opt["n_params"] * opt["n_tokens"] == pytest.approx(flops, rel=1e-9)
        assert opt["loss"] == pytest.approx(line.fun, rel=1e-9)


def test_the_grid_start_matters_when_one_start_is_poor():
    y = law(N, D)
    poor = {"alpha": (2.0,), "beta": (0.0,), "e": (1.0,), "a": (0.0,), "b": (25.0,)}
    one = fit_parametric(N, D, y, grid=poor)
    assert one.objective > fit_parametric(N, D, y, grid=HOFFMANN_GRID | {"a": (5.0,),
                                                                        "b": (5.0,)}).objective


def test_the_per_start_objective_is_scipys_log_sum_exp_without_its_cost(monkeypatch):
    # scipy's L-BFGS-B calls `objective` ~1e5 times on a full grid; scipy.special.logsumexp
    # cost most of that (43 s of the full-grid comparison with scipy). The objective's own
    # log-sum-exp gives scipy's value to rounding and hands only infinite columns to scipy.
    from scipy.special import huber, logsumexp

    from sweep.scaling import huber as module

    calls = []
    monkeypatch.setattr(module, "logsumexp",
                        lambda *a, **k: calls.append(1) or logsumexp(*a, **k))
    rng = np.random.default_rng(1)
    log_n, log_d = np.log(N8), np.log(D8)
    log_loss = np.log(law(N8, D8) * np.exp(rng.normal(0, 0.01, N8.size)))
    for theta in rng.uniform([0, 0, -1, 0, 0], [25, 25, 1, 2, 2], (20, 5)):
        f, _ = _objective(theta, log_n, log_d, log_loss, 1e-3)
        a, b, e, alpha, beta = theta
        r = logsumexp([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)],
                      axis=0) - log_loss
        assert f == pytest.approx(np.sum(huber(1e-3, r)), rel=1e-12)
    assert calls == []
    f, _ = _objective(np.array([np.inf, 0.0, 0.0, 0.3, 0.3]), log_n, log_d, log_loss, 1e-3)
    assert calls == [1] and f == np.inf


def test_the_batched_objective_is_the_per_start_one():
    rng = np.random.default_rng(0)
    y = law(N8, D8) * np.exp(rng.normal(0, 0.01, N8.size))
    args = (np.log(N8), np.log(D8), np.log(y), 1e-3)
    theta = np.column_stack([rng.uniform(0, 25, 50), rng.uniform(0, 25, 50),
                             rng.uniform(-1, 1, 50), rng.uniform(0, 2, 50), rng.uniform(0, 2, 50)])
    weights = rng.integers(0, 3, (50, N8.size)).astype(float)
    f, g = _batched_objective(theta, *args)
    fw, gw = _batched_objective(theta, *args, weights)
    for i in range(50):
        fi, gi = _objective(theta[i], *args)
        assert f[i] == pytest.approx(fi, rel=1e-12, abs=1e-300)
        np.testing.assert_allclose(g[i], gi, rtol=1e-9, atol=1e-13)
        # A weight of k is the point repeated k times.
        rows = np.repeat(np.arange(N8.size), weights[i].astype(int))
        fr, gr = _objective(theta[i], *(a[rows] for a in args[:3]), 1e-3)
        assert fw[i] == pytest.approx(fr, rel=1e-12, abs=1e-300)
        np.testing.assert_allclose(gw[i], gr, rtol=1e-9, atol=1e-13)


def test_batched_lbfgs_minimises_a_rosenbrock_valley_from_many_starts():
    def rosen(x, rows):
        a, b = x[:, 0], x[:, 1]
        f = (1 - a) ** 2 + 100 * (b - a**2) ** 2
        g = np.column_stack([-2 * (1 - a) - 400 * a * (b - a**2), 200 * (b - a**2)])
        return f, g

    starts = np.random.default_rng(1).uniform(-2, 2, (200, 2))
    x, f, status, nit, _ = minimize_lbfgs_batched(rosen, starts, ftol=0.0, gtol=1e-10)
    assert set(status) <= {0, 2}  # 2: no step lowers f in floating point
    np.testing.assert_allclose(x, 1.0, atol=1e-7)
    assert nit.max() < 200


@pytest.mark.parametrize("seed, n_points, noise", [(0, 48, 0.01), (1, 64, 0.03), (2, 30, 0.0)])
def test_batched_starts_find_the_optimum_scipy_finds_start_by_start(seed, n_points, noise):
    rng = np.random.default_rng(seed)
    n = np.exp(rng.uniform(math.log(7e7), math.log(1.6e10), n_points))
    d = np.exp(rng.uniform(math.log(5e9), math.log(5e11), n_points))
    y = law(n, d) * np.exp(rng.normal(0, noise, n_points))
    ours = fit_parametric(n, d, y, grid=SMALL_GRID)
    ref = fit_parametric(n, d, y, grid=SMALL_GRID, solver="scipy")
    assert ref.settings["solver"] == "scipy" and ours.settings["starts"] == 72
    assert ours.objective == pytest.approx(ref.objective, rel=1e-7, abs=1e-15)
    for name in CHINCHILLA:
        assert ours.params[name] == pytest.approx(ref.params[name], rel=1e-4), name


@pytest.mark.slow
def test_batched_full_grid_matches_scipy_full_grid():
    rng = np.random.default_rng(3)
    y = law(N8, D8) * np.exp(rng.normal(0, 0.01, N8.size))
    ours = fit_parametric(N8, D8, y)
    ref = fit_parametric(N8, D8, y, solver="scipy")
    assert ours.objective == pytest.approx(ref.objective, rel=1e-7)
    for name in CHINCHILLA:
        assert ours.params[name] == pytest.approx(ref.params[name], rel=1e-4), name


@pytest.mark.slow  # 3 full-grid fits besides the bootstrap: 3 s
def test_bootstrap_refits_from_the_optimum_reach_the_full_grid_refit():
    rng = np.random.default_rng(4)
    y = law(N8, D8) * np.exp(rng.normal(0, 0.01, N8.size))
    fit = fit_parametric(N8, D8, y, n_bootstrap=30, seed=7)
    assert fit.settings["bootstrap_start"] == "full-fit optimum"
    spread = {name: np.std(fit.draws[name]) for name in CHINCHILLA}
    counts = bootstrap_counts(N8.size, 30, 7)
    for i, times in enumerate(counts[:3]):
        # Independent truth: Hoffmann's whole procedure on the resampled points themselves.
        rows = np.repeat(np.arange(N8.size), times)
        full = fit_parametric(N8[rows], D8[rows], y[rows])
        p = {name: fit.draws[name][i] for name in CHINCHILLA}
        theta = [math.log(p["A"]), math.log(p["B"]), math.log(p["E"]), p["alpha"], p["beta"]]
        refit, _ = _objective(np.array(theta), np.log(N8[rows]), np.log(D8[rows]),
                              np.log(y[rows]), 1e-3)
        assert refit == pytest.approx(full.objective, rel=1e-7)
        # The Huber objective is flat along a valley: the same optimum to well within the
        # bootstrap's own spread.
        for name in CHINCHILLA:
            assert abs(p[name] - full.params[name]) < 0.05 * spread[name], name


def test_bootstrap_intervals_are_reproducible_and_bracket_the_fit():
    rng = np.random.default_rng(5)
    y = law(N8, D8) * np.exp(rng.normal(0, 0.01, N8.size))
    a = fit_parametric(N8, D8, y, n_bootstrap=40, seed=0, level=0.8)
    b = fit_parametric(N8, D8, y, n_bootstrap=40, seed=0, level=0.8)
    assert a.intervals == b.intervals and a.level == 0.8
    assert set(a.draws) == set(CHINCHILLA) and a.draws["alpha"].shape == (40,)
    for name, (lo, hi) in a.intervals.items():
        assert lo < a.params[name] < hi, name
    rows = np.arange(N8.size) % 8  # resample whole rows of the grid (one D each)
    grouped = fit_parametric(N8, D8, y, n_bootstrap=40, seed=0, groups=rows)
    assert grouped.intervals != a.intervals


@pytest.mark.slow
def test_approach_3_bootstrap_intervals_cover_the_true_exponents():
    covered = {"alpha": 0, "beta": 0}
    seeds = range(20)
    for s in seeds:
        y = law(N8, D8) * np.exp(np.random.default_rng(1000 + s).normal(0, 0.005, N8.size))
        fit = fit_parametric(N8, D8, y, n_bootstrap=100, seed=s, level=0.9)
        for name in covered:
            lo, hi = fit.intervals[name]
            covered[name] += lo <= CHINCHILLA[name] <= hi
    for name, k in covered.items():
        assert k >= 0.8 * len(seeds), (name, k)


@pytest.mark.parametrize("n, d, loss, rule", [
    ([1e7] * 5, [1e9] * 5, [3.0] * 5, "at least 6"),
    ([1e7, 1e8, 1e9, 1e7, 1e8, 1e9], [1e9] * 6, [3.0, 2.8, 2.6, 3.0, 2.8, 2.6],
     "n_tokens takes one"),
    ([1e7, 1e8, 1e9, 1e7, 1e8, -1], [1e9, 1e10] * 3, [3.0] * 6, "n_params: every value"),
    ([1e7, 1e8, 1e9, 1e7, 1e8, 1e9], [1e9, 1e10] * 3, [3.0, 2.8, math.inf, 3.0, 2.8, 2.6],
     "5 points after dropping 1 non-finite row: .* at least 6"),
    ([1e7, 1e8], [1e9, 1e10, 1e11], [3.0, 2.9, 2.8], "different lengths"),
])
def test_bad_points_are_refused_with_the_rule(n, d, loss, rule):
    with pytest.raises(FitError, match=rule):
        fit_parametric(n, d, loss)


def test_non_finite_rows_are_dropped_and_reported():
    y = law(N8, D8)
    y[[3, 10]] = [math.nan, math.inf]
    n = N8.copy()
    n[20] = math.nan
    fit = fit_parametric(n, D8, y)
    assert fit.dropped == (3, 10, 20) and fit.settings["dropped"] == 3
    assert fit.n_points == 61 and fit.residuals.shape == (61,)
    for name, value in CHINCHILLA.items():
        assert same_3_digits(fit.params[name], value), name


def test_bad_arguments_are_refused():
    y = law(N8, D8)
    with pytest.raises(FitError, match="level"):
        fit_parametric(N8, D8, y, n_bootstrap=5, level=1.5)
    with pytest.raises(FitError, match="n_bootstrap"):
        fit_parametric(N8, D8, y, n_bootstrap=-1)
    with pytest.raises(FitError, match="solver"):
        fit_parametric(N8, D8, y, solver="adam")


def test_compute_optimal_refuses_a_bad_budget(exact_fit):
    with pytest.raises(FitError, match="finite number > 0"):
        compute_optimal(exact_fit, -1.0)
