"""A resumed Ray scaling study trains an interrupted grid point as that trial's retry."""

from types import SimpleNamespace

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
    from sweep.executors.ray.search import _split_points
    from sweep.executors.ray.tuning import Held

    points = ({"scaling.point": "a"}, {"scaling.point": "b"}, {"scaling.point": "c"},
              {"scaling.point": "d"})
    trials = [held(0, "a", TrialState.COMPLETE), held(1, "b", TrialState.INTERRUPTED),
              held(2, "c", TrialState.INTERRUPTED), held(3, "c", TrialState.INTERRUPTED, 2),
              held(4, "d", TrialState.INTERRUPTED), held(5, "d", TrialState.INTERRUPTED, 4),
              held(6, "d", TrialState.INTERRUPTED, 5), held(7, "d", TrialState.INTERRUPTED, 6)]
    history = Held(trials, trials[:1], 8)

    def ctx(points, retry=True):
        return SimpleNamespace(spec=spec(retry), points=points)

    # b: its trial 1 retried; c: its retry (trial 3) was interrupted too and is retried in
    # turn; d: interrupted at its first try and at its 3 retries (trials 4 to 7), given up, so
    # a new trial
    to_retry, fresh = _split_points(ctx(points[1:]), history, 2)
    assert to_retry == [(1, {"scaling.point": "b"}), (3, {"scaling.point": "c"})]
    assert fresh == [{"scaling.point": "d"}]
    # without retries every point is a new trial; without points, the plain retries
    assert _split_points(ctx(points[1:], retry=False), history, 2) == ([], list(points[1:]))
    assert _split_points(ctx(()), history, 5) == ([(1, trials[1]["params"]),
                                                   (3, trials[3]["params"])], [])
