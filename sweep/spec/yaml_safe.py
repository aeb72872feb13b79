"""A study spec's YAML read safely into plain data.

PyYAML's safe loader (libyaml's where installed), which reads ``1e-3`` as a float and refuses
what a spec never needs: aliases (an alias bomb is refused before it is expanded), tags other
than plain values (objects), merge keys, nesting deeper than `MAX_DEPTH`, and a key given
twice in one mapping; each refusal and each YAML error as one line (`yaml_problem`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

import yaml

__all__ = ["MAX_DEPTH", "SPEC_LOADER", "loader_class", "read_yaml", "yaml_problem"]

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


def yaml_problem(exc: yaml.YAMLError, text: str) -> str:
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
