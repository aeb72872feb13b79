"""Reading a study spec.

The file read (at most `MAX_SPEC_BYTES`, UTF-8), YAML to plain data by a safe loader that reads
``1e-3`` as a float and refuses aliases, object tags and duplicate keys; validation by the
section models and the cross-field rules, one `SpecError` naming every problem in one line each;
and the spec's hash.
"""

from __future__ import annotations

import difflib
import hashlib
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sweep.errors import InputError
from sweep.spec.domains import ChoiceDomain, FloatDomain, IntDomain
from sweep.spec.schema import StudySpec
from sweep.spec.sections import section_model_at, section_paths
from sweep.spec.yaml_safe import read_yaml, yaml_problem


class SpecError(InputError):
    """A study spec is invalid; the message has one line per problem, each with its path."""

    def __init__(self, problems: Iterable[str], source: str | Path | None = None) -> None:
        self.problems = list(problems)
        self.source = str(source) if source is not None else None
        head = f"invalid study spec {self.source}:" if self.source else "invalid study spec:"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))


#: The largest spec file read, in bytes. A spec is a page of YAML (the shipped ones are under
#: 2 KB); a larger file is refused before a byte of it is parsed.
MAX_SPEC_BYTES = 1_000_000


def _integral_floats_to_int(value: Any) -> Any:
    """``2e5`` -> 200000 so that scientific-notation budgets and sizes are integers."""
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1e3:
        return int(value)
    if isinstance(value, list):
        return [_integral_floats_to_int(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral_floats_to_int(v) for k, v in value.items()}
    return value


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("<") and part.endswith(">"):
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


# ---------------------------------------------------------------------------------- messages
_TAGGED = {"<float>": FloatDomain, "<int>": IntDomain, "<choice>": ChoiceDomain}


def _alternatives(annotation: Any) -> list[Any]:
    """The types an annotation admits, ``Annotated`` and unions unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _alternatives(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _alternatives(arg)]
    return [annotation]


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the spec model at ``loc`` (a pydantic error location) accepts, or none.

    A study kind's section (`sweep.kinds`) is its own model at its path, and a key beside it.
    """
    sections = section_paths()
    annotation: Any = StudySpec
    for depth, part in enumerate(loc):
        if loc[:depth + 1] in sections:
            annotation = section_model_at(loc[:depth + 1])
            continue
        if part in _TAGGED:
            annotation = _TAGGED[part]
            continue
        inner = None
        for t in _alternatives(annotation):
            if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str):
                fields = {f.alias or n: f for n, f in t.model_fields.items()}
                inner = fields[part].annotation if part in fields else None
            elif typing.get_origin(t) in (list, tuple) and isinstance(part, int):
                inner = typing.get_args(t)[0]
            elif typing.get_origin(t) is dict and isinstance(part, str):
                inner = typing.get_args(t)[1]
            if inner is not None:
                break
        if inner is None:
            return []
        annotation = inner
    return [f.alias or n for t in _alternatives(annotation)
            if isinstance(t, type) and issubclass(t, BaseModel)
            for n, f in t.model_fields.items()] + \
        [path[-1] for path in sections if path[:-1] == tuple(loc)]


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "nothing (an empty value)"
    shown = repr(value)
    return shown if len(shown) <= 60 else f"{shown[:57]}..."


def _problem(err: Any) -> str:
    """One pydantic error as one line: the dotted path, the rule, and the value given."""
    loc = _format_loc(err["loc"])
    kind, value = err["type"], err.get("input")
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        known = sorted(_known_keys(err["loc"][:-1]))
        close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        msg = "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "") + \
            (f"; known: {', '.join(known)}" if known else "")
    elif kind == "missing":
        msg = "required, but not given"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        msg = f"expected a mapping of keys, got {_kind(value)}"
    elif kind in ("list_type", "tuple_type"):
        msg = f"expected a list, got {_kind(value)}"
    elif kind != "value_error" and not isinstance(value, (dict, list)):
        msg = f"{msg}, got {_kind(value)}"
    msg = " ".join(msg.split())
    return f"{loc}: {msg}" if loc else msg


def _not_a_mapping(data: Any) -> str:
    if data is None:
        return "the spec is empty (or only comments); a study spec needs name, data and train"
    return (f"expected a mapping of sections (name, data, model, train, ...), got "
            f"{_kind(data)}")


def parse_spec(data: Any, source: str | Path | None = None) -> StudySpec:
    """Validate a spec given as a dict (a parsed YAML document).

    Raises:
        SpecError: One line per problem, each with the dotted path of the bad field.
    """
    if not isinstance(data, dict):
        raise SpecError([_not_a_mapping(data)], source)
    try:
        spec = StudySpec.model_validate(_integral_floats_to_int(data))
    except ValidationError as exc:
        raise SpecError([_problem(err) for err in exc.errors()], source) from None
    from sweep.spec import rules  # the cross-field rules: only for fields that are each valid

    problems = rules.problems(spec)
    if problems:
        raise SpecError(problems, source)
    return spec


# ---------------------------------------------------------------------------------- reading
def _read_text(path: Path) -> str:
    """The file's text, refused before parsing when over `MAX_SPEC_BYTES` or not UTF-8.

    Raises:
        SpecError: Unreadable, too large (naming its size and the limit), or not UTF-8
            (naming the line of the first bad byte).
    """
    def too_large(size: str) -> SpecError:
        return SpecError([f"the file is {size}; a study spec may be at most "
                          f"{MAX_SPEC_BYTES:,} bytes (1 MB)"], path)

    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise too_large(f"{size:,} bytes")
        with path.open("rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)  # bounded: a device or pipe has no size
    except OSError as exc:
        raise SpecError([f"cannot read the file: {exc.strerror or exc}"], path) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise too_large(f"over {MAX_SPEC_BYTES:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise SpecError([f"line {line}: byte 0x{raw[exc.start]:02x} is not UTF-8 text (a study "
                         "spec is a YAML file in UTF-8)"], path) from None


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study spec YAML file.

    The file is read only up to `MAX_SPEC_BYTES` and parsed by `read_yaml`.

    Raises:
        SpecError: Missing, unreadable, larger than `MAX_SPEC_BYTES` or not UTF-8; invalid
            YAML or a construct `read_yaml` refuses (aliases, object tags, duplicate keys);
            or any invalid field. The message names the file, then one line per problem with
            the dotted path of the field (or the line of the file).
    """
    path = Path(path)
    text = _read_text(path)
    try:
        data = read_yaml(text)
    except yaml.YAMLError as exc:
        raise SpecError([yaml_problem(exc, text)], path) from None
    except ValueError as exc:  # an int of more digits than Python converts
        raise SpecError([f"invalid YAML value: {' '.join(str(exc).split())}"], path) from None
    return parse_spec(data, path)


def spec_hash(spec: StudySpec) -> str:
    """Stable 16-hex-digit hash of the normalized spec (defaults filled, description left out).

    Two files that differ only in key order, comments, number spelling (``2e5`` vs ``200000``)
    or the description hash the same.
    """
    import json  # a spec's hash is taken only once it is valid

    data = spec.model_dump(mode="json", by_alias=True, exclude={"description"},
                           exclude_none=True)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
