import math

import pytest
import torch

from sweep_models import ModelConfig, build_model

PUBLISHED = {  # nanoGPT scaling_laws.ipynb, HF GPT2LMHeadModel
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_gpt2_presets_have_published_parameter_counts(name):
    model = build_model(ModelConfig.from_preset(name), device="meta")
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED[name]


def test_bert_base_body_matches_hf_bert_minus_token_types_embedding_norm_and_pooler():
    d = 768
    hf_bert_model = 109_482_240  # HF BertModel (bert-base-uncased) with pooler
    extras = 2 * d + 2 * d + (d * d + d)  # token-type table, embedding LayerNorm, pooler
    model = build_model(ModelConfig.from_preset("bert-base"), device="meta")
    assert model.num_params() == hf_bert_model - extras


def naive_attention(attn, x, mask, tau, causal):
    b, t, d = x.shape
    q, k, v = attn.c_attn(x).split(d, dim=2)
    q, k, v = (z.view(b, t, attn.n_heads, attn.d_head).transpose(1, 2) for z in (q, k, v))
    scores = q @ k.transpose(-1, -2) / (math.sqrt(attn.d_head) * tau)
    if mask is None and causal:
        mask = torch.ones(t, t, dtype=torch.bool).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask[:t, :t], float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
    return attn.c_proj(y)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("pattern", "sparsity"), [("dense", 0.0), ("local", 0.6), ("strided", 0.5),
                              ("block_sparse", 0.5)]
)
def test_attention_matches_naive_softmax_with_temperature(pattern, sparsity, causal):
    torch.manual_seed(0)
    cfg = ModelConfig.from_preset(
        "tiny", attn_pattern=pattern, attn_sparsity=sparsity, attn_block_size=16,
        attn_temperature=0.6, causal=causal,
    )
    model = build_model(cfg)
    x = torch.randn(2, cfg.seq_len, cfg.d_model)
    attn = model.blocks[0].attn
    got = attn(x)
    want = naive_attention(attn, x, model.attn_mask, 0.6, causal)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def max_sparsity_cases():
    out = []
    for pattern in ("local", "strided", "block_sparse"):
        for sparsity in (0.05, 0.5, "max"):
            out.append((pattern, sparsity))
    return out


@pytest.mark.parametrize(("pattern", "sparsity"), max_sparsity_cases())
def test_every_pattern_and_sparsity_has_finite_loss_and_gradients(pattern, sparsity):
    base = {"attn_pattern": pattern, "attn_block_size": 8, "seq_len": 64}
    if sparsity == "max":  # the sparsest mask: rows with a single key
        layouts = []
        for s in (x / 100 for x in range(99, 0, -1)):
            try:
                layouts.append(ModelConfig.from_preset("tiny", attn_sparsity=s, **base))
                break
            except ValueError:
                continue
        cfg = layouts[0]
    else:
        cfg = ModelConfig.from_preset("tiny", attn_sparsity=sparsity, **base)
    torch.manual_seed(0)
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (3, cfg.seq_len))
    logits, loss = model(idx, idx)
    loss.backward()
    assert torch.isfinite(logits).all() and torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", "none"])
@pytest.mark.parametrize(("norm", "where", "act"), [("layernorm", "pre", "gelu"),
                                                     ("rmsnorm", "post", "swiglu"),
                                                     ("layernorm", "post", "relu")])
def test_shapes_and_loss_for_option_combinations(pos, norm, where, act):
    cfg = ModelConfig.from_preset("tiny", pos_encoding=pos, norm=norm, norm_position=where,
                                  activation=act)
    model = build_model(cfg)
    idx = torch.randint(0, 256, (2, 50))
    logits = model(idx)
    assert logits.shape == (2, 50, 256)
    _, loss = model(idx, torch.randint(0, 256, (2, 50)))
    # at initialisation the loss is close to uniform over the vocabulary, ln(256)
    assert abs(loss.item() - math.log(256)) < 1.0


def test_causal_model_ignores_future_tokens_and_encoder_does_not():
    torch.manual_seed(0)
    for causal, expect_same in ((True, True), (False, False)):
        model = build_model(ModelConfig.from_preset("tiny", causal=causal)).eval()
        a = torch.randint(0, 256, (1, 32))
        b = a.clone()
        b[0, -1] = (a[0, -1] + 1) % 256
        same = torch.allclose(model(a)[0, :-1], model(b)[0, :-1])
        assert same is expect_same


def test_tied_embeddings_share_one_tensor_and_untied_do_not():
    tied = build_model(ModelConfig.from_preset("tiny"))
    assert tied.lm_head.weight is tied.wte.weight
    untied = build_model(ModelConfig.from_preset("tiny", tie_embeddings=False))
    assert untied.num_params() == tied.num_params() + 256 * 64


def test_gpt2_style_initialisation_scales_residual_projections():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=256, n_heads=4, n_layers=8, vocab_size=512, seq_len=64)
    model = build_model(cfg)
    std_resid = model.blocks[0].attn.c_proj.weight.std().item()
    std_other = model.blocks[0].attn.c_attn.weight.std().item()
    assert std_other == pytest.approx(0.02, rel=0.05)
    assert std_resid == pytest.approx(0.02 / math.sqrt(2 * 8), rel=0.05)
    assert float(model.blocks[0].attn.c_attn.bias.detach().abs().max()) == 0.0


def test_live_temperature_and_dropout_changes():
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("tiny")).eval()
    idx = torch.randint(0, 256, (1, 16))
    before = model(idx)
    model.set_attn_temperature(0.25)
    after = model(idx)
    assert model.config.attn_temperature == 0.25
    assert not torch.allclose(before, after)
    fresh = build_model(ModelConfig.from_preset("tiny", attn_temperature=0.25)).eval()
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(fresh(idx), after)
    model.set_dropout(0.3)
    assert model.config.dropout == 0.3
    assert all(m.p == 0.3 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    with pytest.raises(ValueError, match="attn_temperature"):
        model.set_attn_temperature(0.0)


def test_rope_tables_and_sparse_mask_are_one_buffer_each_shared_by_every_layer():
    cfg = ModelConfig.from_preset("tiny-rope", n_layers=3, attn_pattern="local", attn_sparsity=0.5)
    model = build_model(cfg).double()
    assert all(b.attn.rope is model.rope and b.attn.sparse_mask is model.sparse_mask
               for b in model.blocks)
    # One copy each (what the memory estimate counts), converted with the model, not saved.
    assert sorted(name for name, _ in model.named_buffers()) == [
        "rope.cos", "rope.sin", "sparse_mask.mask"]
    assert model.blocks[2].attn.rope.cos.dtype == torch.float64
    assert not any(k.startswith(("rope", "sparse_mask")) or k.endswith(("cos", "sin", "mask"))
                   for k in model.state_dict())


def test_state_dict_keys_are_the_checkpoint_layout():
    # Checkpoints written by sweep's trainer hold these keys; they must keep loading.
    model = build_model(ModelConfig.from_preset("tiny-rope", n_layers=1, bias=True))
    assert list(model.state_dict()) == [
        "wte.weight", "blocks.0.ln_1.weight", "blocks.0.attn.c_attn.weight",
        "blocks.0.attn.c_attn.bias", "blocks.0.attn.c_proj.weight", "blocks.0.attn.c_proj.bias",
        "blocks.0.ln_2.weight", "blocks.0.mlp.c_fc.weight", "blocks.0.mlp.c_fc.bias",
        "blocks.0.mlp.c_gate.weight", "blocks.0.mlp.c_gate.bias", "blocks.0.mlp.c_proj.weight",
        "blocks.0.mlp.c_proj.bias", "ln_f.weight", "lm_head.weight"]
    learned = build_model(ModelConfig.from_preset("tiny", n_layers=1))
    assert list(learned.state_dict())[:2] == ["wte.weight", "wpe.weight"]
    assert "ln_f.bias" in learned.state_dict()


def test_sequence_longer_than_context_is_rejected():
    model = build_model(ModelConfig.from_preset("tiny"))
    with pytest.raises(ValueError, match="exceeds seq_len=128"):
        model(torch.zeros(1, 129, dtype=torch.long))


@pytest.mark.slow
def test_flex_backend_matches_sdpa_backend():
    """FlexAttention block masks and the boolean-mask SDPA path agree within 1e-5 (fp32)."""
    torch.manual_seed(0)
    for pattern, sparsity in (("local", 0.5), ("block_sparse", 0.5)):
        cfg = ModelConfig.from_preset(
            "tiny", attn_pattern=pattern, attn_sparsity=sparsity, attn_block_size=16,
            attn_temperature=0.8,
        )
        sdpa = build_model(cfg.replace(attn_backend="sdpa")).eval()
        flex = build_model(cfg.replace(attn_backend="flex")).eval()
        flex.load_state_dict(sdpa.state_dict())
        assert flex.blocks[0].attn.resolved_backend(torch.device("cpu")) == "flex"
        idx = torch.randint(0, 256, (2, cfg.seq_len))
        with torch.no_grad():
            torch.testing.assert_close(flex(idx), sdpa(idx), atol=1e-5, rtol=1e-5)


def test_auto_backend_uses_flex_only_for_sparse_patterns_on_cuda():
    sparse = build_model(ModelConfig.from_preset("tiny", attn_pattern="local",
                                                 attn_sparsity=0.5), device="meta")
    dense = build_model(ModelConfig.from_preset("tiny"), device="meta")
    assert sparse.blocks[0].attn.resolved_backend(torch.device("cuda")) == "flex"
    assert sparse.blocks[0].attn.resolved_backend(torch.device("cpu")) == "sdpa"
    assert dense.blocks[0].attn.resolved_backend(torch.device("cuda")) == "sdpa"


@pytest.mark.gpu
def test_cuda_bf16_training_step_runs_on_both_backends():
    torch.manual_seed(0)
    cfg = ModelConfig.from_preset("tiny", attn_pattern="block_sparse", attn_sparsity=0.5,
                                  attn_block_size=32)
    for backend in ("sdpa", "flex"):
        model = build_model(cfg.replace(attn_backend=backend), device="cuda")
        idx = torch.randint(0, 256, (4, cfg.seq_len), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = model(idx, idx)
        loss.backward()
        assert torch.isfinite(loss)
