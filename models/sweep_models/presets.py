"""Named model configs. Presets are data: each has the values and the source they come from.

``d_ff`` is left out where it is ``4 * d_model`` so that overriding ``d_model`` keeps the ratio.
"""

from __future__ import annotations

from typing import Any

from sweep_models.errors import ConfigError

__all__ = ["PRESETS", "PRESET_SOURCES", "preset_dict"]

_GPT2 = {
    "vocab_size": 50257,
    "seq_len": 1024,
    "norm": "layernorm",
    "norm_position": "pre",
    "activation": "gelu",
    "pos_encoding": "learned",
    "tie_embeddings": True,
    "bias": True,
    "causal": True,
    "dropout": 0.0,
}
_GPT2_SRC = "https://huggingface.co/{}/blob/main/config.json (Radford et al. 2019)"

PRESETS: dict[str, dict[str, Any]] = {
    "gpt2": {**_GPT2, "d_model": 768, "n_heads": 12, "n_layers": 12},
    "gpt2-medium": {**_GPT2, "d_model": 1024, "n_heads": 16, "n_layers": 24},
    "gpt2-large": {**_GPT2, "d_model": 1280, "n_heads": 20, "n_layers": 36},
    "gpt2-xl": {**_GPT2, "d_model": 1600, "n_heads": 25, "n_layers": 48},
    # Encoder body of BERT-base; HF BertModel also has token-type embeddings, an embedding
    # LayerNorm and a pooler, which are not part of this model family.
    "bert-base": {
        "vocab_size": 30522,
        "seq_len": 512,
        "d_model": 768,
        "n_heads": 12,
        "n_layers": 12,
        "norm": "layernorm",
        "norm_position": "post",
        "activation": "gelu",
        "pos_encoding": "learned",
        "tie_embeddings": True,
        "bias": True,
        "causal": False,
        "norm_eps": 1e-12,
    },
    # Small byte-level models for tests and CPU sweeps.
    "tiny": {"vocab_size": 256, "seq_len": 128, "d_model": 64, "n_heads": 4, "n_layers": 2},
    "tiny-rope": {
        "vocab_size": 256, "seq_len": 128, "d_model": 64, "n_heads": 4, "n_layers": 2,
        "pos_encoding": "rope", "norm": "rmsnorm", "activation": "swiglu", "d_ff": 172,
        "bias": False,
    },
    "small": {"vocab_size": 256, "seq_len": 256, "d_model": 128, "n_heads": 4, "n_layers": 4},
}

PRESET_SOURCES: dict[str, str] = {
    "gpt2": _GPT2_SRC.format("openai-community/gpt2"),
    "gpt2-medium": _GPT2_SRC.format("openai-community/gpt2-medium"),
    "gpt2-large": _GPT2_SRC.format("openai-community/gpt2-large"),
    "gpt2-xl": _GPT2_SRC.format("openai-community/gpt2-xl"),
    "bert-base": "https://huggingface.co/google-bert/bert-base-uncased/blob/main/config.json "
    "(Devlin et al. 2019)",
    "tiny": "this project: byte-level test model",
    "tiny-rope": "this project: LLaMA-style (RoPE, RMSNorm, SwiGLU, no bias) test model",
    "small": "this project: byte-level CPU sweep model",
}


def preset_dict(name: str) -> dict[str, Any]:
    """The field values of a preset (a fresh dict).

    Raises:
        ConfigError: For an unknown preset name.
    """
    if name not in PRESETS:
        raise ConfigError(f"preset={name!r} is not one of {', '.join(PRESETS)}")
    return dict(PRESETS[name])
