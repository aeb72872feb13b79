"""An adaptive scaling study's driver: rounds placed by the fits, reasons recorded, resumed alike.

The executor here is a stand-in that "trains" each queued point at once with the law's loss
(Chinchilla's, with a noise draw seeded by the point's label, so a point gives one loss however
often it is asked): the driver's round logic runs in full, in a second, without MLflow.
"""

import dataclasses
import math
import random
from pathlib import Path

import pytest

from sweep.kinds.base import KindRun
from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling.adaptive import FIRST_ROUND, round_cost, settings_of
from sweep.kinds.scaling.adaptive_driver import run_adaptive
from sweep.kinds.scaling.shapes import (
    ADAPTIVE_BUDGET,
    ADAPTIVE_REPLICATE,
    ADAPTIVE_SHAPE,
    SCALING_POINT,
    adaptive_label,
    adaptive_point,
    shapes,
)
from sweep.schema import (
    METRIC_ADAPTIVE_SPENT_FLOPS,
    METRIC_FINAL_VAL_LOSS,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    TAG_ADAPTIVE_STOP,
    TAG_ADAPTIVE_WHY,
    TrialState,
)
from sweep.simulate.law import LAWS
from sweep.space import configs_from_params, suggest
from sweep.spec import parse_spec
from sweep_models.cost import param_count

LAW = LAWS["chinchilla"]


def adaptive_spec(name="adaptive", noise=0.01, **adaptive):
    """A tiny simulated scaling study with ``scaling.adaptive`` (as the slow test runs it)."""
    return parse_spec({
        "name": name,
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=200000",
        "model": {"vocab_size": 16, "seq_len": 32},
        "train": {"batch_size": 8, "lr": 1e-2, "eval_tokens": 256, "eval_every": 10**9,
                  "seed": 5},
        "search": {"executor": "optuna", "seed": 3},
        "scaling": {"budgets": [1e9, 3e9], "span": 3,
                    "rule": {"d_model": {"min": 8, "max": 256, "step": 8}, "n_layers": 1,
                             "d_head": 8},
                    "adaptive": {"target_flops": 1e11, "allowance_flops": 1e11,
                                 "n_bootstrap": 8, **adaptive}},
        "simulate": {"law": "chinchilla", "noise": noise, "seed": 0},
    })


class Killed(Exception):
    """The stand-in executor stopped as a killed process would."""


class Store:
    """The study's trials and what the driver writes to its runs (`TrialContext`'s part)."""

    def __init__(self):
        self.trials, self.trial_tags, self.parent_tags, self.parent_metrics = [], {}, {}, {}
        self.texts = {}

    def read_trials(self):
        return [dict(t) for t in self.trials]

    def set_trial_tags(self, tags):
        for run_id, run_tags in tags.items():
            self.trial_tags.setdefault(run_id, {}).update(run_tags)

    def set_parent_tags(self, tags):
        self.parent_tags.update(tags)

    def log_parent_metrics(self, metrics):
        self.parent_metrics.update(metrics)

    def log_parent_text(self, text, artifact):
        self.texts[artifact] = text


@dataclasses.dataclass(frozen=True)
class Ctx:
    spec: object
    tracking: Store
    out_dir: Path = Path("unused")
    device: str | None = None
    points: tuple = ()


class LawExecutor:
    """Trains each queued point with the law's loss (or ``losses[label]``, a study's own);
    raises `Killed` after ``kill_after`` trials."""

    def __init__(self, noise, kill_after=None, losses=None):
        self.noise, self.kill_after, self.asked, self.losses = noise, kill_after, [], losses

    def run(self, ctx, n_trials, view, *, address=None):
        spec, store = ctx.spec, ctx.tracking
        for point in ctx.points:
            if self.kill_after is not None and len(store.trials) >= self.kill_after:
                raise Killed
            model, train = configs_from_params(spec, point)
            n = float(param_count(model))
            metrics, params = spec.kind.trial_records(spec, model, train, {METRIC_N_PARAMS: n})
            label = params[SCALING_POINT]
            loss = self.losses[label] if self.losses is not None else \
                LAW.loss(n, metrics[METRIC_N_TOKENS]) * math.exp(
                    self.noise * random.Random(label).gauss(0, 1))
            self.asked.append(label)
            number = len(store.trials)
            store.trials.append({"trial": number, "run_id": f"run-{number}",
                                 "state": TrialState.COMPLETE, "params": {**point, **params},
                                 "metrics": {METRIC_FINAL_VAL_LOSS: loss}})
        return "study"


def run(spec, store, executor):
    job = KindRun(executor=executor, ctx=Ctx(spec, store), view=None)
    return run_adaptive(job, None)


def labels(store):
    return [t["params"][SCALING_POINT] for t in store.trials]


def test_rounds_follow_the_fits_and_every_trial_says_why():
    spec = adaptive_spec()
    store = Store()
    _, layouts, stop = run(spec, store, LawExecutor(0.01))
    settings = settings_of(spec)
    whys = [store.trial_tags[t["run_id"]][TAG_ADAPTIVE_WHY] for t in store.trials]
    assert len(whys) == len(store.trials) == sum(len(lay.points) for lay in layouts)
    assert all(w.endswith(FIRST_ROUND) for w in whys[:6])
    assert whys[0].startswith("round 1: C=1e+09") and whys[3].startswith("round 1: C=3e+09")
    assert whys[6].startswith("round 2: C=9e+09")
    assert any("new budget: extrapolation dominates" in w for w in whys[6:])
    assert [lay.budget_flops for lay in layouts][:3] == [1e9, 3e9, 9e9]  # growth 3
    assert len(set(labels(store))) == len(store.trials)  # a replicate is its own point
    spent = sum(round_cost(lay) for lay in layouts)
    assert store.parent_metrics[METRIC_ADAPTIVE_SPENT_FLOPS] == pytest.approx(spent)
    assert spent <= settings.allowance_flops
    assert store.parent_tags[TAG_ADAPTIVE_STOP] == stop
    assert stop.startswith(("interval reached", "allowance spent"))


def test_a_spent_allowance_stops_the_study_and_says_so():
    spec = adaptive_spec(allowance_flops=2.5e10, target_rel_ci=1.01)
    store = Store()
    _, layouts, stop = run(spec, store, LawExecutor(0.01))
    assert stop.startswith("allowance spent:")
    spent = sum(round_cost(lay) for lay in layouts)
    # Not even a replicate of the largest budget (3 sizes of about its FLOPs each) fits.
    assert spent <= 2.5e10 < spent + 3 * max(lay.budget_flops for lay in layouts)
    assert len(layouts) >= 3  # the allowance bought more than the first round


def test_a_killed_study_resumed_places_the_same_rounds_and_trains_no_point_twice():
    spec = adaptive_spec()
    whole = Store()
    run(spec, whole, LawExecutor(0.01))
    store = Store()
    with pytest.raises(Killed):
        run(spec, store, LawExecutor(0.01, kill_after=8))  # in round 3
    assert len(store.trials) == 8
    again = LawExecutor(0.01)
    _, _, stop = run(spec, store, again)
    assert labels(store) == labels(whole)
    assert again.asked == labels(whole)[8:]
    assert stop == whole.parent_tags[TAG_ADAPTIVE_STOP]
    assert [store.trial_tags[t["run_id"]] for t in store.trials] == \
        [whole.trial_tags[t["run_id"]] for t in whole.trials]


def test_a_replicate_trains_with_the_next_seeds_and_is_labelled_apart():
    spec = adaptive_spec()
    shape = shapes(spec)[3]
    point = adaptive_point(3e9, shape, 2)
    model, train = configs_from_params(spec, point)
    assert (train.seed, train.flops, model.d_model) == (7, 3e9, shape.d_model)
    _, params = spec.kind.trial_records(spec, model, train, {METRIC_N_PARAMS: 1.0})
    assert params[SCALING_POINT] == f"C3e+09/{shape.label}/r2"
    assert spec.kind.point_key(spec, point) == params[SCALING_POINT]
    assert spec.kind.point_key(spec, params) == params[SCALING_POINT]
    # Sampled define-by-run (the executors' path), the spec's fixed train.seed gives way too.
    import optuna

    _, sampled = suggest(optuna.trial.FixedTrial(point), spec)
    assert sampled.seed == 7
    with pytest.raises(Exception, match="not a shape of this study's family"):
        configs_from_params(spec, {**point, ADAPTIVE_SHAPE: "d9-L1-h1-ff9"})
    with pytest.raises(Exception, match="off"):
        configs_from_params(spec, {**point, ADAPTIVE_BUDGET: 1e3})
    with pytest.raises(Exception, match="missing"):
        configs_from_params(spec, {k: v for k, v in point.items() if k != ADAPTIVE_REPLICATE})


def test_the_defaults_aim_at_100x_the_largest_budget_with_the_fixed_grids_compute():
    spec = parse_spec({**adaptive_spec().to_data(), "scaling": {
        **adaptive_spec().to_data()["scaling"], "adaptive": {}}})
    settings = settings_of(spec)
    fixed = sum(round_cost(lay) for lay in grid.layout(spec))
    assert settings.target_flops == 3e11 and settings.allowance_flops == pytest.approx(fixed)
    # Each fixed-grid point trains whole steps of its budget: a little under 7 x the budgets.
    assert 0.9 * 7 * 4e9 < settings.allowance_flops <= 7 * 4e9
    assert (settings.target_rel_ci, settings.sizes, settings.growth, settings.n_bootstrap,
            settings.span) == (1.5, 3, 3.0, 16, None)


@pytest.mark.slow
def test_a_study_killed_after_its_first_round_resumes_with_the_same_rounds(tmp_path, new_store):
    """Through the real executor and MLflow (losses drawn by the simulate: source)."""
    import signal
    import time

    import yaml
    from testsupport import journal_trials, start_study

    from sweep.study import run_study
    from sweep.tracking import find_study, read_trials

    out = tmp_path / "out"
    uri = new_store(out)
    spec = adaptive_spec("adaptive-kill")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec.to_data()))
    first = start_study(tmp_path, path)
    deadline = time.monotonic() + 300
    while sum(t.state.name == "COMPLETE" for t in journal_trials(out, spec.name)) < 6:
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    # Read from the journal: the killed process may leave the MLflow file a hot journal that
    # only a writer (the resume) rolls back.
    before = {adaptive_label(t.params): t.number for t in journal_trials(out, spec.name)
              if t.state.name == "COMPLETE"}
    assert len(before) >= 6

    summary = run_study(spec, out_dir=out, quiet=True)
    trials = read_trials(uri, *find_study(uri, spec.name))
    done = [t for t in trials if t["state"] is TrialState.COMPLETE]
    done_labels = [t["params"][SCALING_POINT] for t in done]
    assert len(set(done_labels)) == len(done_labels)  # no point trained twice
    assert {t["params"][SCALING_POINT]: t["trial"] for t in done}.items() >= before.items()
    assert len(trials) - len(done) == sum(t["state"] is TrialState.INTERRUPTED
                                          for t in trials) <= 1
    # The rounds are those the finished trials determine: the driver replaying this study's
    # own losses places exactly these points and stops for the same reason.
    replay = Store()
    _, _, stop = run(spec, replay, LawExecutor(0, losses={
        t["params"][SCALING_POINT]: t["metrics"][METRIC_FINAL_VAL_LOSS] for t in done}))
    assert sorted(labels(replay)) == sorted(done_labels) and len(done_labels) > 6
    from mlflow import MlflowClient

    parent = MlflowClient(uri).get_run(summary.parent_run_id)
    assert parent.data.tags[TAG_ADAPTIVE_STOP] == stop
    assert all(TAG_ADAPTIVE_WHY in MlflowClient(uri).get_run(t["run_id"]).data.tags
               for t in done)
    run_study(spec, out_dir=out, quiet=True)  # once more: nothing left to train
    assert len(read_trials(uri, *find_study(uri, spec.name))) == len(trials)
