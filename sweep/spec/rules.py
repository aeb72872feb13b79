"""The rules a study spec must follow beyond its field types: the checks behind `StudySpec`.

Run in stages by `problems` (each stage only when the ones before found nothing, so a message
never rests on a field that is itself wrong):

1. every ``model``/``train`` key is a known field (or a derived one), every fixed value or
   domain has that field's type, and every fixed value, choice and range bound lies inside the
   field's rule (`sweep.spec.fields.FIELD_RULES`, checked exactly, not by sampling);
2. every ``when`` names a fixed or choice field that can take the listed values, without cycles;
3. the search is coherent (sampler, pruner, scheduler, objectives, storage, PBT), the shape
   fields can produce a valid model at all, every ``n_kv_heads`` value divides some
   ``n_heads`` of the space, muP and CompleteP have their base shape, and the
   encoder-decoder fields are given only where ``arch`` is ``encoder_decoder``, with a
   ``src_len`` below some ``seq_len`` and options an encoder-decoder model accepts.

Each problem is one line starting with the dotted path of the field.
"""

from __future__ import annotations

import difflib
import math
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import MISSING
from dataclasses import fields as dc_fields
from typing import Any, Literal, Union

from sweep.schema import METRIC_VAL_LOSS
from sweep.spec.domains import ChoiceDomain, FloatDomain, IntDomain
from sweep.spec.fields import (
    ARCH_FIELDS,
    DERIVED_MODEL_KEYS,
    FIELD_RULES,
    MAX_TOKENS,
    PBT_MUTABLE,
    RDB_SCHEMES,
    SHAPE_FIELDS,
    show_number,
)
from sweep.spec.schema import PBTSpec, StudySpec, ordered, resolve_ref
from sweep.train.config import BUDGET_FIELDS as _BUDGET_FIELDS
from sweep.train.config import TrainConfig
from sweep_models.config import ModelConfig
from sweep_models.presets import PRESETS

__all__ = ["ordered", "problems", "resolve_ref", "section_defaults", "train_config_class"]


def problems(spec: StudySpec) -> list[str]:
    """Every rule ``spec`` breaks, one line each (empty when it is valid)."""
    found = list(_check_fields(spec))
    if not found:
        found += _check_conditions(spec)
    if not found:
        found += _check_search(spec)
        found += _check_shapes(spec)
        found += _check_kv_heads(spec)
        found += _check_parametrization(spec)
        if spec.transfer is not None:
            found += _check_transfer(spec)
        found += _check_arch(spec)
    return found


# ------------------------------------------------------------------------------ type rules
def train_config_class() -> type:
    """The `TrainConfig` dataclass the ``train`` section describes."""
    return TrainConfig


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _field_defaults(cls: type) -> dict[str, Any]:
    out = {}
    for f in dc_fields(cls):
        if f.init:
            if f.default is not MISSING:
                out[f.name] = f.default
            elif f.default_factory is not MISSING:
                out[f.name] = f.default_factory()
    return out


def section_defaults(spec: StudySpec, section: str) -> dict[str, Any]:
    """Default values of a section's fields: the config class's, then the preset's."""
    if section == "train":
        return _field_defaults(train_config_class())
    out = _field_defaults(ModelConfig)
    preset = spec.model.get("preset")
    if isinstance(preset, str) and preset in PRESETS:
        out.update(PRESETS[preset])
    if out.get("d_ff") is None:
        out["d_ff"] = None
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _type_problem(annotation: Any, value: Any) -> str | None:
    """Why ``value`` does not fit ``annotation`` (int, float, bool, str, Literal, X | None, tuple).

    A ``Literal`` (the choice fields of `ModelConfig`) admits exactly its listed values.
    """
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return None if value in args else f"{value!r} is not one of {', '.join(map(str, args))}"
    if origin in (Union, types.UnionType) and args:
        if value is None and type(None) in args:
            return None
        problems = [_type_problem(a, value) for a in args if a is not type(None)]
        return None if any(p is None for p in problems) else problems[0]
    if annotation is int:
        return None if _is_int(value) else f"{value!r} is not an integer"
    if annotation is float:
        return None if _is_num(value) else f"{value!r} is not a number"
    if annotation is bool:
        return None if isinstance(value, bool) else f"{value!r} is not true/false"
    if annotation is str:
        return None if isinstance(value, str) else f"{value!r} is not a string"
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return f"{value!r} is not a list"
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(value)
        if len(value) != len(args):
            return f"{value!r} needs {len(args)} items"
        for a, v in zip(args, value, strict=True):
            p = _type_problem(a, v)
            if p:
                return p
    return None


def _known_fields(section: str) -> dict[str, Any]:
    if section == "model":
        types = _field_types(ModelConfig)
        types = {n: types[n] for n in ModelConfig.field_names()}
        types.update(DERIVED_MODEL_KEYS)
        return types
    cls = train_config_class()
    types = _field_types(cls)
    return {f.name: types[f.name] for f in dc_fields(cls) if f.init}


def _unknown_key(path: str, key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{path}: unknown field{hint}; known: {', '.join(sorted(known))}"


def _candidates(param: Any) -> list[Any]:
    if isinstance(param, ChoiceDomain):
        return list(param.options)
    if isinstance(param, (FloatDomain, IntDomain)):
        return list(param.bounds)
    return [param]


def _check_value(path: str, name: str, annotation: Any, param: Any) -> Iterator[str]:
    if isinstance(param, FloatDomain) and annotation in (int, int | None):
        yield f"{path}: {name} is an integer; use {{int: [lo, hi]}} or {{choice: [...]}}"
        return
    if isinstance(param, (FloatDomain, IntDomain)) and _type_problem(annotation, 1.0) \
            and _type_problem(annotation, 1):
        yield f"{path}: {name} is not numeric; use a fixed value or {{choice: [...]}}"
        return
    where = ".choice" if isinstance(param, ChoiceDomain) else ""
    for i, value in enumerate(_candidates(param)):
        sub = f"{path}{where}[{i}]" if where else path
        if isinstance(param, (FloatDomain, IntDomain)):
            continue
        problem = _type_problem(annotation, value)
        if problem:
            yield f"{sub}: {problem}"


def _check_rule(path: str, param: Any, field: str | None = None) -> Iterator[str]:
    """Where a fixed value, a choice or a range bound at ``path`` breaks the rule of ``field``.

    ``field`` (a dotted ``model.``/``train.`` path) defaults to ``path``. Exact, not sampled: a
    range lies inside a rule when both its bounds do, as every rule is an interval. The first
    break is reported.
    """
    field = field or path
    rule = FIELD_RULES.get(field)
    if rule is None:
        return
    if isinstance(param, (FloatDomain, IntDomain)):
        named = list(zip(("lower bound", "upper bound"), param.bounds, strict=True))
    elif isinstance(param, ChoiceDomain):
        named = [("choice", v) for v in param.options]
    else:
        named = [("value", param)]
    for label, value in named:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if _is_num(v) and not rule.admits(v):
                yield f"{path}: {label} {show_number(v)} is outside the rule {rule}"
                return
        if field in _TOKEN_LIMITED and _is_num(value) and value > MAX_TOKENS:
            yield (f"{path}: {label} {show_number(value)} is above the limit of "
                   f"{show_number(MAX_TOKENS)} tokens a trial may train on"
                   f"{_TOKEN_LIMITED[field]}")
            return


#: The budget fields `MAX_TOKENS` bounds, with why it bounds each.
_TOKEN_LIMITED = {"train.tokens": "", "train.steps": " (each step trains at least one token)"}


def _check_fields(spec: StudySpec) -> Iterator[str]:
    for section in ("model", "train"):
        known = _known_fields(section)
        for name, param in getattr(spec, section).items():
            path = f"{section}.{name}"
            if name not in known:
                yield _unknown_key(path, name, known)
                continue
            found = list(_check_value(path, name, known[name], param))
            yield from found or _check_rule(path, param)
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
    if spec.scaling is not None:
        yield from _check_scaling(spec, budgets)
    elif len(budgets) != 1:
        got = ", ".join(budgets) if budgets else "none"
        yield f"train: exactly one budget of {', '.join(_BUDGET_FIELDS)} is needed (got {got})"
    vocab = model.get("vocab_size")
    if spec.data.vocab_size and _is_int(vocab) and vocab < spec.data.vocab_size:
        yield (f"model.vocab_size: {vocab} is smaller than data.vocab_size="
               f"{spec.data.vocab_size}")


#: Model fields a scaling study's size rule or ladder sets for every trial (``n_kv_heads``: the
#: rule's and ladder's shapes are multi-head, as their head counts need not share a divisor).
SCALING_OWNED_MODEL = ("preset", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "d_head",
                       "d_ff_ratio")
#: Train fields that fix the batch, from which each grid point's step count is laid out.
SCALING_FIXED_TRAIN = ("batch_size", "grad_accum", "batch_tokens")


def _check_scaling(spec: StudySpec, budgets: list[str]) -> Iterator[str]:
    """A scaling study owns the shape and the budget of every trial, and trains each to the end."""
    rung = "scaling.rule" if spec.scaling.rule is not None else "scaling.ladder"
    for name in SCALING_OWNED_MODEL:
        if name in spec.model:
            yield f"model.{name}: a scaling study takes every shape from {rung}; remove it"
    for name in ARCH_FIELDS:
        if name in spec.model and "encoder_decoder" in _candidates(spec.model.get("arch")):
            yield (f"model.{name}: a scaling study's shapes are decoder-only ({rung} sets "
                   "n_layers of one stack); encoder-decoder models are not supported there")
            break
    for name in budgets:
        yield (f"train.{name}: a scaling study trains each shape for tokens = budget / FLOPs "
               "per token, from scaling.budgets; remove it")
    for name in SCALING_FIXED_TRAIN:
        if isinstance(spec.train.get(name), dict) or (
                name in spec.train and not isinstance(spec.train[name], (int, float))):
            yield (f"train.{name}: must be fixed in a scaling study (each grid point's step "
                   "count is laid out from it)")
    if "seq_len" in spec.model and not isinstance(spec.model["seq_len"], int):
        yield ("model.seq_len: must be fixed in a scaling study (each grid point's step count "
               "is laid out from it)")
    s = spec.search
    if "n_trials" in s.model_fields_set:
        yield ("search.n_trials: a scaling study's trials are its grid points (scaling.budgets "
               "x scaling.sizes_per_budget); remove it")
    if s.scheduler == "pbt":
        yield ("search.scheduler: pbt mutates trials mid-run and cannot lay out an IsoFLOP "
               "grid; use none (the default for scaling studies)")
    if list(s.objectives) != [METRIC_VAL_LOSS]:
        yield "search.objectives: a scaling study fits val_loss only; remove the others"
    if spec.scaling.branches:
        yield from _check_branches(spec)


#: Model fields a transfer study's widths set for every trial.
TRANSFER_OWNED_MODEL = ("preset", "d_model", "n_heads", "n_kv_heads", "d_ff", "d_head",
                        "d_ff_ratio")


def _check_transfer(spec: StudySpec) -> Iterator[str]:
    """A transfer study is a grid: the widths x one shared learning-rate grid x choices."""
    if spec.scaling is not None:
        yield "transfer: a study is a scaling study or a transfer study, not both"
        return
    for name in TRANSFER_OWNED_MODEL:
        if name in spec.model:
            yield (f"model.{name}: a transfer study takes every width from transfer.widths "
                   "(d_model, n_heads = d_model / transfer.d_head, d_ff from "
                   "transfer.d_ff_ratio); remove it")
    lr = spec.train.get("lr")
    if not (isinstance(lr, ChoiceDomain) and len(lr.options) >= 3):
        yield ("train.lr: a transfer study runs one learning-rate grid at every width; give "
               "{choice: [...]} with at least 3 rates")
    for param in spec.searched():
        if not isinstance(param.domain, ChoiceDomain):
            yield (f"{param.path}: a transfer study trains the product of its grids, so every "
                   "searched field must be a {choice: [...]}")
        elif param.when:
            yield f"{param.path}.when: conditions are not supported in a transfer study"
    s = spec.search
    if "n_trials" in s.model_fields_set:
        yield ("search.n_trials: a transfer study's trials are its grid points "
               "(transfer.widths x every choice); remove it")
    if s.executor != "optuna":
        yield "search.executor: a transfer study runs on the optuna executor"
    for name in ("pruner", "scheduler"):
        if getattr(s, name) != "none":
            yield (f"search.{name}: every point of a transfer grid trains to the end (a "
                   "stopped point has no final loss to compare); use none (the default)")
    if list(s.objectives) != [METRIC_VAL_LOSS]:
        yield "search.objectives: a transfer study compares val_loss only; remove the others"


def _check_branches(spec: StudySpec) -> Iterator[str]:
    """WSD branches share a stable phase across budgets (`sweep.train.branches`)."""
    schedule = spec.train.get("schedule", TrainConfig.schedule)
    if schedule != "wsd":
        yield (f"scaling.branches: needs train.schedule: wsd (a fixed value), got {schedule!r}; "
               "only a warmup-stable-decay schedule has a stable phase that every budget shares")
    warmup = spec.train.get("warmup", TrainConfig.warmup)
    if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or 0 < warmup < 1:
        yield (f"scaling.branches: needs train.warmup fixed in tokens (>= 1) or 0, got "
               f"{warmup!r}; a fraction of the budget would give each budget its own warmup")


# ------------------------------------------------------------------------------ conditions
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
                    possible = _candidates(target)
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


# ---------------------------------------------------------------------------------- search
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
    if s.scheduler == "pbt":
        if s.pbt is None:
            problems.append("search.pbt: scheduler pbt needs a pbt section "
                            "(perturbation_interval, hyperparam_mutations)")
        if s.sampler not in ("random", "grid"):
            problems.append(f"search.sampler: pbt draws its population at random (Ray Tune "
                            f"cannot combine a search algorithm with PBT); {s.sampler} "
                            "does not apply, use random")
    elif s.pbt is not None:
        problems.append("search.pbt: pbt settings need executor ray with scheduler pbt")
    if s.pbt is not None:
        problems += _check_pbt(spec, s.pbt)
    if s.sampler == "grid":
        for p in spec.searched():
            if not _is_finite_domain(p.value):
                problems.append(f"{p.path}: the grid sampler needs choice, int or float "
                                "domains with a step")
    if s.population_size is not None and s.sampler != "nsga2":
        problems.append("search.population_size: only used by sampler nsga2")
    if s.checkpoint_interval is not None:
        if s.scheduler == "pbt":
            problems.append("search.checkpoint_interval: PBT members checkpoint every "
                            "search.pbt.checkpoint_interval tokens; set that one instead")
        if spec.scaling is not None and spec.scaling.branches:
            problems.append("search.checkpoint_interval: a branched grid point continues its "
                            "shape's stable-phase trunk (scaling.branches); it takes no "
                            "checkpoints of its own")
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


def _check_pbt(spec: StudySpec, pbt: PBTSpec) -> list[str]:
    problems = []
    for name, param in pbt.hyperparam_mutations.items():
        path = f"search.pbt.hyperparam_mutations.{name}"
        bare = name.split(".", 1)[1] if name.startswith(("model.", "train.")) else name
        if bare in SHAPE_FIELDS:
            problems.append(f"{path}: PBT cannot mutate {bare!r}: it fixes tensor shapes, the "
                            "parametrization or the data layout of a member, which must stay "
                            "the same while weights are copied between members; mutable: "
                            f"{', '.join(PBT_MUTABLE)}")
        elif bare not in PBT_MUTABLE or (name != bare and name.split(".")[0]
                                         != PBT_MUTABLE[bare]):
            problems.append(f"{path}: not a field PBT can change on a live trial; mutable: "
                            f"{', '.join(PBT_MUTABLE)}")
        elif not isinstance(param, (FloatDomain, IntDomain, ChoiceDomain)):
            problems.append(f"{path}: needs a domain ({{float: ...}}, {{choice: ...}})")
        elif param.when:
            problems.append(f"{path}.when: conditions are not supported in mutations")
        else:
            section = PBT_MUTABLE[bare]
            found = list(_check_value(path, bare, _known_fields(section)[bare], param))
            problems += found or list(_check_rule(path, param, f"{section}.{bare}"))
    for param in spec.searched():
        if param.name in SHAPE_FIELDS:
            problems.append(f"{param.path}: a PBT population shares one shape (a member that "
                            "exploits copies the donor's weights), so shape fields must be "
                            "fixed values, not searched")
    ckpt = pbt.checkpoint_interval or pbt.perturbation_interval
    if pbt.perturbation_interval % ckpt:
        problems.append(f"search.pbt.checkpoint_interval: {ckpt} tokens does not divide "
                        f"perturbation_interval={pbt.perturbation_interval}; members could only "
                        "exploit a stale checkpoint")
    if spec.scaling is not None:
        return problems
    budget_name, budget = spec.budget()
    if budget_name == "tokens" and _is_num(budget) and pbt.perturbation_interval >= budget:
        problems.append(f"search.pbt.perturbation_interval: {pbt.perturbation_interval} tokens "
                        f"is not below the budget train.tokens={budget}; no member would ever "
                        "be perturbed")
    elif budget_name != "tokens":
        problems.append(f"train.{budget_name}: pbt intervals are in tokens, so the budget must "
                        "be train.tokens")
    return problems


# ---------------------------------------------------------------------------------- shapes
def _int_values(param: Any, default: Any) -> tuple[int, int, int] | list[Any]:
    """A shape field's possible values: (lo, step, count) for int ranges, else a list."""
    if isinstance(param, IntDomain):
        lo, hi = param.bounds
        prog = (lo, param.step, (hi - lo) // param.step + 1)
        return prog if not param.when else [*param.values()[:4096], default]
    values = _candidates(param) if param is not None else [default]
    return [*values, default] if getattr(param, "when", None) else values


def _has_multiple(values: tuple[int, int, int] | list[Any], m: int, at_least: int) -> bool:
    """Whether some value v >= at_least is divisible by m (arithmetic for ranges)."""
    if isinstance(values, list):
        return any(_is_int(v) and v % m == 0 and v >= at_least for v in values)
    lo, step, count = values
    hi = lo + step * (count - 1)
    # solve lo + k*step = 0 (mod m) for the smallest k >= 0
    g = math.gcd(step, m)
    if lo % g:
        return False
    mg = m // g
    k = ((-lo // g) * pow(step // g, -1, mg)) % mg if mg > 1 else 0
    first = lo + k * step
    if first < at_least:
        first += math.ceil((at_least - first) / (mg * step)) * mg * step
    return first <= hi


def _check_shapes(spec: StudySpec) -> list[str]:
    """Reject a space in which no (d_model, heads, position encoding) combination is valid."""
    model = spec.model
    defaults = section_defaults(spec, "model")
    d_model = _int_values(model.get("d_model"), defaults["d_model"])
    pos = _int_values(model.get("pos_encoding"), defaults["pos_encoding"])
    by_head_dim = "d_head" in model
    heads = _int_values(model.get("d_head") if by_head_dim else model.get("n_heads"),
                        None if by_head_dim else defaults["n_heads"])
    if isinstance(heads, tuple):
        lo, step, count = heads
        heads = list(range(lo, lo + step * min(count, 4096), step))
    problems = []
    valid = False
    for h in heads:
        if not _is_int(h) or h <= 0:
            continue
        for p in pos:
            if by_head_dim:
                if p == "rope" and h % 2:
                    continue
                m = math.lcm(h, 2) if p == "sinusoidal" else h
                ok = _has_multiple(d_model, m, h)
            else:
                m = 2 * h if p == "rope" else math.lcm(h, 2) if p == "sinusoidal" else h
                ok = _has_multiple(d_model, m, 1)
            if ok:
                valid = True
                break
        if valid:
            break
    if not valid:
        head = "model.d_head" if by_head_dim else "model.n_heads"
        problems.append(
            f"{head}: no value of model.d_model is divisible by any {head.split('.')[1]} of "
            f"the space (with an even head dimension for rope, an even d_model for "
            f"sinusoidal); the space can never produce a valid model")
    patterns = _candidates(model.get("attn_pattern", defaults["attn_pattern"]))
    sparsity = model.get("attn_sparsity")
    if sparsity is not None and "dense" in patterns and not _sparsity_conditioned(sparsity):
        if any(_is_num(v) and v > 0 for v in _candidates(sparsity)):
            problems.append(
                "model.attn_sparsity: takes values > 0 while model.attn_pattern can be 'dense' "
                "(which keeps every pair); add when: {attn_pattern: [local, strided, "
                "block_sparse]}")
    return problems


def _listed(values: tuple[int, int, int] | list[Any]) -> list[Any]:
    """`_int_values` as a list (a range's first 4096 values)."""
    if isinstance(values, list):
        return values
    lo, step, count = values
    return list(range(lo, lo + step * min(count, 4096), step))


def _check_kv_heads(spec: StudySpec) -> list[str]:
    """Refuse an n_kv_heads value that divides no n_heads of the space (it never builds).

    A scaling study owns the heads and refuses n_kv_heads (`SCALING_OWNED_MODEL`).
    """
    model = spec.model
    if "n_kv_heads" not in model or spec.scaling is not None:
        return []
    defaults = section_defaults(spec, "model")
    if "d_head" in model:
        # n_heads = d_model / d_head is divisible by k when d_model is by k * d_head
        d_model = _int_values(model.get("d_model"), defaults["d_model"])
        d_heads = [h for h in _listed(_int_values(model["d_head"], None)) if _is_int(h) and h > 0]

        def divides_some(k: int) -> bool:
            return any(_has_multiple(d_model, k * h, 1) for h in d_heads)
        where = "n_heads = d_model / d_head of the space"
    else:
        heads = [h for h in _listed(_int_values(model.get("n_heads"), defaults["n_heads"]))
                 if _is_int(h) and h > 0]

        def divides_some(k: int) -> bool:
            return any(h % k == 0 for h in heads)
        shown = ", ".join(map(str, heads[:8])) + (", ..." if len(heads) > 8 else "")
        where = f"value of model.n_heads ({shown})"
    param = model["n_kv_heads"]
    label = ("value" if not isinstance(param, (ChoiceDomain, FloatDomain, IntDomain))
             else "choice" if isinstance(param, ChoiceDomain) else "range value")
    for k in _listed(_int_values(param, None)):
        if _is_int(k) and k > 0 and not divides_some(k):
            return [f"model.n_kv_heads: {label} {k} divides no {where}; n_heads must be "
                    "divisible by n_kv_heads (each key/value head serves the same number of "
                    "query heads)"]
    return []


def _check_parametrization(spec: StudySpec) -> list[str]:
    """Refuse a space that can take muP or CompleteP without their base shape."""
    model = spec.model
    defaults = section_defaults(spec, "model")
    taken = _candidates(model.get("parametrization", defaults["parametrization"]))
    problems = []
    for name, needed_by, what in (("base_d_model", ("mup", "completep"), "width"),
                                  ("base_n_layers", ("completep",), "depth")):
        needing = [p for p in taken if p in needed_by]
        if needing and None in _candidates(model.get(name, defaults[name])):
            problems.append(f"model.{name}: parametrization {needing[0]!r} needs {name}, the "
                            f"{what} the hyperparameters are tuned at; give it")
    return problems


def _arch_conditioned(param: Any) -> bool:
    when = getattr(param, "when", None) or {}
    allowed = when.get("arch", when.get("model.arch"))
    return allowed is not None and "decoder_only" not in allowed


def _check_arch(spec: StudySpec) -> list[str]:
    """The encoder-decoder fields only where ``arch`` can be ``encoder_decoder``, and usable.

    Refused: ``n_encoder_layers``, ``n_decoder_layers`` or ``src_len`` in a space whose
    ``arch`` is never ``encoder_decoder``, or can also be ``decoder_only`` without a ``when``
    that keeps the field to encoder-decoder trials; and, where every trial is encoder-decoder,
    a ``src_len`` never below ``seq_len``, ``causal: false``, no dense ``attn_pattern`` or
    only ``completep`` (no such trial could build).
    """
    model = spec.model
    defaults = section_defaults(spec, "model")
    archs = _candidates(model.get("arch", defaults["arch"]))
    problems = []
    for name in ARCH_FIELDS[1:]:
        if name not in model:
            continue
        if "encoder_decoder" not in archs:
            problems.append(f"model.{name}: needs model.arch: encoder_decoder (a decoder-only "
                            "model has one stack and no source part)")
        elif "decoder_only" in archs and not _arch_conditioned(model[name]):
            problems.append(f"model.{name}: set while model.arch can be 'decoder_only', which "
                            "refuses it; add when: {arch: [encoder_decoder]}")
    if problems or archs != ["encoder_decoder"]:
        return problems
    if "src_len" in model:
        src = [v for v in _candidates(model["src_len"]) if _is_int(v)]
        seq = [v for v in _candidates(model.get("seq_len", defaults["seq_len"])) if _is_int(v)]
        if src and seq and min(src) >= max(seq):
            problems.append(f"model.src_len: {min(src)} is not below any model.seq_len of the "
                            f"space (at most {max(seq)}); src_len must be below seq_len (the "
                            "window is src_len source tokens, then the target)")
    for name, ok, rule in (
            ("causal", lambda v: v is True, "needs causal: true (its decoder is causal)"),
            ("attn_pattern", lambda v: v == "dense", "supports only attn_pattern: dense"),
            ("parametrization", lambda v: v != "completep", "supports sp and mup, not "
                                                             "completep")):
        values = _candidates(model.get(name, defaults[name]))
        if not any(ok(v) for v in values):
            problems.append(f"model.{name}: arch 'encoder_decoder' {rule}; no trial of the "
                            "space could build")
    return problems


def _sparsity_conditioned(param: Any) -> bool:
    when = getattr(param, "when", None) or {}
    allowed = when.get("attn_pattern", when.get("model.attn_pattern"))
    return allowed is not None and "dense" not in allowed
