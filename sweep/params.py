"""The one param codec: a config value as an MLflow param and as an Optuna choice, and back.

- An MLflow param is text: lists, tuples and dicts as JSON, anything else as ``str``
  (`encode_param`); `decode_param` reads it back (``"128"`` -> 128, ``"[0.9, 0.95]"`` -> list).
- An Optuna categorical choice must be a scalar: a choice domain whose options include a
  non-scalar (``betas`` pairs) gives Optuna every option encoded as its MLflow param
  (`choice_labels`), and `choice_value` maps a label back to the option, so a trial's Optuna
  params, its logged params and its config agree.
- Configs travel as flat dotted keys (``model.d_model``): `flatten_params`, `unflatten_params`.

Standard library only, so every layer can import it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SPEC_ONLY_KEYS", "choice_labels", "choice_value", "config_params", "decode_param",
           "encode_param", "flatten_params", "unflatten_params"]

#: Spec keys a trial logs as searched whose values the resolved config holds under other names
#: (``n_heads = d_model / d_head``, ``d_ff = round(d_ff_ratio * d_model)``, a preset's fields):
#: `sweep.space.sampling.build_configs`.
SPEC_ONLY_KEYS = ("model.preset", "model.d_head", "model.d_ff_ratio")

_SCALARS = (str, int, float, bool, type(None))


def encode_param(value: Any) -> str:
    """An MLflow param value: lists, tuples and dicts as JSON, anything else as ``str``."""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def decode_param(text: str) -> Any:
    """Invert `encode_param`: ``"128"`` -> 128, ``"True"`` -> True, ``"[0.9]"`` -> list."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten sections to dotted keys: ``{"model": {"d_model": 64}}`` -> ``model.d_model``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, prefix=f"{name}."))
        else:
            flat[name] = value
    return flat


def config_params(flat: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's logged params less `SPEC_ONLY_KEYS`: its resolved config, to build again."""
    return {k: v for k, v in flat.items() if k not in SPEC_ONLY_KEYS}


def unflatten_params(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Invert `flatten_params`: ``model.d_model`` -> ``{"model": {"d_model": ...}}``."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *heads, leaf = key.split(".")
        for head in heads:
            node = node.setdefault(head, {})
        node[leaf] = value
    return out


def choice_labels(options: Sequence[Any]) -> list[Any]:
    """Optuna categorical choices of ``options``: themselves, or all encoded if one is no scalar.

    Encoded with `encode_param`, so a choice's label is its MLflow param.
    """
    if all(isinstance(o, _SCALARS) for o in options):
        return list(options)
    return [encode_param(o) for o in options]


def choice_value(options: Sequence[Any], label: Any) -> Any:
    """The option an Optuna choice ``label`` stands for (`choice_labels` inverted)."""
    labels = choice_labels(options)
    if isinstance(label, str) and label in labels and labels != list(options):
        return options[labels.index(label)]
    return label
