"""What several study kinds share: running a grid's points, and the parametrization's note."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from sweep.kinds.base import KindRun, StudyKind
from sweep.spec.schema import StudySpec

__all__ = ["GridKind", "parametrization_line", "run_points"]


class GridKind(StudyKind):
    """A kind whose trials are the points of a grid, each trained once, to the end.

    No early stopping unless the spec asks for it (a stopped point has no final loss to
    compare); its spec section is named as the kind. Its subclass says where the points come
    from (`StudyKind.trials_from`), how to run them (`run_points`) and which point a trial
    trained (`StudyKind.point_key`).
    """

    search_defaults = {"pruner": "none", "scheduler": "none"}
    samples_lr_factor = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "section" not in cls.__dict__:
            cls.section = cls.name


def run_points(job: KindRun, points: Iterable[dict[str, Any]],
               held: list[dict[str, Any]] | None = None) -> Any:
    """Run the ``points`` (flat params) whose trials have not ended yet, exactly those.

    A point whose trial ended in any final state (a diverged point is a result) is skipped,
    matched by the kind's `sweep.kinds.StudyKind.point_key`; one whose trial was interrupted
    runs again (as that trial's retry, `sweep.study.policy`). The executor queues the points
    (``ctx.points``) and runs each once.

    Args:
        job: The kind's run.
        points: The grid points, in the order to train them.
        held: The study's trials as `sweep.tracking.read_trials` gives them; read when None.

    Returns:
        The executor's Optuna study, or None when every point had been trained.
    """
    ctx = job.ctx
    spec, kind = ctx.spec, ctx.spec.kind
    if held is None:
        held = ctx.tracking.read_trials()
    done = {kind.point_key(spec, t["params"]) for t in held if t["state"].finished}
    todo = tuple(p for p in points if kind.point_key(spec, p) not in done)
    if not todo:
        return None
    return job.executor.run(dataclasses.replace(ctx, points=todo), len(todo), job.view,
                            address=job.address)


def parametrization_line(spec: StudySpec, what: str) -> str:
    """What the parametrization means for one tuned learning rate across ``what``."""
    model = spec.model
    par = model.get("parametrization", "sp")
    if isinstance(par, str) and par in ("mup", "completep"):
        return (f"parametrization {par} (base d_model {model.get('base_d_model')}): one tuned "
                f"train.lr serves {what} (width_mult = d_model / base_d_model)")
    if isinstance(par, str):
        return (f"parametrization {par}: the best train.lr drifts with width, so one lr does "
                f"not serve {what} equally; model.parametrization: mup with a fixed "
                "base_d_model makes it transfer")
    options = ", ".join(map(str, getattr(par, "options", [])))
    return f"parametrization searched ({options}): compared side by side across {what}"
