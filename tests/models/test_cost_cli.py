"""`sweep estimate`: JSON fields against the published GPT-2 counts (Hugging Face's GPT-2
configs) and a module built independently of the cost model, table output, bad input."""

import json

import pytest
from torch import nn
from typer.testing import CliRunner

from sweep.cli import app
from sweep_models import ModelConfig, build_model
from sweep_models.cost import estimate

runner = CliRunner()


def _json(*args):
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# Published GPT-2 totals (HF GPT2LMHeadModel); V = 50257, T = 1024; a causal mask at T = 1024
# keeps 524,800 query-key pairs.
PUBLISHED = {"gpt2": (124_439_808, 12, 768, 12), "gpt2-xl": (1_557_611_200, 48, 1600, 25)}
V, T, CAUSAL_PAIRS = 50257, 1024, 524_800


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_json_counts_match_published_numbers_and_the_built_module(preset):
    n, n_layers, d, n_heads = PUBLISHED[preset]
    out = _json("--preset", preset)
    assert out["n_params"] == n
    # Kaplan's N: the total without the token embedding and the position table.
    assert out["n_params_non_embedding"] == n - V * d - T * d
    # nanoGPT estimate_mfu (PaLM appendix B): 6N + 12*L*H*q*T, N without the position table.
    assert out["flops_per_token_dense_train"] == 6 * (n - T * d) + 12 * n_layers * d * T
    # Exact forward count: 2 FLOPs per weight of every Linear of the built model (the tied
    # output projection included) and 4*d per causal pair per layer.
    model = build_model(ModelConfig.from_preset(preset), device="meta")
    linear_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    fwd = 2 * linear_weights + 4 * d * n_layers * CAUSAL_PAIRS / T
    assert out["flops_per_token_fwd"] == pytest.approx(fwd, rel=1e-12)
    assert out["flops_per_token_train"] == pytest.approx(3 * fwd, rel=1e-12)
    # fp32 weights (no buffers: dense, learned positions) and grads, AdamW's m and v (ZeRO 3.1).
    memory = out["memory_bytes"]
    assert (memory["weights"], memory["grads"], memory["optimizer"]) == (4 * n, 4 * n, 8 * n)
    assert set(memory) == {"weights", "grads", "optimizer", "activations", "logits", "total"}


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


def test_table_shows_heads_and_parametrization_with_costs_unchanged():
    sets = ["--set", "n_kv_heads=4", "--set", "parametrization=completep",
            "--set", "base_d_model=256", "--set", "base_n_layers=6"]
    result = runner.invoke(app, ["estimate", "--preset", "gpt2", *sets])
    assert result.exit_code == 0, result.output
    assert "12 / 4 (grouped-query)" in result.output
    rows = [" ".join(line.replace("│", " ").split()) for line in result.output.splitlines()]
    assert "parametrization (costs as sp) completep, alpha 1" in rows
    assert "base d_model / width_mult 256 / 3" in rows
    assert "base n_layers / depth_mult 6 / 2" in rows
    sp = _json("--preset", "gpt2", "--set", "n_kv_heads=4")
    out = _json("--preset", "gpt2", *sets)
    assert out["config"]["parametrization"] == "completep" and out["config"]["n_kv_heads"] == 4
    assert {k: v for k, v in out.items() if k != "config"} == {
        k: v for k, v in sp.items() if k != "config"}
    assert sp["n_params"] == 124_439_808 - 12 * 2 * 512 * 769  # K, V: 768 -> 256 wide
    plain = runner.invoke(app, ["estimate", "--preset", "gpt2", "--set", "n_kv_heads=1"])
    assert "12 / 1 (multi-query)" in plain.output
    assert "parametrization (costs as sp) sp" in [
        " ".join(line.replace("│", " ").split()) for line in plain.output.splitlines()]


def test_table_and_json_show_an_encoder_decoder_model():
    sets = ["--set", "arch=encoder_decoder", "--set", "n_encoder_layers=3",
            "--set", "n_decoder_layers=2", "--set", "src_len=8", "--set", "seq_len=24"]
    result = runner.invoke(app, ["estimate", "--preset", "tiny", *sets])
    assert result.exit_code == 0, result.output
    rows = [" ".join(line.replace("│", " ").split()) for line in result.output.splitlines()]
    assert "layers: encoder + decoder 3 + 2" in rows
    assert "tokens: source + target 8 + 16" in rows
    assert "pairs: encoder / decoder / cross 64 / 136 / 128" in rows
    assert "a token is any token of the window, source or target" in " ".join(rows)
    out = _json("--preset", "tiny", *sets)
    cfg = ModelConfig.from_preset("tiny", arch="encoder_decoder", n_encoder_layers=3,
                                  n_decoder_layers=2, src_len=8, seq_len=24)
    assert out["n_params"] == build_model(cfg, device="meta").num_params()
    assert out["config"]["arch"] == "encoder_decoder" and out["attn"]["cross_pairs"] == 128


def test_the_device_is_auto_by_default_as_for_train_and_sample():
    import torch

    assert _json("--preset", "tiny")["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert _json("--preset", "tiny", "--device", "cpu")["device"] == "cpu"


@pytest.mark.parametrize("args,message", [
    (["--set", "arch=encoder_decoder", "--set", "src_len=1024"],
     "src_len=1024 must be below seq_len=1024"),
    (["--set", "d_model=1000"], "d_model=1000"),
    (["--set", "bogus=1"], "bogus"),
    (["--set", "d_model"], "key=value"),
    (["--preset", "gpt5"], "gpt5"),
    (["--seq-len", "4096"], "seq_len=4096"),
    (["--dtype", "fp8"], "dtype"),
    (["--device", "tpu"], "device='tpu' is not one of auto, cuda, cpu"),
    (["--set", "n_kv_heads=5"], "n_heads=12 is not divisible by n_kv_heads=5"),
    (["--set", "parametrization=mup"], "parametrization='mup' needs base_d_model"),
])
def test_bad_input_exits_2_naming_the_problem(args, message):
    result = runner.invoke(app, ["estimate", *args])
    assert result.exit_code == 2
    assert message in result.output
