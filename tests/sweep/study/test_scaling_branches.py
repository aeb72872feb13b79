"""A scaling study with WSD branches: every grid point its own trial, trunks shared, exact."""

import pytest

from sweep import space
from sweep.data import load_corpus
from sweep.folder import StudyFolder
from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling import shapes
from sweep.schema import (
    METRIC_BRANCH_TOKENS,
    METRIC_BUDGET_FLOPS,
    METRIC_FINAL_VAL_LOSS,
    METRIC_TOKENS,
    TrialState,
)
from sweep.spec import SpecError, parse_spec
from sweep.study import run_study
from sweep.tracking import read_trials
from sweep.train import Trainer
from sweep.train.branches import stable_end_tokens

DATA = "synthetic:markov?order=1&vocab=16&seed=0&tokens=200000"


def branched(name, **train):
    return parse_spec(branched_data(name, **train))


def branched_data(name, **train):
    return ({
        "name": name,
        "data": DATA,
        "model": {"vocab_size": 16, "seq_len": 32},
        "train": {"batch_size": 8, "lr": 1e-2, "eval_tokens": 1024, "schedule": "wsd",
                  "warmup": 1024, "decay_fraction": 0.2, **train},
        "scaling": {"budgets": [1e9, 3e9, 9e9], "sizes_per_budget": 3, "span": 2,
                    "recentre": False, "branches": True,
                    "rule": {"d_model": {"min": 16, "max": 96, "step": 8}, "n_layers": 1,
                             "d_head": 8}},
    })


@pytest.fixture(scope="module")
def study(tmp_path_factory, new_store):
    out = tmp_path_factory.mktemp("branches")
    new_store(out)
    spec = branched("tiny-branches")
    summary = run_study(spec, out_dir=out, quiet=True)
    from mlflow import MlflowClient

    parent = MlflowClient(summary.tracking_uri).get_run(summary.parent_run_id)
    trials = read_trials(summary.tracking_uri, parent.info.experiment_id, summary.parent_run_id)
    return spec, out, summary, trials


def test_every_budget_is_its_own_point_and_trunks_are_shared(study):
    spec, out, summary, trials = study
    assert {k: v for k, v in summary.counts.items() if v} == {"COMPLETE": 9}
    by_shape = {}
    for t in trials:
        budget, shape = shapes.parse_label(spec, t["params"][shapes.SCALING_POINT])
        by_shape.setdefault(shape.label, []).append((budget, t))
    shared = {s: ts for s, ts in by_shape.items() if len(ts) > 1}
    assert shared, "the grid has no shape at two budgets; the test needs one"
    reused = 0
    for ts in by_shape.values():
        ts.sort(key=lambda bt: bt[0])
        first = ts[0][1]
        assert first["metrics"][METRIC_BRANCH_TOKENS] == 0  # smallest budget: from step 0
        for (_, prev), (_, t) in zip(ts, ts[1:], strict=False):
            model, train = space.configs_from_params(spec, {shapes.SCALING_POINT:
                                                            prev["params"][shapes.SCALING_POINT]})
            trainer = Trainer(model, train, load_corpus(DATA, out / "data"), device="cpu")
            assert t["metrics"][METRIC_BRANCH_TOKENS] == stable_end_tokens(trainer) > 0
            assert t["branch_from"] == prev["run_id"]
            reused += t["metrics"][METRIC_BRANCH_TOKENS]
            assert t["metrics"][METRIC_TOKENS] > t["metrics"][METRIC_BRANCH_TOKENS]
    total = sum(t["metrics"][METRIC_TOKENS] for t in trials)
    assert 0 < reused < total
    # sweep validate's grid foretold each trial's reuse exactly (no re-centring here)
    rows = grid.grid_rows(spec, grid.layout(spec))
    foretold = {(r[METRIC_BUDGET_FLOPS], r["shape"]): r[METRIC_BRANCH_TOKENS] for r in rows}
    seen = {}
    for t in trials:
        budget, shape = shapes.parse_label(spec, t["params"][shapes.SCALING_POINT])
        seen[(budget, shape.label)] = t["metrics"][METRIC_BRANCH_TOKENS]
    assert seen == foretold
    # one trunk checkpoint per shape, at the stable end of its largest budget
    assert len(list(StudyFolder(out).branches.iterdir())) == len(by_shape)
    assert all(len(list(d.iterdir())) == 1 for d in StudyFolder(out).branches.iterdir())


@pytest.mark.slow  # trains the largest branched point again from step 0: 3.6 s
def test_a_branched_point_equals_a_run_trained_alone(study):
    spec, out, _, trials = study
    late = [t for t in trials if t["metrics"][METRIC_BRANCH_TOKENS] > 0]
    t = max(late, key=lambda t: t["metrics"][METRIC_TOKENS])
    model, train = space.configs_from_params(spec, {shapes.SCALING_POINT:
                                                    t["params"][shapes.SCALING_POINT]})
    alone = Trainer(model, train, load_corpus(DATA, out / "data"), device="cpu").train()
    assert alone.state is TrialState.COMPLETE
    assert t["metrics"][METRIC_FINAL_VAL_LOSS] == alone.final_val_loss
    assert t["metrics"][METRIC_TOKENS] == alone.tokens


@pytest.mark.parametrize(("train", "message"), [
    ({"schedule": "cosine"}, "scaling.branches: needs train.schedule: wsd"),
    ({"warmup": 0.05}, "scaling.branches: needs train.warmup fixed in tokens"),
    ({"warmup": {"float": [100, 1000]}}, "scaling.branches: needs train.warmup fixed"),
])
def test_spec_refuses_branches_without_a_shared_stable_phase(train, message):
    with pytest.raises(SpecError, match=message):
        branched("bad-branches", **train)


def test_spec_refuses_trial_checkpoints_on_branched_points():
    data = branched_data("ckpt-branches")
    data["search"] = {"checkpoint_interval": 4096}
    with pytest.raises(SpecError, match="search.checkpoint_interval: a branched grid point"):
        parse_spec(data)


def test_validate_prints_each_trials_trunk_and_the_tokens_saved(tmp_path, monkeypatch):
    import yaml
    from typer.testing import CliRunner

    from sweep.cli import app

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "wsd.yaml"
    path.write_text(yaml.safe_dump(branched_data("wsd-validate")))
    result = CliRunner().invoke(app, ["validate", str(path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    spec = branched("wsd-validate")
    rows = grid.grid_rows(spec, grid.layout(spec))
    n = sum(1 for r in rows if r[METRIC_BRANCH_TOKENS])
    total = sum(r["n_tokens"] for r in rows)
    trained = total - sum(r[METRIC_BRANCH_TOKENS] for r in rows)
    assert all(f"{r[METRIC_BRANCH_TOKENS]:,}" in result.output for r in rows)
    assert (f"scaling.branches: {n} of 9 trials continue their shape's stable-phase trunk; "
            f"{trained:,} tokens trained instead of {total:,}") in result.output
    assert 0 < n < 9 and not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.ray
def test_ray_executor_shares_the_same_trunks(study, tmp_path, new_store):
    import logging

    import ray
    from mlflow import MlflowClient

    spec, _, _, trials = study
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level=logging.WARNING)
    try:
        ray_spec = parse_spec({**branched_data("tiny-branches-ray"),
                               "search": {"executor": "ray"}})
        new_store(tmp_path)
        summary = run_study(ray_spec, out_dir=tmp_path, quiet=True)
    finally:
        ray.shutdown()
    assert {k: v for k, v in summary.counts.items() if v} == {"COMPLETE": 9}
    parent = MlflowClient(summary.tracking_uri).get_run(summary.parent_run_id)
    on_ray = {t["params"][shapes.SCALING_POINT]: t for t in read_trials(
        summary.tracking_uri, parent.info.experiment_id, summary.parent_run_id)}
    assert sorted(on_ray) == sorted(t["params"][shapes.SCALING_POINT] for t in trials)
    for t in trials:
        r = on_ray[t["params"][shapes.SCALING_POINT]]
        assert r["metrics"][METRIC_BRANCH_TOKENS] == t["metrics"][METRIC_BRANCH_TOKENS]
        # Ray's workers may use another thread count: equal up to float summation order
        assert r["metrics"][METRIC_FINAL_VAL_LOSS] == pytest.approx(
            t["metrics"][METRIC_FINAL_VAL_LOSS], rel=1e-4)
    assert sum(1 for r in on_ray.values() if r["branch_from"]) == sum(
        1 for r in grid.grid_rows(spec, grid.layout(spec)) if r[METRIC_BRANCH_TOKENS])


def test_approach_1_keeps_only_cooled_down_ends_and_says_why_it_cannot_fit(study):
    from sweep.scaling import load_curves
    from sweep.scaling.report import analyze
    from sweep.scaling.runs import load_runs

    _, out, _, trials = study
    curves = load_curves(out)
    assert curves.groupby("run_id").size().max() == 1  # the final, cooled-down evaluation
    finals = {t["run_id"]: t["metrics"][METRIC_FINAL_VAL_LOSS] for t in trials}
    assert {r: v for r, v in zip(curves["run_id"], curves["val_loss"], strict=True)} == finals
    assert curves.attrs["excluded"]["wsd stable phase"] > 0
    report = analyze(load_runs(out), approaches=["1"], curves=curves)
    assert "stable-phase evaluations left out); use approaches 2, 3 or vpnls" in \
        report.results["1"].error
