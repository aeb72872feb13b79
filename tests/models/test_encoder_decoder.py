"""Encoder-decoder models: the config's rules, what the forward pass reads, and the cost model
against the built module's parameters, torch's FlopCounterMode on SDPA's math path (plain bmm
for every attention, so no custom FLOP formula is needed) and a measured training-step peak."""

import sys
from pathlib import Path

import pytest
import torch

from sweep_models import ConfigError, ModelConfig, build_model
from sweep_models.cost import estimate, flops_per_token, non_embedding_param_count, param_count
from sweep_models.encoder_decoder import EncoderDecoder

sys.path.insert(0, str(Path(__file__).parent))
from test_cost_memory import measured_cpu_peak  # noqa: E402
from test_gqa import _math_flops  # noqa: E402

ENC_DEC = {"arch": "encoder_decoder", "vocab_size": 40, "seq_len": 24, "d_model": 32,
           "n_heads": 4, "n_layers": 2}


def cfg(**overrides) -> ModelConfig:
    return ModelConfig(**{**ENC_DEC, **overrides})


def test_defaults_resolve_from_n_layers_and_seq_len_and_follow_them():
    c = cfg()
    assert (c.n_encoder_layers, c.n_decoder_layers, c.src_len, c.tgt_len) == (2, 2, 12, 12)
    assert c.replace(n_layers=3).n_encoder_layers == 3
    assert c.replace(seq_len=40).src_len == 20
    given = cfg(n_encoder_layers=4, src_len=5)
    assert given.replace(n_layers=3).n_encoder_layers == 4
    assert given.replace(n_layers=3).n_decoder_layers == 3
    assert given.replace(seq_len=40).src_len == 5
    assert ModelConfig.from_dict(given.to_dict()) == given
    assert given.replace(arch="decoder_only").src_len is None


def test_decoder_only_dict_is_unchanged_by_the_encoder_decoder_fields():
    keys = ModelConfig().to_dict().keys()
    assert not {"arch", "n_encoder_layers", "n_decoder_layers", "src_len"} & set(keys)
    assert ModelConfig.from_dict(ModelConfig().to_dict()).arch == "decoder_only"


@pytest.mark.parametrize("overrides,message", [
    ({"arch": "decoder_only", "src_len": 4}, "src_len=4 needs arch='encoder_decoder'"),
    ({"arch": "decoder_only", "n_encoder_layers": 2},
     "n_encoder_layers=2 needs arch='encoder_decoder'"),
    ({"src_len": 24}, "src_len=24 must be below seq_len=24"),
    ({"src_len": 0}, "src_len=0 must be a positive integer"),
    ({"n_decoder_layers": 0}, "n_decoder_layers=0 must be a positive integer"),
    ({"causal": False}, "causal=False: arch='encoder_decoder' needs causal=True"),
    ({"attn_pattern": "local", "attn_sparsity": 0.5},
     "attn_pattern='local': arch='encoder_decoder' supports only dense attention"),
    ({"parametrization": "completep", "base_d_model": 32, "base_n_layers": 2},
     "parametrization='completep': arch='encoder_decoder' supports sp and mup"),
    ({"arch": "seq2seq"}, "arch='seq2seq' is not one of decoder_only, encoder_decoder"),
])
def test_invalid_configs_name_the_field_and_rule(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg(**overrides)


def test_forward_reads_the_source_through_cross_attention_and_the_target_causally():
    torch.manual_seed(0)
    c = cfg(dropout=0.0)
    model = build_model(c).eval()
    assert isinstance(model, EncoderDecoder)
    idx = torch.randint(0, c.vocab_size, (2, c.seq_len))
    s = c.src_len
    with torch.no_grad():
        logits = model(idx)
        assert logits.shape == (2, c.tgt_len, c.vocab_size)
        src_changed = idx.clone()
        src_changed[:, s - 1] = (idx[:, s - 1] + 1) % c.vocab_size  # the last source token
        # bidirectional encoder and cross-attention: every target position sees it
        assert (model(src_changed) - logits).abs().amax(dim=-1).min() > 1e-4
        tgt_changed = idx.clone()
        tgt_changed[:, s + 5] = (idx[:, s + 5] + 1) % c.vocab_size
        diff = (model(tgt_changed) - logits).abs().amax(dim=-1)  # (B, T_dec)
        assert diff[:, :5].max() == 0 and diff[:, 5:].min() > 1e-4  # causal decoder
        targets = torch.randint(0, c.vocab_size, idx.shape)
        _, loss = model(idx, targets)
        other = targets.clone()
        other[:, :s] = (targets[:, :s] + 1) % c.vocab_size  # only the source part changed
        assert model(idx, other)[1] == loss
        expected = torch.nn.functional.cross_entropy(
            logits.reshape(-1, c.vocab_size), targets[:, s:].reshape(-1))
        torch.testing.assert_close(loss, expected)
    with pytest.raises(ValueError, match="no target token"):
        model(idx[:, :s])


def test_grouped_query_cross_attention_groups_the_encoder_heads():
    c = cfg(n_kv_heads=2)
    model = build_model(c, device="meta")
    cross = model.decoder[0].cross_attn
    assert cross.c_q.weight.shape == (32, 32) and cross.c_kv.weight.shape == (2 * 16, 32)
    assert model.encoder[0].attn.c_attn.weight.shape == (32 + 2 * 16, 32)


PARAM_GRID = [
    {},
    {"n_kv_heads": 1, "bias": False},
    {"tie_embeddings": False, "norm": "rmsnorm", "activation": "swiglu"},
    {"norm_position": "post", "pos_encoding": "sinusoidal"},
    {"pos_encoding": "rope", "n_encoder_layers": 3, "n_decoder_layers": 1, "src_len": 7},
    {"pos_encoding": "learned", "src_len": 20, "d_ff": 50},
    {"parametrization": "mup", "base_d_model": 16},
]


@pytest.mark.parametrize("overrides", PARAM_GRID)
def test_param_count_matches_built_module(overrides):
    c = cfg(**overrides)
    model = build_model(c, device="meta")
    assert param_count(c) == sum(p.numel() for p in model.parameters())
    embedding = c.vocab_size * c.d_model * (1 if c.tie_embeddings else 2)
    if c.pos_encoding == "learned":
        embedding += max(c.src_len, c.tgt_len) * c.d_model
    assert non_embedding_param_count(c) == param_count(c) - embedding


def test_cross_attention_parameters_by_hand():
    # Vaswani et al. 2017 base shape, d = 512, 8 heads, d_ff = 2048, without the embeddings:
    # an encoder block has 4d^2 + 2 d d_ff weights, a decoder block 8d^2 + 2 d d_ff.
    c = ModelConfig(arch="encoder_decoder", vocab_size=1, seq_len=2, d_model=512, n_heads=8,
                    n_layers=6, d_ff=2048, bias=False, norm="rmsnorm", pos_encoding="none",
                    norm_position="post")
    d, f = 512, 2048
    norms = 6 * 2 * d + 6 * 3 * d
    assert param_count(c) - d == 6 * (4 * d * d + 2 * d * f) + 6 * (8 * d * d + 2 * d * f) + norms


@pytest.mark.parametrize("overrides", PARAM_GRID)
def test_forward_and_training_flops_match_flop_counter(overrides):
    c = cfg(**overrides)
    torch.manual_seed(0)
    model = build_model(c)
    b, t = 2, c.seq_len
    idx = torch.randint(0, c.vocab_size, (b, t))
    # The math path multiplies every query-key pair of the decoder's causal self-attention;
    # we charge the kept T_dec (T_dec + 1) / 2: 4 * d FLOPs per pair and layer forward.
    t_dec = c.tgt_len
    unkept = 4 * c.d_model * c.n_decoder_layers * (t_dec * t_dec - t_dec * (t_dec + 1) // 2) * b
    assert flops_per_token(c) * b * t + unkept == pytest.approx(
        _math_flops(model, idx, train=False), rel=1e-12)
    assert flops_per_token(c, train=True) * b * t + 3 * unkept == pytest.approx(
        _math_flops(model, idx, train=True), rel=1e-12)
    # the dense convention charges those pairs, so it counts at least the math path's
    # attention; with the biases and norms it charges, it is never below the exact count
    assert flops_per_token(c, dense=True) * b * t >= flops_per_token(c) * b * t + unkept


def test_cross_attention_flops_by_hand():
    # One decoder layer and one encoder layer, S = 6, T_dec = 10: the cross-attention adds
    # queries and output 2 * 2d^2 per target token, keys and values 2 * d * 2 d_kv per source
    # token and 4d * T_dec * S for QK^T and AV, against a model without it.
    d, s, t_dec = 32, 6, 10
    c = cfg(n_encoder_layers=1, n_decoder_layers=1, src_len=s, seq_len=s + t_dec, n_kv_heads=2)
    d_kv = 16
    per_window = flops_per_token(c) * (s + t_dec)
    qkv, out, mlp = 2 * d * (d + 2 * d_kv), 2 * d * d, 2 * 2 * d * 4 * d
    encoder = s * (qkv + out + mlp) + 4 * d * s * s
    decoder = t_dec * (qkv + out + mlp) + 4 * d * t_dec * (t_dec + 1) // 2
    cross = t_dec * 2 * 2 * d * d + s * 2 * d * 2 * d_kv + 4 * d * t_dec * s
    head = t_dec * 2 * d * c.vocab_size
    assert per_window == encoder + decoder + cross + head


def test_estimate_reports_the_three_attentions_and_refuses_a_window_without_target():
    c = cfg(src_len=8)
    attn = estimate(c).attn_layout
    assert (attn["encoder_pairs"], attn["decoder_pairs"], attn["cross_pairs"]) == (
        64, 16 * 17 // 2, 16 * 8)
    assert attn["kept_pairs"] == 64 + 136 + 128
    with pytest.raises(ConfigError, match=r"seq_len=8 must be in \[9, 24\]"):
        estimate(c, seq_len=8)


def test_parametrization_changes_no_cost():
    sp = cfg()
    mup = cfg(parametrization="mup", base_d_model=16)
    a, b = estimate(sp, batch_size=2, device="cpu"), estimate(mup, batch_size=2, device="cpu")
    assert a.to_dict() == b.to_dict()


@pytest.mark.parametrize("overrides,batch_size", [
    ({}, 8),
    ({"vocab_size": 64, "d_model": 256, "n_heads": 8, "n_kv_heads": 2, "src_len": 96}, 4),
    ({"norm_position": "post", "activation": "relu", "vocab_size": 64}, 4),
    ({"pos_encoding": "rope", "norm": "rmsnorm", "activation": "swiglu", "bias": False,
      "vocab_size": 64}, 4),
    ({"dropout": 0.1, "vocab_size": 64}, 4),  # CPU: attention dropout runs SDPA's math path
    ({"vocab_size": 64, "n_encoder_layers": 3, "n_decoder_layers": 1, "src_len": 32}, 4),
])
def test_memory_estimate_matches_measured_cpu_peak(overrides, batch_size):
    c = ModelConfig(**{"arch": "encoder_decoder", "vocab_size": 256, "seq_len": 128,
                       "d_model": 128, "n_heads": 4, **overrides})
    measured = measured_cpu_peak(c, batch_size, c.seq_len)
    est = estimate(c, batch_size=batch_size, device="cpu").memory.total
    assert 0.93 <= est / measured <= 1.07, (est, measured)


def test_bf16_memory_estimate_matches_measured_cpu_peak():
    c = ModelConfig(arch="encoder_decoder", vocab_size=256, seq_len=128, d_model=128, n_heads=4)
    measured = measured_cpu_peak(c, 8, 128, bf16=True)
    est = estimate(c, batch_size=8, dtype="bf16", device="cpu").memory.total
    assert 0.93 <= est / measured <= 1.07, (est, measured)


def test_live_changes_reach_cross_attention():
    model = build_model(cfg(dropout=0.1))
    model.set_attn_temperature(2.0)
    model.set_dropout(0.2)
    cross = model.decoder[0].cross_attn
    assert cross.scale == pytest.approx(1 / (8 ** 0.5 * 2.0)) and cross.dropout == 0.2
    assert model.encoder[0].attn.scale == cross.scale
    roles = {name: role for name, _, role in model.param_roles()}
    assert roles["decoder.0.cross_attn.c_proj.weight"] == "hidden_out"
    assert roles["decoder.0.cross_attn.c_kv.weight"] == "hidden"
    assert roles["ln_enc.weight"] == "final_norm"
