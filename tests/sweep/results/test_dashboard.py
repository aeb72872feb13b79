"""`sweep dashboard`: optuna-dashboard over a study's Optuna storage, found from its folder."""

import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import optuna
import pytest
from testsupport import free_port
from typer.testing import CliRunner

from sweep.cli import app
from sweep.executors.optuna import make_storage
from sweep.results.dashboard import DashboardError, locate_storage, open_storage
from sweep.results.readonly import ReadOnlyError, open_read_only
from sweep.tracking import StudyTracker, default_tracking_uri

runner = CliRunner()
optuna.logging.set_verbosity(optuna.logging.WARNING)


def optuna_study(storage, name="dash", n_trials=3):
    study = optuna.create_study(study_name=name, storage=make_storage(storage),
                                load_if_exists=True)
    study.optimize(lambda t: (t.suggest_float("x", 0, 1) - 0.3) ** 2, n_trials=n_trials)
    return study


def study_folder(new_store, out, search, name="dash"):
    """A study folder as `sweep run` leaves it: mlflow.db holding the spec, maybe a journal."""
    new_store(out)
    tracker = StudyTracker.start(default_tracking_uri(out), name,
                                 {"name": name, "search": search},
                                 executor=search["executor"], algorithm="random")
    tracker.finish([])
    return out


@pytest.fixture
def journal_study(tmp_path, new_store):
    out = study_folder(new_store, tmp_path / "dash", {"executor": "optuna"})
    optuna_study(str(out / "optuna.journal"))
    return out


def test_the_journal_in_the_folder_is_found_and_read_only(journal_study):
    found = locate_storage(journal_study)
    assert found.url == str(journal_study / "optuna.journal") and found.study == "dash"
    before = (journal_study / "optuna.journal").read_bytes()
    storage = open_storage(found.url)
    (summary,) = storage.get_all_studies()
    assert summary.study_name == "dash"
    study_id = storage.get_study_id_from_name("dash")
    assert len(storage.get_all_trials(study_id)) == 3
    with pytest.raises(Exception) as refused:
        storage.set_study_system_attr(study_id, "dashboard:note", "x")
    assert getattr(refused.value, "status_code", None) == 403
    assert "read-only" in str(refused.value.body)
    with pytest.raises(ReadOnlyError, match="cannot delete a study"):
        open_read_only(found.url).delete_study(study_id)
    assert (journal_study / "optuna.journal").read_bytes() == before
    assert sorted(p.name for p in journal_study.iterdir()) == [
        "mlartifacts", "mlflow.db", "mlflow.db.lock", "optuna.journal"]  # no lock file left


def test_a_live_study_is_seen_as_it_grows(journal_study):
    storage = open_storage(str(journal_study / "optuna.journal"))
    study_id = storage.get_study_id_from_name("dash")
    assert len(storage.get_all_trials(study_id)) == 3
    optuna_study(str(journal_study / "optuna.journal"), n_trials=2)  # the study goes on
    assert len(storage.get_all_trials(study_id)) == 5


def test_a_folder_without_mlflow_store_uses_its_journal(tmp_path):
    optuna_study(str(tmp_path / "optuna.journal"))
    found = locate_storage(tmp_path)
    assert found.url == str(tmp_path / "optuna.journal") and found.study is None


def test_an_rdb_storage_named_by_the_spec_is_opened_read_only(tmp_path, new_store):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna_study(url)
    out = study_folder(new_store, tmp_path / "rdb", {"executor": "optuna", "storage": url})
    found = locate_storage(out)
    assert found.url == url
    storage = open_storage(url)
    study_id = storage.get_study_id_from_name("dash")
    assert len(storage.get_all_trials(study_id)) == 3
    with pytest.raises(Exception, match="read-only"):
        storage.create_new_trial(study_id)
    assert len(optuna.load_study(study_name="dash", storage=url).trials) == 3


def test_bad_study_dirs_exit_2_with_one_message(tmp_path, new_store):
    cases = {
        "nosuch": (tmp_path / "nosuch", "STUDY_DIR", "no such folder"),
        "empty": (tmp_path, "STUDY_DIR", "optuna.journal does not exist"),
        "ray": (study_folder(new_store, tmp_path / "ray", {"executor": "ray"}), "STUDY_DIR",
                "Ray"),
        "masked": (study_folder(new_store, tmp_path / "pg",
                                {"executor": "optuna", "storage": "postgresql://u:***@h/db"}),
                   "STUDY_DIR", "--storage"),
    }
    for case, (folder, names, rule) in cases.items():
        result = runner.invoke(app, ["dashboard", str(folder)])
        assert result.exit_code == 2, (case, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and names in lines[0] and rule in lines[0], (case, lines)
    not_a_journal = tmp_path / "notes.txt"
    not_a_journal.write_text("not json\n")
    result = runner.invoke(app, ["dashboard", str(tmp_path), "--storage", str(not_a_journal)])
    assert result.exit_code == 2 and "not an Optuna journal; it is left as it is" in " ".join(
        result.output.split())
    result = runner.invoke(app, ["dashboard", str(tmp_path), "--storage", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--storage" in result.output
    with pytest.raises(DashboardError, match="no such folder"):
        locate_storage(not_a_journal)


def request(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_cli_serves_the_study_read_only_and_stops_on_a_signal(journal_study, sig):
    port = free_port()
    before = (journal_study / "optuna.journal").read_bytes()
    proc = subprocess.Popen([sys.executable, "-m", "sweep.cli", "dashboard", str(journal_study),
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        assert "(read-only)" in first and f"http://127.0.0.1:{port}/dashboard/studies/0" in first
        status, body = request(f"http://127.0.0.1:{port}/api/studies")
        assert status == 200
        (summary,) = json.loads(body)["study_summaries"]
        assert summary["study_name"] == "dash"
        status, body = request(f"http://127.0.0.1:{port}/api/studies/0")
        assert status == 200 and len(json.loads(body)["trials"]) == 3
        status, body = request(f"http://127.0.0.1:{port}/api/studies/0/note", "PUT",
                               {"version": 1, "body": "a note"})
        assert status == 403 and "read-only" in json.loads(body)["reason"]
        status, _ = request(f"http://127.0.0.1:{port}/api/studies/0", "DELETE")
        assert status == 403
        proc.send_signal(sig)
        rest = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0 and f"stopped optuna-dashboard ({sig.name})" in rest, rest
    assert (journal_study / "optuna.journal").read_bytes() == before
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
