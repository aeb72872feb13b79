"""One ``--set`` syntax for ``sweep estimate`` and ``sweep train``."""

import json

import pytest
from typer.testing import CliRunner

from sweep.cli import app
from sweep.cli.common import SET_FORMS


def _estimate(*args):
    return CliRunner().invoke(app, ["estimate", "--preset", "gpt2", "--json", *args])


def test_estimate_takes_a_field_bare_or_with_its_section():
    bare = _estimate("--set", "d_model=1024", "--set", "n_heads=16")
    dotted = _estimate("--set", "model.d_model=1024", "--set", "model.n_heads=16")
    assert bare.exit_code == 0 and dotted.exit_code == 0, bare.output + dotted.output
    assert json.loads(bare.stdout) == json.loads(dotted.stdout)
    assert json.loads(bare.stdout)["config"]["d_model"] == 1024


@pytest.mark.parametrize(("flag", "needle"), [
    ("train.lr=1e-3", "--set train.lr: this command takes model fields only"),
    ("lr=1e-3", "'lr' is not a model field"),
    ("optim.lr=1", "'optim' is not a section (model or train)"),
    ("model.n_head=4", "'n_head' is not a model field (did you mean n_heads"),
])
def test_estimate_refuses_other_keys_naming_the_accepted_forms(flag, needle):
    result = _estimate("--set", flag)
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert needle in message and SET_FORMS in message


def test_train_sorts_bare_fields_into_model_and_train(tmp_path):
    result = CliRunner().invoke(app, [
        "train", "--data", "synthetic:markov?order=1&vocab=12&seed=2&tokens=20000",
        "--set", "seq_len=16", "--set", "model.d_model=16", "--set", "n_heads=2",
        "--set", "n_layers=1", "--set", "lr=2e-3", "--set", "train.steps=1",
        "--set", "batch_size=2", "--no-track", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["model"]["seq_len"] == 16 and out["model"]["d_model"] == 16
    assert out["train"]["lr"] == 2e-3 and out["train"]["batch_size"] == 2
    assert out["train"]["steps"] == 1 and out["train"]["tokens"] is None
