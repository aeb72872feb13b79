"""The ``search`` study kind, the default: ``search.n_trials`` draws of the spec's sampler.

It adds nothing to a spec: the sampler (TPE, GP, CMA-ES, random, grid, NSGA-II) draws each
trial's configs from the ``model`` and ``train`` domains, with the pruner or scheduler the spec
names, on either executor.
"""

from __future__ import annotations

from sweep.kinds.base import StudyKind
from sweep.spec.schema import StudySpec

__all__ = ["KIND", "SearchKind"]


class SearchKind(StudyKind):
    """A sampler's search (`StudyKind`'s defaults); it takes any spec no other kind selects."""

    name = "search"

    def selects(self, spec: StudySpec) -> bool:
        return True


KIND = SearchKind()
