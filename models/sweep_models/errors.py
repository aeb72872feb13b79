"""The error every invalid model setting raises, and the checks that raise it."""

from collections.abc import Iterable
from typing import TypeVar

__all__ = ["ConfigError", "check_choice", "reject_unknown", "required"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A model config value breaks a rule; the message names the field and the rule."""


def reject_unknown(kind: str, keys: Iterable[str], known: Iterable[str]) -> None:
    """Refuse keys that are not fields of a config.

    Args:
        kind: The config's name in the message (``model``, ``train``).
        keys: The keys given.
        known: The config's field names.

    Raises:
        ConfigError: Naming the unknown keys and the known fields.
    """
    known = set(known)
    unknown = sorted(set(keys) - known)
    if unknown:
        raise ConfigError(f"unknown {kind} field(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(known))}")


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    """Refuse a value outside a field's fixed set of choices.

    Args:
        name: The field's name in the message.
        value: The value given.
        allowed: The field's choices, in the order the message lists them.

    Raises:
        ConfigError: ``name=value is not one of ...``.
    """
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(allowed)}")


def required(name: str, value: T | None) -> T:
    """The value of an optional field where the config's rules set it, typed as set.

    ``d_ff`` and ``n_kv_heads`` are always set (construction resolves ``None``); the
    encoder-decoder fields for ``arch="encoder_decoder"``; ``base_d_model`` under muP and
    CompleteP, ``base_n_layers`` under CompleteP; a pattern's size in its
    `sweep_models.patterns.AttnLayout`.

    Args:
        name: The field's name in the message.
        value: Its value.

    Raises:
        ConfigError: ``name is unset``: the caller needs a field its config does not have.
    """
    if value is None:
        raise ConfigError(f"{name} is unset")
    return value
