import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from sweep.scaling import FitError
from sweep.scaling.parametric import HOFFMANN_GRID, compute_optimal, fit_parametric

# Hoffmann et al. 2022, eq. 10 (approach 3 fit on MassiveText).
CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
N, D = np.meshgrid(np.geomspace(1e7, 1e10, 6), np.geomspace(1e9, 1e12, 6))
N, D = N.ravel(), D.ravel()


def law(n, d, p=CHINCHILLA):
    return p["E"] + p["A"] / n ** p["alpha"] + p["B"] / d ** p["beta"]


@pytest.fixture(scope="module")
def exact_fit():
    return fit_parametric(N, D, law(N, D))  # the paper's whole grid of 4,500 starts


@pytest.mark.slow
def test_the_papers_procedure_gives_the_published_parameters_back(exact_fit):
    assert exact_fit.settings == {"delta": 1e-3, "starts": 4500}
    for name, value in CHINCHILLA.items():
        assert exact_fit.params[name] == pytest.approx(value, rel=2e-3), name
    assert np.max(np.abs(exact_fit.residuals)) < 1e-4


@pytest.mark.slow
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


@pytest.mark.parametrize("n, d, loss, rule", [
    ([1e7] * 5, [1e9] * 5, [3.0] * 5, "at least 6"),
    ([1e7, 1e8, 1e9, 1e7, 1e8, 1e9], [1e9] * 6, [3.0, 2.8, 2.6, 3.0, 2.8, 2.6],
     "n_tokens takes one"),
    ([1e7, 1e8, 1e9, 1e7, 1e8, -1], [1e9, 1e10] * 3, [3.0] * 6, "n_params: every value"),
    ([1e7, 1e8, 1e9, 1e7, 1e8, 1e9], [1e9, 1e10] * 3, [3.0, 2.8, math.inf, 3.0, 2.8, 2.6],
     "loss: every value"),
])
def test_bad_points_are_refused_with_the_rule(n, d, loss, rule):
    with pytest.raises(FitError, match=rule):
        fit_parametric(n, d, loss)


@pytest.mark.slow
def test_compute_optimal_refuses_a_bad_budget(exact_fit):
    with pytest.raises(FitError, match="finite number > 0"):
        compute_optimal(exact_fit, -1.0)
