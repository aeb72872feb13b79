"""Optuna studies in a PostgreSQL database (`search.storage`), as on a cluster.

A throwaway PostgreSQL server from Debian's packages (``initdb`` + ``pg_ctl``), listening on
127.0.0.1 only, in its own folder; as root it runs as the ``postgres`` user. `sweep run` with
``search.parallel: 2`` and then `sweep worker` share the study through it.
"""

import glob
import os
import pwd
import shutil
import subprocess
import tempfile

import optuna
import pytest
import yaml
from testsupport import free_port
from typer.testing import CliRunner

from sweep.cli import app
from sweep.results import load_results

pytest.importorskip("psycopg2")


def pg_bin(name):
    found = shutil.which(name) or next(iter(sorted(glob.glob(
        f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        pytest.skip(f"PostgreSQL's {name} is not installed (Debian package postgresql)")
    return found


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server on 127.0.0.1 with a database ``optuna``; yields its SQLAlchemy URL."""
    as_user = []
    folder = tempfile.mkdtemp(prefix="pg-", dir="/tmp")
    if os.geteuid() == 0:  # the server refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
    data, port = os.path.join(folder, "data"), free_port()

    def run(*cmd):
        subprocess.run([*as_user, *cmd], check=True, capture_output=True, timeout=120)

    run(pg_bin("initdb"), "-D", data, "-U", "sweep", "-A", "trust", "--no-sync")
    run(pg_bin("pg_ctl"), "-D", data, "-l", os.path.join(folder, "server.log"), "-w", "-o",
        f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off", "start")
    try:
        run(pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "sweep", "optuna")
        yield f"postgresql+psycopg2://sweep@127.0.0.1:{port}/optuna"
    finally:
        run(pg_bin("pg_ctl"), "-D", data, "-m", "fast", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def spec_file(tmp_path, storage, name="pg-study", n_trials=4):
    data = {
        "name": name,
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=40000",
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 4096, "batch_size": 8, "lr": {"float": [1e-3, 3e-2], "log": True},
                  "eval_every": 2048, "eval_tokens": 1024},
        "search": {"executor": "optuna", "sampler": "tpe", "pruner": "none",
                   "n_trials": n_trials, "parallel": 2, "storage": storage},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.server
@pytest.mark.slow
def test_parallel_workers_and_a_joining_worker_share_a_postgres_study(postgres, tmp_path,
                                                                    new_store):
    path, out = spec_file(tmp_path, postgres), tmp_path / "out"
    new_store(out)
    runner = CliRunner()
    result = runner.invoke(app, ["run", str(path), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert not (out / "optuna.journal").exists()  # the study lives in the database
    joined = runner.invoke(app, ["worker", str(path), "--out", str(out), "--trials", "1"])
    assert joined.exit_code == 0, joined.output
    study = optuna.load_study(study_name="pg-study", storage=postgres)
    trials = study.get_trials()
    assert sorted(t.number for t in trials) == [0, 1, 2, 3, 4]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    frame = load_results(out).set_index("trial")
    assert sorted(frame.index) == [0, 1, 2, 3, 4]
    for t in trials:  # the MLflow row of each trial is that Optuna trial
        assert float(frame.loc[t.number, "train.lr"]) == pytest.approx(t.params["train.lr"])
        assert frame.loc[t.number, "best_val_loss"] == pytest.approx(t.value)
    # Resumed: the study already holds 5 trials, so 6 means one more.
    again = runner.invoke(app, ["run", str(path), "--out", str(out), "--trials", "6", "--quiet"])
    assert again.exit_code == 0, again.output
    assert len(optuna.load_study(study_name="pg-study", storage=postgres).get_trials()) == 6


@pytest.mark.parametrize("command", ["run", "worker"])
def test_a_database_that_does_not_answer_exits_2_and_writes_nothing(tmp_path, command):
    url = f"postgresql+psycopg2://sweep:secret@127.0.0.1:{free_port()}/optuna"
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [command, str(spec_file(tmp_path, url)), "--out", str(out)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "search.storage postgresql+psycopg2://sweep:***@127.0.0.1" in text
    assert "cannot connect" in text and "secret" not in text
    assert not out.exists()


@pytest.mark.server
def test_an_unknown_database_exits_2(postgres, tmp_path):
    url = postgres.rsplit("/", 1)[0] + "/no_such_db"
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path, url)), "--out",
                                      str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "no_such_db" in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


@pytest.mark.server
@pytest.mark.slow
def test_plain_postgresql_urls_use_the_installed_driver(postgres, tmp_path, new_store):
    pytest.importorskip("psycopg")
    url = postgres.replace("postgresql+psycopg2://", "postgresql://")
    out = tmp_path / "out"
    new_store(out)
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path, url, "pg-plain", 2)),
                                      "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert len(optuna.load_study(study_name="pg-plain", storage=url).get_trials()) == 2


@pytest.mark.server
def test_the_stored_spec_keeps_no_storage_password(postgres, tmp_path, new_store):
    from mlflow import MlflowClient

    with_password = postgres.replace("sweep@", "sweep:Hunter2@")  # trust auth ignores it
    path, out = spec_file(tmp_path, with_password, "pg-secret", 1), tmp_path / "out"
    new_store(out)
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    frame = load_results(out)
    client = MlflowClient(frame.attrs["tracking_uri"])
    client.download_artifacts(frame.attrs["parent_run_id"], "spec.yaml", str(tmp_path))
    text = (tmp_path / "spec.yaml").read_text()
    assert "Hunter2" not in text
    assert yaml.safe_load(text)["search"]["storage"] == with_password.replace("Hunter2", "***")


@pytest.mark.server
def test_worker_refuses_a_storage_without_the_study(postgres, tmp_path, new_store):
    # The MLflow store has the study, the database does not (another --out, another storage):
    # joining must not start a second study whose trial numbers collide.
    path = spec_file(tmp_path, postgres, "pg-elsewhere", 1)
    out = tmp_path / "out"
    new_store(out)
    assert CliRunner().invoke(app, ["run", str(path), "--out", str(out)]).exit_code == 0
    other = postgres.rsplit("/", 1)[0] + "/postgres"
    moved = spec_file(tmp_path, other, "pg-elsewhere", 1)
    result = CliRunner().invoke(app, ["worker", str(moved), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "no Optuna study 'pg-elsewhere' in search.storage" in " ".join(result.output.split())
    assert [s.study_name for s in optuna.get_all_study_summaries(other)] == []


@pytest.mark.parametrize("url, rule", [
    ("postgresql+psycopg2://sweep@127.0.0.1:abc/optuna", "not a database URL"),
    ("postgresql+psycopg2://sweep@127.0.0.1:{port}/optuna?password=Hunter2", "cannot connect"),
    ("oracle://sweep:Hunter2@127.0.0.1:1521/optuna", "neither a journal file path"),
])
def test_storage_errors_never_print_the_password(tmp_path, url, rule):
    url = url.format(port=free_port())
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path, url)), "--out", str(out)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert rule in text and "Hunter2" not in text and "Traceback" not in text
    assert not out.exists()


def test_a_relative_sqlite_storage_is_not_created_by_a_refused_study(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path, "sqlite:///rel.db")),
                                      "--out", "afile"])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "rel.db").exists()
