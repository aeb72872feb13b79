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
kinds themselves use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from sweep.kinds.base import Described, KindRun, Prepared, StudyKind

if TYPE_CHECKING:
    from sweep.spec.schema import StudySpec

__all__ = ["Described", "KindRun", "Prepared", "StudyKind", "kind_named", "kind_of", "kinds",
           "register_kind", "unregister_kind"]

#: Modules of the built-in kinds, each defining ``KIND``: those with a section of their own
#: first, then the ones a spec's search settings select (the last one takes any spec).
_SECTIONED = ("sweep.kinds.scaling", "sweep.kinds.transfer", "sweep.kinds.hparams")
_FALLBACK = ("sweep.kinds.pbt", "sweep.kinds.search")

_plugins: list[StudyKind] = []


def _builtin(modules: tuple[str, ...]) -> list[StudyKind]:
    return [importlib.import_module(name).KIND for name in modules]


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
    """The kind of ``spec``: the first registered kind that selects it."""
    return next(kind for kind in kinds() if kind.selects(spec))
