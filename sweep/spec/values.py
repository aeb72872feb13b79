"""A spec's ``model`` and ``train`` values against their fields: types, rules, defaults.

Each key of ``model``/``train`` names a `ModelConfig` / `TrainConfig` field (or a derived model
key), and every fixed value, choice or range bound must have that field's type (`type_problem`:
int, float, bool, str, ``Literal`` choices, optional and tuple fields) and lie inside its rule
(`check_rule`, `sweep.spec.fields.FIELD_RULES`, exactly, never by sampling). Used by the rules
of `sweep.spec.rules` and of the study kinds (`sweep.kinds`).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import MISSING
from dataclasses import fields as dc_fields
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, Union

from sweep.spec.domains import ChoiceDomain, FloatDomain, IntDomain
from sweep.spec.fields import DERIVED_MODEL_KEYS, FIELD_RULES, MAX_TOKENS, show_number
from sweep.train.config import TrainConfig
from sweep_models.config import ModelConfig
from sweep_models.presets import PRESETS

if TYPE_CHECKING:
    from sweep.spec.schema import StudySpec

__all__ = ["candidates", "check_rule", "check_value", "field_defaults", "field_types", "is_int",
           "is_num", "known_fields", "section_defaults", "train_config_class", "type_problem",
           "unknown_key"]


def train_config_class() -> type:
    """The `TrainConfig` dataclass the ``train`` section describes."""
    return TrainConfig


def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def field_defaults(cls: type) -> dict[str, Any]:
    out = {}
    for f in dc_fields(cls):
        if f.init:
            if f.default is not MISSING:
                out[f.name] = f.default
            elif f.default_factory is not MISSING:
                out[f.name] = f.default_factory()
    return out


def section_defaults(spec: StudySpec, section: str) -> dict[str, Any]:
    """Default values of a section's fields: the config class's, then the preset's."""
    if section == "train":
        return field_defaults(train_config_class())
    out = field_defaults(ModelConfig)
    preset = spec.model.get("preset")
    if isinstance(preset, str) and preset in PRESETS:
        out.update(PRESETS[preset])
    if out.get("d_ff") is None:
        out["d_ff"] = None
    return out


def is_int(v: Any) -> TypeGuard[int]:
    """Whether ``v`` is an int and not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def type_problem(annotation: Any, value: Any) -> str | None:
    """Why ``value`` does not fit ``annotation`` (int, float, bool, str, Literal, X | None, tuple).

    A ``Literal`` (the choice fields of `ModelConfig`) admits exactly its listed values.
    """
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return None if value in args else f"{value!r} is not one of {', '.join(map(str, args))}"
    if origin in (Union, types.UnionType) and args:
        if value is None and type(None) in args:
            return None
        problems = [type_problem(a, value) for a in args if a is not type(None)]
        return None if any(p is None for p in problems) else problems[0]
    if annotation is int:
        return None if is_int(value) else f"{value!r} is not an integer"
    if annotation is float:
        return None if is_num(value) else f"{value!r} is not a number"
    if annotation is bool:
        return None if isinstance(value, bool) else f"{value!r} is not true/false"
    if annotation is str:
        return None if isinstance(value, str) else f"{value!r} is not a string"
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return f"{value!r} is not a list"
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(value)
        if len(value) != len(args):
            return f"{value!r} needs {len(args)} items"
        for a, v in zip(args, value, strict=True):
            p = type_problem(a, v)
            if p:
                return p
    return None


def known_fields(section: str) -> dict[str, Any]:
    if section == "model":
        types = field_types(ModelConfig)
        types = {n: types[n] for n in ModelConfig.field_names()}
        types.update(DERIVED_MODEL_KEYS)
        return types
    cls = train_config_class()
    types = field_types(cls)
    return {f.name: types[f.name] for f in dc_fields(cls) if f.init}


def unknown_key(path: str, key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{path}: unknown field{hint}; known: {', '.join(sorted(known))}"


def candidates(param: Any) -> list[Any]:
    if isinstance(param, ChoiceDomain):
        return list(param.options)
    if isinstance(param, (FloatDomain, IntDomain)):
        return list(param.bounds)
    return [param]


def check_value(path: str, name: str, annotation: Any, param: Any) -> Iterator[str]:
    if isinstance(param, FloatDomain) and annotation in (int, int | None):
        yield f"{path}: {name} is an integer; use {{int: [lo, hi]}} or {{choice: [...]}}"
        return
    if isinstance(param, (FloatDomain, IntDomain)) and type_problem(annotation, 1.0) \
            and type_problem(annotation, 1):
        yield f"{path}: {name} is not numeric; use a fixed value or {{choice: [...]}}"
        return
    where = ".choice" if isinstance(param, ChoiceDomain) else ""
    for i, value in enumerate(candidates(param)):
        sub = f"{path}{where}[{i}]" if where else path
        if isinstance(param, (FloatDomain, IntDomain)):
            continue
        problem = type_problem(annotation, value)
        if problem:
            yield f"{sub}: {problem}"


def check_rule(path: str, param: Any, field: str | None = None) -> Iterator[str]:
    """Where a fixed value, a choice or a range bound at ``path`` breaks the rule of ``field``.

    ``field`` (a dotted ``model.``/``train.`` path) defaults to ``path``. Exact, not sampled: a
    range lies inside a rule when both its bounds do, as every rule is an interval. The first
    break is reported.
    """
    field = field or path
    rule = FIELD_RULES.get(field)
    if rule is None:
        return
    if isinstance(param, (FloatDomain, IntDomain)):
        named = list(zip(("lower bound", "upper bound"), param.bounds, strict=True))
    elif isinstance(param, ChoiceDomain):
        named = [("choice", v) for v in param.options]
    else:
        named = [("value", param)]
    for label, value in named:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if is_num(v) and not rule.admits(v):
                yield f"{path}: {label} {show_number(v)} is outside the rule {rule}"
                return
        if field in _TOKEN_LIMITED and is_num(value) and value > MAX_TOKENS:
            yield (f"{path}: {label} {show_number(value)} is above the limit of "
                   f"{show_number(MAX_TOKENS)} tokens a trial may train on"
                   f"{_TOKEN_LIMITED[field]}")
            return


#: The budget fields `MAX_TOKENS` bounds, with why it bounds each.
_TOKEN_LIMITED = {"train.tokens": "", "train.steps": " (each step trains at least one token)"}
