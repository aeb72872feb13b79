"""CLI overrides of a study spec: ``--executor`` and ``--trials``.

Light on purpose (the spec package only): ``sweep run`` applies them, and refuses a spec they
make invalid, before it loads torch, MLflow or Optuna.
"""

from __future__ import annotations

from sweep.spec import StudySpec, parse_spec

__all__ = ["with_overrides"]

_PRUNER_TO_SCHEDULER = {"hyperband": "hyperband", "sha": "asha", "median": "median",
                        "none": "none"}


_SCHEDULER_TO_PRUNER = {v: k for k, v in _PRUNER_TO_SCHEDULER.items()}


def with_overrides(spec: StudySpec, *, executor: str | None = None,
                   n_trials: int | None = None) -> StudySpec:
    """The spec with ``--executor`` / ``--trials`` applied (validated again).

    Switching executors carries the early-stopping rule over: Optuna's ``sha`` pruner is Ray's
    ``asha`` scheduler, ``hyperband`` and ``median`` keep their names.

    Raises:
        SpecError: If the override makes the spec invalid (e.g. PBT with the Optuna executor).
    """
    if executor is None and n_trials is None:
        return spec
    data = spec.to_data()
    search = data["search"]
    if executor is not None and executor != spec.search.executor:
        search["executor"] = executor
        # The same early-stopping rule under the other executor's name.
        if executor == "ray":
            pruner = search.pop("pruner", "none")
            search["scheduler"] = _PRUNER_TO_SCHEDULER[pruner]
        elif search.get("scheduler", "none") in _SCHEDULER_TO_PRUNER:
            search["pruner"] = _SCHEDULER_TO_PRUNER[search.pop("scheduler", "none")]
    if n_trials is not None:
        data["search"]["n_trials"] = n_trials
    return parse_spec(data)
