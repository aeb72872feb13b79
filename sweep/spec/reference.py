"""The study spec described for editors and readers: its JSON Schema and a field reference.

`json_schema` is pydantic's schema of `StudySpec` (``StudySpec.model_json_schema``), completed
where the section models are looser than what the spec accepts: ``data`` may be a URI string;
``model`` and ``train`` list every field of `ModelConfig` and `TrainConfig` (and the derived
model keys), each a fixed value of its type and range or a search domain, and no other key.
A YAML language server given it (``# yaml-language-server: $schema=...`` on a spec's first
line, or its ``yaml.schemas`` setting) checks a spec as it is typed; `sweep validate` remains
the whole check (the rules across fields are not in the schema).

`reference_markdown` is ``docs/spec-reference.md``: every section and field with its type,
default and rule, generated from the same models (``sweep schema --markdown``; a test holds
the committed file to it).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from typing import Any, Literal, cast, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field

from sweep.spec.domains import FromStudyDomain
from sweep.spec.fields import DATA_SCHEMES, DERIVED_MODEL_KEYS, FIELD_RULES, Rule, show_number
from sweep.spec.schema import SearchSpec, StudySpec
from sweep.spec.sections import section_models
from sweep.train.config import TrainConfig
from sweep_models.config import ModelConfig

__all__ = ["SCHEMA_TITLE", "json_schema", "reference_markdown"]

SCHEMA_TITLE = "transformer-sweep study spec"
_DOMAINS = ("FloatDomain", "IntDomain", "ChoiceDomain")
#: What the derived model keys mean (`sweep.spec.fields.DERIVED_MODEL_KEYS`).
_DERIVED_DOCS = {
    "preset": "A preset's fields (`models/sweep_models/presets.py`) as the defaults of this "
              "section.",
    "d_head": "Head width: n_heads = d_model / d_head.",
    "d_ff_ratio": "d_ff = round(d_ff_ratio * d_model).",
}


# ----------------------------------------------------------------------- config docstrings
def _attribute_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style class docstring, by name (one line each).

    A line ``a, b: text`` documents both names.
    """
    doc = inspect.getdoc(cls) or ""
    lines = doc.split("Attributes:", 1)[1].splitlines() if "Attributes:" in doc else []
    out: dict[str, str] = {}
    names: list[str] = []
    for line in lines:
        if line and not line.startswith(" "):
            break  # the next section (Raises:)
        match = re.match(r"^ {4}([\w, ]+):\s*(.*)$", line)
        if match:
            names = [n.strip() for n in match.group(1).split(",")]
            for name in names:
                out[name] = match.group(2)
        elif line.strip() and names:
            for name in names:
                out[name] += " " + line.strip()
    return out


def _config_fields(section: str) -> list[tuple[str, Any, Any, str]]:
    """``(name, annotation, default, doc)`` of each field of a ``model``/``train`` section."""
    cls = ModelConfig if section == "model" else TrainConfig
    hints = typing.get_type_hints(cls)
    docs = _attribute_docs(cls)
    fields = [(f.name, hints[f.name], f.default, docs.get(f.name, ""))
              for f in dataclasses.fields(cls) if f.init]
    if section == "model":
        fields += [(name, typ, None, _DERIVED_DOCS[name])
                   for name, typ in DERIVED_MODEL_KEYS.items()]
    return fields


# ------------------------------------------------------------------------------ JSON Schema
def _union_args(annotation: Any) -> tuple[Any, ...] | None:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return get_args(annotation)
    return None


def _fixed_schema(annotation: Any, rule: Rule | None) -> dict[str, Any]:
    """The JSON Schema of one fixed value of a config field."""
    args = _union_args(annotation)
    if args is not None:
        options = [_fixed_schema(a, rule) for a in args if a is not type(None)]
        nullable = type(None) in args
        if len(options) == 1 and not nullable:
            return options[0]
        return {"anyOf": options + ([{"type": "null"}] if nullable else [])}
    if get_origin(annotation) is Literal:
        return {"enum": list(get_args(annotation))}
    if get_origin(annotation) is tuple:
        items = [_fixed_schema(a, rule) for a in get_args(annotation)]
        return {"type": "array", "prefixItems": items, "minItems": len(items),
                "maxItems": len(items)}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is str:
        return {"type": "string"}
    out: dict[str, Any] = {"type": "integer" if annotation is int else "number"}
    if rule is not None:
        if rule.lo is not None:
            out["exclusiveMinimum" if rule.lo_open else "minimum"] = rule.lo
        if rule.hi is not None:
            out["exclusiveMaximum" if rule.hi_open else "maximum"] = rule.hi
    return out


def _config_section_schema(section: str) -> dict[str, Any]:
    properties = {}
    for name, annotation, default, doc in _config_fields(section):
        fixed = _fixed_schema(annotation, FIELD_RULES.get(f"{section}.{name}"))
        domains = _DOMAINS + (("FromStudyDomain",) if f"{section}.{name}" == "train.lr" else ())
        prop: dict[str, Any] = {
            "anyOf": [fixed, *({"$ref": f"#/$defs/{d}"} for d in domains)],
            "description": doc + " A fixed value or a domain ({float: [lo, hi]}, "
                                 "{int: [lo, hi]}, {choice: [...]}"
                          + (", {from_study: STUDY}" if len(domains) > 3 else "") + ").",
        }
        if default is not dataclasses.MISSING and default is not None:
            prop["default"] = list(default) if isinstance(default, tuple) else default
        properties[name] = prop
    what = "Model fields (`ModelConfig`)" if section == "model" else \
        "Train fields (`TrainConfig`); exactly one budget: tokens, flops, steps or seconds"
    return {"type": "object", "title": section.capitalize(), "description": what + ".",
            "properties": properties, "additionalProperties": False}


def _any_of_for_open_unions(node: Any) -> Any:
    """``oneOf`` lists with an open branch (``{}``, a fixed value) as ``anyOf``.

    pydantic writes a discriminated union as ``oneOf``, which fails when a domain also matches
    the open "fixed value" branch.
    """
    if isinstance(node, dict):
        node = {k: _any_of_for_open_unions(v) for k, v in node.items()}
        if "oneOf" in node and any(branch == {} for branch in node["oneOf"]):
            node["anyOf"] = node.pop("oneOf")
        return node
    if isinstance(node, list):
        return [_any_of_for_open_unions(v) for v in node]
    return node


def documented_spec() -> type[BaseModel]:
    """`StudySpec` as the docs describe it: every registered kind's section a field of its own.

    A spec keeps a kind's section aside (`sweep.spec.sections`); for the schema and the
    reference each becomes an optional field where it stands (``scaling``, ``search.pbt``),
    after the fields of the section holding it, and no other key is allowed.
    """
    sections = section_models()
    closed = ConfigDict(extra="forbid", frozen=True)

    def with_sections(model: type[BaseModel], prefix: tuple[str, ...],
                      **replaced: tuple[type[BaseModel], object]) -> type[BaseModel]:
        annotations: dict[str, object] = {path[-1]: section | None
                                          for path, section in sections.items()
                                          if path[:-1] == prefix}
        defaults: dict[str, object] = dict.fromkeys(annotations)
        for name, (annotation, default) in replaced.items():
            annotations[name], defaults[name] = annotation, default
        namespace = {"model_config": closed, "__doc__": model.__doc__, "__module__": __name__,
                     "__annotations__": annotations, **defaults}
        # A subclass of model by construction.
        return cast("type[BaseModel]", type(model.__name__, (model,), namespace))

    search = with_sections(SearchSpec, ("search",))
    return with_sections(StudySpec, (), search=(search, Field(default_factory=search)))


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a study spec, as a YAML language server reads it."""
    schema = _any_of_for_open_unions(documented_spec().model_json_schema())
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema,
              "title": SCHEMA_TITLE}
    props = schema["properties"]
    props["data"] = {"anyOf": [
        {"type": "string", "pattern": f"^({'|'.join(DATA_SCHEMES)}):.+",
         "description": "A corpus URI."},
        {"$ref": "#/$defs/DataSpec"}]}
    props["model"] = _config_section_schema("model")
    props["train"] = _config_section_schema("train")
    return schema


# -------------------------------------------------------------------------------- reference

def _sections(model: type[BaseModel], prefix: str = "") -> list[tuple[str, type[BaseModel]]]:
    """``(dotted path, model)`` of `StudySpec` and every section model under it, in order."""
    out = [(prefix, model)]
    for name, info in model.model_fields.items():
        for sub, listed in _models_in(info.annotation):
            path = (f"{prefix}.{name}" if prefix else name) + ("[]" if listed else "")
            if all(sub is not m for _, m in out):
                out += _sections(sub, path)
    return out


def _models_in(annotation: Any) -> list[tuple[type[BaseModel], bool]]:
    """The section models an annotation holds, each with whether it is a list's item."""
    found = []
    for arg in _union_args(annotation) or (annotation,):
        for inner in (arg, *get_args(arg)):
            if inspect.isclass(inner) and issubclass(inner, BaseModel) \
                    and not inner.__name__.endswith("Domain"):
                found.append((inner, inner is not arg and get_origin(arg) is list))
    return found


def _type_text(annotation: Any) -> str:
    args = _union_args(annotation)
    if args is not None:
        return " or ".join(_type_text(a) for a in args)
    if annotation is type(None):
        return "null"
    origin = get_origin(annotation)
    if origin is Literal:
        return " | ".join(f"`{v}`" for v in get_args(annotation))
    if origin is typing.Annotated:
        return "fixed value or domain"
    if origin in (list, tuple, dict):
        inner = ", ".join(_type_text(a) for a in get_args(annotation))
        return f"{origin.__name__}[{inner}]"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _constraint_text(info: Any) -> str:
    parts = []
    for item in info.metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, attr, None)
            if value is not None:
                parts.append(f"{sign} {show_number(value)}")
        for attr, what in (("min_length", "at least"), ("max_length", "at most")):
            value = getattr(item, attr, None)
            if value is not None:
                unit = "characters" if info.annotation is str else "items"
                parts.append(f"{what} {value} {unit}")
    return ", ".join(parts)


def _default_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseModel):
        return "(section defaults)"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_default_text(v) for v in value) + "]"
    if isinstance(value, (int, float)):
        return show_number(value)
    return f"`{value}`" if value != "" else '`""`'


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _section_table(model: type[BaseModel]) -> list[str]:
    """A section's fields; a column of what each is when the model describes its fields."""
    said = any(info.description for info in model.model_fields.values())
    rows = ["| field | type | default | rule |" + (" what it is |" if said else ""),
            "|---|---|---|---|" + ("---|" if said else "")]
    for name, info in model.model_fields.items():
        if info.is_required():
            default = "required"
        elif info.default_factory is not None:
            default = _default_text(info.get_default(call_default_factory=True))
        else:
            default = _default_text(info.default)
        kind = "corpus URI, or section" if issubclass(model, StudySpec) and name == "data" else \
            _type_text(info.annotation)
        rows.append(f"| `{info.alias or name}` | {_cell(kind)} | "
                    f"{_cell(default)} | {_cell(_constraint_text(info))} |"
                    + (f" {_cell(info.description or '')} |" if said else ""))
    return rows


def _config_table(section: str) -> list[str]:
    rows = ["| field | type | default | rule | what it is |", "|---|---|---|---|---|"]
    for name, annotation, default, doc in _config_fields(section):
        rule = FIELD_RULES.get(f"{section}.{name}")
        choices = get_args(annotation) if get_origin(annotation) is Literal else ()
        rule_text = str(rule) if rule is not None else \
            ("one of " + ", ".join(choices) if choices else "")
        shown = "(not set)" if default is dataclasses.MISSING or \
            (default is None and name in DERIVED_MODEL_KEYS) else _default_text(default)
        rows.append(f"| `{name}` | {_cell(_type_text(annotation))} | {_cell(shown)} | "
                    f"{_cell(rule_text)} | {_cell(doc)} |")
    return rows


def _doc(model: type) -> str:
    return " ".join((inspect.getdoc(model) or "").split("\n\n")[0].split())


def reference_markdown() -> str:
    """The field reference of a study spec as Markdown (``docs/spec-reference.md``)."""
    out = ["# Study spec reference", "",
           "Generated from the spec's models (`sweep/spec/schema.py`, "
           "`models/sweep_models/config.py`, "
           "`sweep/train/config.py`, `sweep/spec/fields.py`) by `sweep schema --markdown`; "
           "`sweep schema` prints the JSON Schema for editors. `sweep validate SPEC` checks "
           "everything here and the rules across fields.", "",
           "Every `model` and `train` field takes a fixed value or a search domain: "
           "`{float: [lo, hi], log: true}`, `{int: [lo, hi], step: k}`, `{choice: [...]}`, "
           "each with an optional `when: {field: [values]}`. A domain's bounds and choices "
           "must obey the field's rule.", ""]
    spec = documented_spec()
    for path, model in _sections(spec):
        title = "Top level" if not path else f"`{path}`"
        out += [f"## {title}", "", _doc(model), "", *_section_table(model), ""]
        if not path:
            for section in ("model", "train"):
                out += [f"## `{section}`", "",
                        _config_section_schema(section)["description"], "",
                        *_config_table(section), ""]
            out += ["## `train.lr: {from_study: ...}`", "", _doc(FromStudyDomain), "",
                    *_section_table(FromStudyDomain), ""]
    return "\n".join(out).rstrip() + "\n"
