"""From sweep to model: ``sweep train --from-study``, ``--save``, ``sweep sample``."""

import json

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from sweep.cli import app
from sweep.schema import (
    BEST_CONFIG_ARTIFACT,
    KIND_TRAIN,
    SAVED_CONFIG_ARTIFACT,
    TAG_KIND,
    TAG_RETRAIN_OF,
    TAG_RETRAIN_OF_RUN,
    TAG_SAVED_TO,
    TRAIN_EXPERIMENT,
    retrain_run_name,
)
from sweep.tracking import find_study, read_trials

DATA = "builtin:python-stdlib?max_bytes=60000"
SPEC = f"""\
name: retrain
data: {DATA}
model: {{seq_len: 16, n_layers: 1, n_heads: 2, d_model: {{choice: [16, 32]}}}}
train: {{tokens: 4096, batch_size: 8, eval_tokens: 512, device: cpu,
        lr: {{float: [3.0e-3, 1.0e-2], log: true}}}}
search: {{executor: optuna, sampler: random, pruner: none, n_trials: 2, seed: 1}}
"""


def _invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _last_json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def study(tmp_path_factory, new_store):
    root = tmp_path_factory.mktemp("retrain")
    (root / "spec.yaml").write_text(SPEC)
    out = root / "study"
    new_store(out)
    result = _invoke("run", root / "spec.yaml", "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    uri = f"sqlite:///{out / 'mlflow.db'}"
    experiment_id, parent = find_study(uri, "retrain")
    trials = read_trials(uri, experiment_id, parent)
    assert [t["state"] for t in trials] == ["COMPLETE", "COMPLETE"]
    return {"out": out, "uri": uri, "experiment_id": experiment_id, "parent": parent,
            "trials": trials}


def _best(study):
    return min(study["trials"], key=lambda t: t["metrics"]["best_val_loss"])


def test_best_config_yaml_holds_the_data_uri_and_trains_again(study, tmp_path):
    client = MlflowClient(study["uri"])
    path = client.download_artifacts(study["parent"], BEST_CONFIG_ARTIFACT, str(tmp_path))
    config = yaml.safe_load(open(path))
    assert config["data"] == {"uri": DATA}
    assert config["model"]["d_model"] == _best(study)["params"]["model.d_model"]
    out = _last_json(_invoke("train", "--config", path, "--no-track", "--out", tmp_path / "o",
                             "--json"))
    assert out["data"] == DATA and out["source"]["config"].endswith(BEST_CONFIG_ARTIFACT)
    assert out["best_val_loss"] == _best(study)["metrics"]["best_val_loss"]  # same config, seed
    assert not (tmp_path / "o" / "mlflow.db").exists()


def test_from_study_retrains_the_best_trial_exactly_logs_a_run_and_saves(study, tmp_path):
    best = _best(study)
    save = tmp_path / "model"
    out = _last_json(_invoke("train", "--from-study", study["out"], "--save", save, "--json"))
    assert out["best_val_loss"] == best["metrics"]["best_val_loss"]
    assert out["tokens"] == best["metrics"]["tokens"]
    assert out["source"] == {"study": "retrain", "trial": best["trial"], "run_id": best["run_id"]}
    run = MlflowClient(study["uri"]).get_run(out["run_id"])
    assert run.info.experiment_id == study["experiment_id"]
    assert run.info.run_name == retrain_run_name(best["trial"])
    tags = run.data.tags
    assert tags[TAG_KIND] == KIND_TRAIN and tags[TAG_RETRAIN_OF] == str(best["trial"])
    assert tags[TAG_RETRAIN_OF_RUN] == best["run_id"] and tags[TAG_SAVED_TO] == str(save)
    assert run.data.params["data.uri"] == DATA
    assert run.data.metrics["best_val_loss"] == best["metrics"]["best_val_loss"]
    assert run.data.metrics["n_params"] == best["metrics"]["n_params"]
    assert [a.path for a in MlflowClient(study["uri"]).list_artifacts(run.info.run_id, "model")] \
        == [SAVED_CONFIG_ARTIFACT]
    # not a trial of the study: its trials and their count are as they were
    trials = read_trials(study["uri"], study["experiment_id"], study["parent"])
    assert [t["run_id"] for t in trials] == [t["run_id"] for t in study["trials"]]
    saved = json.loads((save / "config.json").read_text())
    assert saved["byte_level"] is True and saved["data"] == DATA
    assert saved["model"]["d_model"] == best["params"]["model.d_model"]
    assert saved["source"]["train_run_id"] == out["run_id"]

    first = _last_json(_invoke("sample", save, "--prompt", "def ", "--tokens", 30, "--seed", 5,
                               "--json"))
    assert first["tokens"] == 30 and first["prompt"] == "def "
    again = _last_json(_invoke("sample", save, "--prompt", "def ", "--tokens", 30, "--seed", 5,
                               "--json"))
    assert again["text"] == first["text"]
    plain = _invoke("sample", save, "--prompt", "def ", "--tokens", 30, "--seed", 5)
    assert plain.stdout == "def " + first["text"] + "\n"


def test_a_chosen_trial_trained_longer_with_both_set_forms(study, tmp_path):
    other = max(study["trials"], key=lambda t: t["metrics"]["best_val_loss"])
    out = _last_json(_invoke("train", "--from-study", study["out"], "--trial", other["trial"],
                             "--set", "train.tokens=8192", "--set", "eval_every=4096",
                             "--no-track", "--json"))
    assert out["tokens"] == 8192 and out["n_evals"] == 2
    assert out["model"]["d_model"] == other["params"]["model.d_model"]
    assert out["train"]["lr"] == other["params"]["train.lr"]
    assert out["train"]["tokens"] == 8192 and out["train"]["eval_every"] == 4096


@pytest.mark.parametrize(("args", "needle"), [
    (["--trial", "7"], "--trial 7: study retrain has no trial 7 (its trials: 0, 1)"),
    (["--preset", "tiny"], "--preset and --from-study: give one"),
    (["--set", "train.budget=1"], "'budget' is not a train field"),
    (["--set", "dmodel=1"], "did you mean d_model"),
    (["--set", "model.d_model=33"], "d_model=33"),
    (["--data", "text:/nonexistent"], "/nonexistent"),
])
def test_bad_retrain_input_exits_2_and_writes_no_run(study, tmp_path, args, needle):
    client = MlflowClient(study["uri"])
    before = len(client.search_runs([study["experiment_id"]]))
    result = _invoke("train", "--from-study", study["out"], "--save", tmp_path / "m", *args)
    assert result.exit_code == 2, result.output
    assert needle in " ".join(result.stderr.split())
    assert len(client.search_runs([study["experiment_id"]])) == before
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["--from-study", "{tmp}/nothing"], "no study there"),
    (["--trial", "1"], "--trial N needs --from-study"),
    (["--config", "{tmp}/missing.yaml"], "cannot read the file"),
    (["--config", "{tmp}/bad.yaml"], "unknown section(s) search"),
    (["--save", "{tmp}/file.txt"], "exists and is not a folder"),
    (["--save", "{tmp}/full"], "holds files but no saved model"),
])
def test_bad_train_flags_are_refused_and_nothing_is_written(tmp_path, args, needle):
    (tmp_path / "bad.yaml").write_text("model: {d_model: 32}\nsearch: {n_trials: 2}\n")
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    result = _invoke("train", "--out", tmp_path / "out",
                     *[a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2, result.output
    assert needle in " ".join(result.stderr.split())
    assert not (tmp_path / "out").exists()


def test_a_plain_train_is_tracked_in_its_own_experiment_and_ids_are_not_sampled(tmp_path,
                                                                                new_store):
    new_store(tmp_path)
    markov = "synthetic:markov?order=1&vocab=12&seed=2&tokens=20000"
    out = _last_json(_invoke("train", "--data", markov, "--set", "seq_len=16",
                             "--set", "d_model=16", "--set", "n_heads=2", "--set", "n_layers=1",
                             "--set", "steps=2", "--set", "batch_size=4",
                             "--out", tmp_path, "--save", tmp_path / "m", "--json"))
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(out["run_id"])
    assert client.get_experiment(run.info.experiment_id).name == TRAIN_EXPERIMENT
    assert run.data.tags[TAG_KIND] == KIND_TRAIN and TAG_RETRAIN_OF not in run.data.tags
    result = _invoke("sample", tmp_path / "m", "--prompt", "x")
    assert result.exit_code == 2
    assert "tokens are ids, not bytes" in " ".join(result.stderr.split())


def test_an_encoder_decoder_model_is_trained_saved_and_not_sampled_as_text(tmp_path, new_store):
    new_store(tmp_path)
    # Byte-level windows: the first 8 bytes the source, the next 8 the target.
    out = _last_json(_invoke("train", "--data", DATA, "--set", "arch=encoder_decoder",
                             "--set", "seq_len=16", "--set", "src_len=8", "--set", "d_model=16",
                             "--set", "n_heads=2", "--set", "n_layers=1", "--set", "steps=2",
                             "--set", "batch_size=4", "--out", tmp_path,
                             "--save", tmp_path / "m", "--json"))
    assert out["run_id"]
    result = _invoke("sample", tmp_path / "m", "--prompt", "def ")
    assert result.exit_code == 2
    assert "an encoder_decoder model maps a source window to a target" in " ".join(
        result.stderr.split())
