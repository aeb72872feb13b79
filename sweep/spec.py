"""Study specs: the YAML a user writes, validated once into a `StudySpec`.

A spec has the sections ``name``, ``description``, ``data``, ``model``, ``train``, ``search``,
``constraints``, ``resources`` and ``tracking``. In ``model`` and ``train`` every key is a
`ModelConfig` / `TrainConfig` field (plus the derived model keys ``preset``, ``d_head`` and
``d_ff_ratio``) and every value is either fixed or a domain::

    d_model: {int: [64, 256], step: 64}          # ints, optionally log: true (then step 1)
    lr: {float: [1.0e-4, 3.0e-3], log: true}      # floats, optionally step: x
    attn_pattern: {choice: [dense, local]}        # any values
    attn_sparsity: {float: [0.3, 0.9], when: {attn_pattern: [local, strided]}}

A domain with ``when`` is only sampled while every named field (same section unless dotted,
``train.lr``) takes one of the listed values; otherwise the field keeps its config default.
``d_head`` sets ``n_heads = d_model / d_head`` and ``d_ff_ratio`` sets
``d_ff = round(d_ff_ratio * d_model)``, so the space holds only valid shapes.

Every problem is reported with its dotted path (``search.sampler``, ``model.d_model.float[1]``)
in one `SpecError`, one line per problem. The translation of a spec into sampler calls lives in
`sweep.space`; this module only says what a valid spec is.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, dataclass
from dataclasses import fields as dc_fields
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from models import config as model_config
from models.config import ModelConfig
from models.presets import PRESETS
from sweep.train_config import BUDGET_FIELDS as _BUDGET_FIELDS

__all__ = [
    "DERIVED_MODEL_KEYS",
    "OBJECTIVES",
    "PBT_MUTABLE",
    "ChoiceDomain",
    "FloatDomain",
    "IntDomain",
    "Param",
    "SpecError",
    "StudySpec",
    "load_spec",
    "parse_spec",
    "spec_hash",
]

DERIVED_MODEL_KEYS = ("preset", "d_head", "d_ff_ratio")
#: Metrics a study can optimise; each is reported for every trial (see DESIGN.md, Tracking).
OBJECTIVES = ("val_loss", "flops_per_token", "flops_per_token_dense", "flops_per_token_train",
              "n_params", "n_params_non_embedding", "mem_estimate_bytes")
#: Fields population-based training may change on a live model (shape-preserving).
PBT_MUTABLE = {"lr": "train", "weight_decay": "train", "betas": "train", "grad_clip": "train",
               "dropout": "model", "attn_temperature": "model"}
#: Fields that fix parameter-tensor shapes or the data layout; PBT must never mutate them.
SHAPE_FIELDS = ("vocab_size", "seq_len", "d_model", "n_heads", "n_layers", "d_ff", "d_head",
                "d_ff_ratio", "preset", "activation", "norm", "bias", "tie_embeddings",
                "pos_encoding", "attn_pattern", "attn_sparsity", "attn_block_size", "causal",
                "batch_size")
_MODEL_ENUMS = {
    "attn_pattern": model_config.ATTN_PATTERNS,
    "attn_backend": model_config.ATTN_BACKENDS,
    "norm": model_config.NORMS,
    "norm_position": model_config.NORM_POSITIONS,
    "activation": model_config.ACTIVATIONS,
    "pos_encoding": model_config.POS_ENCODINGS,
}
_DATA_SCHEMES = ("builtin", "text", "tokens", "synthetic")
_RDB_SCHEMES = ("sqlite", "postgresql", "mysql")


class SpecError(Exception):
    """A study spec is invalid; the message has one line per problem, each with its path."""

    def __init__(self, problems: Iterable[str], source: str | Path | None = None) -> None:
        self.problems = list(problems)
        self.source = str(source) if source is not None else None
        head = f"invalid study spec {self.source}:" if self.source else "invalid study spec:"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))


# ----------------------------------------------------------------------------------- domains
def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


class _Domain(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    when: dict[str, list[Any]] | None = None

    @field_validator("when", mode="before")
    @classmethod
    def _when_lists(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _as_list(v) for k, v in value.items()}
        return value

    @field_validator("when")
    @classmethod
    def _when_nonempty(cls, value: dict[str, list[Any]] | None) -> Any:
        if value is not None and (not value or any(not v for v in value.values())):
            raise ValueError("when needs at least one field with at least one value")
        return value


class FloatDomain(_Domain):
    """``{float: [lo, hi], log: bool, step: x}``: a real interval (Optuna FloatDistribution)."""

    bounds: tuple[float, float] = Field(alias="float")
    log: bool = False
    step: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> FloatDomain:
        lo, hi = self.bounds
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"bounds must be finite, got [{lo}, {hi}]")
        if lo > hi:
            raise ValueError(f"lo={lo} > hi={hi}")
        if self.log and lo <= 0:
            raise ValueError(f"log: true needs lo > 0, got lo={lo}")
        if self.log and self.step is not None:
            raise ValueError("log: true cannot be combined with step")
        return self


class IntDomain(_Domain):
    """``{int: [lo, hi], step: k, log: bool}``: integers lo, lo+k, ..., hi (IntDistribution)."""

    bounds: tuple[int, int] = Field(alias="int")
    step: int = Field(default=1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> IntDomain:
        lo, hi = self.bounds
        if lo > hi:
            raise ValueError(f"lo={lo} > hi={hi}")
        if self.log and lo <= 0:
            raise ValueError(f"log: true needs lo > 0, got lo={lo}")
        if self.log and self.step != 1:
            raise ValueError("log: true needs step 1")
        if (hi - lo) % self.step:
            raise ValueError(f"hi - lo = {hi - lo} is not a multiple of step={self.step}")
        return self

    def values(self) -> range:
        lo, hi = self.bounds
        return range(lo, hi + 1, self.step)


class ChoiceDomain(_Domain):
    """``{choice: [a, b, ...]}``: one of the listed values (CategoricalDistribution)."""

    options: list[Any] = Field(alias="choice", min_length=1)

    @field_validator("options")
    @classmethod
    def _unique(cls, value: list[Any]) -> list[Any]:
        seen = [json.dumps(v, sort_keys=True) for v in value]
        dup = sorted({s for s in seen if seen.count(s) > 1})
        if dup:
            raise ValueError(f"duplicate choice(s): {', '.join(dup)}")
        return value


Domain = FloatDomain | IntDomain | ChoiceDomain


def _param_kind(value: Any) -> str:
    if isinstance(value, dict):
        kinds = [k for k in ("float", "int", "choice") if k in value]
        if len(kinds) == 1:
            return f"<{kinds[0]}>"
        return "<bad>"
    return "<fixed>"


Param = Annotated[
    Annotated[FloatDomain, Tag("<float>")]
    | Annotated[IntDomain, Tag("<int>")]
    | Annotated[ChoiceDomain, Tag("<choice>")]
    | Annotated[Any, Tag("<fixed>")],
    Discriminator(
        _param_kind,
        custom_error_type="param",
        custom_error_message="expected a fixed value or exactly one of {float: [lo, hi]}, "
        "{int: [lo, hi]}, {choice: [...]}",
    ),
]


# ---------------------------------------------------------------------------------- sections
class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataSpec(_Section):
    """``data``: a corpus URI (see `sweep.data`) and an optional vocabulary size."""

    uri: str
    vocab_size: int | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"uri": value} if isinstance(value, str) else value

    @field_validator("uri")
    @classmethod
    def _scheme(cls, value: str) -> str:
        scheme, sep, rest = value.partition(":")
        if not sep or scheme not in _DATA_SCHEMES or not rest:
            raise ValueError(f"{value!r} is not scheme:..., scheme one of "
                             f"{', '.join(_DATA_SCHEMES)}")
        return value


class PBTSpec(_Section):
    """``search.pbt``: population-based training (Jaderberg et al. 2017) with Ray Tune.

    Intervals are in training tokens; members copy the weights of a better member and perturb
    ``hyperparam_mutations`` every ``perturbation_interval`` tokens.
    """

    perturbation_interval: int = Field(gt=0)
    checkpoint_interval: int | None = Field(default=None, gt=0)
    hyperparam_mutations: dict[str, Param] = Field(min_length=1)
    quantile_fraction: float = Field(default=0.25, gt=0, le=0.5)
    resample_probability: float = Field(default=0.25, ge=0, le=1)


Sampler = Literal["tpe", "gp", "cmaes", "random", "grid", "nsga2"]
Pruner = Literal["hyperband", "sha", "median", "none"]
Scheduler = Literal["asha", "hyperband", "median", "pbt", "none"]


class SearchSpec(_Section):
    """``search``: executor, algorithm, trial count and storage."""

    executor: Literal["optuna", "ray"] = "optuna"
    sampler: Sampler | None = None
    pruner: Pruner | None = None
    scheduler: Scheduler | None = None
    n_trials: int = Field(default=20, ge=1)
    parallel: int = Field(default=1, ge=1)
    objectives: list[Literal[OBJECTIVES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["val_loss"], min_length=1
    )
    directions: list[Literal["minimize", "maximize"]] | None = None
    storage: str | None = None
    seed: int = 0
    timeout_s: float | None = Field(default=None, gt=0)
    n_startup_trials: int | None = Field(default=None, ge=0)
    population_size: int | None = Field(default=None, ge=2)
    pbt: PBTSpec | None = None

    @model_validator(mode="after")
    def _defaults(self) -> SearchSpec:
        multi = len(self.objectives) > 1
        sets = object.__setattr__
        if self.directions is None:
            sets(self, "directions", ["minimize"] * len(self.objectives))
        if self.sampler is None:
            sets(self, "sampler", "random" if self.scheduler == "pbt" else "tpe")
        if self.pruner is None:
            sets(self, "pruner", "hyperband" if self.executor == "optuna" and not multi
                 else "none")
        if self.scheduler is None:
            sets(self, "scheduler", "asha" if self.executor == "ray" and not multi else "none")
        return self


class ConstraintsSpec(_Section):
    """``constraints``: checked with the cost model before a trial trains.

    ``max_memory_gb`` None means the memory of the device the trial runs on.
    """

    max_params: int | None = Field(default=None, gt=0)
    max_flops_per_token: float | None = Field(default=None, gt=0)
    max_memory_gb: float | None = Field(default=None, gt=0)


class ResourcesSpec(_Section):
    """``resources``: per-trial Ray resources (GPUs may be fractional)."""

    cpus_per_trial: float = Field(default=1.0, gt=0)
    gpus_per_trial: float = Field(default=0.0, ge=0)

    @field_validator("gpus_per_trial")
    @classmethod
    def _whole_above_one(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise ValueError(f"{value} GPUs: more than one GPU per trial must be a whole number")
        return value


class TrackingSpec(_Section):
    """``tracking``: MLflow URI (None: ``sqlite:///<out>/mlflow.db``) and experiment name."""

    uri: str | None = None
    experiment: str | None = None


# ------------------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class SpecParam:
    """One ``model`` or ``train`` key: its dotted ``path`` and a domain or fixed ``value``."""

    section: str
    name: str
    value: Any

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def domain(self) -> Domain | None:
        return self.value if isinstance(self.value, (FloatDomain, IntDomain, ChoiceDomain)) \
            else None

    @property
    def when(self) -> dict[str, list[Any]]:
        return dict(self.domain.when or {}) if self.domain is not None else {}


class StudySpec(BaseModel):
    """A validated study spec. Construct with `load_spec` / `parse_spec`.

    Raises:
        pydantic.ValidationError: On direct construction with bad values (`parse_spec` turns
            these into `SpecError`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)
    description: str = ""
    data: DataSpec
    model: dict[str, Param] = Field(default_factory=dict)
    train: dict[str, Param] = Field(default_factory=dict)
    search: SearchSpec = Field(default_factory=SearchSpec)
    constraints: ConstraintsSpec = Field(default_factory=ConstraintsSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)

    @model_validator(mode="after")
    def _rules(self) -> StudySpec:
        if self.tracking.experiment is None:
            object.__setattr__(self, "tracking",
                               self.tracking.model_copy(update={"experiment": self.name}))
        problems = list(_check_fields(self))
        if not problems:
            problems += _check_conditions(self)
        if not problems:
            problems += _check_search(self)
            problems += _check_shapes(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # ------------------------------------------------------------------------- accessors
    def params(self) -> list[SpecParam]:
        """All ``model`` and ``train`` keys in define-by-run order.

        Each key comes after the keys its ``when`` names.
        """
        return _ordered(self)

    def searched(self) -> list[SpecParam]:
        """The keys with a domain (the search space), in define-by-run order."""
        return [p for p in self.params() if p.domain is not None]

    def conditions(self, param: SpecParam) -> dict[str, list[Any]]:
        """``param``'s ``when`` with each referenced field as a dotted path."""
        out = {}
        for key, allowed in param.when.items():
            ref = _resolve_ref(self, param.section, key)
            out[f"{ref[0]}.{ref[1]}" if ref else key] = allowed
        return out

    def budget(self) -> tuple[str, Any]:
        """The training budget: (``tokens``|``flops``|``steps``|``seconds``, value or domain)."""
        name = next(k for k in _BUDGET_FIELDS if k in self.train)
        return name, self.train[name]

    def objective_directions(self) -> list[tuple[str, str]]:
        return list(zip(self.search.objectives, self.search.directions or [], strict=True))

    def storage_url(self, out_dir: str | Path) -> str:
        """Optuna storage: the spec's RDB URL or journal file, else ``<out>/optuna.journal``."""
        return self.search.storage or str(Path(out_dir) / "optuna.journal")

    def tracking_uri(self, out_dir: str | Path) -> str:
        """MLflow tracking URI: the spec's, ``MLFLOW_TRACKING_URI``, or the study's SQLite file.

        The last is ``sqlite:///<out>/mlflow.db`` with an absolute path.
        """
        import os

        from sweep.tracking import default_tracking_uri

        return (self.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")
                or default_tracking_uri(out_dir))

    def default_output_dir(self) -> Path:
        return Path("runs") / self.name


# ------------------------------------------------------------------------------ type rules
def train_config_class() -> type:
    """The `TrainConfig` dataclass the ``train`` section describes."""
    from sweep.train_config import TrainConfig

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
    """Why ``value`` does not fit ``annotation`` (int, float, bool, str, X | None, tuple)."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
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
        types.update({"preset": str, "d_head": int, "d_ff_ratio": float})
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
        elif name in _MODEL_ENUMS and path.startswith("model.") and \
                value not in _MODEL_ENUMS[name]:
            yield f"{sub}: {value!r} is not one of {', '.join(_MODEL_ENUMS[name])}"


def _check_fields(spec: StudySpec) -> Iterator[str]:
    for section in ("model", "train"):
        known = _known_fields(section)
        for name, param in getattr(spec, section).items():
            path = f"{section}.{name}"
            if name not in known:
                yield _unknown_key(path, name, known)
                continue
            yield from _check_value(path, name, known[name], param)
    model = spec.model
    if "preset" in model:
        if not isinstance(model["preset"], str):
            yield "model.preset: must be a fixed preset name"
        elif model["preset"] not in PRESETS:
            yield f"model.preset: {model['preset']!r} is not one of {', '.join(PRESETS)}"
    for derived, base in (("d_head", "n_heads"), ("d_ff_ratio", "d_ff")):
        if derived in model and base in model:
            yield f"model.{derived}: give {derived} or {base}, not both"
    for name, lo_ok in (("d_head", 1), ("d_ff_ratio", 0)):
        for v in _candidates(model.get(name, 1)):
            if _is_num(v) and (v < lo_ok or (lo_ok == 0 and v <= 0)):
                yield f"model.{name}: {v} must be > 0" if lo_ok == 0 else \
                    f"model.{name}: {v} must be >= 1"
    budgets = [k for k in _BUDGET_FIELDS if k in spec.train]
    if len(budgets) != 1:
        got = ", ".join(budgets) if budgets else "none"
        yield f"train: exactly one budget of {', '.join(_BUDGET_FIELDS)} is needed (got {got})"
    vocab = model.get("vocab_size")
    if spec.data.vocab_size and _is_int(vocab) and vocab < spec.data.vocab_size:
        yield (f"model.vocab_size: {vocab} is smaller than data.vocab_size="
               f"{spec.data.vocab_size}")


# ------------------------------------------------------------------------------ conditions
def _resolve_ref(spec: StudySpec, section: str, key: str) -> tuple[str, str] | None:
    if "." in key:
        sec, _, name = key.partition(".")
        return (sec, name) if sec in ("model", "train") and name in getattr(spec, sec) else None
    for sec in (section, "train" if section == "model" else "model"):
        if key in getattr(spec, sec):
            return sec, key
    return None


def _check_conditions(spec: StudySpec) -> list[str]:
    problems = []
    for section in ("model", "train"):
        for name, param in getattr(spec, section).items():
            when = getattr(param, "when", None) or {}
            for key, allowed in when.items():
                path = f"{section}.{name}.when.{key}"
                ref = _resolve_ref(spec, section, key)
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
            _ordered(spec)
        except ValueError as exc:
            problems.append(str(exc))
    return problems


def _ordered(spec: StudySpec) -> list[SpecParam]:
    """Topological order of the params by their ``when`` references (stable otherwise)."""
    params = {(s, n): SpecParam(s, n, v) for s in ("model", "train")
              for n, v in getattr(spec, s).items()}
    done: dict[tuple[str, str], None] = {}
    visiting: list[tuple[str, str]] = []

    def visit(key: tuple[str, str]) -> None:
        if key in done:
            return
        if key in visiting:
            cycle = " -> ".join(f"{s}.{n}" for s, n in [*visiting[visiting.index(key):], key])
            raise ValueError(f"{key[0]}.{key[1]}.when: conditions form a cycle: {cycle}")
        visiting.append(key)
        for ref_key in params[key].when:
            ref = _resolve_ref(spec, key[0], ref_key)
            if ref is not None:
                visit(ref)
        visiting.pop()
        done[key] = None

    for key in params:
        visit(key)
    return [params[k] for k in done]


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
    if "val_loss" not in s.objectives:
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
    if s.storage and "://" in s.storage:
        scheme = s.storage.split("://", 1)[0].split("+", 1)[0]
        if scheme not in _RDB_SCHEMES:
            problems.append(f"search.storage: {s.storage!r} is neither a journal file path "
                            f"nor an RDB URL ({', '.join(_RDB_SCHEMES)})")
    return problems


def _check_pbt(spec: StudySpec, pbt: PBTSpec) -> list[str]:
    problems = []
    for name, param in pbt.hyperparam_mutations.items():
        path = f"search.pbt.hyperparam_mutations.{name}"
        bare = name.split(".", 1)[1] if name.startswith(("model.", "train.")) else name
        if bare in SHAPE_FIELDS:
            problems.append(f"{path}: PBT cannot mutate {bare!r}: it fixes tensor shapes or "
                            "the data layout of a member, which must stay the same while "
                            "weights are copied between members; mutable: "
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
            problems += list(_check_value(path, bare, _known_fields(PBT_MUTABLE[bare])[bare],
                                          param))
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


def _sparsity_conditioned(param: Any) -> bool:
    when = getattr(param, "when", None) or {}
    allowed = when.get("attn_pattern", when.get("model.attn_pattern"))
    return allowed is not None and "dense" not in allowed


# ----------------------------------------------------------------------------- load / hash
class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-3`` and ``2e5`` as floats (YAML 1.1 needs a dot)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _integral_floats_to_int(value: Any) -> Any:
    """``2e5`` -> 200000 so that scientific-notation budgets and sizes are integers."""
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1e3:
        return int(value)
    if isinstance(value, list):
        return [_integral_floats_to_int(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral_floats_to_int(v) for k, v in value.items()}
    return value


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("<") and part.endswith(">"):
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def parse_spec(data: Any, source: str | Path | None = None) -> StudySpec:
    """Validate a spec given as a dict (a parsed YAML document).

    Raises:
        SpecError: One line per problem, each with the dotted path of the bad field.
    """
    if not isinstance(data, dict):
        raise SpecError([f"expected a mapping of sections, got {type(data).__name__}"], source)
    try:
        return StudySpec.model_validate(_integral_floats_to_int(data))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = _format_loc(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            if loc:
                problems.append(f"{loc}: {msg}")
            else:
                problems.extend(msg.splitlines())
        raise SpecError(problems, source) from None


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study spec YAML file.

    Raises:
        SpecError: Missing or unreadable file, invalid YAML, or any invalid field (the message
            names the file, and the dotted path of each bad field).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError([f"cannot read the file: {exc.strerror or exc}"], path) from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise SpecError([f"invalid YAML: {exc}".replace("\n", " ")], path) from None
    return parse_spec(data, path)


def spec_hash(spec: StudySpec) -> str:
    """Stable 16-hex-digit hash of the normalized spec (defaults filled, description left out).

    Two files that differ only in key order, comments, number spelling (``2e5`` vs ``200000``)
    or the description hash the same.
    """
    data = spec.model_dump(mode="json", by_alias=True, exclude={"description"},
                           exclude_none=True)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
