"""Reading a study spec.

YAML to dict (``1e-3`` read as a float), validation by the section models and the cross-field rules,
one `SpecError` naming every problem; and the spec's hash.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from sweep.spec import rules
from sweep.spec.schema import StudySpec


class SpecError(Exception):
    """A study spec is invalid; the message has one line per problem, each with its path."""

    def __init__(self, problems: Iterable[str], source: str | Path | None = None) -> None:
        self.problems = list(problems)
        self.source = str(source) if source is not None else None
        head = f"invalid study spec {self.source}:" if self.source else "invalid study spec:"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))


# ----------------------------------------------------------------------------- load / hash
class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-3`` and ``2e5`` as floats (YAML 1.1 needs a dot)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


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


def parse_spec(data: Any, source: str | Path | None = None) -> StudySpec:
    """Validate a spec given as a dict (a parsed YAML document).

    Raises:
        SpecError: One line per problem, each with the dotted path of the bad field.
    """
    if not isinstance(data, dict):
        raise SpecError([f"expected a mapping of sections, got {type(data).__name__}"], source)
    try:
        spec = StudySpec.model_validate(_integral_floats_to_int(data))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = _format_loc(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            if loc:
                problems.append(f"{loc}: {msg}")
            else:
                problems.extend(msg.splitlines())
        raise SpecError(problems, source) from None
    problems = rules.problems(spec)
    if problems:
        raise SpecError(problems, source)
    return spec


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study spec YAML file.

    Raises:
        SpecError: Missing or unreadable file, invalid YAML, or any invalid field (the message
            names the file, and the dotted path of each bad field).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([f"cannot read the file: {exc.strerror or exc}"], path) from None
    except UnicodeDecodeError:
        raise SpecError(["not UTF-8 text (a study spec is a YAML file)"], path) from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise SpecError([f"invalid YAML: {exc}".replace("\n", " ")], path) from None
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
