"""VPNLS's refits run together: the batched Nelder-Mead is scipy's, step for step, and the batched
objective is scipy's NNLS residual.

Independent truth: `scipy.optimize.minimize(method="Nelder-Mead")` and `scipy.optimize.nnls`
(through `sweep.scaling.vpnls._nnls`, the guard the single fit uses).
"""

import math

import numpy as np
import pytest
from scipy.optimize import minimize, rosen
from testsupport import CHINCHILLA, isoflop_frame

from sweep.scaling import vpnls
from sweep.scaling.nelder_mead import minimize_batched
from sweep.scaling.vpnls_rows import nnls_rss_rows


def _one_by_one(f):
    return lambda rows, x: np.array([f(v) for v in x])


def _walled(v):
    """A bowl with a wall of infinity and a strip of NaN, as an unsolvable design gives."""
    if v[0] > 2.5:
        return math.inf
    if -0.1 < v[1] < 0.0:
        return math.nan
    return float((v[0] - 1) ** 2 + 3 * (v[1] - 0.5) ** 2 + 0.1 * v[0] * v[1] + v[2] ** 4)


def _refused(v):
    """Infinite beyond 0.5, where a start's whole simplex shrinks to a point it never leaves."""
    return math.inf if v[0] > 0.5 else float((v[0] - 0.2) ** 2 + (v[1] + 1) ** 2)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # scipy's inf - inf
@pytest.mark.parametrize("tail_alone", [False, True])
@pytest.mark.parametrize(("f", "dim", "maxiter"), [(rosen, 2, 10_000), (rosen, 2, 25),
                                                   (_walled, 3, 1_000),
                                                   (_refused, 2, 2_000)])
def test_the_batched_nelder_mead_takes_scipys_steps(f, dim, maxiter, tail_alone):
    starts = np.random.default_rng(0).normal(0, 2, (12, dim))
    starts[0] = 0.0  # scipy's start simplex moves a 0 by 0.00025, not 5%
    options = {"xatol": 1e-10, "fatol": 1e-15, "maxiter": maxiter}
    # the last TAIL problems finished by scipy from their simplexes, or batched to the end
    one = (lambda r: f) if tail_alone else None
    got = minimize_batched(_one_by_one(f), starts, **options, one=one)
    for k, start in enumerate(starts):
        ref = minimize(f, start, method="Nelder-Mead", options=options)
        np.testing.assert_array_equal(got.x[k], ref.x)
        assert (got.fun[k], got.nit[k], got.success[k]) == (ref.fun, ref.nit, ref.success), k


def _nan_beside(v):
    """NaN right of 1.02: the start simplex of (1, 1) holds a NaN vertex beside finite ones."""
    return math.nan if v[0] > 1.02 else float(v[0] ** 2 + v[1] ** 2)


@pytest.mark.parametrize("maxiter", [1, 2, 3])
def test_a_simplex_stopped_beside_a_nan_vertex_gives_the_value_scipy_gives(maxiter):
    """scipy's ``fun`` is ``np.min`` of the last simplex's values: NaN while a vertex is NaN."""
    options = {"xatol": 1e-10, "fatol": 1e-15, "maxiter": maxiter}
    starts = np.array([[1.0, 1.0], [0.5, -0.5]])
    got = minimize_batched(_one_by_one(_nan_beside), starts, **options)
    for k, start in enumerate(starts):
        ref = minimize(_nan_beside, start, method="Nelder-Mead", options=options)
        np.testing.assert_array_equal(got.x[k], ref.x)
        np.testing.assert_array_equal(got.fun[k], ref.fun)  # NaN equal to NaN
        assert (got.nit[k], got.success[k]) == (ref.nit, ref.success), k


def test_the_batched_objective_is_scipys_nnls_and_refuses_what_the_guard_refuses():
    frame = isoflop_frame(dict(CHINCHILLA, alpha=0.25, beta=0.5), noise=0.01, seed=1)
    n, d, y = (frame[c].to_numpy(float) for c in ("n_params", "n_tokens", "loss"))
    log_n, log_d = np.log(n), np.log(d)
    rng = np.random.default_rng(0)
    alpha, beta = rng.uniform(-1, 2, 300), rng.uniform(-1, 2, 300)
    alpha[:3] = (-40.0, 1e-9, 0.0)  # N^40 overflows; N^0 is the constant column again
    weights = rng.integers(0, 3, (300, n.size)).astype(float)
    got = nnls_rss_rows(alpha, beta, log_n, log_d, y, weights)
    refused = 0
    for k, w in enumerate(weights):
        kept = w > 0
        ref, _ = vpnls._nnls(alpha[k], beta[k], log_n[kept], log_d[kept], y[kept],
                             np.sqrt(w[kept]))
        if math.isinf(ref):
            refused += 1
            assert math.isinf(got[k]), k
        else:
            assert got[k] == pytest.approx(ref, rel=1e-10), k
    assert refused >= 2


def test_a_bootstrap_makes_one_scipy_search_and_a_few_hundred_batched_evaluations(monkeypatch):
    frame = isoflop_frame(dict(CHINCHILLA, alpha=0.25, beta=0.5), noise=0.01, seed=2)
    searches, evaluations = [], []
    real_minimize = vpnls.minimize

    def counted_minimize(*args, **kwargs):
        searches.append(1)
        return real_minimize(*args, **kwargs)

    def counted_rows(starts, log_n, log_d, y, weights, options, one):
        evaluations.append(0)
        from sweep.scaling import vpnls_rows

        def objective(rows, x):
            evaluations[-1] += 1
            return nnls_rss_rows(x[:, 0], x[:, 1], log_n, log_d, y, weights[rows])

        return vpnls_rows.minimize_batched(objective, starts, xatol=options["xatol"],
                                           fatol=options["fatol"], maxiter=options["maxiter"],
                                           one=one)

    monkeypatch.setattr(vpnls, "minimize", counted_minimize)
    monkeypatch.setattr(vpnls, "refine_rows", counted_rows)
    fit = vpnls.fit_vpnls(frame.n_params, frame.n_tokens, frame.loss, n_bootstrap=100, seed=2)
    assert np.isfinite(fit.draws["alpha"]).sum() == 100
    # The single fit's search, then the 100 refits' searches together: one call per step for
    # every refit taking it, instead of some 12,000 calls of one refit each.
    assert searches == [1] and len(evaluations) == 1 and 100 < evaluations[0] < 1_000
    assert fit.settings["bootstrap_failed"] == {"degenerate": 0, "not_converged": 0}
