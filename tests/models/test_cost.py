"""Cost model: parameter counts and FLOPs against the built module, FlopCounterMode, brute-force
mask counts and published numbers (GPT-2 configs on Hugging Face, nanoGPT)."""

import itertools

import pytest
import torch
from torch.utils.flop_counter import (
    FlopCounterMode,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

from sweep_models import ConfigError, ModelConfig, build_model
from sweep_models.attention import attention_mask
from sweep_models.cost import (
    attention_pairs,
    estimate,
    flops_per_token,
    non_embedding_param_count,
    param_count,
)
from sweep_models.cost.params import role_param_counts

aten = torch.ops.aten

GRID = list(itertools.product(
    ("layernorm", "rmsnorm"),
    ("pre", "post"),
    ("relu", "gelu", "swiglu"),
    ("learned", "sinusoidal", "rope", "none"),
    (True, False),  # tie_embeddings
    (True, False),  # bias
    (True, False),  # causal
))


@pytest.mark.parametrize("norm,position,activation,pos,tie,bias,causal", GRID)
def test_param_count_matches_built_module(norm, position, activation, pos, tie, bias, causal):
    cfg = ModelConfig(vocab_size=61, seq_len=24, d_model=32, n_heads=4, n_layers=2, d_ff=40,
                      norm=norm, norm_position=position, activation=activation,
                      pos_encoding=pos, tie_embeddings=tie, bias=bias, causal=causal)
    model = build_model(cfg, device="meta")
    assert param_count(cfg) == sum(p.numel() for p in model.parameters())
    # Kaplan's N: drop the token embedding, the position table and an untied head.
    lookup = {model.wte.weight} | ({model.wpe.weight} if pos == "learned" else set())
    head = set() if tie else {model.lm_head.weight}
    body = sum(p.numel() for p in model.parameters() if p not in lookup | head)
    assert non_embedding_param_count(cfg) == body
    by_role = {}
    for _, p, role in model.param_roles():
        role = "hidden" if role == "hidden_out" else role  # they share their multipliers
        by_role[role] = by_role.get(role, 0) + p.numel()
    counts = {role: n for role, n in role_param_counts(cfg).items() if n}
    assert counts == by_role


@pytest.mark.parametrize("name,total", [
    ("gpt2", 124_439_808),
    ("gpt2-medium", 354_823_168),
    ("gpt2-large", 774_030_080),
    ("gpt2-xl", 1_557_611_200),
])
def test_gpt2_published_totals(name, total):
    cfg = ModelConfig.from_preset(name)
    assert param_count(cfg) == total
    assert build_model(cfg, device="meta").num_params() == total


def test_gpt2_non_embedding_and_without_position_table():
    cfg = ModelConfig.from_preset("gpt2")
    assert non_embedding_param_count(cfg) == 85_056_000
    # The dense convention's N is the total without the position table: 123,653,376.
    dense_fwd = flops_per_token(cfg, dense=True)
    n = (dense_fwd - 4 * cfg.n_layers * cfg.d_model * cfg.seq_len) / 2
    assert n == 123_653_376


def test_bert_base_body_matches_hf_count_minus_extras():
    d = 768
    hf_bert_model = 109_482_240  # HF BertModel incl. pooler
    token_type, emb_ln, pooler = 2 * d, 2 * d, d * d + d
    cfg = ModelConfig.from_preset("bert-base")
    assert param_count(cfg) == hf_bert_model - token_type - emb_ln - pooler == 108_888_576
    assert build_model(cfg, device="meta").num_params() == 108_888_576


def test_nanogpt_estimate_mfu_reference():
    # nanoGPT train.py defaults: V=50304 (padded), T=1024, L=12, d=768, H=12, bias=False, tied;
    # estimate_mfu uses N = get_num_params() (position table excluded) and 6N + 12*L*H*q*T.
    cfg = ModelConfig(vocab_size=50304, seq_len=1024, n_layers=12, d_model=768, n_heads=12,
                      bias=False)
    assert flops_per_token(cfg, train=True, dense=True) == 854_770_176
    assert estimate(cfg).flops_per_token_dense_train == 854_770_176


def test_causal_pair_counts():
    dense = ModelConfig(vocab_size=8, seq_len=1024, d_model=64, n_heads=4, n_layers=1)
    assert dense.attn_layout.total_pairs == 524_800
    assert dense.replace(causal=False).attn_layout.kept_pairs == 1_048_576
    local = dense.replace(attn_pattern="local", attn_sparsity=1 - 229_504 / 524_800)
    assert local.attn_layout.window == 256
    assert attention_pairs(local.attn_layout) == 229_504
    # 4*q*H FLOPs per pair per layer: the causal count is (T+1)/(2T) of the dense one.
    e = estimate(dense)
    attn = e.flops_per_token_fwd - estimate(dense.replace(causal=False)).flops_per_token_fwd
    assert attn == pytest.approx(-4 * 64 * (1_048_576 - 524_800) / 1024)


def _cpu_flash(query_shape, key_shape, value_shape, *args, **kwargs):
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, **kwargs):
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# On CPU, SDPA dispatches to ``_scaled_dot_product_flash_attention_for_cpu`` (and its backward),
# which FlopCounterMode (torch 2.13) has no formula for, so it would count attention as 0. Count
# them with torch's own SDPA formulas: 4*B*H*Tq*Tk*q forward, 10*B*H*Tq*Tk*q backward (the
# backward recomputes the scores), dense: masks are ignored.
CPU_FLASH = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward,
}


def _count_flops(model, idx):
    """Forward FLOPs with FlopCounterMode (CPU flash attention counted, see CPU_FLASH)."""
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=CPU_FLASH) as counter:
        model(idx)
    return counter.get_total_flops()


@pytest.mark.parametrize("overrides", [
    {},
    {"activation": "swiglu", "norm": "rmsnorm", "pos_encoding": "rope", "bias": False},
    {"activation": "relu", "norm_position": "post", "tie_embeddings": False},
    {"d_model": 96, "n_heads": 3, "n_layers": 3, "d_ff": 200, "vocab_size": 300},
    {"pos_encoding": "sinusoidal", "seq_len": 64},
])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_flops_match_flop_counter(overrides, causal):
    cfg = ModelConfig(**{"vocab_size": 256, "seq_len": 48, "d_model": 64, "n_heads": 4,
                         "n_layers": 2, "causal": causal, **overrides})
    model = build_model(cfg)
    b, t = 2, cfg.seq_len
    counted = _count_flops(model, torch.randint(0, cfg.vocab_size, (b, t)))
    assert counted > 0
    # FlopCounterMode charges every query-key pair; we charge only the kept (causal) ones.
    kept, total = cfg.attn_layout.kept_pairs, t * t
    dense_attention = 4 * cfg.d_model * cfg.n_layers * (total - kept) / t
    ours = flops_per_token(cfg) + dense_attention
    assert ours * b * t == pytest.approx(counted, rel=1e-9)


@pytest.mark.parametrize("overrides", [
    {},
    {"causal": False},
    {"activation": "swiglu", "norm": "rmsnorm", "pos_encoding": "rope", "bias": False},
    {"activation": "relu", "norm_position": "post", "tie_embeddings": False},
    {"attn_pattern": "local", "attn_sparsity": 0.5},
])
def test_training_flops_match_flop_counter_over_forward_and_backward(overrides):
    # Every matmul of the forward pass has two of its size in the backward pass (the gradients
    # of its input and of its weight); FlopCounterMode sees them all. Its SDPA backward charges
    # 2.5 x the forward (it counts the recomputed scores, which we do not) over all T^2 pairs,
    # where we charge 2 x the forward over the kept ones.
    cfg = ModelConfig(**{"vocab_size": 256, "seq_len": 48, "d_model": 64, "n_heads": 4,
                         "n_layers": 2, **overrides})
    torch.manual_seed(0)
    model = build_model(cfg)
    b, t = 2, cfg.seq_len
    idx = torch.randint(0, cfg.vocab_size, (b, t))
    with FlopCounterMode(display=False, custom_mapping=CPU_FLASH) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    per_pair = 4 * cfg.d_model * cfg.n_layers * b  # forward FLOPs of one pair in all layers
    kept, total = cfg.attn_layout.kept_pairs, t * t
    ours = flops_per_token(cfg, train=True) * b * t
    assert ours - 3 * per_pair * kept + 3.5 * per_pair * total == pytest.approx(
        counter.get_total_flops(), rel=1e-9)


def test_forward_flops_on_cpu_count_the_flash_kernel():
    # Guards the comment in _count_flops: without the mapping, attention counts 0 on CPU.
    cfg = ModelConfig(vocab_size=32, seq_len=16, d_model=32, n_heads=2, n_layers=1)
    idx = torch.randint(0, 32, (1, 16))
    model = build_model(cfg)
    with torch.no_grad(), FlopCounterMode(display=False) as plain:
        model(idx)
    attention = 4 * 16 * 16 * 32
    assert _count_flops(model, idx) - plain.get_total_flops() == attention
    with FlopCounterMode(display=False) as plain_train:
        model(idx)[0, 0, 0].backward()
    with FlopCounterMode(display=False, custom_mapping=CPU_FLASH) as train:
        model(idx)[0, 0, 0].backward()
    assert train.get_total_flops() - plain_train.get_total_flops() == 3.5 * attention


def test_dense_convention_within_one_percent_of_flop_counter_for_gpt2():
    # On the meta device SDPA runs its math path (bmm, twice the forward in the backward, no
    # recomputation), which FlopCounterMode counts over all T^2 pairs.
    cfg = ModelConfig.from_preset("gpt2")
    model = build_model(cfg, device="meta")
    idx = torch.zeros(1, cfg.seq_len, dtype=torch.long, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(idx)
    per_token = counter.get_total_flops() / cfg.seq_len
    assert flops_per_token(cfg, dense=True) == pytest.approx(per_token, rel=0.01)
    with FlopCounterMode(display=False) as train:
        _, loss = model(idx, idx)
        loss.backward()
    per_token = train.get_total_flops() / cfg.seq_len
    assert flops_per_token(cfg, train=True, dense=True) == pytest.approx(per_token, rel=0.01)


SPARSE = [
    {"attn_pattern": "local", "attn_sparsity": 0.6},
    {"attn_pattern": "strided", "attn_sparsity": 0.5},
    {"attn_pattern": "block_sparse", "attn_sparsity": 0.3, "attn_block_size": 8},
    {"attn_pattern": "local", "attn_sparsity": 0.5, "causal": False},
    {"attn_pattern": "strided", "attn_sparsity": 0.6, "causal": False},
    {"attn_pattern": "block_sparse", "attn_sparsity": 0.4, "attn_block_size": 8,
     "causal": False},
]


@pytest.mark.parametrize("overrides", SPARSE)
def test_sparse_flops_against_brute_force_mask_count(overrides):
    cfg = ModelConfig(**{"vocab_size": 64, "seq_len": 64, "d_model": 32, "n_heads": 2,
                         "n_layers": 3, **overrides})
    layout = cfg.attn_layout
    t = cfg.seq_len
    brute = sum(layout.keeps(i, j) for i in range(t) for j in range(t))
    assert brute == int(build_model(cfg).attn_mask.sum())
    # The sparse count differs from the dense-mask count only by 4*d per pair removed.
    dense = cfg.replace(attn_pattern="dense", attn_sparsity=0.0)
    dense_pairs = t * (t + 1) // 2 if cfg.causal else t * t
    diff = flops_per_token(cfg) - flops_per_token(dense)
    assert diff == pytest.approx(4 * cfg.d_model * cfg.n_layers * (brute - dense_pairs) / t)
    # The dense convention ignores the mask.
    assert flops_per_token(cfg, dense=True) == flops_per_token(dense, dense=True)


@pytest.mark.parametrize("overrides", SPARSE + [{}, {"causal": False}])
def test_attention_pairs_on_shorter_sequences(overrides):
    cfg = ModelConfig(**{"vocab_size": 64, "seq_len": 64, "d_model": 32, "n_heads": 2,
                         "n_layers": 1, **overrides})
    mask = attention_mask(cfg.attn_layout)
    for t in (1, 7, 8, 20, 33, 63, 64):
        assert attention_pairs(cfg.attn_layout, t) == int(mask[:t, :t].sum()), t
    with pytest.raises(ConfigError, match="seq_len"):
        attention_pairs(cfg.attn_layout, 65)


def test_training_state_is_16_bytes_per_param_with_adamw():
    cfg = ModelConfig.from_preset("gpt2")
    n = param_count(cfg)
    for dtype in ("fp32", "bf16"):
        m = estimate(cfg, dtype=dtype).memory
        assert (m.weights + m.grads + m.optimizer) / n == 16
    m = estimate(cfg, optimizer="sgd").memory
    assert (m.weights + m.grads + m.optimizer) / n == 12


def test_scores_are_materialised_only_on_the_math_path():
    cfg = ModelConfig(vocab_size=64, seq_len=512, d_model=64, n_heads=8, n_layers=2)
    fused = estimate(cfg, batch_size=2, attn_backend="sdpa").memory.activations
    math = estimate(cfg, batch_size=2, attn_backend="math").memory.activations
    # Per layer: the softmax output (B, H, T, T) in, the logsumexp (B, H, T) out; q*scale,
    # k*scale and a v copy replace the QKV output, the projection input is a copy of the output.
    scores = 2 * 8 * 512 * 512 * 4 * cfg.n_layers
    logsumexp = 2 * 8 * 512 * 4 * cfg.n_layers
    assert math - fused == scores - logsumexp
    dropout = cfg.replace(dropout=0.1)
    assert estimate(dropout, device="cpu").memory.activations > math  # CPU: math path
    assert estimate(dropout, device="cuda").memory.activations < math


def test_estimate_fields_and_dict_against_published_numbers():
    cfg = ModelConfig.from_preset("gpt2", attn_pattern="local", attn_sparsity=0.5)
    d = estimate(cfg, batch_size=4, seq_len=512, dtype="bf16").to_dict()
    n = 124_439_808  # GPT-2 small, HF GPT2LMHeadModel (tied)
    assert d["n_params"] == n and d["n_params_non_embedding"] == 85_056_000
    assert d["seq_len"] == 512 and d["batch_size"] == 4 and d["dtype"] == "bf16"
    # nanoGPT estimate_mfu at T = 512: 6N + 12*L*H*q*T, N without the position table.
    assert d["flops_per_token_dense_train"] == 6 * 123_653_376 + 12 * 12 * 12 * 64 * 512
    # fp32 master weights plus the (1024, 1024) bool keep-mask, fp32 grads, AdamW's m and v.
    memory = d["memory_bytes"]
    assert memory["weights"] == 4 * n + 1024 * 1024
    assert memory["grads"] == 4 * n and memory["optimizer"] == 8 * n
    assert set(memory) == {"weights", "grads", "optimizer", "activations", "logits", "total"}
    # The keep-mask of the first 512 positions, counted in the tensor the model builds.
    assert d["attn"]["kept_pairs"] == int(attention_mask(cfg.attn_layout)[:512, :512].sum())
    assert d["attn"]["total_pairs"] == 512 * 513 // 2
    assert d["attn"]["window"] == cfg.attn_layout.window


@pytest.mark.parametrize("kwargs,field", [
    ({"dtype": "fp16"}, "dtype"),
    ({"optimizer": "adam"}, "optimizer"),
    ({"attn_backend": "xformers"}, "attn_backend"),
    ({"device": "tpu"}, "device"),
    ({"batch_size": 0}, "batch_size"),
    ({"seq_len": 2048}, "seq_len"),
])
def test_estimate_rejects_bad_arguments(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        estimate(ModelConfig.from_preset("gpt2"), **kwargs)
