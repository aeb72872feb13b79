"""A resumed Ray scaling study trains an interrupted grid point as that trial's retry."""

import pytest

from sweep.schema import TrialState
from sweep.spec import parse_spec

pytest.importorskip("ray")


def held(trial, label, state, retry_of=None):
    return {"trial": trial, "state": state, "retry_of": retry_of,
            "params": {"scaling.point": label, "model.d_model": 32}}


def spec(retry=True):
    return parse_spec({
        "name": "points", "data": "synthetic:markov?order=1&vocab=16&tokens=60000",
        "model": {"vocab_size": 16, "seq_len": 32}, "train": {"batch_size": 8},
        "search": {"executor": "ray", "retry_interrupted": retry},
        "scaling": {"budgets": [1e9], "sizes_per_budget": 3, "span": 2, "recentre": False,
                    "rule": {"d_model": {"min": 16, "max": 96, "step": 8}, "n_layers": 1,
                             "d_head": 8}},
    })


def test_interrupted_points_are_retries_and_the_others_new_trials():
    from sweep.executors.ray.executor import _split_points

    points = ({"scaling.point": "a"}, {"scaling.point": "b"}, {"scaling.point": "c"})
    trials = [held(0, "a", TrialState.COMPLETE), held(1, "b", TrialState.INTERRUPTED),
              held(2, "c", TrialState.INTERRUPTED), held(3, "c", TrialState.INTERRUPTED, 2)]
    # b: its trial 1 retried; c: already retried once by trial 3 (interrupted too), so new
    to_retry, fresh = _split_points(spec(), trials, points[1:], 2)
    assert to_retry == [(1, {"scaling.point": "b"})]
    assert fresh == [{"scaling.point": "c"}]
    # without retries every point is a new trial; without points, the plain retries
    assert _split_points(spec(retry=False), trials, points[1:], 2) == ([], list(points[1:]))
    assert _split_points(spec(), trials, (), 5)[1] == []
