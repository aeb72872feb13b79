"""A study folder moved (``mv out out2``) is resumed there with no trial run twice, and its best
trial trained again from it; nothing is written at the old place."""

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from sweep.cli import app
from sweep.executors.optuna import make_storage
from sweep.folder import StudyFolder
from sweep.results import load_results
from sweep.spec import parse_spec
from sweep.study import run_study


def spec_data(n_trials):
    return {
        "name": "moved",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 8, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"steps": 2, "batch_size": 2, "eval_tokens": 8, "device": "cpu",
                  "lr": {"float": [1e-3, 1e-2], "log": True}},
        "search": {"executor": "optuna", "sampler": "random", "pruner": "none",
                   "n_trials": n_trials},
    }


def artifact_uris(out):
    client = MlflowClient(StudyFolder(out).tracking_uri())
    experiment = client.get_experiment_by_name("moved")
    runs = client.search_runs([experiment.experiment_id])
    return experiment.artifact_location, {r.info.run_name: r.info.artifact_uri for r in runs}


@pytest.mark.slow  # two small studies (one in a process of its own), two trainings: ~20 s
@pytest.mark.parametrize("move", [os.rename, shutil.move])
def test_a_moved_study_resumes_and_retrains_from_its_new_folder(tmp_path, new_store,
                                                                 monkeypatch, move):
    monkeypatch.chdir(tmp_path)
    out, out2 = tmp_path / "out", tmp_path / "elsewhere" / "out2"
    new_store(out)
    # The study is run by a process of its own, as `sweep run` is (MLflow keeps what it knows
    # of a run's artifacts for the life of a process).
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec_data(2)))
    done = subprocess.run([sys.executable, "-m", "sweep.cli", "run", str(path), "--out",
                           str(out), "--quiet"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out2.parent.mkdir()
    move(str(out), str(out2))
    runner = CliRunner()
    # Read before anything is written there: the stored spec is found under the new folder.
    retrain = runner.invoke(app, ["train", "--from-study", str(out2), "--no-track"])
    assert retrain.exit_code == 0, retrain.output
    assert not out.exists()
    summary = run_study(parse_spec(spec_data(3)), out_dir=out2, quiet=True)
    assert summary.counts["COMPLETE"] == 3
    frame = load_results(out2)
    assert sorted(frame["trial"]) == [0, 1, 2] and set(frame["state"]) == {"COMPLETE"}
    storage = make_storage(str(StudyFolder(out2).journal))
    assert len(storage.get_all_trials(storage.get_study_id_from_name("moved"))) == 3
    retrain = runner.invoke(app, ["train", "--from-study", str(out2)])
    assert retrain.exit_code == 0, retrain.output
    location, runs = artifact_uris(out2)
    new_root = StudyFolder(out2).artifacts.resolve().as_uri()
    assert location == new_root
    assert sorted(runs) == ["moved", "retrain-trial-" + str(int(frame["trial"][0])),
                            "trial-0", "trial-1", "trial-2"]
    assert all(uri.startswith(new_root + "/") for uri in runs.values())
    parent_id = runs["moved"].split("/")[-2]
    assert (StudyFolder(out2).artifacts / parent_id / "artifacts" / "spec.yaml").is_file()
    assert not out.exists()  # nothing written at the old place


def test_artifact_locations_are_read_under_the_stores_folder():
    from sweep.tracking.stores import artifact_root

    store = "sqlite:////new/place/mlflow.db"
    run = "a" * 32
    assert artifact_root(store, "file:///old/x/mlartifacts") == "file:///new/place/mlartifacts"
    assert artifact_root(store, f"file:///old/x/mlartifacts/{run}/artifacts") == (
        f"file:///new/place/mlartifacts/{run}/artifacts")
    assert artifact_root(store, f"file:///u/mlartifacts/s/mlartifacts/{run}/artifacts") == (
        f"file:///new/place/mlartifacts/{run}/artifacts")
    assert artifact_root(store, "/old/cwd/mlruns/0") == "/old/cwd/mlruns/0"  # not a study's
    assert artifact_root("http://127.0.0.1:5000", "file:///old/x/mlartifacts") == (
        "file:///old/x/mlartifacts")


#: Makes a study's parent run in ``sys.argv[1]``, as `sweep run` would, in a process of its own.
MAKE_STUDY = """
import sys
from sweep.tracking import StudyTracker, default_tracking_uri
StudyTracker.start(default_tracking_uri(sys.argv[1]), "moved", {"name": "moved"},
                   executor="optuna", algorithm="random")
"""


@pytest.mark.slow  # a process that imports MLflow: about 4 s
def test_an_analysis_of_a_moved_study_writes_under_its_new_folder(tmp_path, new_store):
    from sweep.tracking import find_study, log_json, read_stored_spec

    out, out2 = tmp_path / "out", tmp_path / "out2"
    new_store(out)
    subprocess.run([sys.executable, "-c", MAKE_STUDY, str(out)], check=True, timeout=120)
    os.rename(out, out2)
    uri = StudyFolder(out2).tracking_uri()
    parent_run_id = find_study(uri, "moved")[1]
    assert read_stored_spec(uri, parent_run_id) == {"name": "moved"}
    log_json(uri, parent_run_id, {"fit": 1}, "scaling_analysis/report.json")
    written = StudyFolder(out2).artifacts / parent_run_id / "artifacts" / "scaling_analysis"
    assert (written / "report.json").is_file() and not out.exists()
