"""A study kind written and registered in this file alone runs through both executors.

``listed``: a spec section naming the points to train (values of the spec's own choices), each
trained once; a rerun trains none again. Nothing in the executors, the trial path or the driver
knows of it: it is a `sweep.kinds.StudyKind` registered with `sweep.kinds.register_kind`.
"""

import logging
import sys

import pytest
from pydantic import Field

from sweep.kinds import KindRun, StudyKind, kind_of, register_kind, unregister_kind
from sweep.kinds.common import run_points
from sweep.spec import Section, SpecError, parse_spec
from sweep.study import run_study
from sweep.tracking import find_study, read_trials

POINTS = [{"train.lr": 0.01}, {"train.lr": 0.003}]


class ListedPoints(Section):
    """``listed``: the trials to train, each a dict of values of the spec's choices."""

    points: list[dict[str, float]] = Field(min_length=1)


class ListedKind(StudyKind):
    """Trains exactly the points its section lists."""

    name = "listed"
    section = "listed"
    section_model = ListedPoints
    search_defaults = {"pruner": "none", "scheduler": "none"}
    trials_from = "the points of listed.points"

    def problems(self, spec):
        lr = spec.train["lr"]
        return [f"listed.points: {p} is not a choice of train.lr" for p in
                spec.section("listed").points if p["train.lr"] not in lr.options]

    def run(self, job: KindRun):
        return run_points(job, spec_points(job.ctx.spec)), []

    def point_key(self, spec, params):
        return float(params["train.lr"])


def spec_points(spec):
    return [dict(p) for p in spec.section("listed").points]


@pytest.fixture
def listed():
    kind = ListedKind()
    register_kind(kind)
    yield kind
    unregister_kind(kind)


def make_spec(executor, points=POINTS, **search):
    return parse_spec({
        "name": f"listed-{executor}",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=40000",
        "model": {"vocab_size": 16, "seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 2048, "batch_size": 4, "eval_every": 1024, "eval_tokens": 512,
                  "lr": {"choice": [0.001, 0.003, 0.01]}},
        "search": {"executor": executor, "sampler": "random", "parallel": 1, **search},
        "resources": {"cpus_per_trial": 1},
        "listed": {"points": points},
    })


def trained(summary):
    found = find_study(summary.tracking_uri, summary.name)
    return [(t["trial"], t["state"].value, t["params"]["train.lr"])
            for t in read_trials(summary.tracking_uri, *found)]


def test_the_kind_owns_its_section_and_rules(listed):
    spec = make_spec("optuna")
    assert kind_of(spec) is listed and spec.kind == listed
    assert (spec.search.pruner, spec.search.scheduler) == ("none", "none")
    assert spec.to_data()["listed"] == {"points": POINTS} and "n_trials" not in \
        spec.to_data()["search"]
    assert parse_spec(spec.to_data()) == spec
    with pytest.raises(SpecError, match="listed.points: .* is not a choice of train.lr"):
        make_spec("optuna", points=[{"train.lr": 0.5}])
    with pytest.raises(SpecError, match="search.n_trials: a listed study's trials are the points"):
        make_spec("optuna", n_trials=3)
    with pytest.raises(SpecError, match=r"listed.points: List should have at least 1 item"):
        make_spec("optuna", points=[])
    unregister_kind(listed)
    with pytest.raises(SpecError, match="listed: unknown key"):
        make_spec("optuna")


def test_it_runs_on_the_optuna_executor_and_resumes_without_training_again(listed, tmp_path,
                                                                          new_store):
    new_store(tmp_path)
    summary = run_study(make_spec("optuna"), out_dir=tmp_path, quiet=True)
    assert trained(summary) == [(0, "COMPLETE", 0.01), (1, "COMPLETE", 0.003)]
    again = run_study(make_spec("optuna"), out_dir=tmp_path, quiet=True)
    assert trained(again) == trained(summary)


@pytest.mark.ray
@pytest.mark.slow
def test_it_runs_on_the_ray_executor_and_resumes_without_training_again(listed, tmp_path,
                                                                       new_store):
    import ray
    from ray import cloudpickle

    new_store(tmp_path)
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level=logging.WARNING)
    # Ray's workers unpickle the spec, its section and its kind: ship this module's classes
    # with them, as a plug-in that is not installed on the workers would.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        summary = run_study(make_spec("ray"), out_dir=tmp_path, quiet=True)
        assert sorted(lr for _, _, lr in trained(summary)) == [0.003, 0.01]
        assert {state for _, state, _ in trained(summary)} == {"COMPLETE"}
        again = run_study(make_spec("ray"), out_dir=tmp_path, quiet=True)
        assert trained(again) == trained(summary)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        ray.shutdown()
