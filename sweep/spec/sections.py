"""The sections study kinds add to a spec, validated with the kinds' own models.

`StudySpec` and `SearchSpec` keep the keys no section of theirs names as pydantic extras, so that
each registered kind (`sweep.kinds`) can own a section: top-level (``scaling``, ``transfer``, a
plug-in's) or inside ``search`` (``search.pbt``). `validate_with_sections` takes those out of
the input, validates the rest with the spec's own models and each section with its kind's
model, refuses every other unknown key as pydantic would (``Extra inputs are not permitted``,
at its path), and reports all problems in one `pydantic.ValidationError`, the sections' at
their dotted paths. Every registered section is then set on the spec, None where absent (as
an optional field would be), the spec's kind is chosen (`sweep.kinds.kind_of`) and its
``search`` defaults are applied to the fields the spec does not give.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

if TYPE_CHECKING:
    from sweep.spec.schema import StudySpec

__all__ = ["section_model_at", "section_models", "section_of", "section_paths",
           "validate_with_sections"]


#: pydantic-core's own error types; any other is a custom one (`PydanticCustomError`).
_BUILTIN_ERRORS = frozenset(typing.get_args(ErrorType))


def _details(exc: ValidationError, prefix: tuple[str, ...] = ()) -> list[InitErrorDetails]:
    """``exc``'s errors as the details `ValidationError.from_exception_data` takes."""
    out = []
    for err in exc.errors():
        loc = (*prefix, *err["loc"])
        detail: InitErrorDetails
        if err["type"] in _BUILTIN_ERRORS:
            detail = {"type": err["type"], "loc": loc, "input": err["input"]}
            if "ctx" in err:
                detail["ctx"] = err["ctx"]
        else:  # its message as written (no context: nothing is formatted again)
            detail = {"type": PydanticCustomError(err["type"], err["msg"]), "loc": loc,
                      "input": err["input"]}
        out.append(detail)
    return out


def _unknown(model: type[BaseModel], data: dict[str, Any], owned: set[str],
             prefix: tuple[str, ...]) -> list[InitErrorDetails]:
    return [{"type": "extra_forbidden", "loc": (*prefix, key), "input": value}
            for key, value in data.items() if key not in model.model_fields and key not in owned]


def _take_sections(data: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """Pop each section given at a dotted path (one level of nesting) out of ``data``."""
    taken = {}
    for path in paths:
        head, _, tail = path.partition(".")
        if not tail:
            if head in data:
                taken[path] = data.pop(head)
        elif isinstance(data.get(head), dict) and tail in data[head]:
            data[head] = dict(data[head])
            taken[path] = data[head].pop(tail)
    return taken


def _extra(owner: BaseModel) -> dict[str, Any]:
    """``owner``'s extra keys, which its model keeps (``extra="allow"``).

    Raises:
        TypeError: ``owner``'s model does not allow extra keys.
    """
    extra = owner.__pydantic_extra__
    if extra is None:
        raise TypeError(f"{type(owner).__name__} keeps no extra keys (extra='allow')")
    return extra


def validate_with_sections(cls: type[StudySpec], data: Any, handler: Any) -> Any:
    """The wrap validator of `StudySpec` (module docstring).

    Raises:
        pydantic.ValidationError: Every problem of the spec's fields and of its sections.
    """
    if not isinstance(data, dict):
        return handler(data)
    from sweep.kinds import kind_of, kind_sections

    sectioned = kind_sections()  # a kind is imported only when its section is given
    data = dict(data)
    raw = _take_sections(data, list(sectioned))
    top = {path for path in sectioned if "." not in path}
    nested: dict[str, set[str]] = {}
    for path in sectioned:
        if "." in path:
            head, _, tail = path.partition(".")
            nested.setdefault(head, set()).add(tail)
    errors: list[InitErrorDetails] = []
    spec: StudySpec | None = None
    try:
        spec = handler({k: v for k, v in data.items() if k in cls.model_fields})
    except ValidationError as exc:
        errors += _details(exc)
    sections: dict[str, Any] = {}
    for path, load in sectioned.items():
        if raw.get(path) is None:
            continue
        kind = load()
        if kind.section_model is None:
            raise TypeError(f"study kind {kind.name!r} owns the section {path!r} but gives no "
                            "section_model to validate it")
        try:
            sections[path] = kind.section_model.model_validate(raw[path])
        except ValidationError as exc:
            errors += _details(exc, tuple(path.split(".")))
    errors += _unknown(cls, data, top, ())
    for head, field in cls.model_fields.items():
        parent = field.annotation
        if isinstance(data.get(head), dict) and isinstance(parent, type) \
                and issubclass(parent, BaseModel) and parent.model_config.get("extra") == "allow":
            errors += _unknown(parent, data[head], nested.get(head, set()), (head,))
    if errors or spec is None:  # None only when its fields failed, and errors say why
        raise ValidationError.from_exception_data(cls.__name__, errors)
    for path in sectioned:
        head, _, tail = path.partition(".")
        owner = getattr(spec, head) if tail else spec
        _extra(owner)[tail or head] = sections.get(path)
    kind = kind_of(spec)
    search = spec.search
    update = {k: v for k, v in kind.search_defaults.items() if k not in search.model_fields_set}
    if update:
        object.__setattr__(spec, "search", search.model_copy(update=update))
    spec._kind = kind
    return spec


def section_of(model: BaseModel, path: str) -> Any:
    """The section at dotted ``path`` of a validated spec (None when the spec gives none).

    Raises:
        KeyError: No registered kind owns a section at ``path``.
    """
    head, _, tail = path.partition(".")
    owner = getattr(model, head) if tail else model
    extra = owner.__pydantic_extra__ or {}
    if (tail or head) not in extra:
        raise KeyError(f"no study kind owns a spec section {path!r}")
    return extra[tail or head]


def section_models() -> dict[tuple[str, ...], type[BaseModel]]:
    """Every registered kind's section model by its path (``("search", "pbt")``)."""
    return {path: model for path in section_paths()
            if (model := section_model_at(path)) is not None}


def section_model_at(path: tuple[str, ...]) -> type[BaseModel] | None:
    """The section model of the kind owning the section at ``path`` (None: no kind owns it).

    Only that kind is imported.
    """
    from sweep.kinds import kind_sections

    load = kind_sections().get(".".join(path))
    return None if load is None else load().section_model


def section_paths() -> list[tuple[str, ...]]:
    """Every registered kind's section path (``("search", "pbt")``), importing no kind."""
    from sweep.kinds import kind_sections

    return [tuple(path.split(".")) for path in kind_sections()]
