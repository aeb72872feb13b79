import numpy as np
import pytest
from testsupport import CHINCHILLA, law, same_3_digits

from sweep.scaling import FitError
from sweep.scaling.allocation import CONVENTION_6ND, CONVENTION_COST_MODEL, optimal_allocation
from sweep.scaling.envelope import fit_envelope
from sweep.scaling.isoflop import fit_isoflop
from sweep.scaling.parametric import ParametricFit, compute_optimal, fit_parametric
from sweep.scaling.vpnls import fit_vpnls

N8, D8 = (a.ravel() for a in np.meshgrid(np.geomspace(7e7, 1.6e10, 8),
                                         np.geomspace(5e9, 5e11, 8)))


def published(**fields):
    return ParametricFit(params=dict(CHINCHILLA), residuals=np.empty(0), objective=0.0,
                         converged=True, n_points=0, **fields)


def brute_force(p, flops, flops_per_token):
    """Independent truth: the lowest loss over a fine grid of N along C = fpt(N) D."""
    n = np.geomspace(1e8, 1e13, 2_000_001)
    loss = law(n, flops / flops_per_token(n), p)
    i = int(np.argmin(loss))
    return n[i], loss[i]


def test_the_published_split_at_the_chinchilla_budget():
    # cost_vectors.md: a = 0.451613, N_opt = 3.249e10 and D_opt = 3.016e12 at C = 5.88e23.
    split = optimal_allocation(published(), 5.88e23)
    assert split.convention == CONVENTION_6ND
    assert split.exponents["a"] == pytest.approx(0.451613, abs=5e-7)
    assert split.exponents["b"] == pytest.approx(1 - 0.451613, abs=5e-7)
    assert same_3_digits(split.n_params, 3.249e10) and same_3_digits(split.n_tokens, 3.016e12)
    assert split.as_dict() == pytest.approx(compute_optimal(published(), 5.88e23), rel=1e-12)
    assert split.intervals == {} and split.n_draws == 0


@pytest.mark.parametrize("fit", ["approach 3", "vpnls"])
def test_fitted_laws_give_the_published_split_to_3_digits(fit):
    y = law(N8, D8)
    result = fit_parametric(N8, D8, y) if fit == "approach 3" else fit_vpnls(N8, D8, y)
    split = optimal_allocation(result, 5.88e23)
    assert same_3_digits(split.n_params, 3.249e10) and same_3_digits(split.n_tokens, 3.016e12)
    assert same_3_digits(split.exponents["a"], 0.4516)


def test_a_cost_model_of_6n_is_the_closed_form():
    six = optimal_allocation(published(), 1e22)
    cost = optimal_allocation(published(), 1e22, flops_per_token=lambda n: 6 * n)
    assert cost.convention == CONVENTION_COST_MODEL and cost.warnings == ()
    assert cost.n_params == pytest.approx(six.n_params, rel=1e-7)
    assert cost.n_tokens == pytest.approx(six.n_tokens, rel=1e-7)
    assert cost.loss == pytest.approx(six.loss, rel=1e-12)


def test_a_cost_model_with_attention_moves_the_optimum_where_brute_force_finds_it():
    # 6N plus a term that weighs more on small models (attention over a 2,048-token context,
    # 12 n_layer seq_len d_model with d_model = (N / 12 / 64)^(1/3) * 64 and 64 layers wide).
    def flops_per_token(n):
        d_model = 64 * (np.asarray(n) / (12 * 64)) ** (1 / 3)
        n_layers = d_model / 64
        return 6 * np.asarray(n) + 12 * n_layers * 2048 * d_model

    for flops in (1e20, 1e23):
        split = optimal_allocation(published(), flops, flops_per_token=flops_per_token)
        n_true, loss_true = brute_force(CHINCHILLA, flops, flops_per_token)
        assert split.n_params == pytest.approx(n_true, rel=1e-4)
        assert split.loss == pytest.approx(loss_true, rel=1e-9)
        assert split.n_tokens == pytest.approx(flops / flops_per_token(split.n_params), rel=1e-12)
        # Attention makes tokens dearer: fewer of them than 6ND allows at the same N.
        assert split.n_tokens < flops / (6 * split.n_params)


def test_intervals_come_from_the_bootstrap_draws():
    rng = np.random.default_rng(0)
    y = law(N8, D8) + rng.normal(0, 0.01, N8.size)
    fit = fit_vpnls(N8, D8, y, n_bootstrap=60, seed=1)
    split = optimal_allocation(fit, 1e22)
    assert split.n_draws == 60 and split.level == fit.level
    assert set(split.intervals) == {"n_params", "n_tokens", "tokens_per_param", "loss", "a", "b"}
    for name, value in (("n_params", split.n_params), ("n_tokens", split.n_tokens),
                        ("loss", split.loss), ("a", split.exponents["a"])):
        lo, hi = split.intervals[name]
        assert lo < value < hi, name
    # Independent truth: the closed form on each draw, by hand.
    alpha, beta = fit.draws["alpha"], fit.draws["beta"]
    a_draws = beta / (alpha + beta)
    assert split.intervals["a"] == pytest.approx(tuple(np.percentile(a_draws, [5, 95])))
    cost = optimal_allocation(fit, 1e22, flops_per_token=lambda n: 6 * n)
    assert cost.intervals["n_params"] == pytest.approx(split.intervals["n_params"], rel=1e-6)


def test_a_search_that_ends_at_its_bound_says_so():
    split = optimal_allocation(published(), 1e22, flops_per_token=lambda n: 6 * n,
                               n_bounds=(1e8, 1e9))
    assert split.n_params == pytest.approx(1e9, rel=1e-6)
    assert "bound" in split.warnings[0]


def test_approach_1_and_2_allocations_are_their_power_laws():
    flops = np.repeat([1e18, 1e19, 1e20, 1e21], 7)
    n = np.concatenate([np.geomspace(0.25, 4, 7) * 0.6 * c**0.4516 for c in (1e18, 1e19, 1e20,
                                                                               1e21)])
    y = law(n, flops / (6 * n))
    fit = fit_isoflop(flops, n, y, n_bootstrap=50, seed=0)
    split = optimal_allocation(fit, 1e22)
    assert split.convention == "fitted power laws"
    # The loss is the vertices' power law in C, L_opt = k_L C^-alpha_C.
    assert split.loss == pytest.approx(fit.params["k_l"] * 1e22 ** -fit.params["alpha_c"],
                                       rel=1e-12)
    assert split.intervals["loss"][0] <= split.loss <= split.intervals["loss"][1]
    assert split.n_params == pytest.approx(fit.predict(1e22)["n_params"], rel=1e-12)
    assert split.exponents == {"a": fit.params["a"], "b": fit.params["b"]}
    assert "n_params" in split.intervals and split.n_draws > 0
    with pytest.raises(FitError, match="flops_per_token applies to a parametric fit"):
        optimal_allocation(fit, 1e22, flops_per_token=lambda n: 6 * n)
    sizes = np.geomspace(1e7, 1e11, 41)
    c = np.geomspace(1e17, 1e23, 61)
    runs = np.repeat(np.arange(sizes.size), c.size)
    n_run = np.repeat(sizes, c.size)
    c_run = np.tile(c, sizes.size)
    env = fit_envelope(runs, n_run, c_run, law(n_run, c_run / (6 * n_run)), n_budgets=300)
    assert optimal_allocation(env, 1e22).n_params == pytest.approx(
        env.predict(1e22)["n_params"], rel=1e-12)


def test_bad_requests_are_refused():
    with pytest.raises(FitError, match="finite number > 0"):
        optimal_allocation(published(), -1.0)
    with pytest.raises(FitError, match="n_bounds"):
        optimal_allocation(published(), 1e21, flops_per_token=lambda n: 6 * n, n_bounds=(1e9, 1e8))
    with pytest.raises(FitError, match="exponents > 0"):
        bad = ParametricFit(params=CHINCHILLA | {"beta": -0.1}, residuals=np.empty(0),
                            objective=0.0, converged=True, n_points=0)
        optimal_allocation(bad, 1e21)
    with pytest.raises(FitError, match="must be finite and > 0"):
        optimal_allocation(published(), 1e21, flops_per_token=lambda n: -1.0)
