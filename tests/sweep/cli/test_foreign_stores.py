"""Every command that opens a study's store checks first that it is an MLflow store this MLflow
opens as it is; a user's own SQLite file, or a store of another schema, is refused with exit 2
and left byte for byte as it was. A hot journal of the service's own store is not foreign."""

import hashlib
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweep.cli import app
from sweep.store_files import hot_journal, mlflow_store_problem
from sweep.tracking import StudyTracker, default_tracking_uri

runner = CliRunner()
SPEC = {"model": {"d_model": {"choice": [32, 64]}}, "train": {"lr": 1e-3}}


def fingerprint(path: Path) -> tuple[int, int, str]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def users_db(path: Path) -> Path:
    """A SQLite file of the user's own that has tables named ``experiments`` and ``runs``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE experiments (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, experiment INTEGER, loss REAL)")
    con.execute("INSERT INTO experiments VALUES (1, 'mine')")
    con.execute("INSERT INTO runs VALUES (1, 1, 0.5)")
    con.commit()
    con.close()
    return path


@pytest.fixture
def study(tmp_path, new_store, monkeypatch):
    """A study of two COMPLETE trials in ``tmp_path/out``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "out"
    new_store(out)
    tracker = StudyTracker.start(default_tracking_uri(out), "demo", SPEC, executor="optuna",
                                 algorithm="random")
    for n, loss in ((0, 2.0), (1, 1.5)):
        with tracker.start_trial(n, {"model": {"d_model": 32}, "train": {"lr": 1e-3}}) as run:
            run.report(100, {"val_loss": loss})
            run.log_result({"state": "COMPLETE", "tokens": 100, "final_val_loss": loss})
    return out


COMMANDS = {
    "results": ["results", "{d}"],
    "results --tracking-uri": ["results", "demo", "--tracking-uri", "sqlite:///{db}"],
    "ui": ["ui", "{d}", "--no-block", "--port", "1"],
    "dashboard": ["dashboard", "{d}", "--port", "1"],
    "analyze scaling": ["analyze", "scaling", "{d}"],
    "analyze transfer": ["analyze", "transfer", "{d}"],
    "train --from-study": ["train", "--from-study", "{d}", "--no-track"],
    "train --out": ["train", "--preset", "tiny", "--out", "{d}"],
}


def _invoke(args: list[str], d: Path) -> tuple[int, str]:
    args = [a.format(d=d, db=d / "mlflow.db") for a in args]
    result = runner.invoke(app, args)
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_users_sqlite_file_is_refused_untouched(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    db = users_db(tmp_path / "d" / "mlflow.db")
    before, files = fingerprint(db), listing(tmp_path)
    code, output = _invoke(COMMANDS[command], tmp_path / "d")
    assert code == 2, output
    assert (f"{db.name} is a SQLite database of 12,288 bytes with tables experiments, runs, "
            "not an MLflow tracking store; it is left as it is") in output
    assert "Traceback" not in output
    assert fingerprint(db) == before
    assert listing(tmp_path) == files


@pytest.mark.parametrize("revision,said", [("ffffffffffff", "does not know (a newer MLflow"),
                                           ("0584bdc529eb", "the schema of an older MLflow")])
def test_a_store_of_another_schema_is_refused_untouched(study, revision, said):
    db = study / "mlflow.db"
    with sqlite3.connect(db) as con:
        con.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    con.close()
    before = fingerprint(db)
    for command in ("results", "train --from-study", "analyze scaling"):
        code, output = _invoke(COMMANDS[command], study)
        assert code == 2, output
        assert f"{db} has" in output and said in output and revision in output
        assert "Traceback" not in output and "out-of-date" not in output
        assert fingerprint(db) == before


def test_run_refuses_a_store_of_a_newer_mlflow_untouched(study):
    import yaml

    db = study / "mlflow.db"
    with sqlite3.connect(db) as con:
        con.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    con.close()
    before = fingerprint(db)
    spec = study.parent / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "demo", "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 8, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"steps": 2, "batch_size": 2, "eval_tokens": 8, "device": "cpu"},
        "search": {"executor": "optuna", "sampler": "random", "n_trials": 1}}))
    code, output = _invoke(["run", str(spec), "--out", "{d}"], study)
    assert code == 2, output
    assert f"{db} has MLflow schema revision ffffffffffff, which MLflow" in output
    assert "Traceback" not in output and "out-of-date" not in output
    assert fingerprint(db) == before


def test_results_reads_the_store_without_writing_it(study):
    db = study / "mlflow.db"
    db.chmod(0o444)  # a write would fail, and the mtime would move
    before, files = fingerprint(db), listing(study)
    code, output = _invoke(COMMANDS["results"], study)
    assert code == 0, output
    assert "demo: 2 trials (best first)" in output
    assert fingerprint(db) == before and listing(study) == files
    # What the readers open it with refuses a write.
    from mlflow import MlflowClient

    from sweep.tracking import find_study
    from sweep.tracking.stores import reading_uri

    db.chmod(0o644)
    parent_run_id = find_study(default_tracking_uri(study), "demo")[1]
    with pytest.raises(Exception, match="attempt to write a readonly database"):
        MlflowClient(reading_uri(default_tracking_uri(study))).set_tag(parent_run_id, "k", "v")
    assert fingerprint(db)[2] == before[2]


#: Opens the store, writes pages of a table it creates in one transaction, and waits to be
#: killed before it commits: the journal it leaves is hot.
WRITER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA cache_size = 1")  # spill pages to the database file before the commit
con.execute("BEGIN")
con.execute("CREATE TABLE scratch (x BLOB)")
for _ in range(200):
    con.execute("INSERT INTO scratch VALUES (randomblob(4000))")
print("written", flush=True)
time.sleep(600)
"""


def _leave_a_hot_journal(db):
    """`WRITER` on ``db``, killed mid-transaction: its journal is left hot."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE,
                              text=True)
    assert writer.stdout.readline().strip() == "written"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert hot_journal(db) is not None


def _rolled_back(db):
    """Whether ``db`` holds MLflow's tables and not the killed writer's."""
    tables = {n for (n,) in sqlite3.connect(db).execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    return "scratch" not in tables and "runs" in tables


def test_a_hot_journal_of_the_service_store_is_not_foreign(study):
    db = study / "mlflow.db"
    _leave_a_hot_journal(db)
    copy = study.parent / "copy"
    shutil.copytree(study, copy)
    with pytest.raises(sqlite3.OperationalError, match="readonly database"):
        con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        con.execute("SELECT name FROM sqlite_master").fetchall()
    con.close()
    assert mlflow_store_problem(db, new_ok=False) is None  # read from a rolled-back copy
    assert hot_journal(db) is not None  # that check wrote nothing
    from sweep.spec import parse_spec
    from sweep.study.stores import store_problem

    spec = parse_spec({"name": "demo", "data": "synthetic:markov?order=1&vocab=16",
                       "model": {"vocab_size": 16, "seq_len": 8, "d_model": 16, "n_heads": 2,
                                 "n_layers": 1},
                       "train": {"steps": 2, "batch_size": 2, "device": "cpu"},
                       "search": {"executor": "optuna", "n_trials": 1}})
    assert store_problem(spec, copy) is None  # a resume accepts its own store
    code, output = _invoke(COMMANDS["results"], study)  # rolled back, then read
    assert code == 0, output
    assert "demo: 2 trials (best first)" in output
    assert _rolled_back(db)


def test_the_readers_roll_back_a_hot_journal_a_killed_writer_left(study):
    """A script (or a test) reading a killed study with `find_study` and `read_trials`."""
    from sweep.tracking import find_study, read_trials

    db = study / "mlflow.db"
    _leave_a_hot_journal(db)
    uri = f"sqlite:///{db}"
    experiment_id, parent = find_study(uri, "demo")
    assert hot_journal(db) is None
    assert len(read_trials(uri, experiment_id, parent)) == 2
    assert _rolled_back(db)


def test_a_hot_journal_beside_a_foreign_file_is_left_as_it_is(tmp_path):
    from sweep.tracking.stores import reading_uri

    db = tmp_path / "mlflow.db"
    sqlite3.connect(db).execute("CREATE TABLE mine (x)").connection.commit()
    _leave_a_hot_journal(db)
    before = (db.read_bytes(), Path(f"{db}-journal").read_bytes())
    assert "mode=ro" in reading_uri(f"sqlite:///{db}")
    assert (db.read_bytes(), Path(f"{db}-journal").read_bytes()) == before


@pytest.mark.parametrize("form", ["journal", "sqlite"])
def test_dashboard_refuses_a_users_file_as_the_optuna_storage(study, tmp_path, form):
    if form == "journal":
        victim = study / "optuna.journal"  # the folder's default storage
        victim.write_text("my notes\n")
        args = ["dashboard", str(study), "--port", "1"]
        said = f"{victim} is a text file of 9 bytes starting 'my notes', not an Optuna journal"
    else:
        victim = tmp_path / "user.db"
        with sqlite3.connect(victim) as con:
            con.execute("CREATE TABLE studies (id INTEGER)")  # one of Optuna's table names
        con.close()
        args = ["dashboard", str(study), "--port", "1", "--storage", f"sqlite:///{victim}"]
        said = (f"{victim} is a SQLite database of 8,192 bytes with tables studies, not an "
                "Optuna storage database")
    before, files = fingerprint(victim), listing(tmp_path)
    result = runner.invoke(app, args)
    output = " ".join(result.output.split())
    assert result.exit_code == 2, output
    assert f"{said}; it is left as it is" in output and "Traceback" not in output
    assert fingerprint(victim) == before and listing(tmp_path) == files


def test_sweep_ui_serves_the_store_read_only(study):
    from sweep.results import ui_command

    uri = default_tracking_uri(study)
    backend = ui_command(uri, read_only=True)[5]
    assert backend == f"sqlite+pysqlite:///file:{(study / 'mlflow.db').resolve()}?mode=ro&uri=true"
    assert ui_command(uri)[5] == uri  # a server tests write to is opened as given
    with pytest.raises(sqlite3.OperationalError, match="readonly database"):
        con = sqlite3.connect(backend.split("///", 1)[1], uri=True)
        con.execute("CREATE TABLE x (y)")
    con.close()
