"""Reading a study spec.

The file read (at most `MAX_SPEC_BYTES`, UTF-8), YAML to plain data by a safe loader that reads
``1e-3`` as a float and refuses aliases, object tags and duplicate keys; validation by the
section models and the cross-field rules, one `SpecError` naming every problem in one line each;
and the spec's hash.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml
from pydantic import BaseModel, ValidationError

from sweep.errors import InputError
from sweep.spec import rules
from sweep.spec.domains import ChoiceDomain, FloatDomain, IntDomain
from sweep.spec.schema import StudySpec
from sweep.spec.sections import section_models


class SpecError(InputError):
    """A study spec is invalid; the message has one line per problem, each with its path."""

    def __init__(self, problems: Iterable[str], source: str | Path | None = None) -> None:
        self.problems = list(problems)
        self.source = str(source) if source is not None else None
        head = f"invalid study spec {self.source}:" if self.source else "invalid study spec:"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))


# ------------------------------------------------------------------------------------ YAML
#: The largest spec file read, in bytes. A spec is a page of YAML (the shipped ones are under
#: 2 KB); a larger file is refused before a byte of it is parsed.
MAX_SPEC_BYTES = 1_000_000
#: The deepest nesting of mappings and lists a spec may have (the shipped ones reach 4).
MAX_DEPTH = 32
#: The YAML tags a spec may hold: plain values. Object tags (``!!python/object``) and the other
#: tags of PyYAML's safe loader (``!!binary``, ``!!set``, ...) build values no field takes.
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in (
    "null", "bool", "int", "float", "str", "seq", "map", "timestamp"))
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.YAMLError):
    """A YAML construct a spec may not use; ``problem`` is the message line."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


if TYPE_CHECKING:  # the mixin below is only ever combined with a safe loader (`loader_class`)
    _SafeLoader = yaml.SafeLoader
else:
    _SafeLoader = object


class _SpecLoading(_SafeLoader):
    """What a spec loader adds to PyYAML's safe loader (mixed in by `loader_class`).

    Refuses a key given twice in one mapping, naming the key's path and both lines;
    `check_tree` must run on the composed node tree before it is constructed.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.text = stream
        self.paths: dict[int, str] = {}

    def check_tree(self, root: yaml.Node) -> None:
        """Refuse aliases, non-plain tags, merge keys and deep nesting; record node paths.

        Iterative, in document order, and stops at the first node reached twice (an alias), so
        an alias bomb costs no more than its text.

        Raises:
            _Refused: Naming the path and line of the first problem.
        """
        stack: list[tuple[yaml.Node, str, int]] = [(root, "", 0)]
        while stack:
            node, path, depth = stack.pop()
            if id(node) in self.paths:
                line, alias = self._first_alias()
                raise _Refused(f"{path}: line {line}: the alias *{alias} repeats an anchored "
                               "value; anchors and aliases are not allowed in a study spec, "
                               "write the value out")
            self.paths[id(node)] = path
            line = node.start_mark.line + 1
            where = f"{path}: line {line}" if path else f"line {line}"
            if node.tag not in _PLAIN_TAGS:
                shown = node.tag.replace("tag:yaml.org,2002:", "!!")
                raise _Refused(f"{where}: the YAML tag {shown} is not allowed; a study spec "
                               "holds plain values (mappings, lists, text, numbers, true/false)")
            if depth > MAX_DEPTH:
                outer = re.sub(r"(\[\d+\])+$", "", path) or "the spec"
                raise _Refused(f"{outer}: line {line}: nested more than {MAX_DEPTH} levels deep")
            if isinstance(node, yaml.MappingNode):
                for key, value in reversed(node.value):
                    name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                    sub = f"{path}.{name}" if path else str(name)
                    key_line = key.start_mark.line + 1
                    if key.tag == _MERGE_TAG:
                        raise _Refused(f"{sub}: line {key_line}: merge keys (<<) are not "
                                       "allowed in a study spec; write the keys out")
                    stack += [(value, sub, depth + 1), (key, sub, depth + 1)]
            elif isinstance(node, yaml.SequenceNode):
                stack += [(item, f"{path}[{i}]", depth + 1)
                          for i, item in reversed(list(enumerate(node.value)))]

    def _first_alias(self) -> tuple[int, str]:
        """The line and name of the text's first alias: the first node `check_tree` meets twice.

        Parses the text again as events, which only a refused spec pays for.
        """
        for event in yaml.parse(self.text, Loader=type(self)):  # each marked, each alias named
            if isinstance(event, yaml.AliasEvent) and event.start_mark and event.anchor:
                return event.start_mark.line + 1, event.anchor
        raise AssertionError("a node was reached twice without an alias")

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping, refusing a key given twice (``1`` and ``1.0`` count as the same key).

        Raises:
            _Refused: Naming the key's path and the lines of both.
        """
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                earlier = seen.get(key)
            except TypeError:
                continue  # unhashable: the base class refuses it, with its line
            if earlier is not None:
                path = self.paths.get(id(node), "")
                shown = f"{path}.{key}" if path else str(key)
                lines = f"on line {line}" if earlier == line else f"at lines {earlier} and {line}"
                raise _Refused(f"{shown}: given twice, {lines}; keep one")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def loader_class(base: type[yaml.SafeLoader] | type[yaml.CSafeLoader]) -> type[_SpecLoading]:
    """A spec loader on PyYAML's ``base`` loader (``CSafeLoader`` or ``SafeLoader``).

    It reads ``1e-3`` and ``2e5`` as floats (YAML 1.1 needs a dot) and refuses duplicate keys.
    """
    # A subclass of _SpecLoading by construction.
    cls = cast("type[_SpecLoading]", type(f"Spec{base.__name__}", (_SpecLoading, base), {}))
    cls.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    return cls


#: The loader specs are read with: on libyaml's parser where PyYAML was built with it (a 10 MB
#: file in 0.05 s rather than 2 s), else on the pure-Python one.
SPEC_LOADER = loader_class(getattr(yaml, "CSafeLoader", yaml.SafeLoader))


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
    sections = section_models()
    annotation: Any = StudySpec
    for depth, part in enumerate(loc):
        if loc[:depth + 1] in sections:
            annotation = sections[loc[:depth + 1]]
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


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """A YAML error as one line with its line and column, without libyaml's internals."""
    if isinstance(exc, _Refused):
        return exc.problem
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f" ({exc.context})" if exc.context else ""
        return (f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: "
                f"{exc.problem}{context}")
    if isinstance(exc, yaml.reader.ReaderError):
        line = text[:exc.position].count("\n") + 1
        return f"invalid YAML at line {line}: {exc.reason} (character #x{exc.character:04x})"
    return "invalid YAML: " + " ".join(str(exc).split())


def read_yaml(text: str, loader: type[_SpecLoading] = SPEC_LOADER) -> Any:
    """Parse a spec's YAML text into plain data (dicts, lists, scalars), or None when empty.

    ``loader`` is a `loader_class` (`SPEC_LOADER`: libyaml's where installed); ``1e-3`` is a
    float. Refused: aliases (so an alias bomb is refused before it is expanded), tags other
    than plain values (objects), merge keys, nesting deeper than `MAX_DEPTH`, and a key given
    twice in one mapping.

    Raises:
        yaml.YAMLError: Invalid YAML or a refused construct (`load_spec` turns it into a
            one-line `SpecError`).
    """
    parser = loader(text)
    try:
        root = parser.get_single_node()
        if root is None:
            return None
        parser.check_tree(root)
        return parser.construct_document(root)
    finally:
        parser.dispose()


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
        raise SpecError([_yaml_problem(exc, text)], path) from None
    except ValueError as exc:  # an int of more digits than Python converts
        raise SpecError([f"invalid YAML value: {' '.join(str(exc).split())}"], path) from None
    return parse_spec(data, path)


def spec_hash(spec: StudySpec) -> str:
    """Stable 16-hex-digit hash of the normalized spec (defaults filled, description left out).

    Two files that differ only in key order, comments, number spelling (``2e5`` vs ``200000``)
    or the description hash the same.
    """
    data = spec.model_dump(mode="json", by_alias=True, exclude={"description"},
                           exclude_none=True)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
