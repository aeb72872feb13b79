"""The scaling figures: what each draws, and the PNG files the writer leaves."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from sweep import schema as S  # noqa: E402
from sweep.scaling.plots import (  # noqa: E402
    frontier_figure,
    isoflop_figure,
    parametric_figure,
    report_figures,
    residuals_figure,
    write_figures,
)
from sweep.scaling.report import analyze  # noqa: E402
from sweep.scaling.runs import LOSS  # noqa: E402

LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
BUDGETS = (1e18, 1e19, 1e20)


def points(noise=0.005):
    rows = [{S.METRIC_N_PARAMS: n, S.METRIC_N_TOKENS: c / (6 * n), S.METRIC_BUDGET_FLOPS: c}
            for c in BUDGETS for n in np.geomspace(2e7, 2e9, 7) * (c / 1e18) ** 0.45]
    frame = pd.DataFrame(rows)
    n, d = frame[S.METRIC_N_PARAMS], frame[S.METRIC_N_TOKENS]
    clean = LAW["E"] + LAW["A"] / n ** LAW["alpha"] + LAW["B"] / d ** LAW["beta"]
    frame[LOSS] = clean * np.exp(np.random.default_rng(0).normal(0, noise, len(frame)))
    return frame


@pytest.fixture(scope="module")
def report():
    return analyze(points(), approaches=("2", "3"), budgets=[1e22], n_bootstrap=50)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_isoflop_figure_draws_a_parabola_and_a_minimum_per_budget(report):
    fit = report.results["2"].fit
    fig = isoflop_figure(fit, report.points)
    (ax,) = fig.axes
    assert len(ax.lines) == len(BUDGETS)  # one parabola per budget
    stars = [c for c in ax.collections if len(c.get_offsets()) == 1]
    assert len(stars) == sum(math.isfinite(c.n_opt) for c in fit.curves)
    assert ax.get_xscale() == "log"


def test_frontier_figure_has_each_approach_its_band_and_the_target(report):
    fig = frontier_figure(report)
    for ax in fig.axes:  # N_opt and D_opt against C
        labels = [line.get_label() for line in ax.lines]
        assert sum(label.startswith("approach") for label in labels) == 2
        # a band for each fit with bootstrap draws (approach 3 has them)
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert report.results["3"].fit.draws
        assert len(bands) == sum(bool(r.fit.draws) for r in report.results.values())
        targets = [line for line in ax.lines if list(line.get_xdata()) == [1e22, 1e22]]
        assert len(targets) == 1
        assert ax.get_xlim()[1] >= 1e22
        # beyond the largest studied budget each line is dashed
        dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
        assert len(dashed) == 2
        assert all(min(line.get_xdata()) == pytest.approx(max(BUDGETS)) for line in dashed)
    left, right = fig.axes
    assert "N_opt" in left.get_ylabel() and "D_opt" in right.get_ylabel()


def test_parametric_figure_shows_loss_against_n_and_d(report):
    fig = parametric_figure(report.results["3"].fit, report.points)
    left, right = fig.axes
    assert "parameters" in left.get_xlabel() and "tokens" in right.get_xlabel()
    assert len(left.lines) == len(BUDGETS) == len(right.lines)
    # the fitted line along a budget passes near that budget's points
    line = left.lines[0]
    x, y = line.get_xdata(), line.get_ydata()
    first = report.points[report.points[S.METRIC_BUDGET_FLOPS] == BUDGETS[0]]
    assert np.interp(np.log(first[S.METRIC_N_PARAMS].iloc[3]), np.log(x), y) == \
        pytest.approx(first[LOSS].iloc[3], rel=0.02)


def test_residuals_figure_shows_log_loss_residuals_of_each_law_fit(report):
    fig = residuals_figure(report)
    left, right = fig.axes
    (dots,) = left.collections
    residuals = dots.get_offsets()[:, 1]
    fit = report.results["3"].fit  # approach 3 fits log loss: its own residuals are these
    np.testing.assert_allclose(residuals, fit.residuals, atol=1e-12)
    only_2 = analyze(points(), approaches=("2",))
    with pytest.raises(ValueError, match="no fit of L"):
        residuals_figure(only_2)


def test_write_figures_saves_non_empty_pngs(tmp_path):
    only_2 = analyze(points(), approaches=("2",), budgets=[1e22])  # three figures: cheaper
    paths = write_figures(only_2, tmp_path / "plots", dpi=50)
    names = sorted(p.name for p in paths)
    assert names == ["frontier.png", "isoflop_curves.png", "loss_vs_compute.png"]
    for path in paths:
        image = mpimg.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        assert image[..., :3].std() > 0  # not a blank canvas
    assert plt.get_fignums() == []  # the writer closed its figures


def test_a_report_without_fits_draws_only_its_runs():
    frame = points()[:3]  # too few points for either approach
    report = analyze(frame, approaches=("2", "3"))
    assert not any(r.ok for r in report.results.values())
    figures = report_figures(report)
    assert list(figures) == ["loss_vs_compute"]  # the runs, without a fitted frontier
    (ax, _colourbar) = figures["loss_vs_compute"].axes
    assert [line.get_label() for line in ax.lines] == ["lower envelope of the runs (convex hull)"]
