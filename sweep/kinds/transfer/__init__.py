"""The ``transfer`` study kind: the same learning-rate grid at every width.

Every trial is one point of the grid ``transfer.widths`` x ``train.lr``'s choices x every other
searched field's choices (`sweep.kinds.transfer.grid`), each trained once, to the end, so that
``sweep analyze transfer`` can tell how far the best learning rate moves as the model widens
(Yang et al. 2022, "Tensor Programs V", Figure 1). The width is the one axis the kind adds
(``model.d_model``; ``n_heads`` and ``d_ff`` follow from ``transfer.d_head`` and
``transfer.d_ff_ratio``); a resumed study skips the points already trained.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sweep.kinds.base import Described, KindRun
from sweep.kinds.common import GridKind, parametrization_line, run_points
from sweep.kinds.transfer import grid
from sweep.kinds.transfer.rules import TRANSFER_OWNED_MODEL, transfer_problems
from sweep.kinds.transfer.section import TransferSpec
from sweep.spec.domains import ChoiceDomain
from sweep.spec.schema import StudySpec

if TYPE_CHECKING:
    from sweep.train.peaks import NamedGpu

__all__ = ["KIND", "TransferKind"]


class TransferKind(GridKind):
    """Width transfer: `sweep.kinds.transfer` (module docstring).

    Every learning rate of every width trains to the end (`GridKind`).
    """

    name = "transfer"
    section_model = TransferSpec
    trials_from = "its grid points (transfer.widths x every choice)"
    analysis = "sweep.kinds.transfer.analyze"
    owned_model_fields = TRANSFER_OWNED_MODEL

    def trial_count(self, spec: StudySpec) -> str:
        return f"{len(grid.points(spec))} (transfer grid)"

    def problems(self, spec: StudySpec) -> Iterable[str]:
        return transfer_problems(spec)

    def sample(self, trial: Any, spec: StudySpec) -> dict[str, Any]:
        width = trial.suggest_categorical(grid.WIDTH, list(grid.transfer_section(spec).widths))
        return grid.width_values(spec, width)

    def resolve(self, spec: StudySpec, params: dict[str, Any]) -> dict[str, Any]:
        from sweep.space import InvalidConfig

        widths = grid.transfer_section(spec).widths
        width = params.get(grid.WIDTH)
        if width not in widths:
            raise InvalidConfig(f"{grid.WIDTH}={width!r}: not one of transfer.widths {widths}",
                                params)
        return grid.width_values(spec, width)

    def corner(self, spec: StudySpec, end: int) -> dict[str, Any]:
        return {grid.WIDTH: grid.transfer_section(spec).widths[end]}

    def run(self, job: KindRun) -> tuple[Any, list[str]]:
        spec = job.ctx.spec
        widths = grid.transfer_section(spec).widths
        every = grid.points(spec)
        held = job.ctx.tracking.read_trials()
        done = {grid.point_key(spec, t["params"]) for t in held if t["state"].finished}
        left = sum(grid.point_key(spec, p) not in done for p in every)
        if job.say is not None:
            job.say(f"transfer grid: {len(widths)} widths x {len(every) // len(widths)} points "
                    f"each = {len(every)} trials"
                    + (f", {len(every) - left} already trained" if left < len(every) else ""))
        return run_points(job, every, held), []

    def point_key(self, spec: StudySpec, params: Mapping[str, Any]) -> Hashable:
        return grid.point_key(spec, params)

    def describe(self, spec: StudySpec, say: Any, *, device: str | None, as_json: bool,
                 gpu: NamedGpu) -> Described:
        if as_json:
            return Described()
        tr = grid.transfer_section(spec)
        axes = [f"{len(p.domain.options)} {p.path}" for p in spec.searched()
                if p.path in grid.grid_fields(spec) and isinstance(p.domain, ChoiceDomain)]
        say(f"transfer grid: widths {', '.join(map(str, tr.widths))} (d_model; n_heads = "
            f"d_model / {tr.d_head}, d_ff = {tr.d_ff_ratio:g} d_model) x {' x '.join(axes)} = "
            f"{len(grid.points(spec))} trials, each trained to the end; sweep analyze transfer "
            "reports the best lr per width")
        say(parametrization_line(spec, "every width"))
        return Described()

    def widths(self, spec: StudySpec) -> tuple[list[int], dict[str, Any]]:
        tr = grid.transfer_section(spec)
        return list(tr.widths), {"d_head": tr.d_head, "d_ff_ratio": tr.d_ff_ratio}



KIND = TransferKind()
