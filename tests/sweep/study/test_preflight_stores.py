"""Store files that exist before a study starts: recognised as Optuna's or MLflow's, or refused
with exit 2 and left byte for byte as they were."""

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
import yaml
from testsupport import tiny_spec
from typer.testing import CliRunner

from sweep.cli import app
from sweep.spec import parse_spec
from sweep.study.preflight import PreflightError, check_stores
from sweep.study.stores import sqlite_file


def spec_dict(**sections):
    return tiny_spec("stores", **sections)


def user_db(path: Path) -> Path:
    """A SQLite database of the user's own: one table, one row."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (text TEXT)")
    con.execute("INSERT INTO notes VALUES ('mine')")
    con.commit()
    con.close()
    return path


def fingerprint(path: Path) -> tuple[int, int, str]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def refused_by_run(work: Path, data: dict, victim: Path) -> str:
    """``sweep run`` of ``data``: exit 2, ``victim`` unchanged, nothing else written."""
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    before, files = fingerprint(victim), listing(work)
    result = CliRunner().invoke(app, ["run", str(spec), "--out", str(work / "out")])
    assert result.exit_code == 2, result.output
    assert fingerprint(victim) == before
    assert listing(work) == files
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize("form", ["journal", "sqlite"])
def test_a_user_database_as_search_storage_is_refused_untouched(work, form):
    db = user_db(work / "user.db")
    storage = str(db) if form == "journal" else f"sqlite:///{db}"
    message = refused_by_run(work, spec_dict(search={"storage": storage}), db)
    assert f"search.storage {storage}" in message
    assert "SQLite database of 8,192 bytes with tables notes" in message
    assert ("not an Optuna journal" if form == "journal"
            else "not an Optuna storage database") in message


def test_a_text_file_as_journal_is_refused_untouched(work):
    notes = work / "notes.txt"
    notes.write_text("my notes\nsecond line\n")
    message = refused_by_run(work, spec_dict(search={"storage": str(notes)}), notes)
    assert "a text file of 21 bytes starting 'my notes'" in message


@pytest.mark.parametrize("source", ["tracking.uri", "MLFLOW_TRACKING_URI"])
def test_a_user_database_as_tracking_store_is_refused_untouched(work, monkeypatch, source):
    db = user_db(work / "user.db")
    uri = f"sqlite:///{db}"
    if source == "tracking.uri":
        data = spec_dict(tracking={"uri": uri})
    else:
        data = spec_dict()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    message = refused_by_run(work, data, db)
    assert f"{source} {uri}" in message
    assert "with tables notes, not an MLflow tracking store" in message


def test_a_foreign_mlflow_db_in_the_output_folder_is_refused(work):
    out = work / "out"
    out.mkdir()
    db = user_db(out / "mlflow.db")
    message = refused_by_run(work, spec_dict(), db)
    assert f"--out {out} sqlite:///{db}" in message


def test_worker_refuses_a_user_database_as_storage(work):
    db = user_db(work / "user.db")
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_dict(search={"storage": f"sqlite:///{db}"})))
    before = fingerprint(db)
    result = CliRunner().invoke(app, ["worker", str(spec), "--out", str(work / "out")])
    assert result.exit_code == 2, result.output
    assert "not an Optuna storage database" in " ".join(result.output.split())
    assert fingerprint(db) == before
    assert not (work / "out").exists()


def test_storage_and_tracking_may_not_share_a_file(work):
    spec = parse_spec(spec_dict(search={"storage": "sqlite:///out/one.db"},
                                tracking={"uri": "sqlite:///out/one.db"}))
    with pytest.raises(PreflightError, match="name one file"):
        check_stores(spec, work / "out")


def test_stores_optuna_and_mlflow_wrote_are_recognised(work):
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    journal = work / "study.journal"
    optuna.create_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(journal))))
    rdb = work / "optuna.db"
    optuna.create_study(study_name="s", storage=f"sqlite:///{rdb}")
    (work / "empty.journal").touch()
    sqlite3.connect(work / "blank.db").close()  # a file sqlite made, no tables: nothing to lose
    for storage in (str(journal), f"sqlite:///{rdb}", str(work / "empty.journal"),
                    f"sqlite:///{work / 'blank.db'}", str(work / "absent.journal")):
        check_stores(parse_spec(spec_dict(search={"storage": storage})), work / "out")
    # Optuna's SQLite database named as a journal: refused, with the URL that would open it.
    with pytest.raises(PreflightError, match=f"write sqlite:///{rdb}"):
        check_stores(parse_spec(spec_dict(search={"storage": str(rdb)})), work / "out")
    # A journal or Optuna's database is no MLflow store.
    for store in (journal, rdb):
        with pytest.raises(PreflightError, match="not an MLflow tracking store"):
            check_stores(parse_spec(spec_dict(tracking={"uri": f"sqlite:///{store}"})),
                         work / "out")


def test_sqlite_file_of_urls():
    assert sqlite_file("sqlite:///rel/x.db") == Path("rel/x.db")
    assert sqlite_file("sqlite:////abs/x.db") == Path("/abs/x.db")
    assert sqlite_file("sqlite+pysqlite:////abs/x.db?timeout=5") == Path("/abs/x.db")
    assert sqlite_file("sqlite://") is None
    assert sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("postgresql://h/db") is None


def test_an_mlflow_store_is_recognised(work):
    from mlflow import MlflowClient

    db = work / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments(max_results=1)
    check_stores(parse_spec(spec_dict(tracking={"uri": f"sqlite:///{db}"})), work / "out")
    with pytest.raises(PreflightError, match="an MLflow tracking database, not an Optuna"):
        check_stores(parse_spec(spec_dict(search={"storage": f"sqlite:///{db}"})),
                     work / "out")
    assert os.path.getsize(db) > 0


def test_validate_refuses_a_named_foreign_store_as_run_does(work):
    db = user_db(work / "user.db")
    data = spec_dict(search={"storage": f"sqlite:///{db}"})
    message = refused_by_run(work, data, db)
    before = fingerprint(db)
    result = CliRunner().invoke(app, ["validate", str(work / "spec.yaml")])
    assert result.exit_code == 2, result.output
    assert " ".join(result.output.split()) == message
    assert fingerprint(db) == before
