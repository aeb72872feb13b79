"""``sweep worker`` joins a study only under a spec the stored study can continue under, the
same rule and message as ``sweep run`` resuming it."""

import optuna
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from sweep.cli import app
from sweep.executors.optuna import make_storage
from sweep.tracking import default_tracking_uri, find_study


def spec_dict(heads):
    return {
        "name": "heads",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 8, "d_model": 32,
                  "n_heads": {"choice": heads}, "n_layers": 1},
        "train": {"steps": 2, "batch_size": 2, "eval_tokens": 8, "device": "cpu"},
        "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 1},
    }


def trials_of(out):
    study = optuna.load_study(study_name="heads",
                              storage=make_storage(str(out / "optuna.journal")))
    uri = default_tracking_uri(out)
    experiment_id, _ = find_study(uri, "heads")
    runs = MlflowClient(uri).search_runs([experiment_id])
    return [t.state.name for t in study.get_trials()], len(runs)


def test_worker_refuses_changed_choices_as_run_does(tmp_path, monkeypatch, new_store):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump(spec_dict([4, 8])))
    new.write_text(yaml.safe_dump(spec_dict([4, 8, 16])))
    out = tmp_path / "out"
    new_store(out)
    runner = CliRunner()
    started = runner.invoke(app, ["run", str(old), "--out", str(out), "--quiet"])
    assert started.exit_code == 0, started.output
    before = trials_of(out)
    assert before == (["COMPLETE"], 2)  # one trial and the parent run

    joined = runner.invoke(app, ["worker", str(new), "--out", str(out), "--trials", "2"])
    assert joined.exit_code == 2, joined.output
    message = " ".join(joined.output.split())
    assert ("cannot resume: the choices of model.n_heads changed from [4, 8] to [4, 8, 16]"
            in message)
    assert "Traceback" not in joined.output
    assert trials_of(out) == before

    resumed = runner.invoke(app, ["run", str(new), "--out", str(out), "--quiet"])
    assert resumed.exit_code == 2
    assert " ".join(resumed.output.split()) == message
