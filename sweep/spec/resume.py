"""Whether a stored study can resume under a changed spec: its search domains compared as types.

Optuna refuses to continue a study whose distributions changed in kind, choices or log scale
(``optuna.distributions.check_distribution_compatibility``); the same rule, and a changed step,
is applied here to the stored and new specs before anything is written, with a message naming
the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from sweep.errors import InputError
from sweep.spec.domains import ChoiceDomain, Domain, FloatDomain, IntDomain, Param

__all__ = ["ResumeError", "check_resume_compatible"]

_PARAM = TypeAdapter(Param)


class ResumeError(InputError, ValueError):
    """A study cannot resume because its spec changed a search domain incompatibly."""


def _typed(value: Any) -> Domain | None:
    """The domain a spec value declares (as `sweep.spec` parses it), or None for a fixed value.

    A stored value that no longer parses as a domain counts as a fixed value.
    """
    try:
        parsed = _PARAM.validate_python(value)
    except ValidationError:
        return None
    return parsed if isinstance(parsed, (FloatDomain, IntDomain, ChoiceDomain)) else None


def _step(domain: FloatDomain | IntDomain) -> str:
    return "none (continuous)" if domain.step is None else str(domain.step)


def _shown(domain: Domain) -> dict[str, Any]:
    return domain.model_dump(by_alias=True, exclude_none=True)


def check_resume_compatible(old_spec: Mapping[str, Any], new_spec: Mapping[str, Any]) -> list[str]:
    """Check that a study logged with ``old_spec`` can resume under ``new_spec``.

    Both are plain spec dicts (the stored ``spec.yaml`` and the new spec's dump). Their
    ``model`` and ``train`` values are parsed into `FloatDomain` / `IntDomain` / `ChoiceDomain`
    (or fixed values) and compared the way Optuna's ``check_distribution_compatibility`` does:
    a domain's kind, a categorical's choices and a float/int domain's ``log`` flag must not
    change. Nor may a float/int domain's ``step`` (stricter than Optuna, which would let the
    earlier trials' values lie off the new grid: ``d_model`` 100 under a new step of 64). A
    scaling study's ``budgets``, ``rule`` and ``ladder`` must not change either (they define
    the choices of ``scaling.point``), nor a transfer study's ``widths``, ``d_head`` and
    ``d_ff_ratio`` (its points' shapes), nor an hparams study's ``budgets``, ``lr``,
    ``batch_size`` and ``shape`` (the choices of ``hparams.point`` and their shapes). Other
    differences (ranges, fixed values, added or removed parameters) are allowed and returned
    as notes.

    Returns:
        Human-readable notes on the allowed differences (empty when the domains agree).

    Raises:
        ResumeError: Naming the parameter and both domains (for choices, both choice lists).
    """
    notes = []
    # A scaling grid's points are one categorical (scaling.point: every budget times every
    # shape); a transfer grid's widths are the choices of model.d_model, and d_head and
    # d_ff_ratio shape every point: a change there is a change of the grid's points.
    for section, keys in (("scaling", ("budgets", "rule", "ladder")),
                          ("transfer", ("widths", "d_head", "d_ff_ratio")),
                          ("hparams", ("budgets", "lr", "batch_size", "shape"))):
        old, new = old_spec.get(section) or None, new_spec.get(section) or None
        if (old is None) != (new is None):
            raise ResumeError(f"cannot resume: the {section} section was "
                              f"{'added' if new else 'removed'}; start a new study instead")
        if old is None or new is None:  # neither (one alone was refused above)
            continue
        for key in keys:
            if old.get(key) != new.get(key):
                raise ResumeError(f"cannot resume: {section}.{key} changed from "
                                  f"{old.get(key)!r} to {new.get(key)!r}, which changes the "
                                  "grid's points; start a new study (another name or "
                                  "folder) instead")
    for section in ("model", "train"):
        old = {f"{section}.{k}": v for k, v in (old_spec.get(section) or {}).items()}
        new = {f"{section}.{k}": v for k, v in (new_spec.get(section) or {}).items()}
        for name in sorted(set(old) | set(new)):
            if name not in new or name not in old:
                notes.append(f"{name} {'removed' if name not in new else 'added'}")
                continue
            a, b = _typed(old[name]), _typed(new[name])
            if a is None and b is None:
                if old[name] != new[name]:
                    notes.append(f"{name} fixed value {old[name]!r} -> {new[name]!r}")
                continue
            if a is None or b is None or type(a) is not type(b):
                raise ResumeError(
                    f"cannot resume: {name} changed from {old[name]!r} to {new[name]!r}; "
                    "start a new study instead"
                )
            if isinstance(a, ChoiceDomain) and isinstance(b, ChoiceDomain):
                if a.options != b.options:
                    raise ResumeError(
                        f"cannot resume: the choices of {name} changed from {a.options} "
                        f"to {b.options}; start a new study instead"
                    )
            elif not isinstance(a, ChoiceDomain) and not isinstance(b, ChoiceDomain):
                if a.log != b.log:
                    raise ResumeError(
                        f"cannot resume: {name} changed log={a.log} to log={b.log}; start a "
                        "new study instead"
                    )
                if a.step != b.step:
                    raise ResumeError(
                        f"cannot resume: {name} changed step {_step(a)} to {_step(b)}, so "
                        "the earlier trials' values need not lie on the new grid; start a new "
                        "study instead"
                    )
            if a != b:
                notes.append(f"{name} domain {_shown(a)} -> {_shown(b)}")
    return notes
