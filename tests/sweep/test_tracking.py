"""The MLflow schema: a made-up study logged through sweep.tracking, read back with MlflowClient."""

import math
import multiprocessing as mp
import threading
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow import MlflowClient
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH

from sweep import tracking
from sweep.tracking import (
    ResumeError,
    StudyTracker,
    TrialContext,
    check_resume_compatible,
    default_tracking_uri,
    ensure_store,
)

SPEC = {
    "name": "fake",
    "data": {"uri": "synthetic:markov"},
    "model": {"d_model": {"choice": [64, 128]}, "n_layers": 2, "attn_pattern": "dense"},
    "train": {"lr": {"float": [1e-4, 1e-2], "log": True}, "tokens": 3000},
    "search": {"sampler": "tpe"},
}


def config(d_model, lr):
    return {
        "model": {"d_model": d_model, "n_heads": 4, "n_layers": 2, "d_ff": None, "bias": True},
        "train": {"lr": lr, "betas": (0.9, 0.95), "tokens": 3000},
    }


COSTS = {
    "n_params": 1000.0,
    "n_params_non_embedding": 800.0,
    "flops_per_token": 2000.0,
    "flops_per_token_dense": 2100.0,
    "mem_estimate_bytes": 1e6,
}
TOKENS = [1000, 2000, 3000]
# trial number -> (d_model, lr, val losses at TOKENS, end); the made-up outcome of each trial
TRIALS = {
    0: (64, 1e-3, [3.0, 2.5, 2.6], "COMPLETE"),
    1: (128, 2e-3, [2.8, 2.2, 2.1], "COMPLETE"),
    2: (128, 1e-2, [3.1, math.nan], "DIVERGED"),
    3: (64, 1e-4, [3.5], "PRUNED"),
    4: (64, 5e-3, [2.9], "FAILED"),
    5: (128, 5e-3, [], "INFEASIBLE"),
}


def log_fake_trial(ctx, number):
    d_model, lr, losses, end = TRIALS[number]
    run = ctx.start_trial(number, config(d_model, lr))
    with run:
        run.log_costs(COSTS)
        for tokens, loss in zip(TOKENS, losses, strict=False):
            run.report(tokens, {"val_loss": loss, "train_loss": loss + 0.1, "tokens_per_s": 5e3})
        if end == "FAILED":
            raise RuntimeError("out of memory in trial 4")
        if end == "INFEASIBLE":
            run.end("INFEASIBLE", fail_reason="n_params 2e9 > max_params 1e9")
        elif end == "DIVERGED":
            run.log_result(
                {
                    "state": "DIVERGED",
                    "best_val_loss": 3.1,
                    "final_val_loss": math.nan,
                    "tokens": 2000,
                    "fail_reason": "non-finite loss at 2000 tokens",
                }
            )
        elif end == "PRUNED":
            raise optuna.TrialPruned()
        else:
            run.log_result(
                {
                    "state": "COMPLETE",
                    "best_val_loss": min(losses),
                    "final_val_loss": losses[-1],
                    "tokens": 3000,
                    "steps": 30,
                    "wall_s": 1.5,
                    "train_flops": 6000.0 * 3000,
                    "mfu": None,
                }
            )
    return run


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("fake")
    uri = default_tracking_uri(out)
    tracker = StudyTracker.start(uri, "fake", SPEC, executor="optuna", algorithm="tpe/hyperband")
    tracker.log_baseline(5.5)
    runs = {}
    for n in TRIALS:
        try:
            runs[n] = log_fake_trial(tracker.context, n)
        except (RuntimeError, optuna.TrialPruned):
            pass
    summary = tracker.finish()
    client = MlflowClient(uri)
    children = {
        int(r.data.tags["sweep.trial_number"]): r
        for r in client.search_runs(
            [tracker.experiment_id], f"tags.mlflow.parentRunId = '{tracker.parent_run_id}'"
        )
    }
    return {
        "out": out,
        "uri": uri,
        "tracker": tracker,
        "client": client,
        "summary": summary,
        "children": children,
    }


def test_default_store_and_artifacts_live_in_the_output_folder(study):
    out = study["out"]
    assert study["uri"] == f"sqlite:///{out.resolve()}/mlflow.db"
    assert (out / "mlflow.db").is_file()
    experiment = study["client"].get_experiment(study["tracker"].experiment_id)
    assert experiment.name == "fake"
    assert experiment.artifact_location == (out.resolve() / "mlartifacts").as_uri()
    assert (out / "mlartifacts").is_dir()


def test_parent_run_has_tags_metrics_and_artifacts(study):
    client, tracker = study["client"], study["tracker"]
    parent = client.get_run(tracker.parent_run_id)
    tags, metrics = parent.data.tags, parent.data.metrics
    assert tags["sweep.kind"] == "study"
    assert tags["sweep.executor"] == "optuna"
    assert tags["sweep.algorithm"] == "tpe/hyperband"
    assert len(tags["sweep.spec_hash"]) == 16
    assert tags["sweep.state"] == "COMPLETE"
    assert parent.info.status == "FINISHED"
    assert metrics["baseline_unigram_loss"] == 5.5
    assert metrics["best_val_loss"] == 2.1
    expected = {"complete": 2, "pruned": 1, "failed": 1, "infeasible": 1, "diverged": 1}
    for state, n in expected.items():
        assert metrics[f"trials_{state}"] == n
    assert tags["sweep.best_trial_number"] == "1"
    assert study["summary"]["best_trial"] == 1
    assert study["summary"]["counts"]["COMPLETE"] == 2

    root = Path(parent.info.artifact_uri.removeprefix("file://"))
    assert yaml.safe_load((root / "spec.yaml").read_text()) == SPEC
    best = yaml.safe_load((root / "best_config.yaml").read_text())
    assert best["model"]["d_model"] == 128
    assert best["train"]["lr"] == 2e-3
    assert best["train"]["betas"] == [0.9, 0.95]
    csv_lines = (root / "trials.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(TRIALS)
    assert csv_lines[1].startswith("1,COMPLETE,2.1,")
    plots = {p.name for p in (root / "plots").iterdir()}
    assert {"val_loss_curves.png", "optimization_history.png", "parallel_coordinate.png"} <= plots
    assert "param_importances.png" in plots
    assert all((root / "plots" / p).stat().st_size > 5000 for p in plots)


def test_one_child_run_per_trial_with_params_metrics_and_tags(study):
    children, parent_id = study["children"], study["tracker"].parent_run_id
    assert sorted(children) == sorted(TRIALS)
    for n, run in children.items():
        d_model, lr, losses, end = TRIALS[n]
        assert run.info.run_name == f"trial-{n}"
        assert run.data.tags["mlflow.parentRunId"] == parent_id
        assert run.data.tags["sweep.state"] == end
        params = run.data.params
        assert params["model.d_model"] == str(d_model)
        assert float(params["train.lr"]) == lr
        assert params["model.d_ff"] == "None"
        assert params["train.betas"] == "[0.9, 0.95]"
        for key, value in COSTS.items():
            assert run.data.metrics[key] == value
    status = {n: r.info.status for n, r in children.items()}
    assert status == {
        0: "FINISHED",
        1: "FINISHED",
        2: "FAILED",
        3: "KILLED",
        4: "FAILED",
        5: "KILLED",
    }


def test_val_loss_history_has_tokens_as_steps(study):
    client, run = study["client"], study["children"][1]
    history = client.get_metric_history(run.info.run_id, "val_loss")
    assert [(m.step, m.value) for m in history] == list(zip(TOKENS, [2.8, 2.2, 2.1], strict=True))
    train = client.get_metric_history(run.info.run_id, "train_loss")
    assert [m.step for m in train] == TOKENS
    assert run.data.metrics["best_val_loss"] == 2.1
    assert run.data.metrics["tokens"] == 3000
    assert run.data.metrics["tokens_per_s"] == 5e3
    assert "mfu" not in run.data.metrics


def test_diverged_trial_logs_no_nan_and_never_ranks_first(study):
    client, children = study["client"], study["children"]
    diverged = children[2]
    history = client.get_metric_history(diverged.info.run_id, "val_loss")
    assert [(m.step, m.value) for m in history] == [(1000, 3.1)]
    assert "best_val_loss" not in diverged.data.metrics
    assert "final_val_loss" not in diverged.data.metrics
    assert diverged.data.tags["sweep.fail_reason"] == "non-finite loss at 2000 tokens"
    ranked = client.search_runs(
        [study["tracker"].experiment_id],
        f"tags.mlflow.parentRunId = '{study['tracker'].parent_run_id}'",
        order_by=["metrics.best_val_loss ASC"],
    )
    order = [int(r.data.tags["sweep.trial_number"]) for r in ranked]
    assert order[:3] == [1, 0, 3]
    assert all(math.isfinite(v) for r in ranked for v in r.data.metrics.values())


def test_raising_trial_ends_failed_and_next_trial_gets_a_fresh_run(study):
    failed, pruned = study["children"][4], study["children"][3]
    assert failed.data.tags["sweep.fail_reason"] == "RuntimeError: out of memory in trial 4"
    assert "best_val_loss" not in failed.data.metrics
    root = Path(failed.info.artifact_uri.removeprefix("file://"))
    assert "Traceback" in (root / "fail_reason.txt").read_text()
    assert pruned.info.run_id != failed.info.run_id
    assert pruned.data.metrics["best_val_loss"] == 3.5
    infeasible = study["children"][5]
    assert infeasible.data.tags["sweep.fail_reason"] == "n_params 2e9 > max_params 1e9"
    assert "val_loss" not in infeasible.data.metrics


def test_long_param_goes_to_an_artifact_and_the_rest_is_logged(study):
    ctx, client = study["tracker"].context, study["client"]
    long_value = "x" * (MAX_PARAM_VAL_LENGTH + 1000)
    with ctx.start_trial(100, {"model": {"d_model": 64}, "train": {"note": long_value}}) as run:
        run.report(10, {"val_loss": 1.0})
    logged = client.get_run(run.run_id)
    param = logged.data.params["train.note"]
    assert len(param) <= MAX_PARAM_VAL_LENGTH
    assert param.startswith("x" * 100)
    assert "params/train.note.txt" in param
    assert logged.data.tags["sweep.truncated_params"] == "train.note"
    assert logged.data.params["model.d_model"] == "64"
    assert logged.data.metrics["best_val_loss"] == 1.0
    root = Path(logged.info.artifact_uri.removeprefix("file://"))
    assert (root / "params" / "train.note.txt").read_text() == long_value


def test_param_the_store_rejects_fails_the_run_with_the_reason(study):
    from mlflow.exceptions import MlflowException

    ctx, client = study["tracker"].context, study["client"]
    with pytest.raises(MlflowException):
        ctx.start_trial(104, {"model": {"d_model!": 64}})
    (run,) = client.search_runs([ctx.experiment_id], "tags.sweep.trial_number = '104'")
    assert run.info.status == "FAILED"
    assert run.data.tags["sweep.fail_reason"].startswith("logging params: MlflowException")


def test_long_fail_reason_is_truncated_in_the_tag_and_kept_whole(study):
    ctx, client = study["tracker"].context, study["client"]
    reason = "diverged: " + "y" * MAX_TAG_VAL_LENGTH
    with ctx.start_trial(101, {"model": {"d_model": 64}}) as run:
        run.end("DIVERGED", fail_reason=reason)
    logged = client.get_run(run.run_id)
    assert logged.data.tags["sweep.fail_reason"] == reason[:MAX_TAG_VAL_LENGTH]
    root = Path(logged.info.artifact_uri.removeprefix("file://"))
    assert (root / "fail_reason.txt").read_text() == reason


def test_pbt_mutation_is_a_metric_and_the_param_keeps_its_first_value(study):
    ctx, client = study["tracker"].context, study["client"]
    with ctx.start_trial(102, {"train": {"lr": 1e-3, "dropout": 0.0}}) as run:
        run.report(1000, {"val_loss": 3.0})
        run.log_mutation(1000, {"train": {"lr": 5e-4}})
        run.log_mutation(2000, {"train.lr": 2.5e-4, "model.attn_pattern": "local"})
        with pytest.raises(ValueError, match="train.lr"):
            run.log_params({"train": {"lr": 7e-4}})
        run.log_params({"train": {"lr": 1e-3, "weight_decay": 0.1}})
    logged = client.get_run(run.run_id)
    assert logged.data.params["train.lr"] == "0.001"
    assert logged.data.params["train.weight_decay"] == "0.1"
    history = client.get_metric_history(run.run_id, "pbt.train.lr")
    assert sorted((m.step, m.value) for m in history) == [(1000, 5e-4), (2000, 2.5e-4)]
    assert logged.data.tags["pbt.train.lr"] == "0.00025"
    assert logged.data.tags["pbt.model.attn_pattern"] == "local"
    assert logged.data.tags["sweep.state"] == "COMPLETE"


def test_attach_continues_a_trial_from_another_worker(study):
    tracker, client = study["tracker"], study["client"]
    with tracker.start_trial(103, config(64, 1e-3)) as first:
        first.report(1000, {"val_loss": 2.0})
        first.log_result({"state": "RUNNING", "history": [{"tokens": 1000, "val_loss": 2.0}]})
        run_id = first.run_id
        first.detach()
    assert client.get_run(run_id).info.status == "RUNNING"
    ctx = TrialContext(tracker.context.tracking_uri, tracker.experiment_id, tracker.parent_run_id)
    with ctx.attach_trial(run_id) as again:
        assert (again.number, again.last_step, again.best_val_loss) == (103, 1000, 2.0)
        history = [{"tokens": 1000, "val_loss": 2.0}, {"tokens": 2000, "val_loss": 1.5}]
        again.log_result({"state": "COMPLETE", "best_val_loss": 1.5, "history": history})
    history = client.get_metric_history(run_id, "val_loss")
    assert sorted((m.step, m.value) for m in history) == [(1000, 2.0), (2000, 1.5)]
    assert client.get_run(run_id).data.metrics["best_val_loss"] == 1.5


def test_threads_log_to_their_own_runs(study):
    ctx, client = study["tracker"].context, study["client"]
    run_ids = {}

    def work(n):
        with ctx.start_trial(n, {"model": {"d_model": n}}) as run:
            for step in range(1, 11):
                run.report(step * 100, {"val_loss": n + 1.0 / step})
            run_ids[n] = run.run_id

    threads = [threading.Thread(target=work, args=(n,)) for n in range(200, 204)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n, run_id in run_ids.items():
        run = client.get_run(run_id)
        assert run.data.params == {"model.d_model": str(n)}
        assert run.data.metrics["best_val_loss"] == pytest.approx(n + 0.1)
        assert len(client.get_metric_history(run_id, "val_loss")) == 10
    assert len(run_ids) == 4


def test_study_without_a_complete_trial_fails(study):
    uri = study["uri"]
    tracker = StudyTracker.start(uri, "doomed", SPEC, executor="ray", algorithm="asha")
    for n in (2, 4):
        try:
            log_fake_trial(tracker.context, n)
        except (RuntimeError, optuna.TrialPruned):
            pass
    summary = tracker.finish()
    parent = MlflowClient(uri).get_run(tracker.parent_run_id)
    assert summary["state"] == "FAILED" and summary["best_trial"] is None
    assert parent.info.status == "FAILED"
    assert parent.data.tags["sweep.state"] == "FAILED"
    assert "best_val_loss" not in parent.data.metrics
    assert parent.data.metrics["trials_diverged"] == 1
    assert parent.data.metrics["trials_failed"] == 1


def _worker(uri, number, queue):
    try:
        tracker = StudyTracker.start(uri, f"s{number}", SPEC, executor="optuna", algorithm="tpe")
        ctx = TrialContext(uri, tracker.experiment_id, tracker.parent_run_id)
        with ctx.start_trial(number, config(64, 1e-3)) as run:
            for step in range(1, 21):
                run.report(step * 100, {"val_loss": 3.0 - step * 0.01, "train_loss": 3.0})
            run.log_result({"state": "COMPLETE", "tokens": 2000})
        queue.put((number, "ok"))
    except Exception as exc:  # report to the parent; the test asserts none happened
        queue.put((number, f"{type(exc).__name__}: {exc}"))


@pytest.mark.slow
def test_processes_log_to_a_fresh_sqlite_store_after_ensure_store(tmp_path):
    # Without ensure_store, processes opening a fresh SQLite store race in MLflow's schema
    # migration (alembic CommandError "expected to match one row").
    uri = default_tracking_uri(tmp_path / "fresh")
    ensure_store(uri)
    spawn = mp.get_context("spawn")
    queue = spawn.Queue()
    procs = [spawn.Process(target=_worker, args=(uri, n, queue)) for n in range(4)]
    for p in procs:
        p.start()
    outcomes = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert outcomes == {n: "ok" for n in range(4)}
    client = MlflowClient(uri)
    for n in range(4):
        experiment_id, parent_run_id = tracking.find_study(uri, f"s{n}")
        (trial,) = tracking.read_trials(uri, experiment_id, parent_run_id)
        assert trial["trial"] == n and trial["state"] == "COMPLETE"
        assert len(client.get_metric_history(trial["run_id"], "val_loss")) == 20
        assert trial["metrics"]["best_val_loss"] == pytest.approx(2.8)


def test_optuna_study_plots_and_pareto_front(study):
    uri = study["uri"]
    tracker = StudyTracker.start(uri, "mo", SPEC, executor="optuna", algorithm="nsga2")
    study = optuna.create_study(directions=["minimize", "minimize"])
    dist = optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    for n, (lr, loss, flops) in enumerate([(1e-3, 2.0, 3e9), (3e-3, 1.8, 5e9), (5e-4, 2.4, 1e9)]):
        study.add_trial(
            optuna.trial.create_trial(
                params={"train.lr": lr}, distributions={"train.lr": dist}, values=[loss, flops]
            )
        )
        with tracker.start_trial(n, config(64, lr)) as run:
            run.report(1000, {"val_loss": loss})
    tracker.finish(study, objective_names=["val_loss", "train_flops"])
    root = Path(tracker.client.get_run(tracker.parent_run_id).info.artifact_uri[len("file://") :])
    plots = {p.name for p in (root / "plots").iterdir()}
    assert {"pareto_front.png", "optimization_history.png", "val_loss_curves.png"} <= plots


def test_plots_that_cannot_be_drawn_are_skipped(study, caplog, monkeypatch):
    from optuna.visualization import matplotlib as ovm

    def broken(*args, **kwargs):
        raise RuntimeError("no display")

    monkeypatch.setattr(ovm, "plot_optimization_history", broken)
    uri = study["uri"]
    tracker = StudyTracker.start(uri, "one", SPEC, executor="optuna", algorithm="tpe")
    log_fake_trial(tracker.context, 1)
    with caplog.at_level("WARNING", logger="sweep.results"):
        summary = tracker.finish()
    assert summary["state"] == "COMPLETE"
    assert "plot param_importances skipped: ValueError: needs >= 2 complete trials" in caplog.text
    assert "plot optimization_history skipped: RuntimeError: no display" in caplog.text
    root = Path(tracker.client.get_run(tracker.parent_run_id).info.artifact_uri[len("file://") :])
    assert {p.name for p in (root / "plots").iterdir()} == {"val_loss_curves.png"}


def test_study_context_manager_marks_a_crashed_driver_failed(study):
    uri = study["uri"]
    with pytest.raises(KeyboardInterrupt):
        with StudyTracker.start(uri, "crash", SPEC, executor="optuna", algorithm="tpe") as t:
            raise KeyboardInterrupt()
    parent = MlflowClient(uri).get_run(t.parent_run_id)
    assert parent.info.status == "FAILED"
    assert parent.data.tags["sweep.fail_reason"].startswith("KeyboardInterrupt")


def changed(section, name, value):
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec[section][name] = value
    return spec


def test_resume_refuses_changed_choices_naming_both_lists():
    new = changed("model", "d_model", {"choice": [64, 128, 256]})
    with pytest.raises(ResumeError) as err:
        check_resume_compatible(SPEC, new)
    assert "model.d_model" in str(err.value)
    assert "[64, 128]" in str(err.value) and "[64, 128, 256]" in str(err.value)


@pytest.mark.parametrize(
    ("section", "name", "value", "match"),
    [
        ("train", "lr", {"float": [1e-4, 1e-2]}, "log=True to log=False"),
        ("train", "lr", {"choice": [1e-3, 1e-2]}, "train.lr changed"),
        ("model", "n_layers", {"int": [2, 4]}, "model.n_layers changed"),
        ("model", "d_model", 64, "model.d_model changed"),
    ],
)
def test_resume_refuses_changed_domain_kinds(section, name, value, match):
    with pytest.raises(ResumeError, match=match):
        check_resume_compatible(SPEC, changed(section, name, value))


def test_resume_accepts_compatible_changes_with_notes():
    new = changed("train", "lr", {"float": [1e-5, 1e-2], "log": True})
    new["model"]["n_layers"] = 3
    new["train"]["weight_decay"] = 0.1
    notes = check_resume_compatible(SPEC, new)
    assert len(notes) == 3
    assert any(n.startswith("train.lr domain") for n in notes)
    assert "model.n_layers fixed value 2 -> 3" in notes
    assert "train.weight_decay added" in notes
    assert check_resume_compatible(SPEC, SPEC) == []


def test_resume_reopens_the_parent_or_refuses(study):
    uri = study["uri"]
    first = StudyTracker.start(uri, "r", SPEC, executor="optuna", algorithm="tpe")
    log_fake_trial(first.context, 0)
    first.finish()
    bad = changed("model", "d_model", {"choice": [32, 64]})
    with pytest.raises(ResumeError, match=r"model.d_model.*\[64, 128\].*\[32, 64\]"):
        StudyTracker.start(uri, "r", bad, executor="optuna", algorithm="tpe", resume=True)
    wider = changed("train", "lr", {"float": [1e-5, 1e-2], "log": True})
    again = StudyTracker.start(uri, "r", wider, executor="optuna", algorithm="tpe", resume=True)
    assert again.parent_run_id == first.parent_run_id
    client = MlflowClient(uri)
    assert client.get_run(again.parent_run_id).info.status == "RUNNING"
    log_fake_trial(again.context, 1)
    summary = again.finish()
    assert summary["counts"]["COMPLETE"] == 2 and summary["best_trial"] == 1
    root = Path(client.get_run(again.parent_run_id).info.artifact_uri[len("file://") :])
    assert yaml.safe_load((root / "spec.yaml").read_text()) == wider
    assert len(list((root / "spec_history").iterdir())) == 1
    fresh = StudyTracker.start(uri, "r", bad, executor="optuna", algorithm="tpe")
    assert fresh.parent_run_id != first.parent_run_id


def test_relative_sqlite_uri_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = tracking.absolute_uri("sqlite:///runs/x/mlflow.db")
    assert uri == f"sqlite:///{tmp_path.resolve()}/runs/x/mlflow.db"
    assert tracking.absolute_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_param_values_round_trip():
    for value in (128, 1e-3, True, False, None, "dense", [0.9, 0.95], 2.5e-05):
        text = tracking._param_str(value)
        assert tracking.parse_param_value(text) == value
    assert tracking.parse_param_value(tracking._param_str((0.9, 0.95))) == [0.9, 0.95]


@pytest.mark.parametrize("uri, shown", [
    ("postgresql+psycopg2://sweep:Hunter2@127.0.0.1:5432/optuna",
     "postgresql+psycopg2://sweep:***@127.0.0.1:5432/optuna"),
    ("postgresql://sweep@db/optuna?sslmode=require&password=Hunter2",
     "postgresql://sweep@db/optuna?sslmode=require&password=***"),
    ("http://user:s3cret@127.0.0.1:5000", "http://user:***@127.0.0.1:5000"),
    ("http://[::1", "http://***"),
    ("sqlite:///runs/x/mlflow.db", "sqlite:///runs/x/mlflow.db"),  # unchanged, as written
    ("runs/x/optuna.journal", "runs/x/optuna.journal"),
])
def test_shown_uri_hides_passwords_and_nothing_else(uri, shown):
    assert tracking.shown_uri(uri) == shown
