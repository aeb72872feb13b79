"""A trial's MLflow writes kept in the study folder while the store is down, then sent once."""

import json
import math
import time

import pytest
from mlflow import MlflowClient
from testsupport import FailingAfter

from sweep.schema import METRIC_VAL_LOSS, TAG_STATE, TrialState
from sweep.tracking import StudyTracker, TrialContext
from sweep.tracking import buffer as buffer_module
from sweep.tracking.buffer import BufferedClient, buffered_runs, replay_file, sync_folder

SPEC = {"name": "buffered", "search": {"n_trials": 2}}


def open_study(uri, tmp_path):
    tracker = StudyTracker.start(uri, "buffered", SPEC, executor="optuna", algorithm="random")
    ctx = tracker.context
    return TrialContext(ctx.tracking_uri, ctx.experiment_id, ctx.parent_run_id,
                        buffer_dir=str(tmp_path / "mlflow-buffer"))


def history(uri, run_id, key=METRIC_VAL_LOSS):
    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key)]


def child_runs(uri, ctx):
    client = MlflowClient(uri)
    return client.search_runs([ctx.experiment_id],
                              f"tags.`mlflow.parentRunId` = '{ctx.parent_run_id}'")


@pytest.mark.server
def test_a_trial_keeps_training_while_the_server_is_down_and_its_run_is_sent_once(
        tmp_path, stoppable_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    server = stoppable_server
    ctx = open_study(server.url, tmp_path)
    losses = [3.0 - 0.1 * i for i in range(10)]
    with ctx.start_trial(0, {"model": {"d_model": 32}}) as run:
        for i, loss in enumerate(losses[:4]):
            run.report(1000 * (i + 1), {METRIC_VAL_LOSS: loss})
        server.stop()
        t0 = time.perf_counter()
        run.report(5000, {METRIC_VAL_LOSS: losses[4]})  # the first failing write
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i, loss in enumerate(losses[5:], start=5):
            run.report(1000 * (i + 1), {METRIC_VAL_LOSS: loss})
        later = (time.perf_counter() - t0) / 5
        assert run.client.buffering
        run.log_result({"state": "COMPLETE", "best_val_loss": min(losses),
                        "final_val_loss": losses[-1], "tokens": 10000})
    # Training never waited on the store after its first failure; the run's end was kept too.
    assert later < 0.05 < first + 0.05
    files = buffered_runs(tmp_path / "mlflow-buffer")
    assert [h["run_id"] for _, h in files] == [run.run_id]
    ops = files[0][0].read_text().splitlines()[1:]
    assert [json.loads(op.rpartition("\t")[0])["op"] for op in ops][-1] == "end"

    server.start()
    result = ctx.sync_buffers()
    assert result.runs == [run.run_id] and result.error is None and result.writes == len(ops)
    assert buffered_runs(tmp_path / "mlflow-buffer") == []
    got = MlflowClient(server.url).get_run(run.run_id)
    assert got.info.status == "FINISHED" and got.data.tags[TAG_STATE] == TrialState.COMPLETE
    assert history(server.url, run.run_id) == [(1000 * (i + 1), v) for i, v in enumerate(losses)]
    assert math.isclose(got.data.metrics["best_val_loss"], min(losses))
    assert len(child_runs(server.url, ctx)) == 1  # no run made from the buffer
    # A second sync has nothing to send and doubles nothing.
    assert ctx.sync_buffers().writes == 0
    assert len(history(server.url, run.run_id)) == len(losses)


@pytest.mark.server
def test_the_probe_sends_the_buffer_while_the_trial_still_trains(tmp_path, stoppable_server,
                                                                 monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setattr(buffer_module, "PROBE_S", 0.2)
    server = stoppable_server
    ctx = open_study(server.url, tmp_path)
    with ctx.start_trial(0, {"model": {"d_model": 32}}) as run:
        run.report(1000, {METRIC_VAL_LOSS: 3.0})
        server.stop()
        run.report(2000, {METRIC_VAL_LOSS: 2.9})
        assert run.client.buffering
        server.start()
        deadline = time.monotonic() + 30
        while run.client.buffering and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not run.client.buffering
        assert history(server.url, run.run_id) == [(1000, 3.0), (2000, 2.9)]
        run.report(3000, {METRIC_VAL_LOSS: 2.8})  # straight to the server again
        assert buffered_runs(tmp_path / "mlflow-buffer") == []
    assert history(server.url, run.run_id)[-1] == (3000, 2.8)
    assert MlflowClient(server.url).get_run(run.run_id).info.status == "FINISHED"


def test_a_replay_cut_short_goes_on_where_it_stopped(tmp_path, new_store):
    uri = new_store(tmp_path)
    ctx = open_study(uri, tmp_path)
    client = MlflowClient(uri)
    run = client.create_run(ctx.experiment_id)
    run_id = run.info.run_id
    buffered = BufferedClient(FailingAfter(client, 0), run_id, tmp_path / "mlflow-buffer",
                              {"tracking_uri": uri, "trial": 0})
    from mlflow.entities import Metric

    for i in range(6):
        buffered.log_batch(run_id, metrics=[Metric(METRIC_VAL_LOSS, 3.0 - i, 7, i)])
    buffered.set_terminated(run_id, "FINISHED", end_time=9)
    assert buffered.buffering
    path = tmp_path / "mlflow-buffer" / f"{run_id}.jsonl"
    # The store fails again after 4 writes of the replay: 4 sent, the file and its count kept.
    with pytest.raises(ConnectionError):
        replay_file(path, FailingAfter(client, 4))
    assert path.is_file() and path.with_suffix(".sent").read_text().startswith("4\t")
    assert [s for s, _ in history(uri, run_id)] == [0, 1, 2, 3]
    # The next replay sends the other 3 (2 metrics and the end) and nothing twice.
    assert replay_file(path, client) == 3
    assert [s for s, _ in history(uri, run_id)] == [0, 1, 2, 3, 4, 5]
    assert client.get_run(run_id).info.status == "FINISHED"
    assert not path.exists() and not path.with_suffix(".sent").exists()


def test_sync_leaves_files_it_did_not_write_untouched(tmp_path):
    folder = tmp_path / "mlflow-buffer"
    folder.mkdir()
    foreign = folder / "notes.jsonl"
    foreign.write_text('{"op": "end", "status": "FINISHED"}\n')
    cut = folder / "abc.jsonl"  # a header naming another run
    cut.write_text(json.dumps({"format": buffer_module.FORMAT, "run_id": "xyz"}) + "\n")
    result = sync_folder(folder, lambda header: pytest.fail("nothing to send"))
    assert result.runs == [] and result.writes == 0
    assert [p.name for p, _ in result.refused] == ["abc.jsonl", "notes.jsonl"]
    assert foreign.read_text() == '{"op": "end", "status": "FINISHED"}\n' and cut.is_file()


def test_a_write_cut_by_a_crash_is_not_replayed(tmp_path, new_store):
    uri = new_store(tmp_path)
    ctx = open_study(uri, tmp_path)
    client = MlflowClient(uri)
    run_id = client.create_run(ctx.experiment_id).info.run_id
    buffered = BufferedClient(FailingAfter(client, 0), run_id, tmp_path / "mlflow-buffer",
                              {"tracking_uri": uri, "trial": 0})
    from mlflow.entities import Metric

    buffered.log_batch(run_id, metrics=[Metric(METRIC_VAL_LOSS, 2.5, 7, 100)])
    path = tmp_path / "mlflow-buffer" / f"{run_id}.jsonl"
    with open(path, "a") as f:
        f.write('{"op": "batch", "metrics": [["val_loss", 2.4, 7,')  # killed mid-write
    assert replay_file(path, client) == 1
    assert history(uri, run_id) == [(100, 2.5)]


def test_without_a_buffer_folder_a_failing_write_raises(tmp_path, new_store):
    uri = new_store(tmp_path)
    ctx = open_study(uri, tmp_path)
    client = MlflowClient(uri)
    run_id = client.create_run(ctx.experiment_id).info.run_id
    buffered = BufferedClient(FailingAfter(client, 0), run_id, None, {})
    with pytest.raises(ConnectionError):
        buffered.set_tag(run_id, "k", "v")
    # and an error that is not the store's is never buffered
    keep = BufferedClient(client, run_id, tmp_path / "b", {})
    with pytest.raises(Exception, match="(?i)invalid|must|param"):
        keep.log_batch(run_id, params=[__import__("mlflow").entities.Param("", "x")])
    assert not (tmp_path / "b").exists()


def test_sync_command_refuses_what_is_not_a_folder_and_says_when_nothing_waits(tmp_path):
    from typer.testing import CliRunner

    from sweep.cli import app

    runner = CliRunner()
    missing = runner.invoke(app, ["sync", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "STUDY_DIR" in missing.output and "not a folder" in (
        missing.output)
    empty = runner.invoke(app, ["sync", str(tmp_path)])
    assert empty.exit_code == 0 and "nothing to send" in empty.output
    # a kept run whose URI hid a password cannot be sent without --tracking-uri
    folder = tmp_path / "mlflow-buffer"
    kept = BufferedClient(None, "r1", folder, {"tracking_uri": "http://user:***@127.0.0.1:9/"})
    kept._append(kept.path, {"op": "end", "status": "FINISHED", "end_time": 1})
    hidden = runner.invoke(app, ["sync", str(tmp_path)])
    assert hidden.exit_code == 2 and "--tracking-uri" in hidden.output
    assert (folder / "r1.jsonl").is_file()
