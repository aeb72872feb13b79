"""Bad input that ``sweep validate`` and ``sweep run`` both refuse: exit 2, one message naming
the field or file, no traceback, nothing written."""

import hashlib
import os
from pathlib import Path

import pytest
import yaml
from testsupport import tiny_spec
from typer.testing import CliRunner

from sweep.cli import app


def spec_file(tmp_path, **sections):
    data = tiny_spec("refusals", **sections)
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


# ---------------------------------------------------------------------- --out: whose folder
SYSTEM = [("/", "the root, a home folder or a folder of folders"),
          ("/etc", "/etc and what is under it belong to the system"),
          ("/root", "the root, a home folder or a folder of folders"),
          ("/usr/bin", "/usr and what is under it belong to the system"),
          ("/proc", "/proc and what is under it belong to the system"),
          ("/etc/sweep-study", "/etc and what is under it belong to the system")]


@pytest.mark.parametrize(("out", "reason"), SYSTEM)
@pytest.mark.parametrize("command", ["run", "worker", "train", "coord-check", "submit"])
def test_out_refuses_the_root_and_system_folders(tmp_path, command, out, reason):
    path = spec_file(tmp_path)
    args = {"run": ["run", path, "--force-out"], "worker": ["worker", path],
            "train": ["train", "--preset", "tiny", "--force-out"],
            "coord-check": ["coord-check", path, "--force-out"],
            "submit": ["submit", path, "--address", "http://127.0.0.1:9"]}[command]
    text = refused(tmp_path, *args, "--out", out)
    assert text.startswith(f"error: --out {out}: {reason}"), text
    assert not Path("/etc/sweep-study").exists()


def test_a_link_into_a_system_folder_is_judged_where_it_leads(tmp_path):
    (tmp_path / "link").symlink_to("/etc")
    text = refused(tmp_path, *run_args(spec_file(tmp_path), tmp_path)[:2], "--out",
                   tmp_path / "link")
    assert "/etc and what is under it belong to the system (/etc)" in text


def test_train_save_refuses_a_system_folder(tmp_path):
    text = refused(tmp_path, "train", "--preset", "tiny", "--save", "/usr/lib/sweep-model")
    assert text.startswith("error: --save /usr/lib/sweep-model: /usr and what is under it "
                           "belong to the system")


def _users_folder(tmp_path):
    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "notes" / "todo.txt").write_text("my own notes\n")
    (mine / "data").mkdir()  # a folder of the user's that a study also writes (data/)
    (mine / "thesis.tex").write_text("\\documentclass{article}\n")
    return mine


@pytest.mark.parametrize("command", ["run", "worker", "train", "coord-check"])
def test_a_non_empty_folder_that_is_not_a_study_is_refused_unchanged(tmp_path, command):
    mine = _users_folder(tmp_path)
    path = spec_file(tmp_path)
    args = {"run": ["run", path], "worker": ["worker", path],
            "train": ["train", "--preset", "tiny"], "coord-check": ["coord-check", path]}
    text = refused(tmp_path, *args[command], "--out", mine)  # tree() compares every sha256
    assert text == (f"error: --out {mine}: holds files that are not a study's (no "
                    "optuna.journal, mlflow.db or prepared corpus); give a new or empty "
                    "folder, a study's folder, or add --force-out to write the study among "
                    "these files")


@pytest.mark.slow  # two short studies: about 10 s
def test_force_out_writes_among_the_users_files_and_the_study_then_resumes(tmp_path, new_store):
    """--force-out is the user's word; the folder is then a study's, resumed without it."""
    mine = _users_folder(tmp_path)
    before = tree(mine)
    uri = new_store(tmp_path / "store")  # the MLflow store elsewhere: mine holds no mlflow.db
    path = spec_file(tmp_path, tracking={"uri": uri})
    refused(tmp_path, "run", path, "--out", mine)
    first = CliRunner().invoke(app, ["run", str(path), "--out", str(mine), "--quiet",
                                     "--force-out"])
    assert first.exit_code == 0, first.output
    assert (mine / "optuna.journal").is_file()
    again = CliRunner().invoke(app, ["run", str(path), "--out", str(mine), "--quiet",
                                     "--trials", "2"])
    assert again.exit_code == 0, again.output
    from sweep.results import load_results

    assert len(load_results("refusals", tracking_uri=uri)) == 2  # one trial, then one more
    after = tree(mine)
    assert {k: v for k, v in after.items() if k in before} == before  # the user's files kept


# ------------------------------------------- validate refuses what run refuses: vocab, server
def _tokens_folder(folder, vocab):
    """A nanoGPT-style ``tokens:`` folder whose ids run up to ``vocab - 1`` (meta.json)."""
    import numpy as np

    folder.mkdir()
    (np.arange(4096) % vocab).astype(np.uint16).tofile(folder / "train.bin")
    (np.arange(1024) % vocab).astype(np.uint16).tofile(folder / "val.bin")
    (folder / "meta.json").write_text(f'{{"vocab_size": {vocab}}}')
    return folder


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("corpus", ["synthetic", "tokens"])
def test_a_corpus_with_more_token_ids_than_model_vocab_size_is_refused(tmp_path, command,
                                                                       corpus):
    if corpus == "tokens":
        uri, n = f"tokens:{_tokens_folder(tmp_path / 'tok', 1000)}", 1000
        path = spec_file(tmp_path, data=uri, model={"vocab_size": {"choice": [256, 512]}})
        largest = 512
    else:
        uri, n, largest = tiny_spec("refusals")["data"], 16, 8
        path = spec_file(tmp_path, model={"vocab_size": 8})
    args = ["validate", path] if command == "validate" else run_args(path, tmp_path)
    text = refused(tmp_path, *args)
    assert text == (f"error: model.vocab_size={largest} is smaller than the vocabulary of "
                    f"'{uri}' ({n} token ids); give model.vocab_size >= {n}")


@pytest.mark.parametrize("command", ["validate", "run", "worker"])
def test_an_http_tracking_uri_where_nothing_listens_is_refused(tmp_path, command):
    from testsupport import free_port

    port = free_port()
    path = spec_file(tmp_path, tracking={"uri": f"http://alice:s3cret@127.0.0.1:{port}/ml"})
    args = ["validate", path] if command == "validate" else [command, path, "--out",
                                                              tmp_path / "out"]
    text = refused(tmp_path, *args)
    assert text == (f"error: tracking.uri http://127.0.0.1:{port}/ml: no MLflow server answers "
                    f"there (nothing accepts a connection at 127.0.0.1:{port}: Connection "
                    "refused); start it (mlflow server --host 127.0.0.1 --port PORT) or fix "
                    "the address")
    assert "s3cret" not in text and "alice" not in text


# ---------------------------------------------- a model folder whose config.json cannot fit
@pytest.mark.parametrize(("field", "value"), [("d_model", 10**9), ("n_layers", 10**7)])
def test_sample_refuses_a_config_json_whose_weights_cannot_fit_before_allocating(
        tmp_path, field, value):
    import json

    from sweep.train.saved import CONFIG_FILE, FORMAT, TORCH_FILE

    folder = tmp_path / "model"
    folder.mkdir()
    model = {"vocab_size": 256, "seq_len": 64, "d_model": 64, "n_heads": 8, "n_layers": 2,
             field: value}
    (folder / CONFIG_FILE).write_text(json.dumps({"format": FORMAT, "model": model,
                                                  "byte_level": True,
                                                  "data": "builtin:python-stdlib"}))
    (folder / TORCH_FILE).write_bytes(b"weights that are never read")
    text = refused(tmp_path, "sample", folder, "--prompt", "def ")
    assert text.startswith(f"error: MODEL_DIR {folder}: config.json model.d_model="
                           f"{model['d_model']}, model.n_layers={model['n_layers']}, "
                           "model.vocab_size=256: "), text
    assert "GB as fp32 weights, over the" in text and text.endswith("GB of cpu")


@pytest.mark.parametrize("command", ["train", "coord-check", "sample"])
def test_device_flag_of_the_model_commands_is_refused_in_one_line(tmp_path, command):
    """Before a corpus is prepared or a model built: nothing is written (coord-check wrote its
    corpus, then raised a traceback from torch)."""
    args = {"train": ["train", "--preset", "tiny", "--no-track", "--out", tmp_path / "out"],
            "coord-check": ["coord-check", "tiny", "--out", tmp_path / "out"],
            "sample": ["sample", tmp_path / "model", "--prompt", "x"]}[command]
    text = refused(tmp_path, *args, "--device", "mps")
    assert text == ("error: --device='mps': not a device a study trains on; use auto, cpu, "
                    "cuda or cuda:N")


@pytest.mark.parametrize(("out", "reason"), SYSTEM[:4])
def test_analyze_out_refuses_the_root_and_system_folders(tmp_path, out, reason):
    from testsupport import law

    rows = ["n_params,n_tokens,loss"] + [f"{n:g},{d:g},{law(n, d):.6f}"
                                         for n in (1e6, 4e6, 1.6e7) for d in (1e8, 1e9, 1e10)]
    (tmp_path / "points.csv").write_text("\n".join(rows) + "\n")
    text = refused(tmp_path, "analyze", "scaling", "--csv", tmp_path / "points.csv",
                   "--approach", "3", "--bootstrap", "0", "--out", out)
    assert text.startswith(f"error: --out {out}: {reason}"), text
