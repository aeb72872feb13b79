"""A real, tiny scaling study end to end: grid points as trials, records, re-centring, resume."""

import csv
import io
import logging

import pytest
from mlflow import MlflowClient

from sweep.kinds.scaling import shapes
from sweep.schema import (
    METRIC_BUDGET_FLOPS,
    METRIC_FLOPS_PER_TOKEN_TRAIN,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    METRIC_TOKENS,
    METRIC_TOKENS_PER_PARAM,
    SCALING_GRID_ARTIFACT,
    TrialState,
)
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.tracking import read_trials

STEP = 8 * 32  # batch_size x seq_len


def tiny(name, executor="optuna"):
    return parse_spec({
        "name": name,
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=200000",
        "model": {"vocab_size": 16, "seq_len": 32},
        "train": {"batch_size": 8, "lr": 1e-2, "eval_tokens": 1024},
        "search": {"executor": executor},
        "scaling": {"budgets": [1e9, 3e9], "sizes_per_budget": 3, "span": 2,
                    "rule": {"d_model": {"min": 16, "max": 64, "step": 8}, "n_layers": 1,
                             "d_head": 8}},
    })


def trials_of(summary):
    client = MlflowClient(summary.tracking_uri)
    parent = client.get_run(summary.parent_run_id)
    return client, read_trials(summary.tracking_uri, parent.info.experiment_id,
                               summary.parent_run_id)


def check_study(spec, summary):
    client, trials = trials_of(summary)
    # nothing dropped on this grid; the last note points to the analysis, and the plan's
    # warnings (as sweep validate gives them) come first: this tiny grid's smallest budget
    # cannot bracket its optimum, and its largest size there trains under 50 optimizer steps
    *warnings, last = summary.notes
    assert last == f"next: sweep analyze scaling {summary.out_dir} (the verdict and its notes)"
    assert [w.split(": ", 2)[1] for w in warnings] == ["C=1e+09", "C=1e+09"]
    assert "cannot bracket its optimum" in warnings[0]
    assert "fewer than 50 optimizer steps" in warnings[1]
    assert {k: v for k, v in summary.counts.items() if v} == {"COMPLETE": 6}
    assert [t["trial"] for t in trials] == list(range(6))
    labels = [t["params"][shapes.SCALING_POINT] for t in trials]
    assert len(set(labels)) == 6
    assert [label.split("/")[0] for label in labels] == ["C1e+09"] * 3 + ["C3e+09"] * 3
    for t in trials:
        m = t["metrics"]
        budget, shape = shapes.parse_label(spec, t["params"][shapes.SCALING_POINT])
        assert (t["params"]["model.d_model"], t["params"]["model.n_heads"]) == \
            (shape.d_model, shape.n_heads)
        assert t["params"]["scaling.d_head"] == 8 and t["params"]["scaling.n_layers"] == 1
        assert m[METRIC_BUDGET_FLOPS] == budget
        expected = int(budget / m[METRIC_FLOPS_PER_TOKEN_TRAIN] // STEP) * STEP
        assert m[METRIC_N_TOKENS] == expected == m[METRIC_TOKENS]  # trained to its budget
        assert m[METRIC_TOKENS_PER_PARAM] == pytest.approx(expected / m[METRIC_N_PARAMS])
    rows = list(csv.DictReader(io.StringIO(client.download_artifacts(
        summary.parent_run_id, SCALING_GRID_ARTIFACT, dst_path=str(summary.out_dir / "dl"))
        and (summary.out_dir / "dl" / SCALING_GRID_ARTIFACT).read_text())))
    assert [r["shape"] for r in rows if not r["dropped"]] == [lab.split("/")[1] for lab in labels]
    sources = {r["budget_flops"]: r["centre_source"] for r in rows}
    assert sources["1e+09"].startswith("prior: 20 tokens per parameter")
    assert sources["3e+09"] == "re-centred on the optimum of 1 earlier budget(s)"
    return trials


@pytest.fixture(scope="module")
def finished(tmp_path_factory, new_store):
    out = tmp_path_factory.mktemp("scaling")
    new_store(out)
    spec = tiny("tiny-scaling")
    return spec, out, run_study(spec, out_dir=out, quiet=True)


@pytest.mark.slow
def test_every_grid_point_trains_once_to_its_budget(finished):
    spec, _, summary = finished
    check_study(spec, summary)


@pytest.mark.slow
def test_rerun_of_a_finished_scaling_study_trains_nothing(finished):
    spec, out, first = finished
    _, before = trials_of(first)
    again = run_study(spec, out_dir=out, quiet=True)
    _, after = trials_of(again)
    assert {k: v for k, v in again.counts.items() if v} == {"COMPLETE": 6}
    assert [t["run_id"] for t in after] == [t["run_id"] for t in before]
    assert all(t["state"] is TrialState.COMPLETE for t in after)


@pytest.mark.slow
@pytest.mark.ray
def test_ray_executor_runs_the_same_grid(tmp_path, new_store):
    import ray

    new_store(tmp_path)
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level=logging.WARNING)
    try:
        spec = tiny("tiny-scaling-ray", executor="ray")
        check_study(spec, run_study(spec, out_dir=tmp_path, quiet=True))
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_analyze_prints_fits_and_the_shapes_to_train(finished, tmp_path):
    from typer.testing import CliRunner

    from sweep.cli import app

    _, out, _ = finished
    result = CliRunner().invoke(app, ["analyze", "scaling", str(out), "--approach", "3,vpnls",
                                      "--bootstrap", "20", "--budget", "1e11",
                                      "--out", str(tmp_path / "plots")], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = result.output
    assert "approach 3:" in text and "approach vpnls:" in text
    assert "recommended shapes (nearest to N_opt on the study's size rule)" in text
    assert "spec fragment for C=1e+11" in text and "tokens:" in text
    assert sorted(p.suffix for p in (tmp_path / "plots").iterdir()) == [".png"] * len(
        list((tmp_path / "plots").iterdir())) and any((tmp_path / "plots").iterdir())
