"""``sweep validate`` reads the corpus (writing nothing) and prints its size, split and baseline."""

import json
import math
import random

import numpy as np
import yaml
from scipy.stats import entropy as scipy_entropy
from typer.testing import CliRunner

from sweep.cli import app
from sweep.data import load_corpus


def _spec(tmp_path, data: str):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "name": "validate-corpus",
        "data": data,
        "model": {"vocab_size": 256, "seq_len": 8, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"steps": 2, "batch_size": 2, "eval_tokens": 8, "device": "cpu"},
        "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 1},
    }))
    return path


def _folder(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    for i in range(12):
        rng = random.Random(i)
        words = " ".join(rng.choice(["ox", "fen", "lark", "moor", "tide", "reed"]) + str(i)
                         for _ in range(100))
        (root / f"part{i:02d}.txt").write_text(f"chapter {i}: {words}\n")
    (root / "cover.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)))
    (root / "notes.pyc").write_bytes(b"\xa7\r\r\n\x00" * 10)
    return root


def _invoke(tmp_path, monkeypatch, *args):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())


def test_validate_prints_the_corpus_size_split_and_baseline(tmp_path, monkeypatch):
    root = _folder(tmp_path)
    spec = _spec(tmp_path, f"text:{root}")
    before = sorted(tmp_path.rglob("*"))
    result, text = _invoke(tmp_path, monkeypatch, "validate", spec)
    assert result.exit_code == 0, result.output
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, no runs/ folder
    corpus = load_corpus(f"text:{root}", tmp_path / "elsewhere")
    val = np.asarray(corpus.val)
    baseline = scipy_entropy(np.bincount(val, minlength=256))  # nats
    n = len(corpus.train) + len(val)
    assert f"corpus text:{root}: {n:,} bytes in 12 documents (2 binary files skipped)" in text
    assert (f"split: train {len(corpus.train):,}, val {len(val):,} bytes "
            f"({len(val) / n:.1%}), whole documents by a hash of their path") in text
    assert f"unigram baseline {baseline:.4f} nats/token ({baseline / math.log(2):.4f} " \
           "bits/byte)" in text


def test_validate_json_carries_the_corpus(tmp_path, monkeypatch):
    root = _folder(tmp_path)
    result, _ = _invoke(tmp_path, monkeypatch, "validate", _spec(tmp_path, f"text:{root}"),
                        "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)["corpus"]
    corpus = load_corpus(f"text:{root}", tmp_path / "elsewhere")
    assert record["n_val"] == len(corpus.val) and record["binary_skipped"] == 2
    assert record["baseline_unigram_loss"] == corpus.baseline_unigram_loss
    assert record["split"] == "documents" and record["content_hash"] == corpus.content_hash


def test_validate_refuses_a_missing_or_unusable_corpus_naming_data_uri(tmp_path, monkeypatch):
    missing = tmp_path / "no-such-folder"
    result, text = _invoke(tmp_path, monkeypatch, "validate", _spec(tmp_path, f"text:{missing}"))
    assert result.exit_code == 2
    assert text.startswith("error: data.uri: ") and f"'{missing}' does not exist" in text
    root = _folder(tmp_path)
    result, text = _invoke(tmp_path, monkeypatch, "validate",
                           _spec(tmp_path, f"text:{root}?val=appendix*"))
    assert result.exit_code == 2
    assert "data.uri: " in text and "val=appendix* matches none of the 12 documents" in text
    assert text.count("error:") == 1 and "parameter" not in text  # refused before the space
    assert not (tmp_path / "runs").exists()
