"""The approaches run on a points frame: published numbers back, failures kept per approach.

Independent truths: the Chinchilla law (Hoffmann et al. 2022, eq. 10) and its compute-optimal
split at C = 5.88e23 as given in ``shared/reference/cost_vectors.md`` (N_opt = 3.249e10,
D_opt = 3.016e12, a = 0.451613).
"""

import json
import math

import numpy as np
import pandas as pd
import pytest

from sweep import schema as S
from sweep.scaling import FitError
from sweep.scaling.approaches import APPROACHES, Approach, parse_approaches
from sweep.scaling.report import analyze, default_budgets, optimal_rows
from sweep.scaling.report_json import report_json
from sweep.scaling.runs import LOSS

LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
A_EXPONENT = LAW["beta"] / (LAW["alpha"] + LAW["beta"])  # 0.451613


def law(n, d):
    return LAW["E"] + LAW["A"] / n ** LAW["alpha"] + LAW["B"] / d ** LAW["beta"]


def n_star(c):
    """Hoffmann et al. 2022 eq. 4 with the law's numbers: N_opt = G (C/6)^a."""
    a, b = LAW["alpha"], LAW["beta"]
    g = (a * LAW["A"] / (b * LAW["B"])) ** (1 / (a + b))
    return g * (c / 6) ** (b / (a + b))


def isoflop_points(budgets=(1e18, 1e19, 1e20, 1e21), k=4, sizes=9, noise=0.0, seed=0):
    """Sizes log-spaced over [N*/k, N* k] around each budget's optimum, D = C / (6N)."""
    rows = [{S.METRIC_N_PARAMS: n, S.METRIC_N_TOKENS: c / (6 * n), S.METRIC_BUDGET_FLOPS: c}
            for c in budgets for n in n_star(c) * np.geomspace(1 / k, k, sizes)]
    frame = pd.DataFrame(rows)
    rng = np.random.default_rng(seed)
    frame[LOSS] = law(frame[S.METRIC_N_PARAMS], frame[S.METRIC_N_TOKENS]) * np.exp(
        rng.normal(0.0, noise, len(frame)))
    frame[S.METRIC_TRAIN_FLOPS] = 6 * frame[S.METRIC_N_PARAMS] * frame[S.METRIC_N_TOKENS]
    frame.attrs.update(source="made up", excluded={"FAILED": 2}, n_params_convention="total")
    return frame


@pytest.fixture(scope="module")
def exact():
    return analyze(isoflop_points(), approaches=("2", "3"), budgets=[5.88e23])


def test_approach_3_gives_the_published_law_and_its_split_back(exact):
    result = exact.results["3"]
    assert result.ok and result.error is None
    for name, value in LAW.items():
        assert result.params[name] == pytest.approx(value, rel=1e-3), name
    assert result.params["a"] == pytest.approx(A_EXPONENT, abs=1e-5)
    assert result.params["b"] == pytest.approx(1 - A_EXPONENT, abs=1e-5)
    (row,) = result.optimal
    assert row.budget_flops == 5.88e23 and row.extrapolated
    assert row.n_params == pytest.approx(3.249e10, rel=1e-3)
    assert row.n_tokens == pytest.approx(3.016e12, rel=1e-3)
    assert 6 * row.n_params * row.n_tokens == pytest.approx(5.88e23)
    assert row.loss == pytest.approx(law(row.n_params, row.n_tokens), rel=1e-4)


def test_approach_2_gives_the_allocation_exponent_on_a_centred_grid(exact):
    result = exact.results["2"]
    assert result.params["a"] == pytest.approx(A_EXPONENT, abs=1e-4)
    (row,) = result.optimal
    # On a centred grid each parabola's minimum is off by a constant factor (1.0132 at k = 4,
    # cost_vectors.md), so the extrapolated N_opt carries that factor too.
    assert row.n_params / n_star(5.88e23) == pytest.approx(1.0132, abs=2e-3)
    # approach 2's loss is the vertices' power law in C, L_opt = k_L C^-alpha_C (Kaplan's form,
    # no irreducible term): it matches the law's optima inside the budgets it saw and falls
    # below them beyond, where the law levels off towards E.
    fit = result.fit
    for c in (1e18, 1e21):
        n = n_star(c)
        inside = fit.params["k_l"] * c ** -fit.params["alpha_c"]
        assert inside == pytest.approx(law(n, c / (6 * n)), rel=0.02)
    n = n_star(5.88e23)
    assert row.loss < law(n, 5.88e23 / (6 * n))


def test_the_report_keeps_the_source_exclusions_and_conventions(exact):
    assert exact.source == "made up"
    assert exact.excluded == {"FAILED": 2}
    assert exact.n_params_convention == "total"
    assert exact.targets == [5.88e23] and exact.budgets == [5.88e23]
    assert exact.recommendations == []


def test_one_approach_that_cannot_fit_leaves_the_others(exact):
    points = isoflop_points()
    points[S.METRIC_BUDGET_FLOPS] = math.nan  # approach 2 needs budgets; approach 3 does not
    report = analyze(points, approaches=("2", "3"), budgets=[1e22])
    assert not report.results["2"].ok
    assert S.METRIC_BUDGET_FLOPS in report.results["2"].error
    assert report.results["3"].ok
    assert report.results["3"].params["alpha"] == pytest.approx(LAW["alpha"], rel=1e-3)


def test_bootstrap_draws_give_intervals_around_the_estimates():
    report = analyze(isoflop_points(noise=0.01), approaches=("3",), budgets=[1e22],
                     n_bootstrap=100, seed=1)
    result = report.results["3"]
    assert result.level == 0.9
    for name in ("E", "alpha", "beta", "a", "b"):
        lo, hi = result.intervals[name]
        assert lo < hi, name
    (row,) = result.optimal
    for name, value in ((S.METRIC_N_PARAMS, row.n_params), (S.METRIC_N_TOKENS, row.n_tokens),
                        (LOSS, row.loss)):
        lo, hi = row.intervals[name]
        assert lo < hi and lo <= value * 1.5 and hi >= value / 1.5, name
    # The interval of a comes from the same draws as alpha and beta: a = beta / (alpha + beta).
    fit = result.fit
    a_draws = fit.draws["beta"] / (fit.draws["alpha"] + fit.draws["beta"])
    assert result.intervals["a"][0] == pytest.approx(np.nanpercentile(a_draws, 5))
    assert not any("no intervals" in note for note in result.notes)


def test_optimal_rows_without_draws_have_no_intervals(exact):
    result = exact.results["3"]
    rows = optimal_rows(result.fit, [1e20, 1e21], largest=1e20)
    assert [r.extrapolated for r in rows] == [False, True]
    assert all(r.intervals == {} for r in rows)


def test_the_json_is_keyed_by_approach_with_the_parameters_at_top_level(exact):
    out = report_json(exact)
    text = json.dumps(out, allow_nan=False)  # nan became null
    assert set(json.loads(text)) == {"2", "3"}
    three = out["3"]
    assert {"E", "A", "B", "alpha", "beta", "a", "b", "intervals", "optimal"} <= set(three)
    assert three["flop_convention"] == "C = 6ND" and three["n_points"] == 36
    assert three["optimal"][0][S.METRIC_N_PARAMS] == pytest.approx(3.249e10, rel=1e-3)
    assert out["2"]["optimal"][0][LOSS] == pytest.approx(exact.results["2"].optimal[0].loss)
    points = isoflop_points()
    points[S.METRIC_BUDGET_FLOPS] = math.nan
    failed = report_json(analyze(points, approaches=("2",)))
    assert set(failed["2"]) == {"title", "error"}


def test_default_budgets_are_the_studys_own_or_decades_of_6nd():
    assert default_budgets(isoflop_points()) == [1e18, 1e19, 1e20, 1e21]
    points = isoflop_points()
    points[S.METRIC_BUDGET_FLOPS] = math.nan
    assert default_budgets(points) == [1e18, 1e19, 1e20, 1e21]
    report = analyze(isoflop_points(), approaches=("3",))
    assert report.targets == [] and len(report.results["3"].optimal) == 4


def test_approach_names_parse_and_unknown_ones_are_named():
    assert parse_approaches("all") == tuple(APPROACHES)
    assert parse_approaches("3, 2,3") == ("3", "2")
    with pytest.raises(ValueError, match="--approach 4, x: unknown; choose from 1, 2, 3, vpnls"):
        parse_approaches("4,x")
    with pytest.raises(ValueError, match="unknown approach"):
        analyze(isoflop_points(), approaches=("5",))
    for budget in (-1.0, math.nan, 0.0):
        with pytest.raises(ValueError, match="must be a finite number of FLOPs > 0"):
            analyze(isoflop_points(), approaches=("2",), budgets=[budget])


def test_an_approach_is_one_table_entry(monkeypatch):
    """A new approach runs through analyze, the JSON and the failure path with no other change."""
    base = APPROACHES["3"]

    def refuse(inputs):
        raise FitError("refused on purpose")

    monkeypatch.setitem(APPROACHES, "copy", Approach("copy", "a copy of 3", base.fit,
                                                     base.shown))
    monkeypatch.setitem(APPROACHES, "never", Approach("never", "always fails", refuse, ()))
    assert parse_approaches("copy,never") == ("copy", "never")
    out = report_json(analyze(isoflop_points(), approaches=("copy", "never"), budgets=[1e22]))
    assert out["copy"]["alpha"] == pytest.approx(LAW["alpha"], rel=1e-3)
    assert out["never"]["error"] == "refused on purpose"
