"""Grouped-query attention: its grouping, and its cost against the built module, torch's
FlopCounterMode on SDPA's math path (which repeats the key/value heads and runs plain bmm, so
no custom FLOP formula is needed) and a measured training-step peak."""

import sys
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from sweep_models import ConfigError, ModelConfig, build_model
from sweep_models.attention import SelfAttention
from sweep_models.cost import estimate, flops_per_token, param_count

sys.path.insert(0, str(Path(__file__).parent))
from test_cost_memory import measured_cpu_peak  # noqa: E402

SHAPES = [  # (d_model, n_heads, n_kv_heads)
    (64, 4, 4), (64, 4, 2), (64, 4, 1), (96, 6, 3), (96, 6, 2), (128, 8, 1),
]


@pytest.mark.parametrize("d_model,n_heads,n_kv_heads", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_param_count_matches_built_module(d_model, n_heads, n_kv_heads, bias):
    cfg = ModelConfig(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, bias=bias,
                      n_layers=2, vocab_size=100, seq_len=32)
    model = build_model(cfg, device="meta")
    assert param_count(cfg) == sum(p.numel() for p in model.parameters())
    d_kv = n_kv_heads * d_model // n_heads
    assert model.blocks[0].attn.c_attn.weight.shape == (d_model + 2 * d_kv, d_model)
    # against multi-head attention: 2 (d - d_kv) (d + bias) fewer per block
    mha = param_count(cfg.replace(n_kv_heads=n_heads))
    assert mha - param_count(cfg) == 2 * 2 * (d_model - d_kv) * (d_model + bias)


def test_default_is_multi_head_with_the_same_parameter_names_and_shapes():
    cfg = ModelConfig(d_model=64, n_heads=4)
    assert cfg.n_kv_heads == 4 and cfg.d_kv == 64
    explicit = build_model(cfg.replace(n_kv_heads=4), device="meta").state_dict()
    default = build_model(ModelConfig(d_model=64, n_heads=4), device="meta").state_dict()
    assert {k: v.shape for k, v in explicit.items()} == {k: v.shape for k, v in default.items()}
    assert default["blocks.0.attn.c_attn.weight"].shape == (3 * 64, 64)


def test_replace_keeps_multi_head_multi_head_and_grouped_query_grouped():
    mha = ModelConfig(d_model=64, n_heads=4)
    assert mha.replace(n_heads=2).n_kv_heads == 2 and mha.replace(n_heads=8).n_kv_heads == 8
    gqa = mha.replace(n_kv_heads=2)
    assert gqa.replace(n_heads=8).n_kv_heads == 2
    assert mha.replace(n_heads=8, n_kv_heads=4).n_kv_heads == 4
    with pytest.raises(ConfigError, match="n_heads=1 is not divisible by n_kv_heads=2"):
        gqa.replace(n_heads=1)


def test_n_kv_heads_must_divide_n_heads():
    with pytest.raises(ConfigError, match="n_heads=6 is not divisible by n_kv_heads=4"):
        ModelConfig(d_model=96, n_heads=6, n_kv_heads=4)


def _math_flops(model, idx, train):
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        if train:
            _, loss = model(idx, idx)
            loss.backward()
        else:
            with torch.no_grad():
                model(idx)
    return counter.get_total_flops()


@pytest.mark.parametrize("d_model,n_heads,n_kv_heads", SHAPES)
@pytest.mark.parametrize("overrides", [
    {},
    {"causal": False, "pos_encoding": "rope", "activation": "swiglu", "bias": False},
    {"attn_pattern": "local", "attn_sparsity": 0.5, "tie_embeddings": False},
])
def test_forward_and_training_flops_match_flop_counter(d_model, n_heads, n_kv_heads, overrides):
    cfg = ModelConfig(**{"vocab_size": 128, "seq_len": 32, "d_model": d_model,
                         "n_heads": n_heads, "n_kv_heads": n_kv_heads, "n_layers": 2,
                         **overrides})
    torch.manual_seed(0)
    model = build_model(cfg)
    b, t = 2, cfg.seq_len
    idx = torch.randint(0, cfg.vocab_size, (b, t))
    # The math path multiplies every query-key pair (a mask only zeroes them); we charge the
    # kept ones: 4 * d FLOPs per pair and layer forward, twice that backward.
    unkept = 4 * d_model * cfg.n_layers * (t * t - cfg.attn_layout.kept_pairs) * b
    assert flops_per_token(cfg) * b * t + unkept == pytest.approx(
        _math_flops(model, idx, train=False), rel=1e-12)
    assert flops_per_token(cfg, train=True) * b * t + 3 * unkept == pytest.approx(
        _math_flops(model, idx, train=True), rel=1e-12)


def test_fewer_key_value_heads_cost_fewer_projection_flops_only():
    mha = ModelConfig(d_model=128, n_heads=8, n_layers=3, seq_len=64)
    mqa = mha.replace(n_kv_heads=1)
    # per layer and token: 2 * d * 2 * (d - d_kv) fewer in the K and V projections
    assert flops_per_token(mha) - flops_per_token(mqa) == 3 * 2 * 128 * 2 * (128 - 16)


def test_grouped_heads_attend_as_multi_head_attention_with_repeated_keys_and_values():
    # Query head i reads key/value head i // (H / H_kv), as SDPA's enable_gqa groups them.
    torch.manual_seed(0)
    gqa_cfg = ModelConfig(d_model=48, n_heads=6, n_kv_heads=2, seq_len=16, pos_encoding="rope")
    gqa = SelfAttention(gqa_cfg)
    mha = SelfAttention(gqa_cfg.replace(n_kv_heads=6))
    d, q, group = 48, 8, 3
    w, bias = gqa.c_attn.weight.detach(), gqa.c_attn.bias.detach()

    def repeat(rows):  # (H_kv * q, ...) -> (H * q, ...), each head repeated `group` times
        return rows.reshape(2, q, *rows.shape[1:]).repeat_interleave(group, 0).reshape(
            6 * q, *rows.shape[1:])

    with torch.no_grad():
        mha.c_attn.weight.copy_(torch.cat([w[:d], repeat(w[d:d + 16]), repeat(w[d + 16:])]))
        mha.c_attn.bias.copy_(torch.cat([bias[:d], repeat(bias[d:d + 16]),
                                         repeat(bias[d + 16:])]))
        mha.c_proj.load_state_dict(gqa.c_proj.state_dict())
        x = torch.randn(2, 16, d)
        torch.testing.assert_close(gqa(x), mha(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overrides", [{}, {"pos_encoding": "rope"}, {"dropout": 0.1}])
def test_memory_estimate_matches_measured_peak_and_its_saving(overrides):
    # d_model 256 and a small vocabulary, so that attention's activations are a visible share.
    peaks, estimates = {}, {}
    for kv in (8, 2, 1):
        cfg = ModelConfig(vocab_size=64, seq_len=128, d_model=256, n_heads=8, n_kv_heads=kv,
                          n_layers=2, **overrides)
        peaks[kv] = measured_cpu_peak(cfg, 4, 128)
        estimates[kv] = estimate(cfg, batch_size=4, device="cpu").memory.total
        assert 0.95 <= estimates[kv] / peaks[kv] <= 1.05, (kv, estimates[kv], peaks[kv])
    for kv in (2, 1):
        saved, estimated = peaks[8] - peaks[kv], estimates[8] - estimates[kv]
        assert saved > 0 and estimated == pytest.approx(saved, rel=0.02), (kv, estimated, saved)
