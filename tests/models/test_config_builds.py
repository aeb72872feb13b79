"""Every config that validates builds, runs a forward pass and is priced by the cost model.

A seeded random sampler over the whole config space (every choice field, small sizes with the
edge values: seq_len 1, one head per channel, d_ff 1, block size 1, sparsities up to the
sparsest mask) instead of a property-testing library, which is not a dependency.
"""

import random
import warnings

import pytest
import torch

from sweep_models import ConfigError, ModelConfig, build_model
from sweep_models.config import CHOICE_FIELDS
from sweep_models.cost import estimate

N_CONFIGS = 1000


def _draw(rng: random.Random) -> dict:
    values = {name: rng.choice(allowed) for name, allowed in CHOICE_FIELDS.items()}
    n_heads = rng.choice([1, 1, 2, 3, 4])
    # Mostly a whole head dimension (1 is n_heads == d_model); sometimes any width, which may
    # not divide (such configs fail validation and are skipped).
    d_model = n_heads * rng.choice([1, 2, 3, 4]) if rng.random() < 0.85 else rng.randint(1, 12)
    values.update({
        "vocab_size": rng.choice([1, 2, rng.randint(3, 40)]),
        "seq_len": rng.choice([1, 1, 2, 3, rng.randint(4, 24)]),
        "d_model": d_model,
        "n_heads": n_heads,
        "n_layers": rng.choice([1, 2]),
        "d_ff": rng.choice([None, 1, rng.randint(2, 16)]),
        "attn_temperature": rng.choice([1.0, rng.uniform(0.1, 3.0)]),
        # A dense pattern with a sparsity is invalid; drawn now and then, mostly not.
        "attn_sparsity": 0.0 if values["attn_pattern"] == "dense" and rng.random() < 0.8
        else rng.choice([0.0, 0.2, 0.5, 0.9, rng.random() * 0.99]),
        "attn_block_size": rng.choice([1, 2, rng.randint(3, 8), 64]),
        "attn_seed": rng.randint(0, 5),
        "rope_base": rng.choice([10000.0, 2.0]),
        "tie_embeddings": rng.random() < 0.5,
        "bias": rng.random() < 0.5,
        "dropout": rng.choice([0.0, 0.1]),
        "causal": rng.random() < 0.7,
        # Grouped-query attention, sometimes with a count that does not divide n_heads.
        "n_kv_heads": rng.choice([None, None, 1, rng.randint(1, 4),
                                  *[k for k in (1, 2, 3, 4) if n_heads % k == 0]]),
        # muP and CompleteP need a base shape, now and then missing (invalid, skipped).
        "base_d_model": None if rng.random() < 0.05 else rng.randint(1, 24),
        "base_n_layers": None if rng.random() < 0.05 else rng.randint(1, 3),
        "completep_alpha": rng.choice([1.0, 0.5, rng.uniform(0.5, 1.0)]),
    })
    # Encoder-decoder models a quarter of the time, mostly with the options they accept
    # (causal, dense, not CompleteP), with their own depths and source length now and then.
    if rng.random() < 0.25:
        values["arch"] = "encoder_decoder"
        if rng.random() < 0.8:
            values.update(causal=True, attn_pattern="dense", attn_sparsity=0.0,
                          parametrization=rng.choice(["sp", "mup"]))
        values["n_encoder_layers"] = rng.choice([None, 1, 2, 3])
        values["n_decoder_layers"] = rng.choice([None, 1, 2, 3])
        values["src_len"] = rng.choice([None, 1, rng.randint(1, 24)])
    else:
        values["arch"] = "decoder_only"
    return values


def _valid_configs() -> list[ModelConfig]:
    rng = random.Random(20240610)
    configs = []
    for _ in range(N_CONFIGS):
        try:
            configs.append(ModelConfig(**_draw(rng)))
        except ConfigError:
            continue
    return configs


CONFIGS = _valid_configs()


def test_the_sampler_reaches_the_whole_space():
    """Not vacuous: hundreds of draws validate, every choice value and the edge sizes occur."""
    assert len(CONFIGS) >= 250
    for name, allowed in CHOICE_FIELDS.items():
        assert {getattr(c, name) for c in CONFIGS} == set(allowed), name
    assert any(c.seq_len == 1 and c.attn_pattern == "strided" for c in CONFIGS)
    assert any(c.n_heads == c.d_model and c.n_heads > 1 for c in CONFIGS)
    assert any(c.attn_sparsity > 0 for c in CONFIGS)
    assert any(c.d_ff == 1 for c in CONFIGS)
    assert any(1 < c.n_kv_heads < c.n_heads for c in CONFIGS)
    assert any(c.n_kv_heads == 1 < c.n_heads for c in CONFIGS)
    assert any(c.parametrization == "completep" and c.completep_alpha < 1 for c in CONFIGS)
    assert any(c.arch == "encoder_decoder" and c.n_encoder_layers != c.n_decoder_layers
               and c.n_kv_heads < c.n_heads for c in CONFIGS)


def test_every_valid_config_builds_and_runs_a_forward_pass():
    torch.manual_seed(0)
    failures = []
    for cfg in CONFIGS:
        try:
            model = build_model(cfg)
            idx = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
            with warnings.catch_warnings():  # flex on CPU falls back to SDPA with a warning
                warnings.simplefilter("ignore")
                logits = model(idx)
            # an encoder-decoder model's logits are for the target part of the window
            out_len = cfg.tgt_len if cfg.arch == "encoder_decoder" else cfg.seq_len
            assert logits.shape == (2, out_len, cfg.vocab_size)
            assert torch.isfinite(logits).all()
            cost = estimate(cfg, batch_size=2)
            assert cost.n_params == model.num_params()
        except Exception as exc:  # collect them all, to report every config that breaks
            failures.append(f"{cfg}: {type(exc).__name__}: {exc}")
    assert not failures, f"{len(failures)} of {len(CONFIGS)} configs:\n" + "\n".join(failures[:5])


@pytest.mark.parametrize("causal", [True, False])
def test_strided_attention_at_seq_len_1_builds(causal):
    cfg = ModelConfig(seq_len=1, attn_pattern="strided", causal=causal)
    assert cfg.attn_layout.stride == 1 and cfg.attn_layout.kept_pairs == 1
    logits = build_model(cfg)(torch.zeros(1, 1, dtype=torch.long))
    assert logits.shape == (1, 1, cfg.vocab_size)
