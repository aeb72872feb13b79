"""Bad input that ``sweep validate`` and ``sweep run`` both refuse: exit 2, one message naming
the field or file, no traceback, nothing written."""

import hashlib
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sweep.cli import app

BASE = {
    "name": "refusals",
    "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
    "model": {"vocab_size": 16, "seq_len": 8, "d_model": 16, "n_heads": 2, "n_layers": 1},
    "train": {"steps": 2, "batch_size": 2, "eval_tokens": 8, "device": "cpu"},
    "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 1},
}


def spec_file(tmp_path, **sections):
    data = {**BASE}
    for key, value in sections.items():
        data[key] = {**BASE[key], **value} if isinstance(BASE.get(key), dict) else value
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def tree(folder):
    """Every path under ``folder`` with the sha256 of each file (None for a folder)."""
    out = {}
    for path in sorted(Path(folder).rglob("*")):
        out[str(path)] = (hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file()
                          and not path.is_symlink() else None)
    return out


def refused(tmp_path, *args, cwd=None):
    """Invoke ``sweep ARGS`` in ``cwd`` (tmp_path); assert exit 2, one error line, nothing new
    written under ``cwd``; return the message as one line."""
    cwd = cwd or tmp_path
    before = tree(cwd)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, [str(a) for a in args])
    finally:
        os.chdir(old)
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # typer.Exit(2)
    assert "Traceback" not in result.output and text.count("error:") == 1, result.output
    assert tree(cwd) == before
    return text


def run_args(path, tmp_path):
    return ["run", path, "--out", tmp_path / "out"]


# ------------------------------------------------------- a fixed d_ff under muP or CompleteP
@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("parametrization", ["mup", "completep"])
def test_a_fixed_d_ff_while_d_model_varies_under_mup_or_completep_is_refused(
        tmp_path, command, parametrization):
    path = spec_file(tmp_path, model={"d_model": {"choice": [16, 32]}, "d_ff": 64,
                                      "parametrization": parametrization, "base_d_model": 16,
                                      "base_n_layers": 1})
    args = ["validate", path] if command == "validate" else run_args(path, tmp_path)
    text = refused(tmp_path, *args)
    assert f"model.d_ff: d_ff=64 while model.d_model varies breaks parametrization " \
           f"'{parametrization}'" in text
    assert "use model.d_ff_ratio so d_ff scales with d_model" in text
