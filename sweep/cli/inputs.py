"""The light checks of a study's spec and flags, shared by validate, run, worker and submit.

They run before a command imports torch, MLflow or Optuna, so bad input is refused in well
under a second; what they raise is bad input (exit 2, `sweep.cli.common`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sweep.cli.common import as_bad_input, bad_input

if TYPE_CHECKING:
    from sweep.space import SpaceSummary
    from sweep.spec import StudySpec

__all__ = ["check_study_inputs", "load_study_spec"]


def load_study_spec(spec_path: str, executor: str | None = None,
                    trials: int | None = None) -> StudySpec:
    """The spec at ``spec_path`` with ``--executor`` and ``--trials`` applied.

    Raises:
        sweep.spec.SpecError: An invalid spec, or one the overrides make invalid.
        typer.Exit: With status 2 for an unknown executor, or ``--trials`` for a study whose
            kind sets its trials.
    """
    from sweep.spec import load_spec
    from sweep.study.overrides import with_overrides

    if executor is not None and executor not in ("optuna", "ray"):
        bad_input(f"--executor {executor!r} is not one of optuna, ray")
    spec = load_spec(spec_path)
    if trials is not None and spec.kind.trials_from is not None:
        bad_input(f"--trials {trials}: a {spec.kind.name} study's trials are "
                  f"{spec.kind.trials_from}; change those instead")
    return with_overrides(spec, executor=executor, n_trials=trials)


def check_study_inputs(spec: StudySpec, out: Path | None = None, device: str | None = None,
                       space: bool = False, ray_address: str | None = None,
                       force_out: bool = False) -> SpaceSummary | None:
    """`sweep.study.check_inputs` (and `check_space` when ``space``).

    Returns:
        The priced space when ``space``, else ``None``.

    Raises:
        sweep.study.PreflightError: What the spec or flags name cannot be used.
        typer.Exit: With status 2 for a corpus that cannot be used (``data.uri: ...``).
    """
    from sweep.data import DataError
    from sweep.study.preflight import check_inputs, check_space

    with as_bad_input("data.uri", DataError):
        check_inputs(spec, out, device=device, ray_address=ray_address, force_out=force_out)
        return check_space(spec, device=device) if space else None
