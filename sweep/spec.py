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

import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

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
    ``hyperparam_mutations`` every ``perturbation_interval`` tokens. ``synch: false`` (default)
    is the asynchronous form: each member is compared with whatever the others last reported
    when it reaches its own interval, so which members overlap depends on timing. ``synch: true``
    is the synchronous form (Jaderberg et al. 2017, appendix A.1; Ray Tune's ``synch``): members
    wait at every interval until all live members reach it, then the bottom quantile exploits
    the top one; reproducible, at the cost of idle members while the slowest catches up.
    """

    perturbation_interval: int = Field(gt=0)
    checkpoint_interval: int | None = Field(default=None, gt=0)
    hyperparam_mutations: dict[str, Param] = Field(min_length=1)
    quantile_fraction: float = Field(default=0.25, gt=0, le=0.5)
    resample_probability: float = Field(default=0.25, ge=0, le=1)
    synch: bool = False


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
        from sweep import spec_rules

        problems = spec_rules.problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # ------------------------------------------------------------------------- accessors
    def params(self) -> list[SpecParam]:
        """All ``model`` and ``train`` keys in define-by-run order.

        Each key comes after the keys its ``when`` names.
        """
        from sweep.spec_rules import ordered

        return ordered(self)

    def searched(self) -> list[SpecParam]:
        """The keys with a domain (the search space), in define-by-run order."""
        return [p for p in self.params() if p.domain is not None]

    def conditions(self, param: SpecParam) -> dict[str, list[Any]]:
        """``param``'s ``when`` with each referenced field as a dotted path."""
        from sweep.spec_rules import resolve_ref

        out = {}
        for key, allowed in param.when.items():
            ref = resolve_ref(self, param.section, key)
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

    def tracking_uri_source(self) -> str:
        """Where `tracking_uri` comes from, for messages.

        Returns:
            ``tracking.uri``, ``MLFLOW_TRACKING_URI`` or ``default``.
        """
        import os

        if self.tracking.uri:
            return "tracking.uri"
        return "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "default"

    def default_output_dir(self) -> Path:
        return Path("runs") / self.name


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
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([f"cannot read the file: {exc.strerror or exc}"], path) from None
    except UnicodeDecodeError:
        raise SpecError(["not UTF-8 text (a study spec is a YAML file)"], path) from None
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
