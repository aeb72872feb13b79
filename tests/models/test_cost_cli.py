"""`sweep estimate`: JSON fields against the published GPT-2 counts, table output, bad input."""

import json

import pytest
from typer.testing import CliRunner

from models import ModelConfig
from models.cost import estimate
from sweep.cli import app

runner = CliRunner()


def _json(*args):
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("preset,n_params", [("gpt2", 124_439_808), ("gpt2-xl", 1_557_611_200)])
def test_json_parameter_counts(preset, n_params):
    out = _json("--preset", preset)
    assert out["n_params"] == n_params
    for key in ("n_params_non_embedding", "flops_per_token_fwd", "flops_per_token_train",
                "flops_per_token_dense_train"):
        assert out[key] > 0
    assert set(out["memory_bytes"]) >= {"weights", "grads", "optimizer", "activations",
                                        "logits", "total"}


def test_json_follows_sets_and_flags():
    out = _json("--preset", "gpt2", "--set", "d_model=1024", "--set", "n_heads=16",
                "--set", "attn_pattern=local", "--set", "attn_sparsity=0.5",
                "--batch-size", "4", "--seq-len", "512", "--dtype", "bf16", "--device", "cpu")
    cfg = ModelConfig.from_preset("gpt2", d_model=1024, n_heads=16, attn_pattern="local",
                                  attn_sparsity=0.5)
    want = estimate(cfg, batch_size=4, seq_len=512, dtype="bf16", device="cpu")
    assert out["n_params"] == want.n_params
    assert out["memory_bytes"] == want.memory.to_dict()
    assert out["attn"]["window"] == cfg.attn_layout.window
    assert out["attn"]["sparsity"] == pytest.approx(want.attn_layout["sparsity"])
    assert out["config"]["d_ff"] == 4096 and out["seq_len"] == 512


def test_table_output():
    result = runner.invoke(app, ["estimate", "--preset", "gpt2", "--set", "attn_pattern=strided",
                                 "--set", "attn_sparsity=0.5"])
    assert result.exit_code == 0, result.output
    assert "124,439,808" in result.output and "stride=" in result.output


@pytest.mark.parametrize("args,message", [
    (["--set", "d_model=1000"], "d_model=1000"),
    (["--set", "bogus=1"], "bogus"),
    (["--set", "d_model"], "key=value"),
    (["--preset", "gpt5"], "gpt5"),
    (["--seq-len", "4096"], "seq_len=4096"),
    (["--dtype", "fp8"], "dtype"),
])
def test_bad_input_exits_2_naming_the_problem(args, message):
    result = runner.invoke(app, ["estimate", *args])
    assert result.exit_code == 2
    assert message in result.output
