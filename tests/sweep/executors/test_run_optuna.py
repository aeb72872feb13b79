"""End to end: `sweep run` with the Optuna executor on tiny models and budgets (CPU)."""

import math

import optuna
import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from sweep.cli import app
from sweep.executors.optuna import make_storage
from sweep.results import load_results
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.study import trial as objective

DATA = "synthetic:markov?order=1&vocab=16&seed=0&tokens=60000"
SCHEMA_METRICS = {
    "n_params", "n_params_non_embedding", "flops_per_token", "flops_per_token_dense",
    "train_flops", "mem_estimate_bytes", "val_loss", "train_loss", "tokens_per_s",
    "best_val_loss",
}


def spec_dict(name="tiny-study", **sections):
    base = {
        "name": name,
        "data": DATA,
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": {"choice": [16, 32]},
                  "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 12288, "batch_size": 8, "lr": {"float": [1e-3, 3e-2], "log": True},
                  "eval_every": 2048, "eval_tokens": 1024},
        "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 3},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return base


def write_spec(tmp_path, data, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def child_runs(uri, parent_run_id):
    client = MlflowClient(uri)
    parent = client.get_run(parent_run_id)
    runs = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
    )
    return client, parent, runs


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory, new_store):
    out = tmp_path_factory.mktemp("study")
    new_store(out)
    spec = parse_spec(spec_dict(search={"n_trials": 4}))
    return spec, out, run_study(spec, out_dir=out, quiet=True)


def test_study_writes_parent_and_one_child_per_trial_with_schema(finished_study):
    spec, out, summary = finished_study
    assert summary.state == "COMPLETE" and summary.counts["COMPLETE"] == 4
    client, parent, runs = child_runs(summary.tracking_uri, summary.parent_run_id)
    assert parent.data.tags["sweep.kind"] == "study"
    assert parent.data.tags["sweep.executor"] == "optuna"
    assert parent.data.metrics["trials_complete"] == 4
    assert math.isfinite(parent.data.metrics["baseline_unigram_loss"])
    assert sorted(r.info.run_name for r in runs) == [f"trial-{i}" for i in range(4)]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"trials.csv", "best_config.yaml", "spec.yaml", "plots"} <= artifacts
    for run in runs:
        assert SCHEMA_METRICS <= set(run.data.metrics), run.info.run_name
        assert run.data.tags["sweep.state"] == "COMPLETE"
        assert run.data.params["model.d_model"] in ("16", "32")
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")]
        assert steps == sorted(steps) and steps[-1] == 12288  # step = tokens seen
    best = min(r.data.metrics["best_val_loss"] for r in runs)
    assert parent.data.metrics["best_val_loss"] == pytest.approx(best)


def test_results_table_matches_optuna_records(finished_study):
    spec, out, summary = finished_study
    frame = load_results(out)
    study = optuna.load_study(study_name=spec.name, storage=make_storage(spec.storage_url(out)))
    trials = {t.number: t for t in study.get_trials()}
    assert sorted(frame["trial"]) == sorted(trials)
    for _, row in frame.iterrows():
        t = trials[int(row["trial"])]
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert row["best_val_loss"] == pytest.approx(t.value)
        assert float(row["train.lr"]) == pytest.approx(t.params["train.lr"])
    assert list(frame["best_val_loss"]) == sorted(frame["best_val_loss"])


def test_resumed_study_runs_only_the_remaining_trials(finished_study):
    spec, out, summary = finished_study
    again = run_study(spec, out_dir=out, quiet=True)
    assert again.parent_run_id == summary.parent_run_id
    assert sum(again.counts.values()) == 4


def test_resume_with_changed_choices_is_refused_naming_both_lists(finished_study, tmp_path):
    spec, out, _ = finished_study
    changed = spec_dict(model={"d_model": {"choice": [16, 48]}}, search={"n_trials": 6})
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, changed)), "--out",
                                      str(out), "--quiet"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "model.d_model" in message and "[16, 32]" in message and "[16, 48]" in message
    assert len(load_results(out)) == 4


def test_pruner_stops_bad_trials_early(tmp_path, new_store):
    data = spec_dict(
        "pruned",
        train={"lr": {"choice": [3e-2, 1e-6]}, "tokens": 8192, "eval_every": 1024},
        # The whole grid of 4; one completed trial before the rule judges (the default waits
        # for 3, more than this grid's 1e-6 trials may leave), from the warm-up's evaluation.
        search={"sampler": "grid", "pruner": "median", "n_trials": 4, "n_startup_trials": 1},
    )
    spec = parse_spec(data)
    new_store(tmp_path)
    summary = run_study(spec, out_dir=tmp_path, quiet=True)
    frame = load_results(tmp_path)
    pruned = frame[frame["state"] == "PRUNED"]
    assert summary.counts["PRUNED"] >= 1
    assert (pruned["tokens"] < 8192).all()
    assert set(pruned["train.lr"].astype(float)) == {1e-6}


def test_infeasible_constraint_costs_no_training(tmp_path, new_store):
    # d_model 16 has about 4k parameters, d_model 32 about 14k: the limit rules out the latter.
    data = spec_dict("infeasible", constraints={"max_params": 8000},
                     train={"lr": 1e-2}, search={"n_trials": 2, "sampler": "grid"})
    new_store(tmp_path / "out")
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, data)), "--out",
                                      str(tmp_path / "out"), "--quiet"])
    assert result.exit_code == 0, result.output
    frame = load_results(tmp_path / "out")
    frame.index = frame["model.d_model"].astype(int)
    assert frame.loc[32, "state"] == "INFEASIBLE" and frame.loc[16, "state"] == "COMPLETE"
    # An infeasible trial never trains, so it logs no totals: its tokens cell is empty (NaN).
    assert math.isnan(frame.loc[32, "tokens"])
    assert frame.loc[16, "tokens"] == 12288
    client, parent, runs = child_runs(frame.attrs["tracking_uri"], frame.attrs["parent_run_id"])
    bad = next(r for r in runs if r.data.tags["sweep.state"] == "INFEASIBLE")
    assert "max_params" in bad.data.tags["sweep.fail_reason"]
    assert "n_params" in bad.data.metrics and "val_loss" not in bad.data.metrics
    assert "tokens" not in bad.data.metrics


def test_study_that_can_never_train_exits_2_and_writes_nothing(tmp_path):
    data = spec_dict("hopeless", constraints={"max_params": 100})
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, data)), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "no trial could train" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not out.exists()


def test_no_completed_trial_exits_1_with_a_summary(tmp_path, monkeypatch, new_store):
    class Broken(objective.Trainer):
        def train(self, *args, **kwargs):
            raise RuntimeError("out of luck")

    monkeypatch.setattr(objective, "Trainer", Broken)
    data = spec_dict("unlucky", search={"n_trials": 2})
    new_store(tmp_path / "out")
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, data)), "--out",
                                      str(tmp_path / "out"), "--quiet"])
    assert result.exit_code == 1
    assert "no trial completed" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    frame = load_results(tmp_path / "out")
    client, parent, _ = child_runs(frame.attrs["tracking_uri"], frame.attrs["parent_run_id"])
    assert parent.data.tags["sweep.state"] == "FAILED"


@pytest.mark.parametrize(("flags", "message"), [
    (["--device", "tpu"], "--device"),
    (["--device", "cuda:7"], "--device"),
])
def test_bad_device_exits_2_and_writes_nothing(tmp_path, flags, message):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, spec_dict())), "--out",
                                      str(out), *flags])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()


def test_out_that_is_a_file_exits_2(tmp_path):
    target = tmp_path / "afile"
    target.write_text("keep me")
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, spec_dict())), "--out",
                                      str(target)])
    assert result.exit_code == 2 and "is a file" in result.output
    assert target.read_text() == "keep me"


@pytest.mark.parametrize(("changes", "message"), [
    ({"data": "synthetic:markov?order=1&vocab=16&tokens=100"}, "seq_len + 1 = 33"),
    ({"model": {"vocab_size": 8}}, "model.vocab_size=8 is smaller"),
    ({"train": {"tokens": 10}}, "less than one optimizer step"),
])
def test_corpus_that_does_not_fit_the_models_exits_2_and_writes_nothing(tmp_path, changes,
                                                                        message):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, spec_dict(**changes))),
                                      "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not out.exists()


def test_trial_that_raises_ends_failed_and_the_next_trial_gets_a_fresh_run(tmp_path, monkeypatch,
                                                                           new_store):
    real = objective.Trainer
    calls = []

    class Flaky(real):
        def train(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("simulated worker crash")
            return super().train(*args, **kwargs)

    monkeypatch.setattr(objective, "Trainer", Flaky)
    new_store(tmp_path)
    summary = run_study(parse_spec(spec_dict("flaky", search={"n_trials": 2})),
                        out_dir=tmp_path, quiet=True)
    frame = load_results(tmp_path).sort_values("trial")
    assert list(frame["state"]) == ["FAILED", "COMPLETE"]
    client, _, runs = child_runs(summary.tracking_uri, summary.parent_run_id)
    failed = next(r for r in runs if r.data.tags["sweep.state"] == "FAILED")
    assert "simulated worker crash" in failed.data.tags["sweep.fail_reason"]
    assert len({r.info.run_id for r in runs}) == 2


def test_diverged_trial_never_ranks_best(tmp_path, new_store):
    data = spec_dict(
        "diverge",
        train={"lr": {"choice": [10.0, 1e-2]}, "weight_decay": 1.0, "warmup": 0,
               "schedule": "constant", "tokens": 8192, "eval_every": 1024},
        search={"sampler": "grid", "n_trials": 4},
        model={"d_model": 32},
    )
    new_store(tmp_path)
    summary = run_study(parse_spec(data), out_dir=tmp_path, quiet=True)
    frame = load_results(tmp_path)
    # The grid has two points: lr=10 diverges, lr=0.01 completes.
    assert summary.counts["DIVERGED"] == 1 and summary.counts["COMPLETE"] == 1
    assert sum(summary.counts.values()) == 2
    assert list(frame["state"]) == ["COMPLETE", "DIVERGED"]
    assert list(frame["train.lr"].astype(float)) == [1e-2, 10.0]
    assert frame[frame["state"] == "DIVERGED"]["best_val_loss"].isna().all()
    client, parent, runs = child_runs(summary.tracking_uri, summary.parent_run_id)
    # MLflow's own ranking of the trial runs puts the diverged one (no best_val_loss) last.
    ranked = client.search_runs([parent.info.experiment_id],
                                filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
                                order_by=["metrics.best_val_loss ASC"])
    assert [r.data.tags["sweep.state"] for r in ranked] == ["COMPLETE", "DIVERGED"]
    assert ranked[0].info.run_id == frame.iloc[0]["run_id"]
    study = optuna.load_study(study_name="diverge",
                              storage=make_storage(str(tmp_path / "optuna.journal")))
    assert study.best_trial.params["train.lr"] == 1e-2  # a choice keeps its option's value
    states = {t.params["train.lr"]: t.state for t in study.trials}
    assert states == {1e-2: optuna.trial.TrialState.COMPLETE, 10.0: optuna.trial.TrialState.FAIL}


def test_bad_spec_exits_2_and_writes_nothing(tmp_path):
    data = spec_dict(search={"sampler": "annealing"})
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, data)), "--out", str(out)])
    assert result.exit_code == 2
    assert "search.sampler" in result.output
    assert not out.exists()


def test_bad_data_exits_2_and_writes_no_run(tmp_path):
    data = spec_dict(data="text:/nonexistent/corpus.txt")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, data)), "--out", str(out)])
    assert result.exit_code == 2
    assert "/nonexistent/corpus.txt" in " ".join(result.output.split())
    assert not (out / "mlflow.db").exists()


@pytest.mark.slow
def test_parallel_worker_processes_share_the_study(tmp_path, new_store):
    data = spec_dict("parallel", search={"n_trials": 4, "parallel": 2})
    new_store(tmp_path / "out")
    result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, data)), "--out",
                                      str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    frame = load_results(tmp_path / "out")
    assert sorted(frame["trial"]) == [0, 1, 2, 3]
    assert (frame["state"] == "COMPLETE").all()


def test_multi_objective_study_logs_a_pareto_front(tmp_path, new_store):
    data = spec_dict("pareto-tiny", search={"sampler": "nsga2", "n_trials": 4,
                                            "objectives": ["val_loss", "flops_per_token"]},
                     model={"n_layers": {"int": [1, 2]}})
    new_store(tmp_path)
    summary = run_study(parse_spec(data), out_dir=tmp_path, quiet=True)
    client = MlflowClient(summary.tracking_uri)
    plots = {a.path for a in client.list_artifacts(summary.parent_run_id, "plots")}
    assert any("pareto" in p for p in plots), plots


def test_worker_joins_the_study_through_its_storage(tmp_path, new_store):
    path = write_spec(tmp_path, spec_dict("joined", search={"n_trials": 2}))
    out = tmp_path / "out"
    new_store(out)
    runner = CliRunner()
    assert runner.invoke(app, ["run", str(path), "--out", str(out), "--quiet"]).exit_code == 0
    result = runner.invoke(app, ["worker", str(path), "--out", str(out), "--trials", "1"])
    assert result.exit_code == 0, result.output
    frame = load_results(out)
    assert sorted(frame["trial"]) == [0, 1, 2]
    assert (frame["state"] == "COMPLETE").all()
    storage = make_storage(str(out / "optuna.journal"))
    study = optuna.load_study(study_name="joined", storage=storage)
    assert len(study.get_trials()) == 3


def test_worker_without_a_started_study_exits_2(tmp_path):
    path = write_spec(tmp_path, spec_dict("never-started"))
    result = CliRunner().invoke(app, ["worker", str(path), "--out", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "sweep run" in result.output
    assert not (tmp_path / "none").exists()


def test_progress_rows_leave_out_queued_trials():
    # A transfer or scaling study queues every grid point up front (WAITING); the heartbeat's
    # "running" must count only the trials a worker has started.
    from sweep.executors.optuna.executor import _rows
    from sweep.schema import TrialState

    study = optuna.create_study()
    for lr in (1e-3, 2e-3, 4e-3):
        study.enqueue_trial({"train.lr": lr})
    started = study.ask()
    rows = _rows(study)
    assert [(r.number, r.state) for r in rows] == [(started.number, TrialState.RUNNING)]
