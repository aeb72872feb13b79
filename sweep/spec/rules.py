"""The rules a study spec must follow beyond its field types: the checks behind `StudySpec`.

Run in stages by `problems` (each stage only when the ones before found nothing, so a message
never rests on a field that is itself wrong):

1. every ``model``/``train`` key is a known field (or a derived one), every fixed value or
   domain has that field's type, and every fixed value, choice and range bound lies inside the
   field's rule (`sweep.spec.values`, checked exactly, not by sampling); a ``from_study``
   learning rate follows `sweep.spec.from_study`'s rules;
2. every ``when`` names a fixed or choice field that can take the listed values, without cycles;
3. the search is coherent (sampler, pruner, scheduler, objectives, storage), the shapes can
   build (`sweep.spec.shape_rules`), and the study kind's own rules hold
   (`sweep.kinds.StudyKind.problems`; a section of another kind is refused).

Each problem is one line starting with the dotted path of the field.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sweep.schema import METRIC_VAL_LOSS
from sweep.spec.domains import ChoiceDomain, FloatDomain, IntDomain
from sweep.spec.fields import RDB_SCHEMES
from sweep.spec.from_study import FromStudyDomain, from_study_problems
from sweep.spec.schema import StudySpec, ordered, resolve_ref
from sweep.spec.shape_rules import shape_problems
from sweep.spec.values import (
    candidates,
    check_rule,
    check_value,
    is_int,
    known_fields,
    section_defaults,
    unknown_key,
)
from sweep.train.choices import BUDGET_FIELDS as _BUDGET_FIELDS
from sweep_models.presets import PRESETS

__all__ = ["ordered", "problems", "resolve_ref", "section_defaults"]


def problems(spec: StudySpec) -> list[str]:
    """Every rule ``spec`` breaks, one line each (empty when it is valid)."""
    found = list(_check_fields(spec))
    if not found:
        found += _check_conditions(spec)
    if not found:
        found += _check_search(spec)
        found += shape_problems(spec)
        found += _check_kind(spec)
    return found


def _check_kind(spec: StudySpec) -> list[str]:
    """The kind's own rules, and a section of another kind refused."""
    from sweep.kinds import kind_sections

    kind = spec.kind
    found = []
    if kind.trials_from is not None and "n_trials" in spec.search.model_fields_set:
        found.append(f"search.n_trials: a {kind.name} study's trials are {kind.trials_from}; "
                     "remove it")
    found += kind.problems(spec)
    for path, load in kind_sections().items():
        if path != kind.section and spec.section(path) is not None:
            found.append(load().misplaced(kind))
    return found


def _check_fields(spec: StudySpec) -> Iterator[str]:
    for section in ("model", "train"):
        known = known_fields(section)
        for name, param in getattr(spec, section).items():
            path = f"{section}.{name}"
            if name not in known:
                yield unknown_key(path, name, known)
                continue
            if isinstance(param, FromStudyDomain):  # its rules below; its range the law's
                continue
            found = list(check_value(path, name, known[name], param))
            yield from found or check_rule(path, param)
    yield from from_study_problems(spec)
    model = spec.model
    if "preset" in model:
        if not isinstance(model["preset"], str):
            yield "model.preset: must be a fixed preset name"
        elif model["preset"] not in PRESETS:
            yield f"model.preset: {model['preset']!r} is not one of {', '.join(PRESETS)}"
    for derived, base in (("d_head", "n_heads"), ("d_ff_ratio", "d_ff")):
        if derived in model and base in model:
            yield f"model.{derived}: give {derived} or {base}, not both"
    budgets = [k for k in _BUDGET_FIELDS if k in spec.train]
    if spec.kind.budget(spec) is None and len(budgets) != 1:
        got = ", ".join(budgets) if budgets else "none"
        yield f"train: exactly one budget of {', '.join(_BUDGET_FIELDS)} is needed (got {got})"
    if spec.simulate is not None and "seconds" in spec.train:
        yield ("train.seconds: a simulated trial (simulate) takes no time; give its budget in "
               "tokens, steps or flops")
    vocab = model.get("vocab_size")
    if spec.data.vocab_size and is_int(vocab) and vocab < spec.data.vocab_size:
        yield (f"model.vocab_size: {vocab} is smaller than data.vocab_size="
               f"{spec.data.vocab_size}")


def _check_conditions(spec: StudySpec) -> list[str]:
    problems = []
    for section in ("model", "train"):
        for name, param in getattr(spec, section).items():
            when = getattr(param, "when", None) or {}
            for key, allowed in when.items():
                path = f"{section}.{name}.when.{key}"
                ref = resolve_ref(spec, section, key)
                if ref is None:
                    problems.append(f"{path}: names no model or train field of this spec")
                    continue
                target = getattr(spec, ref[0])[ref[1]]
                if ref == (section, name):
                    problems.append(f"{path}: a field cannot depend on itself")
                elif isinstance(target, ChoiceDomain) or not isinstance(
                        target, (FloatDomain, IntDomain)):
                    possible = candidates(target)
                    bad = [v for v in allowed if v not in possible]
                    if bad:
                        problems.append(f"{path}: {', '.join(map(repr, bad))} is never taken "
                                        f"by {ref[0]}.{ref[1]} (values: "
                                        f"{', '.join(map(repr, possible))})")
                else:
                    problems.append(f"{path}: conditions need a fixed or choice field")
    if not problems:
        try:
            ordered(spec)
        except ValueError as exc:
            problems.append(str(exc))
    return problems


def _is_finite_domain(param: Any) -> bool:
    return isinstance(param, (ChoiceDomain, IntDomain)) or (
        isinstance(param, FloatDomain) and param.step is not None)


def _check_search(spec: StudySpec) -> list[str]:
    s = spec.search
    problems = []
    n_obj = len(s.objectives)
    if len(set(s.objectives)) != n_obj:
        problems.append("search.objectives: each objective may appear once")
    if s.directions is not None and len(s.directions) != n_obj:
        problems.append(f"search.directions: {len(s.directions)} direction(s) for {n_obj} "
                        "objective(s)")
    if METRIC_VAL_LOSS not in s.objectives:
        problems.append("search.objectives: val_loss must be one of the objectives (the others "
                        "are known before training)")
    if s.sampler == "nsga2" and n_obj < 2:
        problems.append("search.sampler: nsga2 is multi-objective and needs >= 2 objectives")
    if s.sampler in ("cmaes", "gp") and n_obj > 1:
        problems.append(f"search.sampler: {s.sampler} is single-objective; use nsga2 or tpe "
                        "for several objectives")
    if n_obj > 1 and s.pruner != "none":
        problems.append(f"search.pruner: {s.pruner} cannot prune multi-objective studies; "
                        "use none")
    if n_obj > 1 and s.scheduler != "none":
        problems.append(f"search.scheduler: {s.scheduler} stops trials on one metric and "
                        "cannot serve several objectives; use none")
    if s.executor == "optuna" and s.scheduler != "none":
        problems.append("search.scheduler: schedulers belong to executor ray; with optuna "
                        "use search.pruner")
    if s.executor == "ray" and s.pruner != "none":
        problems.append("search.pruner: pruners belong to executor optuna; with ray use "
                        "search.scheduler")
    if s.sampler == "grid":
        for p in spec.searched():
            if not _is_finite_domain(p.value):
                problems.append(f"{p.path}: the grid sampler needs choice, int or float "
                                "domains with a step")
    if s.population_size is not None and s.sampler != "nsga2":
        problems.append("search.population_size: only used by sampler nsga2")
    if s.storage and "://" in s.storage:
        scheme = s.storage.split("://", 1)[0].split("+", 1)[0]
        if scheme not in RDB_SCHEMES:
            problems.append(f"search.storage: {s.storage.split('://', 1)[0]}://... is neither a "
                            f"journal file path nor an RDB URL ({', '.join(RDB_SCHEMES)})")
        elif s.parallel > 1 and _is_memory_sqlite(s.storage):
            problems.append(f"search.storage: {s.storage} is an in-memory database, which each of "
                            f"the search.parallel={s.parallel} worker processes would hold on "
                            "its own (none would see the others' trials); give a file, "
                            "sqlite:///path/optuna.db, or search.parallel: 1")
    return problems


def _is_memory_sqlite(url: str) -> bool:
    """Whether an SQLAlchemy URL names an in-memory SQLite database.

    ``sqlite://``, ``sqlite:///`` and ``sqlite:///:memory:`` (any driver, ``sqlite+pysqlite``),
    and a ``file:`` URI with ``mode=memory``.
    """
    scheme, _, rest = url.partition("://")
    if scheme.split("+", 1)[0] != "sqlite":
        return False
    database, _, query = rest.removeprefix("/").partition("?")
    return database in ("", ":memory:") or "mode=memory" in query
