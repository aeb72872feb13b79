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


# ------------------------------------------------------------ a corpus file that cannot be read
def _unreadable(folder, how):
    """A ``text:`` folder of two readable documents and one that cannot be read; its path."""
    folder.mkdir()
    (folder / "a.txt").write_text("the first document of the corpus\n" * 20)
    (folder / "b.txt").write_text("a second document, not like the first\n" * 20)
    bad = folder / "c.txt"
    if how == "chmod":
        bad.write_text("a document nobody may read\n")
        bad.chmod(0)
    else:  # reading /proc/self/mem at offset 0 fails with EIO, for root too
        bad.symlink_to("/proc/self/mem")
    return bad


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("how", ["chmod", "io-error"])
def test_an_unreadable_corpus_file_is_named(tmp_path, command, how):
    if how == "chmod" and os.geteuid() == 0:
        pytest.skip("root reads a file of mode 000; the io-error case covers root")
    corpus = tmp_path / "corpus"
    bad = _unreadable(corpus, how)
    path = spec_file(tmp_path, data=f"text:{corpus}", model={"vocab_size": 256})
    args = ["validate", path] if command == "validate" else run_args(path, tmp_path)
    text = refused(tmp_path, *args)
    reason = "Permission denied" if how == "chmod" else "Input/output error"
    assert f"data.uri: corpus 'text:{corpus}': cannot read '{bad}': {reason}" in text
    assert "--out" not in text


# ------------------------------------------------------------------ a device no study trains on
@pytest.mark.parametrize("command", ["validate", "run", "worker"])
@pytest.mark.parametrize("where", ["flag", "spec"])
def test_a_device_no_study_trains_on_is_refused_in_one_line(tmp_path, command, where):
    path = spec_file(tmp_path, train={"device": "mps" if where == "spec" else "cpu"})
    args = ["validate", path] if command == "validate" else [command, path, "--out",
                                                              tmp_path / "out"]
    if where == "flag":
        args += ["--device", "mps"]
    text = refused(tmp_path, *args)
    source = "--device" if where == "flag" else "train.device"
    assert text == (f"error: {source}='mps': not a device a study trains on; use auto, cpu, "
                    "cuda or cuda:N")
