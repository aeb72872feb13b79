"""The MLflow schema: a made-up study logged through sweep.tracking, read back with MlflowClient.

Names come from `sweep.schema`, so these tests check that the writer and the reader agree on
the schema's layout. Every test that writes gets its own store (`uri`, function-scoped); the
module-scoped `fake` study is only read, so the tests pass alone and in any order.
"""

import math
import multiprocessing as mp
import threading
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH

from sweep import params, schema, tracking
from sweep.study.summary import finish_study
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


# One made-up value per cost metric, all distinct, so a metric logged under another name shows.
COSTS = {name: 1000.0 * (i + 1) for i, name in enumerate(schema.COST_METRICS)}
TOKENS = [1000, 2000, 3000]
# trial number -> (d_model, lr, val losses at TOKENS, end); the made-up outcome of each trial
TRIALS = {
    0: (64, 1e-3, [3.0, 2.5, 2.6], schema.TrialState.COMPLETE),
    1: (128, 2e-3, [2.8, 2.2, 2.1], schema.TrialState.COMPLETE),
    2: (128, 1e-2, [3.1, math.nan], schema.TrialState.DIVERGED),
    3: (64, 1e-4, [3.5], schema.TrialState.PRUNED),
    4: (64, 5e-3, [2.9], schema.TrialState.FAILED),
    5: (128, 5e-3, [], schema.TrialState.INFEASIBLE),
}


def log_fake_trial(ctx, number):
    """Log trial ``number`` of `TRIALS`; the FAILED one raises RuntimeError out of its run."""
    d_model, lr, losses, end = TRIALS[number]
    run = ctx.start_trial(number, config(d_model, lr))
    with run:
        run.log_costs(COSTS)
        for tokens, loss in zip(TOKENS, losses, strict=False):
            run.report(tokens, {schema.METRIC_VAL_LOSS: loss, schema.METRIC_TRAIN_LOSS: loss + 0.1,
                                schema.METRIC_TOKENS_PER_S: 5e3})
        if end is schema.TrialState.FAILED:
            raise RuntimeError("out of memory in trial 4")
        if end is schema.TrialState.INFEASIBLE:
            run.end(schema.TrialState.INFEASIBLE, fail_reason="n_params 2e9 > max_params 1e9")
        elif end is schema.TrialState.DIVERGED:
            run.log_result(
                {
                    "state": schema.TrialState.DIVERGED,
                    schema.METRIC_BEST_VAL_LOSS: 3.1,
                    schema.METRIC_FINAL_VAL_LOSS: math.nan,
                    schema.METRIC_TOKENS: 2000,
                    "fail_reason": "non-finite loss at 2000 tokens",
                }
            )
        elif end is schema.TrialState.PRUNED:
            # what the executors do when their pruner stops a trial
            run.end(schema.TrialState.PRUNED)
        else:
            run.log_result(
                {
                    "state": schema.TrialState.COMPLETE,
                    schema.METRIC_BEST_VAL_LOSS: min(losses),
                    schema.METRIC_FINAL_VAL_LOSS: losses[-1],
                    schema.METRIC_TOKENS: 3000,
                    "steps": 30,
                    schema.METRIC_WALL_S: 1.5,
                    schema.METRIC_TRAIN_FLOPS: 6000.0 * 3000,
                    "mfu": None,
                }
            )
    return run


def log_fake_trials(ctx, numbers):
    for n in numbers:
        try:
            log_fake_trial(ctx, n)
        except RuntimeError:
            assert TRIALS[n][3] is schema.TrialState.FAILED


def artifact_root(client, run_id):
    return Path(client.get_run(run_id).info.artifact_uri.removeprefix("file://"))


def children_of(client, experiment_id, parent_run_id, **kw):
    return client.search_runs(
        [experiment_id], f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_run_id}'", **kw)


# ------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def fake(tmp_path_factory, new_store):
    """The made-up study of `TRIALS`, logged and finished once; read-only (no test writes)."""
    out = tmp_path_factory.mktemp("fake")
    new_store(out)
    uri = default_tracking_uri(out)
    tracker = StudyTracker.start(uri, "fake", SPEC, executor="optuna", algorithm="tpe/hyperband")
    tracker.log_baseline(5.5)
    log_fake_trials(tracker.context, TRIALS)
    summary = finish_study(tracker)
    client = MlflowClient(uri)
    children = {
        int(r.data.tags[schema.TAG_TRIAL_NUMBER]): r
        for r in children_of(client, tracker.experiment_id, tracker.parent_run_id)
    }
    return {
        "out": out,
        "uri": uri,
        "experiment_id": tracker.experiment_id,
        "parent_run_id": tracker.parent_run_id,
        "client": client,
        "summary": summary,
        "children": children,
    }


@pytest.fixture
def uri(tmp_path, new_store):
    """A new, empty store for one test."""
    return new_store(tmp_path / "store")


@pytest.fixture
def client(uri):
    return MlflowClient(uri)


@pytest.fixture
def tracker(uri):
    """A fresh study (parent run) in the test's own store."""
    return StudyTracker.start(uri, "fake", SPEC, executor="optuna", algorithm="tpe")


# ------------------------------------------------------------------ the made-up study, read
def test_default_store_and_artifacts_live_in_the_output_folder(fake):
    out = fake["out"]
    assert fake["uri"] == f"sqlite:///{out.resolve()}/mlflow.db"
    assert (out / "mlflow.db").is_file()
    experiment = fake["client"].get_experiment(fake["experiment_id"])
    assert experiment.name == "fake"
    assert experiment.artifact_location == (out.resolve() / "mlartifacts").as_uri()
    assert (out / "mlartifacts").is_dir()


def test_parent_run_has_tags_metrics_and_artifacts(fake):
    client = fake["client"]
    parent = client.get_run(fake["parent_run_id"])
    tags, metrics = parent.data.tags, parent.data.metrics
    assert tags[schema.TAG_KIND] == schema.KIND_STUDY
    assert tags[schema.TAG_EXECUTOR] == "optuna"
    assert tags[schema.TAG_ALGORITHM] == "tpe/hyperband"
    assert len(tags[schema.TAG_SPEC_HASH]) == 16
    assert tags[schema.TAG_STATE] == schema.TrialState.COMPLETE
    assert parent.info.status == "FINISHED"
    assert metrics[schema.METRIC_BASELINE] == 5.5
    assert metrics[schema.METRIC_BEST_VAL_LOSS] == 2.1
    state = schema.TrialState
    expected = {state.COMPLETE: 2, state.PRUNED: 1, state.FAILED: 1, state.INFEASIBLE: 1,
                state.DIVERGED: 1, state.RUNNING: 0, state.INTERRUPTED: 0}
    assert {s: metrics[schema.count_metric(s)] for s in schema.TrialState} == expected
    assert tags[schema.TAG_BEST_TRIAL] == "1"
    assert tags[schema.TAG_BEST_RUN_ID] == fake["children"][1].info.run_id
    assert fake["summary"]["best_trial"] == 1
    assert fake["summary"]["best_run_id"] == fake["children"][1].info.run_id
    assert fake["summary"][schema.METRIC_BEST_VAL_LOSS] == 2.1
    assert fake["summary"]["state"] is schema.TrialState.COMPLETE
    assert fake["summary"]["counts"] == {s.value: n for s, n in expected.items()}

    root = artifact_root(client, fake["parent_run_id"])
    assert yaml.safe_load((root / schema.SPEC_ARTIFACT).read_text()) == SPEC
    best = yaml.safe_load((root / schema.BEST_CONFIG_ARTIFACT).read_text())
    assert best["model"]["d_model"] == 128
    assert best["train"]["lr"] == 2e-3
    assert best["train"]["betas"] == [0.9, 0.95]
    csv_lines = (root / schema.TRIALS_ARTIFACT).read_text().splitlines()
    assert len(csv_lines) == 1 + len(TRIALS)
    assert csv_lines[0].startswith(f"trial,state,{schema.METRIC_BEST_VAL_LOSS},")
    assert csv_lines[1].startswith(f"1,{schema.TrialState.COMPLETE.value},2.1,")
    plots = {p.name for p in (root / "plots").iterdir()}
    assert {"val_loss_curves.png", "optimization_history.png", "parallel_coordinate.png"} <= plots
    assert "param_importances.png" in plots
    assert all((root / "plots" / p).stat().st_size > 5000 for p in plots)


def test_parent_and_experiment_carry_the_summary_a_researcher_looks_for(fake):
    client = fake["client"]
    parent = client.get_run(fake["parent_run_id"])
    tags, metrics = parent.data.tags, parent.data.metrics
    assert tags[schema.TAG_CORPUS] == "synthetic:markov"
    assert metrics[schema.METRIC_BEST_OVER_BASELINE] == pytest.approx(2.1 / 5.5)
    note = tags[schema.TAG_NOTE]
    best_id = fake["children"][1].info.run_id
    assert note.splitlines()[0] == "**fake**: COMPLETE."
    assert (f"best trial: **[trial-1](#/experiments/{fake['experiment_id']}/runs/{best_id}"
            "?workflowType=machine_learning)**, "
            "best val loss **2.1000** nats/token, **0.382** x the unigram baseline (5.5000;"
            ) in note
    assert "- trials: 2 COMPLETE, 1 PRUNED, 1 DIVERGED, 1 FAILED, 1 INFEASIBLE\n" in note
    assert "- corpus synthetic:markov\n- search: optuna tpe/hyperband" in note
    experiment = client.get_experiment(fake["experiment_id"])
    description = experiment.tags[schema.TAG_NOTE]
    assert description.startswith(
        f"transformer-sweep study **fake**, spec hash `{tags[schema.TAG_SPEC_HASH]}`, made by "
        "the Python API")
    assert "nested `trial-<n>` runs are the trials" in description


def test_the_experiment_names_the_command_that_made_it_across_resumes(uri, client):
    first = StudyTracker.start(uri, "cmd", SPEC, executor="optuna", algorithm="tpe",
                               command="sweep run a.yaml --out runs/cmd")
    assert "made by the Python API" not in client.get_experiment(first.experiment_id).tags[
        schema.TAG_NOTE]
    running = client.get_run(first.parent_run_id).data.tags
    assert running[schema.TAG_NOTE].startswith("**cmd** is running")
    assert running[schema.TAG_COMMAND] == "sweep run a.yaml --out runs/cmd"
    first.finish([])
    again = StudyTracker.start(uri, "cmd", SPEC, executor="optuna", algorithm="tpe",
                               resume=True, command="sweep run b.yaml --out runs/cmd")
    note = client.get_experiment(again.experiment_id).tags[schema.TAG_NOTE]
    assert "made by `sweep run a.yaml --out runs/cmd`." in note
    assert "Last resumed by `sweep run b.yaml --out runs/cmd`." in note
    ended = again.finish([], interrupted="interrupted by SIGTERM")
    assert ended["state"] is schema.TrialState.INTERRUPTED
    tags = client.get_run(again.parent_run_id).data.tags
    assert tags[schema.TAG_COMMAND] == "sweep run b.yaml --out runs/cmd"
    assert tags[schema.TAG_NOTE].splitlines()[:3] == [
        "**cmd**: INTERRUPTED. Stopped: interrupted by SIGTERM", "",
        "- best trial: none completed"]


def test_tokens_is_logged_beside_every_val_loss_at_the_same_step(fake):
    client = fake["client"]
    for n in (0, 3):  # a COMPLETE trial (its total logged at the end) and a PRUNED one
        run_id = fake["children"][n].info.run_id
        losses = {m.step for m in client.get_metric_history(run_id, schema.METRIC_VAL_LOSS)}
        tokens = client.get_metric_history(run_id, schema.METRIC_TOKENS)
        assert {m.step for m in tokens} == losses, n
        assert all(m.value == m.step for m in tokens)
    assert fake["children"][0].data.metrics[schema.METRIC_TOKENS] == 3000  # the total


def test_one_child_run_per_trial_with_params_metrics_and_tags(fake):
    children, parent_id = fake["children"], fake["parent_run_id"]
    assert sorted(children) == sorted(TRIALS)
    for n, run in children.items():
        d_model, lr, losses, end = TRIALS[n]
        assert run.info.run_name == schema.run_name(n) == f"trial-{n}"
        assert run.data.tags[MLFLOW_PARENT_RUN_ID] == parent_id
        assert run.data.tags[schema.TAG_STATE] == end.value
        params = run.data.params
        assert params["model.d_model"] == str(d_model)
        assert float(params["train.lr"]) == lr
        assert params["model.d_ff"] == "None"
        assert params["train.betas"] == "[0.9, 0.95]"
        for key, value in COSTS.items():
            assert run.data.metrics[key] == value
    # Only a trial's own fault shows as failed: MLflow's UI marks KILLED as red as FAILED, so a
    # pruned or infeasible trial's run is FINISHED and its tag tells which it was.
    status = {n: r.info.status for n, r in children.items()}
    assert status == {
        0: "FINISHED",
        1: "FINISHED",
        2: "FAILED",
        3: "FINISHED",
        4: "FAILED",
        5: "FINISHED",
    }


def test_read_trials_gives_states_params_and_metrics_back(fake):
    trials = tracking.read_trials(fake["uri"], fake["experiment_id"], fake["parent_run_id"])
    assert [t["trial"] for t in trials] == sorted(TRIALS)
    for t in trials:
        d_model, lr, losses, end = TRIALS[t["trial"]]
        assert t["state"] is end
        assert t["run_id"] == fake["children"][t["trial"]].info.run_id
        assert t["run_name"] == schema.run_name(t["trial"])
        assert t["params"]["model.d_model"] == d_model and t["params"]["train.lr"] == lr
        assert t["params"]["model.d_ff"] is None and t["params"]["train.betas"] == [0.9, 0.95]
        assert t["end_time"] >= t["start_time"] > 0
    by_number = {t["trial"]: t for t in trials}
    assert by_number[1]["metrics"][schema.METRIC_VAL_LOSS] == 2.1  # the last value
    assert by_number[4]["fail_reason"] == "RuntimeError: out of memory in trial 4"
    assert by_number[0]["fail_reason"] is None
    assert tracking.find_study(fake["uri"], "fake") == (fake["experiment_id"],
                                                       fake["parent_run_id"])
    assert tracking.find_study(fake["uri"], "no such study") is None
    assert tracking.list_studies(fake["uri"]) == ["fake"]


def test_val_loss_history_has_tokens_as_steps(fake):
    client, run = fake["client"], fake["children"][1]
    history = client.get_metric_history(run.info.run_id, schema.METRIC_VAL_LOSS)
    assert [(m.step, m.value) for m in history] == list(zip(TOKENS, [2.8, 2.2, 2.1], strict=True))
    train = client.get_metric_history(run.info.run_id, schema.METRIC_TRAIN_LOSS)
    assert [m.step for m in train] == TOKENS
    assert run.data.metrics[schema.METRIC_BEST_VAL_LOSS] == 2.1
    assert run.data.metrics[schema.METRIC_TOKENS] == 3000
    assert run.data.metrics[schema.METRIC_TOKENS_PER_S] == 5e3
    assert "mfu" not in run.data.metrics  # None is not logged
    histories = tracking.val_loss_histories(fake["uri"], [run.info.run_id])
    assert histories == {run.info.run_id: list(zip(TOKENS, [2.8, 2.2, 2.1], strict=True))}


def test_diverged_trial_ends_its_losses_in_nan_and_never_ranks_first(fake):
    client, children = fake["client"], fake["children"]
    diverged = children[2]
    history = client.get_metric_history(diverged.info.run_id, schema.METRIC_VAL_LOSS)
    # The nan its runner reported is not logged; one nan marks where it diverged (tokens).
    assert [(m.step, m.value) for m in history][:1] == [(1000, 3.1)]
    assert [m.step for m in history] == [1000, 2000] and math.isnan(history[1].value)
    assert schema.METRIC_BEST_VAL_LOSS not in diverged.data.metrics
    assert schema.METRIC_FINAL_VAL_LOSS not in diverged.data.metrics
    assert diverged.data.tags[schema.TAG_FAIL_REASON] == "non-finite loss at 2000 tokens"
    ranked = children_of(client, fake["experiment_id"], fake["parent_run_id"],
                         order_by=[f"metrics.{schema.METRIC_BEST_VAL_LOSS} ASC"])
    order = [int(r.data.tags[schema.TAG_TRIAL_NUMBER]) for r in ranked]
    assert order[:3] == [1, 0, 3]
    nan = {(int(r.data.tags[schema.TAG_TRIAL_NUMBER]), k) for r in ranked
           for k, v in r.data.metrics.items() if not math.isfinite(v)}
    assert nan == {(2, schema.METRIC_VAL_LOSS), (2, schema.METRIC_TRAIN_LOSS)}


def test_raising_trial_ends_failed_and_next_trial_gets_a_fresh_run(fake):
    failed, pruned = fake["children"][4], fake["children"][3]
    assert failed.data.tags[schema.TAG_FAIL_REASON] == "RuntimeError: out of memory in trial 4"
    assert schema.METRIC_BEST_VAL_LOSS not in failed.data.metrics
    root = artifact_root(fake["client"], failed.info.run_id)
    assert "Traceback" in (root / schema.FAIL_REASON_ARTIFACT).read_text()
    assert pruned.info.run_id != failed.info.run_id
    assert pruned.data.metrics[schema.METRIC_BEST_VAL_LOSS] == 3.5  # a pruned trial keeps its best
    assert schema.TAG_FAIL_REASON not in pruned.data.tags
    infeasible = fake["children"][5]
    assert infeasible.data.tags[schema.TAG_FAIL_REASON] == "n_params 2e9 > max_params 1e9"
    assert schema.METRIC_VAL_LOSS not in infeasible.data.metrics


# ----------------------------------------------------------- trial runs, each in its own store
def test_an_exception_inside_a_run_is_failed_even_optunas_pruned(tracker, client):
    # Only run.end(PRUNED) prunes: the service never raises TrialPruned inside a run, so one
    # that escapes is a bug of the trial's and ends it FAILED.
    with pytest.raises(optuna.TrialPruned):
        with tracker.start_trial(0, config(64, 1e-3)) as run:
            run.report(1000, {schema.METRIC_VAL_LOSS: 3.0})
            raise optuna.TrialPruned("pruned at 1000")
    logged = client.get_run(run.run_id)
    assert logged.data.tags[schema.TAG_STATE] == schema.TrialState.FAILED
    assert logged.data.tags[schema.TAG_FAIL_REASON] == "TrialPruned: pruned at 1000"
    assert logged.info.status == "FAILED"
    assert schema.METRIC_BEST_VAL_LOSS not in logged.data.metrics


def test_end_refuses_an_unknown_or_running_state(tracker, client):
    with tracker.start_trial(0) as run:
        for state in ("DONE", schema.TrialState.RUNNING):
            with pytest.raises(ValueError, match="is not one of"):
                run.end(state)
    assert client.get_run(run.run_id).data.tags[schema.TAG_STATE] == schema.TrialState.COMPLETE


def test_long_param_goes_to_an_artifact_and_the_rest_is_logged(tracker, client):
    long_value = "x" * (MAX_PARAM_VAL_LENGTH + 1000)
    with tracker.start_trial(100, {"model": {"d_model": 64}, "train": {"note": long_value}}) as run:
        run.report(10, {schema.METRIC_VAL_LOSS: 1.0})
    logged = client.get_run(run.run_id)
    param = logged.data.params["train.note"]
    assert len(param) <= MAX_PARAM_VAL_LENGTH
    assert param.startswith("x" * 100)
    assert "params/train.note.txt" in param
    assert logged.data.tags[schema.TAG_TRUNCATED] == "train.note"
    assert logged.data.params["model.d_model"] == "64"
    assert logged.data.metrics[schema.METRIC_BEST_VAL_LOSS] == 1.0
    root = artifact_root(client, run.run_id)
    assert (root / "params" / "train.note.txt").read_text() == long_value


def test_param_the_store_rejects_fails_the_run_with_the_reason(tracker, client):
    with pytest.raises(MlflowException):
        tracker.context.start_trial(104, {"model": {"d_model!": 64}})
    (run,) = client.search_runs([tracker.experiment_id],
                                f"tags.`{schema.TAG_TRIAL_NUMBER}` = '104'")
    assert run.info.status == "FAILED"
    assert run.data.tags[schema.TAG_STATE] == schema.TrialState.FAILED
    assert run.data.tags[schema.TAG_FAIL_REASON].startswith("logging params: MlflowException")


def test_long_fail_reason_is_truncated_in_the_tag_and_kept_whole(tracker, client):
    reason = "diverged: " + "y" * MAX_TAG_VAL_LENGTH
    with tracker.start_trial(101, {"model": {"d_model": 64}}) as run:
        run.end(schema.TrialState.DIVERGED, fail_reason=reason)
    logged = client.get_run(run.run_id)
    assert logged.data.tags[schema.TAG_FAIL_REASON] == reason[:MAX_TAG_VAL_LENGTH]
    root = artifact_root(client, run.run_id)
    assert (root / schema.FAIL_REASON_ARTIFACT).read_text() == reason


def test_pbt_mutation_is_a_metric_and_the_param_keeps_its_first_value(tracker, client):
    with tracker.start_trial(102, {"train": {"lr": 1e-3, "dropout": 0.0}}) as run:
        run.report(1000, {schema.METRIC_VAL_LOSS: 3.0})
        run.log_mutation(1000, {"train": {"lr": 5e-4}})
        run.log_mutation(2000, {"train.lr": 2.5e-4, "model.attn_pattern": "local"})
        with pytest.raises(ValueError, match="train.lr"):
            run.log_params({"train": {"lr": 7e-4}})
        run.log_params({"train": {"lr": 1e-3, "weight_decay": 0.1}})
    logged = client.get_run(run.run_id)
    assert logged.data.params["train.lr"] == "0.001"
    assert logged.data.params["train.weight_decay"] == "0.1"
    history = client.get_metric_history(run.run_id, schema.mutation_key("train.lr"))
    assert sorted((m.step, m.value) for m in history) == [(1000, 5e-4), (2000, 2.5e-4)]
    assert logged.data.tags[schema.mutation_key("train.lr")] == "0.00025"
    assert logged.data.tags[schema.mutation_key("model.attn_pattern")] == "local"
    assert schema.mutation_key("model.attn_pattern") not in logged.data.metrics  # not a number
    assert logged.data.tags[schema.TAG_STATE] == schema.TrialState.COMPLETE


def test_attach_continues_a_trial_from_another_worker(tracker, client):
    with tracker.start_trial(103, config(64, 1e-3)) as first:
        first.report(1000, {schema.METRIC_VAL_LOSS: 2.0})
        first.log_result({"state": schema.TrialState.RUNNING,
                          "history": [{schema.METRIC_TOKENS: 1000, schema.METRIC_VAL_LOSS: 2.0}]})
        run_id = first.run_id
        first.detach()
    assert client.get_run(run_id).info.status == "RUNNING"
    assert client.get_run(run_id).data.tags[schema.TAG_STATE] == schema.TrialState.RUNNING
    ctx = TrialContext(tracker.context.tracking_uri, tracker.experiment_id, tracker.parent_run_id)
    with ctx.attach_trial(run_id) as again:
        assert (again.number, again.last_step, again.best_val_loss) == (103, 1000, 2.0)
        history = [{schema.METRIC_TOKENS: 1000, schema.METRIC_VAL_LOSS: 2.0},
                   {schema.METRIC_TOKENS: 2000, schema.METRIC_VAL_LOSS: 1.5}]
        again.log_result({"state": schema.TrialState.COMPLETE, schema.METRIC_BEST_VAL_LOSS: 1.5,
                          "history": history})
    history = client.get_metric_history(run_id, schema.METRIC_VAL_LOSS)
    assert sorted((m.step, m.value) for m in history) == [(1000, 2.0), (2000, 1.5)]
    assert client.get_run(run_id).data.metrics[schema.METRIC_BEST_VAL_LOSS] == 1.5
    assert tracking.find_trial_run(ctx, 103) == run_id
    assert tracking.find_trial_run(ctx, 104) is None


def test_threads_log_to_their_own_runs(tracker, client):
    ctx = tracker.context
    run_ids = {}

    def work(n):
        with ctx.start_trial(n, {"model": {"d_model": n}}) as run:
            for step in range(1, 11):
                run.report(step * 100, {schema.METRIC_VAL_LOSS: n + 1.0 / step})
            run_ids[n] = run.run_id

    threads = [threading.Thread(target=work, args=(n,)) for n in range(200, 204)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(run_ids) == 4
    for n, run_id in run_ids.items():
        run = client.get_run(run_id)
        assert run.data.params == {"model.d_model": str(n)}
        assert run.data.metrics[schema.METRIC_BEST_VAL_LOSS] == pytest.approx(n + 0.1)
        assert len(client.get_metric_history(run_id, schema.METRIC_VAL_LOSS)) == 10


# -------------------------------------------------------------- whole studies, each in its own
def test_finish_alone_summarises_but_draws_no_table_or_plots(uri, client):
    tracker = StudyTracker.start(uri, "bare", SPEC, executor="optuna", algorithm="tpe")
    log_fake_trials(tracker.context, (0, 3))
    summary = tracker.finish()  # reads the trials itself; finish_study draws the table/plots
    assert summary["state"] is schema.TrialState.COMPLETE and summary["best_trial"] == 0
    assert summary[schema.METRIC_BEST_VAL_LOSS] == 2.5
    logged = {a.path for a in client.list_artifacts(tracker.parent_run_id)}
    assert logged == {schema.SPEC_ARTIFACT, schema.BEST_CONFIG_ARTIFACT}
    assert client.get_run(tracker.parent_run_id).data.metrics[schema.count_metric("PRUNED")] == 1


def test_finish_summarises_the_trials_it_is_given(uri, client):
    tracker = StudyTracker.start(uri, "given", SPEC, executor="optuna", algorithm="tpe")
    log_fake_trials(tracker.context, (0, 1))
    trials = tracking.read_trials(uri, tracker.experiment_id, tracker.parent_run_id)
    summary = tracker.finish([t for t in trials if t["trial"] == 0], trials_csv="trial\n0\n")
    assert summary["best_trial"] == 0 and summary["counts"][schema.TrialState.COMPLETE] == 1
    root = artifact_root(client, tracker.parent_run_id)
    assert (root / schema.TRIALS_ARTIFACT).read_text() == "trial\n0\n"
    assert not (root / "plots").exists()


def test_study_without_a_complete_trial_fails(uri, client):
    tracker = StudyTracker.start(uri, "doomed", SPEC, executor="ray", algorithm="asha")
    log_fake_trials(tracker.context, (2, 4))
    summary = finish_study(tracker)
    parent = client.get_run(tracker.parent_run_id)
    assert summary["state"] is schema.TrialState.FAILED and summary["best_trial"] is None
    assert math.isnan(summary[schema.METRIC_BEST_VAL_LOSS])
    assert parent.info.status == "FAILED"
    assert parent.data.tags[schema.TAG_STATE] == schema.TrialState.FAILED
    assert schema.METRIC_BEST_VAL_LOSS not in parent.data.metrics
    assert schema.TAG_BEST_TRIAL not in parent.data.tags
    assert parent.data.metrics[schema.count_metric(schema.TrialState.DIVERGED)] == 1
    assert parent.data.metrics[schema.count_metric(schema.TrialState.FAILED)] == 1
    assert parent.data.metrics[schema.count_metric(schema.TrialState.COMPLETE)] == 0
    logged = {a.path for a in client.list_artifacts(tracker.parent_run_id)}
    assert schema.BEST_CONFIG_ARTIFACT not in logged and schema.TRIALS_ARTIFACT in logged


def _worker(uri, number, queue):
    try:
        tracker = StudyTracker.start(uri, f"s{number}", SPEC, executor="optuna", algorithm="tpe")
        ctx = TrialContext(uri, tracker.experiment_id, tracker.parent_run_id)
        with ctx.start_trial(number, config(64, 1e-3)) as run:
            for step in range(1, 21):
                run.report(step * 100, {schema.METRIC_VAL_LOSS: 3.0 - step * 0.01,
                                        schema.METRIC_TRAIN_LOSS: 3.0})
            run.log_result({"state": schema.TrialState.COMPLETE, schema.METRIC_TOKENS: 2000})
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
        assert trial["trial"] == n and trial["state"] is schema.TrialState.COMPLETE
        assert len(client.get_metric_history(trial["run_id"], schema.METRIC_VAL_LOSS)) == 20
        assert trial["metrics"][schema.METRIC_BEST_VAL_LOSS] == pytest.approx(2.8)


def test_optuna_study_plots_and_pareto_front(uri, client):
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
            run.report(1000, {schema.METRIC_VAL_LOSS: loss})
    finish_study(tracker, study,
                 objective_names=[schema.METRIC_VAL_LOSS, schema.METRIC_TRAIN_FLOPS])
    root = artifact_root(client, tracker.parent_run_id)
    plots = {p.name for p in (root / "plots").iterdir()}
    assert {"pareto_front.png", "optimization_history.png", "val_loss_curves.png"} <= plots


def test_plots_that_cannot_be_drawn_are_skipped(uri, client, caplog, monkeypatch):
    from optuna.visualization import matplotlib as ovm

    def broken(*args, **kwargs):
        raise RuntimeError("no display")

    monkeypatch.setattr(ovm, "plot_optimization_history", broken)
    tracker = StudyTracker.start(uri, "one", SPEC, executor="optuna", algorithm="tpe")
    log_fake_trial(tracker.context, 1)
    with caplog.at_level("WARNING", logger="sweep.results"):
        summary = finish_study(tracker)
    assert summary["state"] is schema.TrialState.COMPLETE
    assert "plot param_importances skipped: ValueError: needs >= 2 complete trials" in caplog.text
    assert "plot optimization_history skipped: RuntimeError: no display" in caplog.text
    root = artifact_root(client, tracker.parent_run_id)
    assert {p.name for p in (root / "plots").iterdir()} == {"val_loss_curves.png"}
    assert (root / schema.TRIALS_ARTIFACT).is_file()


def test_study_context_manager_marks_a_crashed_driver_failed(uri, client):
    with pytest.raises(KeyboardInterrupt):
        with StudyTracker.start(uri, "crash", SPEC, executor="optuna", algorithm="tpe") as t:
            raise KeyboardInterrupt()
    parent = client.get_run(t.parent_run_id)
    assert parent.info.status == "FAILED"
    assert parent.data.tags[schema.TAG_STATE] == schema.TrialState.FAILED
    assert parent.data.tags[schema.TAG_FAIL_REASON].startswith("KeyboardInterrupt")


def test_study_context_manager_finishes_a_study_on_normal_exit(uri, client):
    with StudyTracker.start(uri, "ok", SPEC, executor="optuna", algorithm="tpe") as t:
        log_fake_trial(t.context, 0)
    parent = client.get_run(t.parent_run_id)
    assert parent.info.status == "FINISHED" and t.finished
    assert parent.data.tags[schema.TAG_STATE] == schema.TrialState.COMPLETE
    assert parent.data.metrics[schema.METRIC_BEST_VAL_LOSS] == 2.5


# ---------------------------------------------------------------------------------- resume
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


def test_resume_reopens_the_parent_or_refuses(uri, client):
    first = StudyTracker.start(uri, "r", SPEC, executor="optuna", algorithm="tpe")
    log_fake_trial(first.context, 0)
    first.finish()
    bad = changed("model", "d_model", {"choice": [32, 64]})
    with pytest.raises(ResumeError, match=r"model.d_model.*\[64, 128\].*\[32, 64\]"):
        StudyTracker.start(uri, "r", bad, executor="optuna", algorithm="tpe", resume=True)
    wider = changed("train", "lr", {"float": [1e-5, 1e-2], "log": True})
    again = StudyTracker.start(uri, "r", wider, executor="optuna", algorithm="tpe", resume=True)
    assert again.parent_run_id == first.parent_run_id
    parent = client.get_run(again.parent_run_id)
    assert parent.info.status == "RUNNING"
    assert parent.data.tags[schema.TAG_STATE] == schema.TrialState.RUNNING
    log_fake_trial(again.context, 1)
    summary = again.finish()
    assert summary["counts"][schema.TrialState.COMPLETE] == 2 and summary["best_trial"] == 1
    root = artifact_root(client, again.parent_run_id)
    assert yaml.safe_load((root / schema.SPEC_ARTIFACT).read_text()) == wider
    assert len(list((root / "spec_history").iterdir())) == 1
    fresh = StudyTracker.start(uri, "r", bad, executor="optuna", algorithm="tpe")
    assert fresh.parent_run_id != first.parent_run_id


# ------------------------------------------------------------------------- URIs and codec
def test_relative_sqlite_uri_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = tracking.absolute_uri("sqlite:///runs/x/mlflow.db")
    assert uri == f"sqlite:///{tmp_path.resolve()}/runs/x/mlflow.db"
    assert tracking.absolute_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


@pytest.mark.parametrize("value", [128, 1e-3, True, False, None, "dense", [0.9, 0.95], 2.5e-05,
                                   {"a": 1}, 0, -3.5, "local"])
def test_param_values_round_trip(value):
    decoded = params.decode_param(params.encode_param(value))
    assert decoded == value and type(decoded) is type(value)


def test_param_codec_writes_what_mlflow_shows_and_reads_tuples_as_lists():
    assert params.encode_param((0.9, 0.95)) == "[0.9, 0.95]"
    assert params.decode_param(params.encode_param((0.9, 0.95))) == [0.9, 0.95]
    assert params.encode_param(None) == "None" and params.encode_param(True) == "True"
    assert params.decode_param("[not json") == "[not json"
    assert params.decode_param("1e-3") == 1e-3


def test_a_choice_is_told_to_optuna_as_its_mlflow_param():
    options = [[0.9, 0.95], [0.9, 0.99]]
    labels = params.choice_labels(options)
    assert labels == [params.encode_param(o) for o in options] == ["[0.9, 0.95]", "[0.9, 0.99]"]
    assert [params.choice_value(options, label) for label in labels] == options
    assert params.choice_labels(["dense", "local"]) == ["dense", "local"]
    assert params.choice_value(["dense", "local"], "local") == "local"


def test_flatten_and_unflatten_params_invert_each_other():
    nested = config(64, 1e-3)
    flat = params.flatten_params(nested)
    assert flat["model.d_model"] == 64 and flat["train.betas"] == (0.9, 0.95)
    assert set(flat) == {f"{s}.{k}" for s, section in nested.items() for k in section}
    assert params.unflatten_params(flat) == nested
    # dotted keys pass through
    assert params.flatten_params({"train.lr": 1e-3}) == {"train.lr": 1e-3}


@pytest.mark.parametrize(("address", "shown"), [
    ("postgresql+psycopg2://sweep:Hunter2@127.0.0.1:5432/optuna",
     "postgresql+psycopg2://sweep:***@127.0.0.1:5432/optuna"),
    ("postgresql://sweep@db/optuna?sslmode=require&password=Hunter2",
     "postgresql://sweep@db/optuna?sslmode=require&password=***"),
    ("http://user:s3cret@127.0.0.1:5000", "http://user:***@127.0.0.1:5000"),
    ("http://[::1", "http://***"),
    ("sqlite:///runs/x/mlflow.db", "sqlite:///runs/x/mlflow.db"),  # unchanged, as written
    ("runs/x/optuna.journal", "runs/x/optuna.journal"),
])
def test_shown_uri_hides_passwords_and_nothing_else(address, shown):
    assert tracking.shown_uri(address) == shown


@pytest.mark.slow  # MLflow retries the locked store for about 20 s
def test_an_interrupt_whose_end_cannot_be_written_still_interrupts(tmp_path, new_store):
    # Ctrl-C landed inside a store write and the store stays locked (SQLite "database is
    # locked", another connection holding the write lock): ending the run fails, and the
    # interrupt must still reach the driver instead of a failed trial and a study that goes on.
    import sqlite3

    from sweep.tracking.trial_run import TrialRun

    new_store(tmp_path)
    db = tmp_path / "mlflow.db"
    client = MlflowClient(f"sqlite:///{db}")
    experiment_id = client.create_experiment("locked")
    run_id = client.create_run(experiment_id).info.run_id
    lock = sqlite3.connect(db, timeout=0.1)
    run = TrialRun(client, run_id, 0)
    with pytest.raises(KeyboardInterrupt):
        with run:
            lock.execute("BEGIN EXCLUSIVE")
            raise KeyboardInterrupt()
    lock.rollback()
    lock.close()
    assert client.get_run(run_id).info.status == "RUNNING"  # left for the next resume to end
