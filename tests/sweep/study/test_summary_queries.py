"""The study summary's store queries do not grow with the study; its reads match MLflow's own.

At 1,000 trials a query per run (or per page of runs) is seconds of the summary, so the count of
SQL statements `finish_study` makes is held equal at N and 2N trials. The trial runs are read
with one query per table (`sweep.adapters.mlflow.child_runs`), checked here against
``MlflowClient.search_runs``, the reading it replaces.
"""

import math

import pytest
import sqlalchemy
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from sweep.schema import (
    METRIC_BEST_VAL_LOSS,
    METRIC_VAL_LOSS,
    TAG_STATE,
    TAG_TRIAL_NUMBER,
    TrialState,
)
from sweep.study import summary as summary_module
from sweep.study.summary import finish_study
from sweep.tracking import StudyTracker, reader


def _study(uri, name, n, *, parent=None):
    """A study's parent run and ``n`` COMPLETE trial runs, each with a two-point curve."""
    tracker = StudyTracker.start(uri, name, {"name": name}, executor="optuna",
                                 algorithm="random") if parent is None else parent
    client = MlflowClient(uri)
    for i in range(n):
        run = client.create_run(tracker.experiment_id, run_name=f"trial-{i}", tags={
            MLFLOW_PARENT_RUN_ID: tracker.parent_run_id, TAG_TRIAL_NUMBER: str(i),
            TAG_STATE: TrialState.COMPLETE.value})
        loss = 3.0 - 0.1 * i
        client.log_batch(run.info.run_id, params=[Param("train.lr", str(1e-3 * (i + 1)))],
                         metrics=[Metric(METRIC_VAL_LOSS, loss + 0.5, 0, 8),
                                  Metric(METRIC_VAL_LOSS, loss, 0, 16),
                                  Metric(METRIC_BEST_VAL_LOSS, loss, 0, 16)])
        client.set_terminated(run.info.run_id)
    return tracker


@pytest.fixture(scope="module", autouse=True)
def imported():
    """The summary's libraries imported first: their import time stays out of the tests."""
    import optuna  # noqa: F401 - the summary's in-memory study
    import pandas  # noqa: F401 - the trials table

    from sweep import results  # noqa: F401


@pytest.fixture
def statements(tmp_path):
    """SQL statements sent to the stores under this test's folder while the fixture is active.

    Only those: a thread another test left (a trial's heartbeat) may write to its own store
    meanwhile.
    """
    seen = []
    folder = str(tmp_path)

    def count(conn, cursor, statement, *args):
        if folder in str(conn.engine.url):
            seen.append(statement)

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", count)
    yield seen
    sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", count)


def test_the_summary_makes_as_many_queries_at_2n_trials_as_at_n(tmp_path, new_store, statements,
                                                                monkeypatch):
    # A chunked history read would show as more queries at 2N (one chunk per run here).
    monkeypatch.setattr(reader, "HISTORY_CHUNK", 1)
    # The plots read nothing from the store (they are drawn from the table and histories read
    # before) and cost seconds of imports here; the table, counts and best trial are kept.
    monkeypatch.setattr(summary_module.results, "study_figures", lambda *args: {})
    made = {}
    for n in (2, 4):
        uri = new_store(tmp_path / str(n))
        tracker = _study(uri, f"queries-{n}", n)
        statements.clear()
        summary = finish_study(tracker)
        made[n] = len(statements)
        assert summary["counts"][TrialState.COMPLETE.value] == n
        assert summary[METRIC_BEST_VAL_LOSS] == pytest.approx(3.0 - 0.1 * (n - 1))
    assert made[2] == made[4] and made[2] > 0, made
    csv = MlflowClient(uri).download_artifacts(tracker.parent_run_id, "trials.csv", tmp_path)
    assert len(open(csv).read().splitlines()) == 1 + 4


def test_trial_runs_read_in_bulk_are_those_search_runs_gives(tmp_path, new_store):
    uri = new_store(tmp_path)
    tracker = _study(uri, "bulk", 4)
    _study(uri, "bulk", 2, parent=StudyTracker.start(uri, "bulk", {"name": "bulk"},
                                                     executor="optuna", algorithm="random"))
    client = MlflowClient(uri)
    runs = client.search_runs([tracker.experiment_id],
                              filter_string=f"tags.{MLFLOW_PARENT_RUN_ID} = "
                                            f"'{tracker.parent_run_id}'")
    client.delete_run(runs[0].info.run_id)  # a deleted run is not a trial
    client.log_batch(runs[1].info.run_id, metrics=[Metric(METRIC_VAL_LOSS, math.nan, 0, 24)],
                     tags=[RunTag("extra", "x")])
    expected = sorted(
        (reader._trial({"run_id": r.info.run_id, "run_name": r.info.run_name,
                        "start_time": r.info.start_time, "end_time": r.info.end_time,
                        "tags": r.data.tags, "params": r.data.params,
                        "metrics": r.data.metrics})
         for r in client.search_runs([tracker.experiment_id], filter_string=(
             f"tags.{MLFLOW_PARENT_RUN_ID} = '{tracker.parent_run_id}'"))),
        key=lambda t: t["trial"])
    got = reader.read_trials(uri, tracker.experiment_id, tracker.parent_run_id)
    assert len(got) == 3
    nan_run = next(t for t in got if t["run_id"] == runs[1].info.run_id)
    assert math.isnan(nan_run["metrics"][METRIC_VAL_LOSS])
    assert repr(got) == repr(expected)  # repr: NaN compares unequal to itself
    ids = [t["run_id"] for t in got]
    histories = reader.val_loss_histories(uri, ids, tracker.parent_run_id)
    assert repr(histories) == repr(reader.val_loss_histories(uri, ids))  # MLflow's bulk read
    assert sorted(len(points) for points in histories.values()) == [2, 2, 3]
