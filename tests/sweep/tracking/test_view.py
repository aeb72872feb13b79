"""What MLflow's UI and optuna-dashboard open on for a study: the saved view of its trials, the
params as the spec searched them, each trial's state in its description, named objectives.

The view's keys are the ones MLflow 3.17's runs page reads (``mlflow/server/js``); the browser
test (tests/sweep/results/test_browser.py) checks what a browser shows of them.
"""

import json
import urllib.parse

import optuna
import pytest
from mlflow import MlflowClient
from testsupport import tiny_spec

from sweep import schema
from sweep.results import load_results
from sweep.schema import TrialState
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.study.retrain import from_study
from sweep.tracking import find_study, read_landing_query, run_url, study_view
from sweep.tracking.notes import trial_note
from sweep.tracking.view import children_filter, landing_query

VIEW_TAG = schema.TAG_VIEW_PREFIX + schema.VIEW_KEY


def test_the_view_lists_the_parents_trials_best_first_with_the_searched_params():
    view = study_view("abc123", ["model.d_head", "train.lr"])
    assert view["searchFilter"] == "tags.`mlflow.parentRunId` = 'abc123'"
    assert (view["orderByKey"], view["orderByAsc"]) == ("metrics.`best_val_loss`", True)
    columns = view["selectedColumns"]
    for column in ("attributes.`Description`", "metrics.`best_val_loss`",
                   "metrics.`final_val_loss`", "metrics.`n_params`", "metrics.`flops_per_token`",
                   "params.`model.d_head`", "params.`train.lr`", "tags.`sweep.state`"):
        assert column in columns
    assert view["globalLineChartConfig"]["xAxisKey"] == "metric"
    assert view["globalLineChartConfig"]["selectedXAxisMetricKey"] == schema.METRIC_TOKENS


def test_the_landing_query_opens_the_saved_view_or_filters_an_old_study_to_its_trials():
    assert landing_query({VIEW_TAG: "{}"}, "p1") == (
        f"viewStateShareKey={schema.VIEW_KEY}&workflowType=machine_learning")
    old = urllib.parse.parse_qs(landing_query({}, "p1"))
    assert old["searchFilter"] == [children_filter("p1")]
    assert old["orderByKey"] == ["metrics.`best_val_loss`"] and old["orderByAsc"] == ["true"]
    assert old["workflowType"] == ["machine_learning"]


def test_a_run_link_names_the_server_without_its_password_or_the_local_ui():
    assert run_url("http://bob:secret@host:5001/", "3", "r1") == (
        "http://host:5001/#/experiments/3/runs/r1?workflowType=machine_learning")
    assert run_url("sqlite:////x/mlflow.db", "3", "r1").startswith(
        "http://127.0.0.1:5000/#/experiments/3/runs/r1?")


def test_a_trials_description_says_its_state_where_it_stopped_and_why():
    assert trial_note(TrialState.COMPLETE, tokens=4096) == "COMPLETE"
    assert trial_note(TrialState.PRUNED, tokens=2048) == "PRUNED at 2,048 tokens"
    assert trial_note(TrialState.INFEASIBLE, reason="n_params 14,304 > max_params 9,000") == (
        "INFEASIBLE: n_params 14,304 > max_params 9,000")


SEARCHED = {"d_model": {"choice": [16, 32]}, "d_head": {"choice": [8, 16]},
            "d_ff_ratio": {"choice": [2.0, 4.0]}}


@pytest.fixture(scope="module")
def study(tmp_path_factory, new_store):
    """Six trials searching ``d_head`` and ``d_ff_ratio``; the wide ones are infeasible."""
    out = tmp_path_factory.mktemp("view") / "view-study"
    new_store(out)
    model = {k: v for k, v in tiny_spec("x")["model"].items() if k != "n_heads"}
    spec = tiny_spec("view-study", model={**model, **SEARCHED},
                     search={"n_trials": 6, "seed": 0}, constraints={"max_params": 10_000})
    del spec["model"]["n_heads"]
    summary = run_study(parse_spec(spec), out_dir=out, quiet=True)
    experiment_id, parent_id = find_study(summary.tracking_uri, "view-study")
    client = MlflowClient(summary.tracking_uri)
    runs = client.search_runs([experiment_id], children_filter(parent_id))
    return {"out": out, "summary": summary, "client": client, "runs": runs,
            "experiment_id": experiment_id, "parent_id": parent_id}


def test_a_trial_logs_the_searched_params_as_written_beside_the_derived_ones(study):
    states = {r.data.tags[schema.TAG_STATE] for r in study["runs"]}
    assert {"COMPLETE", "INFEASIBLE"} <= states, states
    for run in study["runs"]:
        params = run.data.params
        d_model, d_head = int(params["model.d_model"]), int(params["model.d_head"])
        assert int(params["model.n_heads"]) == d_model // d_head
        assert int(params["model.d_ff"]) == round(float(params["model.d_ff_ratio"]) * d_model)
        note = run.data.tags[schema.TAG_NOTE]
        assert note.startswith(run.data.tags[schema.TAG_STATE]), note
        if run.data.tags[schema.TAG_STATE] == "INFEASIBLE":
            assert "max_params" in note
    parent = study["client"].get_run(study["parent_id"])
    assert parent.data.tags[schema.TAG_SEARCHED] == "model.d_model,model.d_head,model.d_ff_ratio"


def test_the_study_saves_its_view_and_sweep_ui_opens_it(study):
    experiment = study["client"].get_experiment(study["experiment_id"])
    view = json.loads(experiment.tags[VIEW_TAG])
    assert view == study_view(study["parent_id"],
                              ["model.d_model", "model.d_head", "model.d_ff_ratio"])
    assert experiment.tags[schema.TAG_EXPERIMENT_KIND] == schema.KIND_MODEL_TRAINING
    query = read_landing_query(study["summary"].tracking_uri, study["experiment_id"],
                               study["parent_id"])
    assert query.startswith(f"viewStateShareKey={schema.VIEW_KEY}&")


def test_results_name_the_searched_params_and_a_retrain_builds_from_the_derived_ones(study):
    frame = load_results(study["out"])
    assert frame.attrs["searched"] == ["model.d_model", "model.d_head", "model.d_ff_ratio"]
    assert {"model.d_head", "model.n_heads", "model.d_ff_ratio", "model.d_ff"} <= set(frame)
    chosen = from_study(str(study["out"]))
    assert "d_head" not in chosen.base.model and "d_ff_ratio" not in chosen.base.model
    assert chosen.base.model["n_heads"] == chosen.base.model["d_model"] // int(
        frame.loc[frame["trial"] == chosen.trial, "model.d_head"].iloc[0])


def test_optuna_dashboard_gets_named_objectives_sizes_and_run_links(study):
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(study["out"] / "optuna.journal")))
    loaded = optuna.load_study(study_name="view-study", storage=storage)
    assert loaded.metric_names == ["best_val_loss"]
    for trial in loaded.trials:
        attrs = trial.user_attrs
        assert attrs[schema.METRIC_N_PARAMS] > 0
        assert attrs[schema.ATTR_MLFLOW_RUN].endswith(
            f"/runs/{attrs[schema.ATTR_RUN_ID]}?workflowType=machine_learning")


def test_the_schedules_rate_is_lr_now_beside_the_param_train_lr(study):
    trained = [r for r in study["runs"] if r.data.tags[schema.TAG_STATE] == "COMPLETE"]
    assert trained
    for run in trained:
        assert "lr" not in run.data.metrics and "train.lr" in run.data.params
        assert 0 < run.data.metrics[schema.METRIC_LR] <= float(run.data.params["train.lr"])


def test_a_study_that_logged_the_schedule_as_lr_still_reads(tmp_path, new_store):
    from sweep.tracking import StudyTracker

    uri = new_store(tmp_path)
    tracker = StudyTracker.start(uri, "old", {"name": "old"}, executor="optuna",
                                 algorithm="tpe")
    with tracker.start_trial(0, {"model": {"d_model": 16}, "train": {"lr": 0.01}}) as run:
        run.report(64, {"val_loss": 2.5, "lr": 0.001})  # the old name of the schedule's rate
        run.report(128, {"val_loss": 2.25, "lr": 0.0005})
    frame = load_results(tmp_path)
    assert frame["best_val_loss"].tolist() == [2.25]
    assert frame["train.lr"].tolist() == [0.01] and frame.attrs["searched"] == []
