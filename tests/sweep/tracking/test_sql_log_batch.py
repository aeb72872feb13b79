"""`sweep.adapters.mlflow.sql_log_batch` writes the rows MLflow's own ``log_batch`` writes."""

import math
import sqlite3

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from sweep.adapters.mlflow import sql_create_run, sql_log_batch, sql_set_terminated

#: Batches logged one after another: NaN and infinities, a key at several steps out of order,
#: one metric twice, a step whose timestamp or value ties, a tag replaced, a param repeated.
BATCHES = [
    {"params": [Param("model.d_model", "64"), Param("train.lr", "0.001")],
     "metrics": [Metric("n_params", 1234.0, 1000, 0), Metric("loss", math.nan, 1000, 0),
                 Metric("big", math.inf, 1000, 0), Metric("small", -math.inf, 1000, 0)],
     "tags": [RunTag("sweep.state", "RUNNING"), RunTag("sweep.owner", "a")]},
    {"params": [Param("train.lr", "0.001"), Param("train.steps", "3")],
     "metrics": [Metric("val_loss", 3.0, 2000, 16), Metric("val_loss", 2.5, 1900, 32),
                 Metric("val_loss", 2.9, 2100, 8), Metric("val_loss", 2.5, 1900, 32),
                 Metric("tie", 1.0, 5, 1), Metric("tie", 2.0, 5, 1), Metric("tie", 1.5, 5, 1),
                 Metric("loss", 2.0, 900, 0)],
     "tags": [RunTag("sweep.state", "COMPLETE")]},
    {"params": [], "metrics": [Metric("val_loss", 2.0, 3000, 32), Metric("late", 1.0, 1, 5),
                               Metric("late", 0.5, 9, 4)], "tags": []},
]

TABLES = {"params": "key, value", "metrics": "key, value, timestamp, step, is_nan",
          "latest_metrics": "key, value, timestamp, step, is_nan", "tags": "key, value"}


@pytest.fixture
def store(tmp_path, new_store):
    new_store(tmp_path)
    db = tmp_path / "mlflow.db"
    client = MlflowClient(f"sqlite:///{db}")
    return db, client, client.create_experiment("x")


def _rows(db, run_id):
    con = sqlite3.connect(db)
    try:
        return {table: sorted(con.execute(f"SELECT {cols} FROM {table} WHERE run_uuid = ?",
                                          (run_id,)).fetchall(), key=repr)
                for table, cols in TABLES.items()}
    finally:
        con.close()


def test_the_same_batches_make_the_same_rows_as_mlflows_log_batch(store):
    db, client, experiment = store
    ours, theirs = (client.create_run(experiment, run_name="r").info.run_id for _ in "ab")
    write = sql_log_batch(client)
    assert write is not None
    for batch in BATCHES:
        client.log_batch(theirs, **batch)
        write(ours, **batch)
    assert _rows(db, ours) == _rows(db, theirs)
    a, b = client.get_run(ours).data, client.get_run(theirs).data
    assert a.params == b.params and a.tags.items() >= {"sweep.state": "COMPLETE"}.items()
    assert {k: v for k, v in a.metrics.items() if k != "loss"} == {
        k: v for k, v in b.metrics.items() if k != "loss"}
    assert math.isnan(a.metrics["loss"]) and math.isnan(b.metrics["loss"])
    assert a.metrics["val_loss"] == 2.0 and a.metrics["tie"] == 2.0 and a.metrics["late"] == 1.0
    assert len(_rows(db, ours)["metrics"]) == 14  # of 15 logged: the repeated one once


def test_a_changed_param_is_refused_as_mlflow_refuses_it_and_nothing_is_written(store):
    db, client, experiment = store
    ours, theirs = (client.create_run(experiment, run_name="r").info.run_id for _ in "ab")
    write = sql_log_batch(client)
    for run, log in ((ours, write), (theirs, client.log_batch)):
        log(run, params=[Param("train.lr", "0.1")])
        with pytest.raises(MlflowException) as caught:
            log(run, params=[Param("train.lr", "0.2")], metrics=[Metric("m", 1.0, 1, 0)],
                tags=[RunTag("t", "v")])
        assert "Changing param values is not allowed" in str(caught.value)
        assert caught.value.error_code == "INVALID_PARAMETER_VALUE"
    assert _rows(db, ours) == _rows(db, theirs)
    assert _rows(db, ours)["metrics"] == [] and _rows(db, ours)["tags"] == [("mlflow.runName", "r")]


def test_a_deleted_or_unknown_run_is_refused(store):
    _, client, experiment = store
    write = sql_log_batch(client)
    run = client.create_run(experiment).info.run_id
    client.delete_run(run)
    with pytest.raises(MlflowException, match="must be in the 'active' state"):
        write(run, tags=[RunTag("t", "v")])
    with pytest.raises(MlflowException, match="not found"):
        write("0" * 32, tags=[RunTag("t", "v")])


def test_mlflows_validation_runs_first(store):
    _, client, experiment = store
    run = client.create_run(experiment).info.run_id
    with pytest.raises(MlflowException, match="[Dd]uplicate"):
        sql_log_batch(client)(run, params=[Param("a", "1"), Param("a", "2")])


def test_the_run_name_tag_goes_through_mlflow_which_keeps_it_in_the_runs_row(store):
    _, client, experiment = store
    run = client.create_run(experiment).info.run_id
    sql_log_batch(client)(run, tags=[RunTag("mlflow.runName", "trial-7")])
    assert client.get_run(run).info.run_name == "trial-7"


def test_a_server_store_has_none(tmp_path):
    assert sql_log_batch(MlflowClient("http://127.0.0.1:9")) is None


@pytest.mark.parametrize(("status", "end_time"), [(None, None), ("KILLED", 5000),
                                                  ("FAILED", 0)])
def test_a_runs_end_is_the_row_mlflows_set_terminated_writes(store, status, end_time):
    db, client, experiment = store
    ours, theirs = (client.create_run(experiment, run_name="r").info.run_id for _ in "ab")
    sql_set_terminated(client)(ours, status, end_time=end_time)
    client.set_terminated(theirs, status, end_time=end_time)
    a, b = client.get_run(ours).info, client.get_run(theirs).info
    assert a.status == b.status == (status or "FINISHED")
    if end_time:
        assert a.end_time == b.end_time == end_time
    else:
        assert abs(a.end_time - b.end_time) < 5000
    client.delete_run(ours)
    with pytest.raises(MlflowException, match="must be in the 'active' state"):
        sql_set_terminated(client)(ours, "FINISHED")


def test_a_wrapped_client_keeps_its_own_writes(store):
    _, client, _ = store

    class Wrapper:
        def __getattr__(self, name):
            return getattr(client, name)

    assert sql_log_batch(Wrapper()) is None and sql_set_terminated(Wrapper()) is None


RUN_COLUMNS = ("name, source_type, source_name, entry_point_name, user_id, status, end_time, "
               "deleted_time, source_version, lifecycle_stage, experiment_id")


def test_a_run_created_is_the_row_and_tags_mlflows_create_run_writes(store):
    db, client, experiment = store
    tags = {"mlflow.parentRunId": "p" * 32, "sweep.trial_number": "3", "mlflow.user": "ada"}
    ours = sql_create_run(client)(experiment, tags, "trial-3")
    theirs = client.create_run(experiment, tags=tags, run_name="trial-3").info.run_id
    con = sqlite3.connect(db)
    try:
        rows = [con.execute(f"SELECT {RUN_COLUMNS}, artifact_uri, start_time FROM runs "
                            "WHERE run_uuid = ?", (r,)).fetchone() for r in (ours, theirs)]
    finally:
        con.close()
    assert rows[0][:-2] == rows[1][:-2]
    assert rows[0][-2].replace(ours, theirs) == rows[1][-2]  # under the experiment's location
    assert abs(rows[0][-1] - rows[1][-1]) < 5000
    assert _rows(db, ours)["tags"] == _rows(db, theirs)["tags"]
    run = client.get_run(ours)
    assert run.info.run_name == "trial-3" and run.info.status == "RUNNING"
    assert run.info.user_id == "ada" and run.info.lifecycle_stage == "active"


def test_a_run_in_a_deleted_or_unknown_experiment_is_refused(store):
    _, client, experiment = store
    client.delete_experiment(experiment)
    with pytest.raises(MlflowException, match="must be in the 'active' state"):
        sql_create_run(client)(experiment, {}, "trial-0")
    with pytest.raises(MlflowException, match="No Experiment"):
        sql_create_run(client)("987", {}, "trial-0")
