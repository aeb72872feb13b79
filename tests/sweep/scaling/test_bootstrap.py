import math

import numpy as np
import pytest

from sweep.scaling import FitError
from sweep.scaling.bootstrap import bootstrap_counts, percentile_intervals


def test_points_are_drawn_with_replacement():
    counts = bootstrap_counts(50, 400, 0)
    assert counts.shape == (400, 50) and (counts.sum(axis=1) == 50).all()
    # Each point's count is Binomial(50, 1/50): mean 1, variance 49/50.
    assert counts.mean() == pytest.approx(1.0, abs=1e-12)
    assert counts.var() == pytest.approx(49 / 50, rel=0.05)
    assert (bootstrap_counts(50, 400, 0) == counts).all()
    assert not (bootstrap_counts(50, 400, 1) == counts).all()


def test_groups_are_drawn_whole():
    groups = np.repeat(["a", "b", "c", "d"], [3, 5, 2, 6])
    counts = bootstrap_counts(groups.size, 300, 1, groups=groups)
    for label in "abcd":
        block = counts[:, groups == label]
        assert (block == block[:, :1]).all()  # every point of a group the same number of times
    times = np.column_stack([counts[:, groups == g][:, 0] for g in "abcd"])
    assert (times.sum(axis=1) == 4).all()  # 4 groups drawn from 4


def test_strata_keep_their_sizes():
    strata = np.repeat([0, 1, 2], [4, 7, 9])
    counts = bootstrap_counts(strata.size, 300, 2, strata=strata)
    for s in range(3):
        assert (counts[:, strata == s].sum(axis=1) == np.sum(strata == s)).all()


def test_percentile_interval_of_a_mean_is_the_normal_interval():
    # Independent truth: for the mean of n normal draws, the bootstrap percentile interval at
    # 90% is close to mean +- 1.645 s / sqrt(n).
    rng = np.random.default_rng(3)
    x = rng.normal(2.0, 1.0, 400)
    counts = bootstrap_counts(x.size, 4000, 4)
    means = counts @ x / x.size
    lo, hi = percentile_intervals({"mean": means}, 0.9)["mean"]
    half = 1.645 * x.std() / math.sqrt(x.size)
    assert lo == pytest.approx(x.mean() - half, abs=0.1 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.1 * half)


def test_percentile_intervals_skip_nan_draws():
    draws = {"a": np.array([1.0, 2.0, math.nan, 3.0, 4.0, 5.0]), "b": np.full(3, math.nan)}
    out = percentile_intervals(draws, 0.5)
    assert out == {"a": (2.0, 4.0)}


def test_bad_arguments_are_refused():
    with pytest.raises(FitError, match="not both"):
        bootstrap_counts(4, 2, 0, groups=[0, 0, 1, 1], strata=[0, 1, 0, 1])
    with pytest.raises(FitError, match="3 labels for 4 points"):
        bootstrap_counts(4, 2, 0, groups=[0, 0, 1])
    with pytest.raises(FitError, match="level"):
        percentile_intervals({"a": np.ones(3)}, 1.0)
