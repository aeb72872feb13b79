"""Study kinds as plug-ins, registered here and nowhere else.

A kind (`StudyKind`) says what a study of its kind adds: a spec section and its rules, search
axes, how the driver runs its trials, which point a trial stands for on resume, its analysis
command. The built-in kinds, in the order a spec is matched against them:

- ``scaling`` (`sweep.kinds.scaling`): an IsoFLOP grid, budget by budget;
- ``transfer`` (`sweep.kinds.transfer`): one learning-rate grid at every width;
- kinds added with `register_kind`;
- ``pbt`` (`sweep.kinds.pbt`): population-based training on Ray Tune;
- ``search`` (`sweep.kinds.search`): a sampler's draws, the default.

A spec's kind is the first whose `StudyKind.selects` holds (`kind_of`). The built-in kinds are
imported on first use (``importlib``), so this module stays light and below the packages the
kinds themselves use; `kind_sections` names their sections without importing them, so that a
spec refused at its fields' types loads no kind.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING

from sweep.kinds.base import Described, KindRun, Prepared, StudyKind

if TYPE_CHECKING:
    from sweep.spec.schema import StudySpec

__all__ = ["Described", "KindRun", "Prepared", "StudyKind", "kind_named", "kind_of",
           "kind_sections", "kinds", "register_kind", "unregister_kind"]

#: Modules of the built-in kinds, each defining ``KIND``, with the section its kind owns
#: (``KIND.section``; a test holds the two equal): those with a section of their own first,
#: then the ones a spec's search settings select (the last one takes any spec).
_SECTIONED = {"sweep.kinds.scaling": "scaling", "sweep.kinds.transfer": "transfer",
              "sweep.kinds.hparams": "hparams"}
_FALLBACK = {"sweep.kinds.pbt": "search.pbt", "sweep.kinds.search": None}

_plugins: list[StudyKind] = []


def _load(module: str) -> StudyKind:
    kind: StudyKind = importlib.import_module(module).KIND
    return kind


def _given(kind: StudyKind) -> StudyKind:
    return kind


def _builtin(modules: Iterable[str]) -> list[StudyKind]:
    return [_load(name) for name in modules]


def kind_sections() -> dict[str, Callable[[], StudyKind]]:
    """Each registered kind's section path (``scaling``, ``search.pbt``) and its kind's loader.

    In `kinds`' order; a built-in kind is imported only when its loader is called.
    """
    out: dict[str, Callable[[], StudyKind]] = {
        section: partial(_load, module) for module, section in _SECTIONED.items()}
    out.update({kind.section: partial(_given, kind) for kind in _plugins if kind.section})
    out.update({section: partial(_load, module) for module, section in _FALLBACK.items()
                if section})
    return out


def kinds() -> tuple[StudyKind, ...]:
    """Every registered kind, in the order a spec is matched against them."""
    return (*_builtin(_SECTIONED), *_plugins, *_builtin(_FALLBACK))


def register_kind(kind: StudyKind) -> None:
    """Add a kind; specs are matched against it after the built-in sectioned kinds.

    Raises:
        ValueError: A kind of that name, or owning that section, is registered already.
    """
    for other in kinds():
        if other.name == kind.name or (kind.section and other.section == kind.section):
            raise ValueError(f"study kind {kind.name!r} (section {kind.section!r}) clashes "
                             f"with the registered kind {other.name!r}")
    _plugins.append(kind)


def unregister_kind(kind: StudyKind) -> None:
    """Remove a kind added with `register_kind` (a no-op for one that is not)."""
    if kind in _plugins:
        _plugins.remove(kind)


def kind_named(name: str) -> StudyKind:
    """The registered kind called ``name``.

    Raises:
        KeyError: No kind has that name.
    """
    for kind in kinds():
        if kind.name == name:
            return kind
    raise KeyError(f"no study kind {name!r}; registered: {', '.join(k.name for k in kinds())}")


def kind_of(spec: StudySpec) -> StudyKind:
    """The kind of ``spec``: the first registered kind that selects it.

    A built-in kind with a section of its own selects the specs that give it (a test holds
    this), so one whose section ``spec`` does not give is not imported.
    """
    loads = [partial(_load, module) for module, section in _SECTIONED.items()
             if spec.section(section) is not None]
    loads += [partial(_given, kind) for kind in _plugins]
    loads += [partial(_load, module) for module in _FALLBACK]
    return next(kind for kind in (load() for load in loads) if kind.selects(spec))
