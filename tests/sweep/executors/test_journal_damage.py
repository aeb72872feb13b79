"""Damaged Optuna journals and MLflow stores of another schema: refused, then rebuilt exactly.

One real study (4 trials) is run once; each test copies its folder, damages it for real (a
journal cut mid-record, 64 flipped bytes, an emptied journal, an unknown MLflow schema
version), and checks the refusal (files unchanged) and the rebuild (`--rebuild-journal`):
the rebuilt trials equal the original ones, and the resume numbers its new trial 4.
"""

import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage

from sweep.executors.optuna import JournalError
from sweep.executors.optuna.journal import journal_damage
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.study.overrides import with_overrides
from sweep.tracking import StoreSchemaError, find_study, read_trials

ROOT = Path(__file__).resolve().parents[3]
NAME = "damaged"
DATA = {
    "name": NAME,
    "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
    "model": {"vocab_size": 16, "seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1},
    "train": {"tokens": 4096, "batch_size": 4, "lr": {"float": [1e-3, 1e-2], "log": True},
              "eval_every": 1024, "eval_tokens": 256, "device": "cpu"},
    "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 4,
               "seed": 0},
}


def test_journal_damage_names_the_first_bad_line(tmp_path):
    path = tmp_path / "optuna.journal"
    good = b'{"op_code":0,"worker_id":"w"}\n{"op_code":4,"worker_id":"w"}\n'
    path.write_bytes(good)
    assert journal_damage(path) is None
    path.write_bytes(good[:-10])
    assert journal_damage(path) == "its last record (line 2) is cut short"
    path.write_bytes(good.replace(b'"w"}\n{', b'"\xff"}\n{', 1))
    assert journal_damage(path) == "line 1 is not UTF-8 text (bytes were changed)"
    path.write_bytes(good.replace(b"4,", b"4;", 1))
    assert journal_damage(path) == "line 2 is not a JSON record (cut or changed)"
    path.write_bytes(b"[1]\n")
    assert journal_damage(path) == "line 1 is not an Optuna journal record"


@pytest.fixture(scope="module")
def original(tmp_path_factory, new_store):
    """The study folder after 4 trials, and its Optuna trials."""
    out = tmp_path_factory.mktemp("original") / "out"
    new_store(out)
    run_study(parse_spec(DATA), out_dir=out, quiet=True)
    return out, trials(out)


def trials(out):
    storage = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    return optuna.load_study(study_name=NAME, storage=storage).get_trials()


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def cut(journal):
    os.truncate(journal, journal.stat().st_size - 60)


def flip(journal):
    data = bytearray(journal.read_bytes())
    for i in random.Random(0).sample(range(len(data) // 3, 2 * len(data) // 3), 64):
        data[i] ^= 0xFF
    journal.write_bytes(bytes(data))


def empty(journal):
    journal.write_bytes(b"")


DAMAGES = {
    cut: "its last record (line ",
    flip: "is not UTF-8 text (bytes were changed)",
    empty: "it holds 0 trial(s) but the MLflow store has runs of trial(s) 0-3 that it lacks",
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGES), ids=lambda f: f.__name__)
def test_a_damaged_journal_is_refused_unchanged_then_rebuilt_with_the_same_trials(
        tmp_path, original, damage):
    out = tmp_path / "out"
    shutil.copytree(original[0], out)
    journal = out / "optuna.journal"
    damage(journal)
    before = {p.name: digest(p) for p in (journal, out / "mlflow.db")}
    spec = with_overrides(parse_spec(DATA), n_trials=5)
    with pytest.raises(JournalError) as info:
        run_study(spec, out_dir=out, quiet=True)
    message = str(info.value)
    assert DAMAGES[damage] in message and "--rebuild-journal" in message
    assert message.startswith(f"study {NAME}: the Optuna storage {journal}: ")
    assert {p.name: digest(p) for p in (journal, out / "mlflow.db")} == before

    summary = run_study(spec, out_dir=out, quiet=True, rebuild_journal=True)
    (aside,) = out.glob("optuna.journal.damaged-*")
    assert digest(aside)[0] == before["optuna.journal"][0]  # the damaged file, kept as it was
    now = trials(out)
    assert [t.number for t in now] == [0, 1, 2, 3, 4]
    assert [(t.number, t.params, t.state, t.values) for t in now[:4]] == [
        (t.number, t.params, t.state, t.values) for t in original[1]]
    assert now[4].state == optuna.trial.TrialState.COMPLETE
    assert {k: v for k, v in summary.counts.items() if v} == {"COMPLETE": 5}
    runs = read_trials(summary.tracking_uri, *find_study(summary.tracking_uri, NAME))
    assert sorted(r["trial"] for r in runs) == [0, 1, 2, 3, 4]
    assert {str(r["state"]) for r in runs} == {"COMPLETE"}


@pytest.mark.slow
def test_rebuild_journal_on_a_whole_journal_refuses_and_changes_nothing(tmp_path, original):
    out = tmp_path / "out"
    shutil.copytree(original[0], out)
    before = digest(out / "optuna.journal")
    with pytest.raises(JournalError, match="is whole and holds every trial of the MLflow "
                                           "store's 4 run"):
        run_study(parse_spec(DATA), out_dir=out, quiet=True, rebuild_journal=True)
    assert digest(out / "optuna.journal") == before and not list(out.glob("*.damaged-*"))


@pytest.mark.slow
def test_an_mlflow_store_of_an_unknown_schema_version_is_refused_unchanged(tmp_path, original):
    out = tmp_path / "out"
    shutil.copytree(original[0], out)
    con = sqlite3.connect(out / "mlflow.db")
    with con:
        con.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    con.close()
    before = digest(out / "mlflow.db"), digest(out / "optuna.journal")
    with pytest.raises(StoreSchemaError) as info:
        run_study(with_overrides(parse_spec(DATA), n_trials=5), out_dir=out, quiet=True)
    assert "schema revision ffffffffffff" in str(info.value)
    assert "a newer MLflow made it" in str(info.value)
    assert (digest(out / "mlflow.db"), digest(out / "optuna.journal")) == before


@pytest.mark.slow
def test_the_cli_says_one_line_and_exits_2_for_a_cut_journal(tmp_path, original):
    import yaml

    out = tmp_path / "out"
    shutil.copytree(original[0], out)
    cut(out / "optuna.journal")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(DATA))
    done = subprocess.run(
        [sys.executable, "-m", "sweep.cli", "run", str(tmp_path / "spec.yaml"), "--out",
         str(out), "--trials", "5", "--quiet"], cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: study damaged: ")
    assert "--rebuild-journal" in done.stderr


def test_a_rebuilt_journal_keeps_interrupted_trials_retryable_and_numbers_without_a_run(
        tmp_path):
    from sweep.executors.optuna.journal import rebuild_journal
    from sweep.executors.optuna.recovery import _queue_retries
    from sweep.schema import ATTR_RETRY_OF, ATTR_RUN_ID, ATTR_STATE, TrialState

    def run(number, state, lr, *, retry_of=None, best=None):
        return {"trial": number, "run_id": f"r{number}", "state": state, "retry_of": retry_of,
                "fail_reason": None if state.finished else "killed", "params":
                {"train.lr": lr, "model.d_model": 16},
                "metrics": {} if best is None else {"best_val_loss": best}}

    runs = [run(0, TrialState.COMPLETE, 0.002, best=2.5),
            run(1, TrialState.INTERRUPTED, 0.004),
            run(2, TrialState.COMPLETE, 0.004, retry_of=1, best=2.25),
            run(3, TrialState.RUNNING, 0.008),  # its process is gone: interrupted
            run(5, TrialState.PRUNED, 0.003, best=2.75)]  # number 4 has no run
    path = tmp_path / "optuna.journal"
    assert rebuild_journal(parse_spec(DATA), path, runs, baseline=2.7) is None
    storage = JournalStorage(JournalFileBackend(str(path)))
    study = optuna.load_study(study_name=NAME, storage=storage)
    got = study.get_trials()
    S = optuna.trial.TrialState
    assert [(t.number, t.state, t.user_attrs[ATTR_STATE]) for t in got] == [
        (0, S.COMPLETE, "COMPLETE"), (1, S.FAIL, "INTERRUPTED"), (2, S.COMPLETE, "COMPLETE"),
        (3, S.FAIL, "INTERRUPTED"), (4, S.FAIL, "FAILED"), (5, S.PRUNED, "PRUNED")]
    assert [t.params for t in got] == [{"train.lr": r["params"]["train.lr"]} for r in runs[:4]] + [
        {}, {"train.lr": 0.003}]
    assert (got[0].values, got[2].values) == ([2.5], [2.25])
    assert got[2].user_attrs[ATTR_RETRY_OF] == 1 and got[3].user_attrs[ATTR_RUN_ID] == "r3"
    assert _queue_retries(study) == [3]  # 1 was retried already (trial 2)
    (queued,) = study.get_trials(states=(S.WAITING,))
    assert queued.number == 6 and queued.user_attrs[ATTR_RETRY_OF] == 3
