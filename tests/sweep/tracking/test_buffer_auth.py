"""The buffer sends only files a trial of this study wrote: a planted file, a file moved from
another study and a key open to others are refused with a note, left as they are, and `sweep
sync` says exactly what it sent, run by run."""

import json
import shutil

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric
from testsupport import FailingAfter
from typer.testing import CliRunner

from sweep.cli import app
from sweep.folder import StudyFolder
from sweep.schema import METRIC_BEST_VAL_LOSS, METRIC_VAL_LOSS, TAG_STATE
from sweep.tracking import StudyTracker, default_tracking_uri
from sweep.tracking.buffer import FORMAT, BufferedClient, buffered_runs

runner = CliRunner()
SPEC = {"name": "auth", "search": {"n_trials": 2}}


def make_study(out, new_store, name="auth"):
    """A study of trials 0 (best val loss 2.0) and 1 (1.5), both COMPLETE; their run ids."""
    new_store(out)
    tracker = StudyTracker.start(default_tracking_uri(out), name, SPEC, executor="optuna",
                                 algorithm="random")
    run_ids = []
    for n, loss in ((0, 2.0), (1, 1.5)):
        with tracker.start_trial(n, {"model": {"d_model": 32}}) as run:
            run.report(100, {METRIC_VAL_LOSS: loss})
            run.log_result({"state": "COMPLETE", "best_val_loss": loss, "tokens": 100})
        run_ids.append(run.run_id)
    return run_ids


def buffer_writes(out, run_id, trial, values):
    """A trial's writes buffered as the store fails: val losses at steps 200, 300, ... ."""
    uri = default_tracking_uri(out)
    client = BufferedClient(FailingAfter(MlflowClient(uri), 0), run_id,
                            StudyFolder(out).buffer, {"tracking_uri": uri, "trial": trial})
    for i, value in enumerate(values):
        client.log_batch(run_id, metrics=[Metric(METRIC_VAL_LOSS, value, 7, 200 + 100 * i)])
    assert client.buffering
    return client.path


def plant(out, run_id):
    """A file with the right header that sets trial 0's best val loss to 0.001, no valid MAC."""
    header = {"format": FORMAT, "run_id": run_id, "tracking_uri": default_tracking_uri(out),
              "trial": 0}
    ops = [{"op": "batch", "metrics": [[METRIC_BEST_VAL_LOSS, 0.001, 7, 0]], "params": [],
            "tags": [[TAG_STATE, "COMPLETE"], ["planted", "yes"]]}]
    path = StudyFolder(out).buffer / f"{run_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{json.dumps(x)}\t{'0' * 64}\n" for x in [header, *ops]))
    return path


def history(out, run_id):
    client = MlflowClient(default_tracking_uri(out))
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, METRIC_VAL_LOSS))


def test_sync_sends_the_genuine_file_and_refuses_a_planted_one(tmp_path, new_store):
    out = tmp_path / "out"
    run0, run1 = make_study(out, new_store)
    genuine = buffer_writes(out, run1, 1, [1.4, 1.3, 1.2])
    planted = plant(out, run0)
    planted_bytes = planted.read_bytes()
    assert buffered_runs(StudyFolder(out).buffer) == [(genuine, json.loads(
        genuine.read_text().splitlines()[0].rpartition("\t")[0]))]
    result = runner.invoke(app, ["sync", str(out)])
    output = " ".join(result.output.split())
    assert result.exit_code == 0, output
    assert f"run {run1} (trial 1): sent 3 write(s)" in output
    assert "sent 3 write(s) of 1 trial run(s)" in output
    assert (f"note: {planted}: not sent: it does not carry this study's MAC (not written by a "
            "trial of this study); left as it is") in output
    assert "Traceback" not in output
    client = MlflowClient(default_tracking_uri(out))
    trial0 = client.get_run(run0).data
    assert trial0.metrics[METRIC_BEST_VAL_LOSS] == 2.0 and "planted" not in trial0.tags
    assert history(out, run1) == [(100, 1.5), (200, 1.4), (300, 1.3), (400, 1.2)]
    assert planted.read_bytes() == planted_bytes and not genuine.exists()
    again = runner.invoke(app, ["sync", str(out)])
    assert "nothing to send" in again.output and history(out, run1)[-1] == (400, 1.2)


def test_a_file_moved_from_another_study_is_refused(tmp_path, new_store):
    out, other = tmp_path / "out", tmp_path / "other"
    run0, _ = make_study(out, new_store)
    buffer_writes(out, run0, 0, [1.9])  # this study's key exists and is used
    other_runs = make_study(other, new_store, name="other")
    moved = buffer_writes(other, other_runs[0], 0, [0.001])
    StudyFolder(out).buffer.joinpath(f"{run0}.jsonl").unlink()  # no file of run 0 is left
    target = StudyFolder(out).buffer / f"{run0}.jsonl"
    # Renamed after a run of this study, its header made to name that run: still refused.
    lines = moved.read_text().splitlines()
    header = json.loads(lines[0].rpartition("\t")[0]) | {"run_id": run0}
    lines[0] = f"{json.dumps(header)}\t{lines[0].rpartition(chr(9))[2]}"
    target.write_text("\n".join(lines) + "\n")
    shutil.copy(moved, StudyFolder(out).buffer / moved.name)
    before = {p.name: p.read_bytes() for p in StudyFolder(out).buffer.iterdir()}
    result = runner.invoke(app, ["sync", str(out)])
    output = " ".join(result.output.split())
    assert result.exit_code == 0, output
    assert "nothing to send: no buffered trial runs of this study" in output
    assert f"note: {target}: not sent: it does not carry this study's MAC" in output
    assert (f"note: {StudyFolder(out).buffer / moved.name}: not sent: it does not carry this "
            "study's MAC") in output
    assert {p.name: p.read_bytes() for p in StudyFolder(out).buffer.iterdir()} == before
    client = MlflowClient(default_tracking_uri(out))
    assert client.get_run(run0).data.metrics[METRIC_BEST_VAL_LOSS] == 2.0
    assert history(out, run0) == [(100, 2.0)]


def test_a_line_added_to_a_genuine_file_or_a_key_open_to_others_sends_nothing(
        tmp_path, new_store):
    out = tmp_path / "out"
    run0, _ = make_study(out, new_store)
    path = buffer_writes(out, run0, 0, [1.9, 1.8])
    lines = path.read_text().splitlines()
    forged = {"op": "batch", "metrics": [[METRIC_BEST_VAL_LOSS, 0.001, 7, 0]], "params": [],
              "tags": []}
    path.write_text("\n".join([*lines[:2], f"{json.dumps(forged)}\t{lines[1][-64:]}",
                               lines[2]]) + "\n")
    result = runner.invoke(app, ["sync", str(out)])
    assert "line 3 does not carry this study's MAC" in " ".join(result.output.split())
    assert history(out, run0) == [(100, 2.0)]
    path.write_text("\n".join(lines) + "\n")  # as the trial wrote it, but the key is open
    key = StudyFolder(out).root / "mlflow-buffer.key"
    assert key == StudyFolder(out).buffer_key
    key.chmod(0o644)
    result = runner.invoke(app, ["sync", str(out)])
    assert "open to others (mode 644)" in " ".join(result.output.split())
    assert history(out, run0) == [(100, 2.0)]
    key.chmod(0o600)
    result = runner.invoke(app, ["sync", str(out)])
    assert f"run {run0} (trial 0): sent 2 write(s)" in result.output
    assert history(out, run0) == [(100, 2.0), (200, 1.9), (300, 1.8)]


def test_sync_refuses_a_users_sqlite_file_as_its_store(tmp_path, new_store):
    import sqlite3

    out = tmp_path / "out"
    run0, _ = make_study(out, new_store)
    path = buffer_writes(out, run0, 0, [1.9])
    db = tmp_path / "user.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE experiments (id INTEGER)")
    con.close()
    before, kept = db.read_bytes(), path.read_bytes()
    mtime = db.stat().st_mtime_ns
    result = runner.invoke(app, ["sync", str(out), "--tracking-uri", f"sqlite:///{db}"])
    output = " ".join(result.output.split())
    assert result.exit_code == 2, output
    assert "not an MLflow tracking store; it is left as it is" in output
    assert db.read_bytes() == before and db.stat().st_mtime_ns == mtime
    assert path.read_bytes() == kept and history(out, run0) == [(100, 2.0)]


@pytest.mark.parametrize("record", ["-3", "1\t" + "0" * 64, "9"])
def test_a_forged_record_of_writes_sent_sends_nothing(tmp_path, new_store, record):
    out = tmp_path / "out"
    run0, _ = make_study(out, new_store)
    path = buffer_writes(out, run0, 0, [1.9, 1.8])
    path.with_suffix(".sent").write_text(record)
    result = runner.invoke(app, ["sync", str(out)])
    assert "record of writes sent" in " ".join(result.output.split())
    assert history(out, run0) == [(100, 2.0)] and path.is_file()


def test_a_resume_names_the_planted_file_it_does_not_send(tmp_path, new_store, caplog):
    from types import SimpleNamespace

    from sweep.study.resume import reconcile
    from sweep.tracking import TrialContext, find_study

    out = tmp_path / "out"
    run0, run1 = make_study(out, new_store)
    buffer_writes(out, run1, 1, [1.4])
    planted = plant(out, run0)
    experiment_id, parent_run_id = find_study(default_tracking_uri(out), "auth")
    ctx = SimpleNamespace(tracking=TrialContext(default_tracking_uri(out), experiment_id,
                                                parent_run_id, str(StudyFolder(out).buffer)))
    with caplog.at_level("WARNING", logger="sweep.study.resume"):
        done = reconcile(ctx)
    assert done.synced == [run1]
    assert [r.getMessage() for r in caplog.records] == [
        f"{planted} not sent: it does not carry this study's MAC (not written by a trial of "
        "this study); left as it is"]
    assert MlflowClient(default_tracking_uri(out)).get_run(run0).data.metrics[
        METRIC_BEST_VAL_LOSS] == 2.0
