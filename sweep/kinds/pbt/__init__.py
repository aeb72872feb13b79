"""The ``pbt`` study kind: population-based training on Ray Tune (Jaderberg et al. 2017).

Selected by ``search.scheduler: pbt``, with its settings in ``search.pbt``
(`sweep.kinds.pbt.section`). Ray Tune cannot combine a search algorithm with PBT, so the
population is drawn at random (`sweep.kinds.pbt.population.initial_population`); members train
in chunks with checkpoints, and every perturbation interval the worst copy the weights of the
best and mutate the fields ``search.pbt.hyperparam_mutations`` names
(`sweep.kinds.pbt.mutations`), which must keep a member's shapes. It runs through the Ray
executor's Tune runner (`sweep.kinds.pbt.tune`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sweep.kinds.base import KindRun, StudyKind
from sweep.kinds.pbt.section import PBTSpec
from sweep.spec.schema import StudySpec

__all__ = ["KIND", "PBTKind"]


class PBTKind(StudyKind):
    """Population-based training: `sweep.kinds.pbt` (module docstring)."""

    name = "pbt"
    section = "search.pbt"
    section_model = PBTSpec
    # PBT draws its population at random (Ray Tune cannot combine a searcher with it).
    search_defaults = {"sampler": "random"}

    def selects(self, spec: StudySpec) -> bool:
        return spec.search.scheduler == "pbt"

    def misplaced(self, kind: StudyKind) -> str:
        return "search.pbt: pbt settings need executor ray with scheduler pbt"

    def problems(self, spec: StudySpec) -> Iterable[str]:
        from sweep.kinds.pbt.rules import pbt_problems  # the rules: only for a valid section

        return pbt_problems(spec)

    def run(self, job: KindRun) -> tuple[Any, list[str]]:
        from sweep.kinds.pbt.tune import run_population

        run_population(job)
        return None, []

    def disk_needs(self, spec: StudySpec, largest_n_params: float) -> dict[str, float]:
        from sweep.study.preflight import checkpoint_bytes

        members = spec.search.population_size or 4
        return {f"{2 * members} PBT checkpoints": 2 * members * checkpoint_bytes(largest_n_params)}


KIND = PBTKind()
