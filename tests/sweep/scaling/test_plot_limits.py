"""Every scaling figure's axis limits hold its data and are not stretched by a flagged point.

Synthetic points from a known law L = E + A / N^alpha + B / D^beta at sizes 1e6-1e8, and one
budget whose losses trace a parabola in log N with its vertex at N = 4 (an extrapolated,
flagged minimum, as a grid far above the optimum gives): the figures must frame the data,
within a small margin, and draw that minimum at the edge.
"""

import copy
import dataclasses
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from sweep import schema as S  # noqa: E402
from sweep.scaling.plot_axes import MARGIN, linear_limits, log_limits  # noqa: E402
from sweep.scaling.plots import contour_figure, frontier_figure, report_figures  # noqa: E402
from sweep.scaling.report import analyze  # noqa: E402
from sweep.scaling.runs import LOSS  # noqa: E402
from sweep.scaling.verdict import make_verdict  # noqa: E402

LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
SIZES = np.geomspace(1e6, 1e8, 7)
LAW_BUDGETS = (1e16, 1e17, 3e17)
FLAGGED_BUDGET = 3e15
VERTEX_N = 4.0
TARGET = 3e18  # 10x the largest budget: inside every figure's frame
SLACK = 2.5 * MARGIN  # the most an axis may reach beyond its data, as a share of the range


def points(flagged=True):
    budgets = (FLAGGED_BUDGET, *LAW_BUDGETS) if flagged else LAW_BUDGETS
    rows = [{S.METRIC_N_PARAMS: n, S.METRIC_N_TOKENS: c / (6 * n), S.METRIC_BUDGET_FLOPS: c}
            for c in budgets for n in SIZES]
    frame = pd.DataFrame(rows)
    n, d = frame[S.METRIC_N_PARAMS], frame[S.METRIC_N_TOKENS]
    clean = LAW["E"] + LAW["A"] / n ** LAW["alpha"] + LAW["B"] / d ** LAW["beta"]
    frame[LOSS] = clean * np.exp(np.random.default_rng(0).normal(0, 0.005, len(frame)))
    off = frame[S.METRIC_BUDGET_FLOPS] == FLAGGED_BUDGET
    frame.loc[off, LOSS] = 3.0 + 0.004 * (np.log(n[off]) - math.log(VERTEX_N)) ** 2
    return frame


def _concluded(report):
    """The report with its verdict (the diagnostics' refits are not needed to draw it)."""
    report.verdict, _ = make_verdict(report, [])
    return report


@pytest.fixture(scope="module")
def report():
    """Approach 2 with its bootstrap on the points with the flagged budget."""
    return _concluded(analyze(points(), approaches=("2",), budgets=[TARGET], n_bootstrap=50))


@pytest.fixture(scope="module")
def law_report():
    """Approaches 2 and 3 on the law's budgets alone: the verdict is approach 3's."""
    return _concluded(analyze(points(flagged=False), approaches=("2", "3"), budgets=[TARGET]))


@pytest.fixture(scope="module")
def figures(report, law_report):
    drawn = {"flagged": report_figures(report), "law": report_figures(law_report)}
    yield drawn
    plt.close("all")


def _holds(limits, values, log):
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    lo, hi = sorted(limits)
    assert lo <= values.min() and values.max() <= hi, (limits, values.min(), values.max())
    if log:
        lo, hi, values = math.log10(lo), math.log10(hi), np.log10(values)
    reach = SLACK * (values.max() - values.min())
    assert lo >= values.min() - reach and hi <= values.max() + reach, (limits, reach)


def test_the_fixture_has_one_flagged_minimum_near_n_4(report):
    curves = {c.budget_flops: c for c in report.results["2"].fit.curves}
    assert not curves[FLAGGED_BUDGET].usable
    assert curves[FLAGGED_BUDGET].n_opt == pytest.approx(VERTEX_N, rel=1e-3)
    assert all(curves[c].usable for c in LAW_BUDGETS)
    assert report.verdict.approach == "2"


def test_the_isoflop_curves_frame_the_points_and_put_the_flagged_minimum_at_the_edge(
        report, figures):
    (ax,) = figures["flagged"]["isoflop_curves"].axes
    frame = report.points
    _holds(ax.get_xlim(), frame[S.METRIC_N_PARAMS], log=True)
    usable = [c.loss_opt for c in report.results["2"].fit.curves if c.usable]
    _holds(ax.get_ylim(), np.append(frame[LOSS], usable), log=False)
    (note,) = [t for t in ax.texts if "flagged" in t.get_text()]
    assert note.xy[0] == pytest.approx(ax.get_xlim()[0])  # on the left edge, not at N = 4
    assert f"({VERTEX_N:.3g}," in note.get_text()


def test_each_report_draws_the_figures_its_fits_allow(figures):
    assert sorted(figures["law"]) == ["frontier", "isoflop_curves", "loss_contours",
                                      "loss_vs_compute", "loss_vs_n_and_d_3", "residuals"]
    # approach 2 alone: no L(N, D) to draw contours, a law or residuals of
    assert sorted(figures["flagged"]) == ["frontier", "isoflop_curves", "loss_vs_compute"]


def _frontier_values(report, metric):
    curves = [c for c in report.results["2"].fit.curves if c.usable]
    rows = report.verdict.rows
    if metric == S.METRIC_N_PARAMS:
        values = [c.n_opt for c in curves] + [r.n_params for r in rows]
    else:
        values = [c.budget_flops / (6 * c.n_opt) for c in curves] + [r.n_tokens for r in rows]
    return values + [v for r in rows for v in r.intervals.get(metric, ())]


@pytest.mark.parametrize("which", ["flagged", "law"])
def test_the_frontier_panels_hold_the_minima_the_targets_and_the_verdict(
        which, report, law_report, figures):
    chosen = report if which == "flagged" else law_report
    left, right = figures[which]["frontier"].axes
    for ax, metric in ((left, S.METRIC_N_PARAMS), (right, S.METRIC_N_TOKENS)):
        _holds(ax.get_xlim(), [chosen.points[S.METRIC_BUDGET_FLOPS].min(), TARGET], log=True)
        lo, hi = ax.get_ylim()
        values = _frontier_values(chosen, metric)
        assert lo <= min(values) and hi >= max(values)
        assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == \
            [TARGET]
    assert any(t.startswith("verdict") for t in left.get_legend_handles_labels()[1])


def test_the_flagged_minimum_does_not_stretch_the_frontier(figures):
    left, right = figures["flagged"]["frontier"].axes
    # N_opt = 4 is marked at the lower edge of a frame that stays near the data (1e6-1e8)
    assert left.get_ylim()[0] > 1e5
    (note,) = [t for t in left.texts if "flagged N_opt" in t.get_text()]
    assert note.xy[1] == pytest.approx(left.get_ylim()[0])
    # its D_opt = C / (6 x 4) lies above the D_opt panel's frame: marked at its top edge
    (note,) = [t for t in right.texts if "flagged D_opt" in t.get_text()]
    assert note.xy[1] == pytest.approx(right.get_ylim()[1])


@pytest.mark.parametrize("which", ["flagged", "law"])
def test_loss_against_compute_frames_every_run(which, report, law_report, figures):
    chosen = report if which == "flagged" else law_report
    (ax, _colourbar) = figures[which]["loss_vs_compute"].axes
    frame = chosen.points
    compute = 6 * frame[S.METRIC_N_PARAMS] * frame[S.METRIC_N_TOKENS]
    _holds(ax.get_xlim(), np.append(compute, TARGET), log=True)
    assert ax.get_ylim()[0] <= frame[LOSS].min() and ax.get_ylim()[1] >= frame[LOSS].max()
    (steps,) = [line for line in ax.lines if line.get_label().startswith("lower envelope")]
    assert np.all(np.diff(steps.get_ydata()) < 0)  # each run on it lowers the loss
    assert steps.get_ydata()[-1] == pytest.approx(frame[LOSS].min())
    # no run lies below it: it is the lower envelope (convex hull) of the runs
    x, y = np.log(steps.get_xdata()), steps.get_ydata()
    within = (np.log(compute) >= x[0]) & (np.log(compute) <= x[-1])
    below = frame[LOSS][within] < np.interp(np.log(compute[within]), x, y) - 1e-12
    assert not below.any()


def test_the_contours_frame_the_points_and_the_target(law_report, figures):
    (ax, _colourbar) = figures["law"]["loss_contours"].axes
    frame = law_report.points
    (row,) = law_report.verdict.rows
    assert law_report.verdict.approach == "3"
    _holds(ax.get_xlim(), np.append(frame[S.METRIC_N_PARAMS], row.n_params), log=True)
    _holds(ax.get_ylim(), np.append(frame[S.METRIC_N_TOKENS], row.n_tokens), log=True)
    assert any("efficient frontier" in line.get_label() for line in ax.lines)


def test_the_law_and_residual_figures_hold_their_points(law_report, figures):
    frame = law_report.points
    left, right = figures["law"]["loss_vs_n_and_d_3"].axes
    for ax, column in ((left, S.METRIC_N_PARAMS), (right, S.METRIC_N_TOKENS)):
        lo, hi = ax.get_xlim()
        assert lo <= frame[column].min() and hi >= frame[column].max()
        assert ax.get_ylim()[0] <= frame[LOSS].min() <= frame[LOSS].max() <= ax.get_ylim()[1]
    for ax, column in zip(figures["law"]["residuals"].axes,
                          (S.METRIC_N_PARAMS, S.METRIC_N_TOKENS), strict=True):
        assert ax.get_xlim()[0] <= frame[column].min()
        assert ax.get_xlim()[1] >= frame[column].max()


def test_a_verdict_interval_that_misses_its_estimate_is_still_drawn(law_report):
    # noiseless points give bootstrap intervals that can sit beside the full fit's estimate
    (row,) = law_report.verdict.rows
    beside = {k: (v * 1.01, v * 1.02) for k, v in
              ((S.METRIC_N_PARAMS, row.n_params), (S.METRIC_N_TOKENS, row.n_tokens))}
    report = copy.copy(law_report)
    report.verdict = dataclasses.replace(
        law_report.verdict, rows=[dataclasses.replace(row, intervals=beside)])
    left, right = frontier_figure(report).axes
    assert left.get_ylim()[1] >= beside[S.METRIC_N_PARAMS][1]
    assert right.get_ylim()[1] >= beside[S.METRIC_N_TOKENS][1]


def test_no_contours_of_a_law_without_a_frontier(law_report):
    report = copy.copy(law_report)
    fit = law_report.results["3"].fit
    bad = dataclasses.replace(fit, params={**fit.params, "beta": -0.01})
    report.results = {**law_report.results,
                      "3": dataclasses.replace(law_report.results["3"], fit=bad)}
    with pytest.raises(ValueError, match="beta=-0.01"):
        contour_figure(report)


def test_limits_widen_the_data_range_by_the_margin_and_ignore_what_cannot_be_drawn():
    lo, hi = log_limits([1e6, 1e8, math.nan, -1.0, 0.0])
    assert math.log10(lo) == pytest.approx(6 - 2 * MARGIN)
    assert math.log10(hi) == pytest.approx(8 + 2 * MARGIN)
    assert linear_limits([2.0, 3.0], 2.5) == pytest.approx((2 - MARGIN, 3 + MARGIN))
    with pytest.raises(ValueError, match="no finite"):
        log_limits([0.0, math.nan])
