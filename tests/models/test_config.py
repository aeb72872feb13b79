import typing

import pytest

from sweep_models import PRESETS, ConfigError, ModelConfig, build_model
from sweep_models import config as model_config


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"d_model": 1000, "n_heads": 12}, "d_model=1000 is not divisible by n_heads=12"),
        ({"d_model": 0}, "d_model=0 must be positive"),
        ({"n_layers": -1}, "n_layers=-1 must be positive"),
        ({"vocab_size": 0}, "vocab_size=0 must be positive"),
        ({"seq_len": 2.5}, "seq_len=2.5 must be an integer"),
        ({"d_ff": 0}, "d_ff=0 must be positive"),
        ({"n_heads": True}, "n_heads=True must be an integer"),
        ({"attn_temperature": 0.0}, "attn_temperature=0.0 must be a finite number > 0"),
        ({"attn_temperature": -1}, "attn_temperature=-1 must be a finite number > 0"),
        ({"attn_temperature": float("nan")}, "attn_temperature=nan"),
        ({"attn_pattern": "local", "attn_sparsity": 1.0}, "attn_sparsity=1.0 must be in [0, 1)"),
        ({"attn_pattern": "local", "attn_sparsity": -0.1}, "attn_sparsity=-0.1 must be in"),
        ({"attn_sparsity": 0.5}, "needs a sparse attn_pattern"),
        ({"attn_pattern": "local", "attn_sparsity": 0.99, "seq_len": 64},
         "would leave some query with no key"),
        ({"attn_pattern": "strided", "attn_sparsity": 0.95, "seq_len": 64},
         "more than attn_pattern='strided' can remove"),
        ({"attn_pattern": "block_sparse", "attn_sparsity": 0.3, "seq_len": 64,
          "attn_block_size": 64}, "smaller attn_block_size"),
        ({"attn_pattern": "sliding"}, "attn_pattern='sliding' is not one of"),
        ({"norm": "batchnorm"}, "norm='batchnorm' is not one of"),
        ({"norm_position": "middle"}, "norm_position='middle' is not one of"),
        ({"activation": "tanh"}, "activation='tanh' is not one of"),
        ({"pos_encoding": "alibi"}, "pos_encoding='alibi' is not one of"),
        ({"attn_backend": "xformers"}, "attn_backend='xformers' is not one of"),
        ({"dropout": 1.0}, "dropout=1.0 must be in [0, 1)"),
        ({"causal": "yes"}, "causal='yes' must be true or false"),
        ({"pos_encoding": "rope", "d_model": 60, "n_heads": 4}, "even head dimension"),
        ({"n_heads": 4, "n_kv_heads": 3}, "n_heads=4 is not divisible by n_kv_heads=3"),
        ({"n_kv_heads": 0}, "n_kv_heads=0 must be positive"),
        ({"n_kv_heads": 2.0}, "n_kv_heads=2.0 must be an integer"),
        ({"parametrization": "ntk"}, "parametrization='ntk' is not one of sp, mup, completep"),
        ({"parametrization": "mup"}, "parametrization='mup' needs base_d_model"),
        ({"parametrization": "completep", "base_d_model": 64},
         "parametrization='completep' needs base_n_layers"),
        ({"base_d_model": 0}, "base_d_model=0 must be a positive integer or null"),
        ({"base_n_layers": 1.5}, "base_n_layers=1.5 must be a positive integer or null"),
        ({"completep_alpha": 0.4}, "completep_alpha=0.4 must be in [0.5, 1]"),
        ({"completep_alpha": float("nan")}, "completep_alpha=nan must be in [0.5, 1]"),
    ],
)
def test_invalid_values_raise_config_error_naming_field(changes, message):
    with pytest.raises(ConfigError) as info:
        ModelConfig(**changes)
    assert message in str(info.value)


def test_dict_round_trip_is_unchanged():
    cfg = ModelConfig(
        d_model=96, n_heads=6, attn_pattern="strided", attn_sparsity=0.4, activation="swiglu",
        d_ff=256, pos_encoding="rope", norm="rmsnorm", tie_embeddings=False, bias=False,
    )
    flat = cfg.to_dict()
    assert all(isinstance(v, (int, float, str, bool)) for k, v in flat.items()
               if k not in ("base_d_model", "base_n_layers"))
    assert flat["base_d_model"] is None and flat["base_n_layers"] is None  # unset under sp
    assert ModelConfig.from_dict(flat) == cfg
    assert ModelConfig.from_dict(flat).to_dict() == flat
    mup = cfg.replace(parametrization="completep", base_d_model=48, base_n_layers=1,
                      completep_alpha=0.5, n_kv_heads=2)
    flat = mup.to_dict()
    assert all(isinstance(v, (int, float, str, bool)) for v in flat.values())
    assert ModelConfig.from_dict(flat) == mup


def test_unknown_key_is_rejected():
    with pytest.raises(ConfigError, match="unknown model field.*d_modle"):
        ModelConfig.from_dict({"d_modle": 64})


def test_d_ff_defaults_to_four_times_d_model_and_follows_overrides():
    assert ModelConfig(d_model=96, n_heads=4).d_ff == 384
    assert ModelConfig.from_preset("gpt2", d_model=1024, n_heads=16).d_ff == 4096


def test_presets_are_valid_and_unknown_preset_errors():
    for name in PRESETS:
        assert ModelConfig.from_preset(name).d_model > 0
    with pytest.raises(ConfigError, match="preset='gpt5' is not one of"):
        ModelConfig.from_preset("gpt5")


def test_derived_layout_is_exposed():
    cfg = ModelConfig(seq_len=1024, attn_pattern="local", attn_sparsity=0.5)
    layout = cfg.attn_layout
    assert layout.window is not None and 1 <= layout.window <= 1024
    assert abs(layout.sparsity - 0.5) < 1e-3
    assert ModelConfig(seq_len=1024).attn_layout.kept_pairs == 524_800


# The documented choices of each string field (ModelConfig's docstring, README).
DOCUMENTED_CHOICES = {
    "attn_pattern": ("dense", "local", "strided", "block_sparse"),
    "attn_backend": ("auto", "sdpa", "flex"),
    "norm": ("layernorm", "rmsnorm"),
    "norm_position": ("pre", "post"),
    "activation": ("relu", "gelu", "swiglu"),
    "pos_encoding": ("learned", "sinusoidal", "rope", "none"),
    "parametrization": ("sp", "mup", "completep"),
    "arch": ("decoder_only", "encoder_decoder"),
}


def test_choice_fields_are_the_literal_annotations_and_the_documented_choices():
    hints = typing.get_type_hints(ModelConfig)
    literal = {name: typing.get_args(hint) for name, hint in hints.items()
               if typing.get_origin(hint) is typing.Literal}
    assert model_config.CHOICE_FIELDS == literal == DOCUMENTED_CHOICES
    assert list(model_config.CHOICE_FIELDS) == [f for f in ModelConfig.field_names()
                                                if f in DOCUMENTED_CHOICES]
    constants = {"attn_pattern": model_config.ATTN_PATTERNS,
                 "attn_backend": model_config.ATTN_BACKENDS, "norm": model_config.NORMS,
                 "norm_position": model_config.NORM_POSITIONS,
                 "activation": model_config.ACTIVATIONS,
                 "pos_encoding": model_config.POS_ENCODINGS,
                 "parametrization": model_config.PARAMETRIZATIONS,
                 "arch": model_config.ARCHS}
    assert constants == DOCUMENTED_CHOICES


@pytest.mark.parametrize("name", sorted(DOCUMENTED_CHOICES))
def test_every_choice_builds_and_a_value_outside_is_refused_naming_the_field(name):
    for value in model_config.CHOICE_FIELDS[name]:
        extra = {"attn_sparsity": 0.3, "attn_block_size": 16} if name == "attn_pattern" \
            and value != "dense" else {}
        if name == "parametrization":
            extra = {"base_d_model": 16, "base_n_layers": 1}
        cfg = ModelConfig.from_preset("tiny", **{name: value}, **extra)
        build_model(cfg, device="meta")
    for bad in ("bogus", value.upper(), 1, None):
        with pytest.raises(ConfigError) as info:
            ModelConfig.from_preset("tiny", **{name: bad})
        assert str(info.value).startswith(f"{name}={bad!r} is not one of ")
        assert ", ".join(DOCUMENTED_CHOICES[name]) in str(info.value)
