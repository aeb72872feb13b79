import json

import pytest
from typer.testing import CliRunner

from sweep.cli import app

MARKOV = "synthetic:markov?order=1&vocab=12&seed=2&tokens=30000"
SMALL = ["--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=1",
         "--set", "train.batch_size=8", "--set", "train.lr=1e-2"]



def _run(args):
    return CliRunner().invoke(app, ["train", *args])


def test_json_result_and_vocab_follows_corpus(tmp_path, new_store):
    new_store(tmp_path)
    res = _run(["--data", MARKOV, "--budget-tokens", "8e3", "--out", str(tmp_path), "--json",
                *SMALL, "--set", "train.eval_every=2048"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    for key in ("state", "best_val_loss", "final_val_loss", "baseline_unigram_loss", "tokens",
                "wall_s", "n_params"):
        assert key in out
    assert out["state"] == "COMPLETE" and out["tokens"] == 31 * 256
    assert out["model"]["vocab_size"] == 12 and out["model"]["d_model"] == 32
    assert out["train"]["lr"] == 1e-2 and out["n_evals"] == 4
    assert out["final_val_loss"] < out["baseline_unigram_loss"]
    assert 0 < out["entropy_rate"] < out["baseline_unigram_loss"]
    assert (tmp_path / "data" / "corpora").is_dir()


def test_text_output_lists_evaluations(tmp_path, new_store):
    new_store(tmp_path)
    res = _run(["--data", MARKOV, "--set", "train.steps=8", "--set", "train.eval_every=1024",
                "--out", str(tmp_path), *SMALL])
    assert res.exit_code == 0, res.output
    assert res.stdout.count("val_loss") == 2 + 1  # two evaluations and the summary
    assert "COMPLETE: best val_loss" in res.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--set", "model.n_heads=3"], "d_model=64 is not divisible by n_heads=3"),
        (["--set", "optim.lr=1"], "--set optim.lr"),
        (["--set", "train.lr=-1"], "lr=-1"),
        (["--set", "train.learning_rate=1"], "learning_rate"),
        (["--set", "train.steps=5", "--budget-tokens", "1000"], "both set a budget"),
        (["--preset", "huge"], "preset='huge'"),
        (["--data", "text:/nonexistent/file.txt"], "/nonexistent/file.txt"),
        (["--data", "synthetic:markov?vocab=300&tokens=1000", "--set", "model.vocab_size=256"],
         "beyond vocab_size=256"),
        (["--data", "synthetic:markov?tokens=100"], "fewer than one sequence"),
        (["--set", "badflag"], "key=value"),
    ],
)
def test_bad_input_exits_2_with_one_message(tmp_path, args, needle):
    out = tmp_path / "out"
    res = _run(["--out", str(out), "--data", MARKOV, *args])
    assert res.exit_code == 2, res.output
    assert needle in res.stderr.replace("\n", "")
    if "--data" not in args:
        assert not out.exists()  # config errors are caught before anything is written


def test_diverging_trial_exits_1(tmp_path, new_store):
    new_store(tmp_path)
    res = _run(["--data", MARKOV, "--out", str(tmp_path), *SMALL, "--set", "train.lr=1e20",
                "--set", "train.warmup=0", "--set", "train.steps=50", "--json"])
    assert res.exit_code == 1
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["state"] == "DIVERGED" and "non-finite" in out["fail_reason"]


@pytest.mark.parametrize(("flags", "message"), [
    (["--set", "model.n_layers=100000"], "exceeds the"),
    (["--set", "model.d_model=1000000000", "--set", "model.n_heads=1"], "exceeds the"),
    (["--set", "train.batch_size=100000000"], "exceeds the"),
    (["--device", "tpu"], "device='tpu'"),
])
def test_configs_that_cannot_run_exit_2_before_allocating(tmp_path, flags, message):
    result = CliRunner().invoke(app, ["train", "--out", str(tmp_path / "out"), *flags])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()
