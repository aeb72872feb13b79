"""The sections of a study spec as pydantic models, and `StudySpec`, the validated whole.

Field types and ranges are checked here; the rules across fields live in `sweep.spec.rules`,
which `sweep.spec.loader.parse_spec` runs after these models validate.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from sweep.schema import METRIC_VAL_LOSS
from sweep.spec.domains import Param, SpecParam
from sweep.spec.fields import DATA_SCHEMES, MAX_TOKENS, OBJECTIVES
from sweep.train.config import BUDGET_FIELDS as _BUDGET_FIELDS

#: The Optuna journal a study keeps in its output folder unless ``search.storage`` names one.
JOURNAL_FILE = "optuna.journal"


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
        if not sep or scheme not in DATA_SCHEMES or not rest:
            raise ValueError(f"{value!r} is not scheme:..., scheme one of "
                             f"{', '.join(DATA_SCHEMES)}")
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
    """``search``: executor, algorithm, trial count and storage.

    ``retry_interrupted``: queue a trial interrupted from outside (its process killed, Ctrl-C,
    a store that failed) again with the same parameters when the study resumes
    (`sweep.study.resume`); interrupted trials never count toward ``n_trials``.
    ``fault_wait_s``: after an infrastructure fault (the MLflow server or the storage does not
    answer, the disk is full), how long the study keeps retrying, with a doubling back-off,
    before it stops (exit 3) to be resumed later.
    ``checkpoint_interval``: every trial saves its whole training state every this many
    training tokens (``<out>/checkpoints/trial-<n>/latest.pt``, one file a trial, deleted when
    the trial ends), and the retry of an interrupted trial continues from it: the same losses
    as a trial never stopped, without training those tokens again. None (the default): no
    checkpoints, a retry trains from step 0. Costs one write of the model and AdamW state
    (about 12 bytes a parameter in fp32) per interval.
    """

    executor: Literal["optuna", "ray"] = "optuna"
    sampler: Sampler | None = None
    pruner: Pruner | None = None
    scheduler: Scheduler | None = None
    n_trials: int = Field(default=20, ge=1)
    parallel: int = Field(default=1, ge=1)
    objectives: list[Literal[OBJECTIVES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: [METRIC_VAL_LOSS], min_length=1
    )
    directions: list[Literal["minimize", "maximize"]] | None = None
    storage: str | None = None
    seed: int = 0
    timeout_s: float | None = Field(default=None, gt=0)
    retry_interrupted: bool = True
    checkpoint_interval: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    fault_wait_s: float = Field(default=300.0, ge=0, le=86400, allow_inf_nan=False)
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
    """``resources``: per-trial Ray resources (GPUs may be fractional).

    With a fraction of a GPU per trial (``gpus_per_trial: 0.25``: four trials share each GPU),
    a trial may use that fraction of the GPU's memory: the memory constraint's default
    (`sweep.space.memory_limit_bytes`), so the cost model's estimate decides which configs may
    share a GPU. ``gpu_memory_gb`` is the memory of each GPU the trials get, in GB (1e9
    bytes); None reads it from the GPU a trial runs on.
    """

    cpus_per_trial: float = Field(default=1.0, gt=0)
    gpus_per_trial: float = Field(default=0.0, ge=0)
    gpu_memory_gb: float | None = Field(default=None, gt=0)

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


#: The most shapes a size rule or ladder may hold.
MAX_FAMILY = 1000


class WidthRange(_Section):
    """``scaling.rule.d_model`` as a range: ``min`` to ``max`` (inclusive) in steps of ``step``."""

    min: int = Field(gt=0)
    max: int = Field(gt=0)
    step: int = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> WidthRange:
        if self.max < self.min:
            raise ValueError(f"max={self.max} is below min={self.min}")
        if (self.max - self.min) // self.step + 1 > MAX_FAMILY:
            raise ValueError(f"{(self.max - self.min) // self.step + 1:,} widths: at most "
                             f"{MAX_FAMILY:,} (raise step)")
        return self

    def widths(self) -> list[int]:
        return list(range(self.min, self.max + 1, self.step))


class SizeRuleSpec(_Section):
    """``scaling.rule``: a family of shapes from a range of widths.

    Each width ``d_model`` gets ``n_layers = max(1, round(d_model / aspect))`` (a fixed aspect
    ratio, Kaplan et al. 2020 section 3.1 and Hoffmann et al. 2022 table A9 keep
    d_model / n_layers roughly fixed) or the given ``n_layers`` (one depth for every width, or a
    list paired with the widths), ``n_heads = d_model / d_head`` and
    ``d_ff = round(d_ff_ratio * d_model)``.
    """

    d_model: list[int] | WidthRange
    aspect: float | None = Field(default=None, ge=1, allow_inf_nan=False)
    n_layers: int | list[int] | None = None
    d_head: int = Field(default=64, gt=0)
    d_ff_ratio: float = Field(default=4.0, gt=0, le=64, allow_inf_nan=False)

    @field_validator("d_model", mode="before")
    @classmethod
    def _one_form(cls, value: Any) -> Any:
        """A list of widths or a ``{min, max, step}`` range, with one message for either."""
        from pydantic import TypeAdapter, ValidationError

        if isinstance(value, dict):
            form, adapter = "range {min, max, step}", TypeAdapter(WidthRange)
        elif isinstance(value, list):
            form, adapter = "list of widths", TypeAdapter(list[int])
        else:
            raise ValueError(f"{value!r}: give a list of widths or a range {{min, max, step}}")
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(f"entry {part + 1}" if isinstance(part, int) else str(part)
                             for part in first["loc"])
            raise ValueError(f"{form}: {where + ': ' if where else ''}"
                             f"{first['msg'].removeprefix('Value error, ')}") from None

    @field_validator("d_model")
    @classmethod
    def _widths(cls, value: list[int] | WidthRange) -> list[int] | WidthRange:
        widths = value.widths() if isinstance(value, WidthRange) else value
        if len(widths) < 3 or any(w <= 0 for w in widths) or len(set(widths)) != len(widths):
            raise ValueError(f"{len(widths)} widths: give at least 3 distinct positive widths")
        if len(widths) > MAX_FAMILY:
            raise ValueError(f"{len(widths):,} widths: at most {MAX_FAMILY:,}")
        return value

    @model_validator(mode="after")
    def _depth(self) -> SizeRuleSpec:
        if (self.aspect is None) == (self.n_layers is None):
            raise ValueError("give exactly one of aspect (d_model / n_layers) and n_layers")
        widths = self.widths()
        if isinstance(self.n_layers, list) and len(self.n_layers) != len(widths):
            raise ValueError(f"n_layers has {len(self.n_layers)} entries for {len(widths)} "
                             "widths; give one depth, or one per width")
        depths = self.n_layers if isinstance(self.n_layers, list) else \
            [self.n_layers] if self.n_layers is not None else []
        if any(d < 1 for d in depths):
            raise ValueError("n_layers: every depth must be >= 1")
        bad = [w for w in widths if w % self.d_head]
        if bad:
            raise ValueError(f"d_model {bad} not divisible by d_head={self.d_head}")
        return self

    def widths(self) -> list[int]:
        return self.d_model.widths() if isinstance(self.d_model, WidthRange) \
            else list(self.d_model)

    def parameters(self) -> dict[str, Any]:
        """The rule's settings, as logged on every trial (``scaling.<name>``)."""
        out: dict[str, Any] = {"d_head": self.d_head, "d_ff_ratio": self.d_ff_ratio}
        if self.aspect is not None:
            out["aspect"] = self.aspect
        elif isinstance(self.n_layers, int):
            out["n_layers"] = self.n_layers
        return out


class ShapeSpec(_Section):
    """One rung of ``scaling.ladder``: a model shape."""

    d_model: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    d_ff: int = Field(gt=0)

    @model_validator(mode="after")
    def _heads(self) -> ShapeSpec:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by "
                             f"n_heads={self.n_heads}")
        return self


class ScalingSpec(_Section):
    """``scaling``: an IsoFLOP study (Hoffmann et al. 2022, section 3.2).

    For each FLOP budget in ``budgets`` the service trains ``sizes_per_budget`` shapes from the
    size rule (``rule``) or ``ladder``, log-spaced from N*/``span`` to N* x ``span`` around the
    expected optimum N*, each for tokens = budget / (training FLOPs per token of the cost model).
    N* is where tokens / params equals ``tokens_per_param`` (Hoffmann et al. 2022 find about 20)
    or, with ``recentre`` and budgets run in ascending order, the optimum predicted from the
    earlier budgets' results. Shapes that would train less than one optimizer step, or more than
    ``max_epochs`` passes over the corpus's training split, are dropped with a note (Muennighoff
    et al. 2023, "Scaling Data-Constrained Language Models": up to about 4 epochs of repeated
    data are worth nearly as much as new data).

    With ``branches`` (needs ``train.schedule: wsd`` and ``train.warmup`` in tokens), a shape's
    run at a larger budget continues the stable phase of its run at the next smaller budget
    from a checkpoint and cools down on its own branch: the same final loss as a run from step
    0, for a fraction of the tokens (`sweep.train.branches`, Hagele et al. 2024).
    """

    budgets: list[float] = Field(min_length=1, max_length=64)
    rule: SizeRuleSpec | None = None
    ladder: list[ShapeSpec] | None = Field(default=None, max_length=MAX_FAMILY)
    sizes_per_budget: int = Field(default=7, ge=3, le=64)
    tokens_per_param: float = Field(default=20.0, gt=0, allow_inf_nan=False)
    span: float = Field(default=4.0, gt=1, le=1e6, allow_inf_nan=False)
    recentre: bool = True
    max_epochs: float = Field(default=4.0, gt=0, allow_inf_nan=False)
    branches: bool = False

    @field_validator("budgets", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, list) and any(isinstance(b, bool) for b in value):
            raise ValueError("budgets are FLOP counts, not true/false")
        return value

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, value: list[float]) -> list[float]:
        import math

        for b in value:
            if not (math.isfinite(b) and b > 0):
                raise ValueError(f"budget {b!r}: every budget must be a finite FLOP count > 0")
        if len(set(value)) != len(value):
            raise ValueError("budgets must be distinct")
        # Grid-point labels name a budget by 4 significant digits (sweep.space.grid).
        shown = [f"{b:.4g}" for b in value]
        if len(set(shown)) != len(shown):
            same = sorted({s for s in shown if shown.count(s) > 1})
            raise ValueError(f"budgets {', '.join(same)} differ only beyond 4 significant "
                             "digits; give budgets that differ within them")
        return sorted(value)

    @model_validator(mode="after")
    def _family(self) -> ScalingSpec:
        if (self.rule is None) == (self.ladder is None):
            raise ValueError("give exactly one of rule (a size rule) and ladder (a list of "
                             "shapes)")
        if self.ladder is not None:
            if len(self.ladder) < 3:
                raise ValueError(f"ladder has {len(self.ladder)} shapes; an IsoFLOP curve needs "
                                 "at least 3")
            if len({tuple(s.model_dump().values()) for s in self.ladder}) != len(self.ladder):
                raise ValueError("ladder lists a shape twice")
        return self


#: The most widths a transfer study may compare.
MAX_TRANSFER_WIDTHS = 16


class TransferSpec(_Section):
    """``transfer``: the same learning-rate grid at every width (hyperparameter transfer).

    Every trial is one point of the grid ``widths`` x ``train.lr``'s choices x every other
    searched field's choices (the product, each point trained once, to the end). Each width
    sets ``d_model``, ``n_heads = d_model / d_head`` and ``d_ff = round(d_ff_ratio *
    d_model)``; ``base_d_model`` (muP, CompleteP) stays as the model section fixes it, so the
    widths share one base. A searched ``train.seed`` (``{choice: [0, 1]}``) gives each point
    that many replicates, which ``sweep analyze transfer`` averages. Under muP the best learning
    rate should stay put across the widths (Yang et al. 2022, "Tensor Programs V", sec. 1 and
    Figure 1); ``sweep analyze transfer`` measures how far it moves.
    """

    widths: list[int] = Field(min_length=2, max_length=MAX_TRANSFER_WIDTHS)
    d_head: int = Field(default=32, gt=0)
    d_ff_ratio: float = Field(default=4.0, gt=0, le=64, allow_inf_nan=False)

    @field_validator("widths")
    @classmethod
    def _widths(cls, value: list[int]) -> list[int]:
        if any(w <= 0 for w in value) or len(set(value)) != len(value):
            raise ValueError(f"{value}: give at least 2 distinct positive widths")
        return sorted(value)

    @model_validator(mode="after")
    def _heads(self) -> TransferSpec:
        bad = [w for w in self.widths if w % self.d_head]
        if bad:
            raise ValueError(f"widths {bad} not divisible by d_head={self.d_head}")
        return self


#: A study name: no path separators, spaces or leading dot, as it names a folder.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class StudySpec(BaseModel):
    """A validated study spec. Construct with `load_spec` / `parse_spec`.

    Raises:
        pydantic.ValidationError: On direct construction with bad values (`parse_spec` turns
            these into `SpecError`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(max_length=100)
    description: str = ""
    data: DataSpec
    model: dict[str, Param] = Field(default_factory=dict)
    train: dict[str, Param] = Field(default_factory=dict)
    search: SearchSpec = Field(default_factory=SearchSpec)
    constraints: ConstraintsSpec = Field(default_factory=ConstraintsSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    scaling: ScalingSpec | None = None
    transfer: TransferSpec | None = None

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"{value!r}: a study name starts with a letter or digit and holds "
                             "only letters, digits, '_', '.' and '-' (it names the study's "
                             "folder and MLflow experiment)")
        return value

    @model_validator(mode="after")
    def _scaling_defaults(self) -> StudySpec:
        # An IsoFLOP curve needs every size trained to its budget, a transfer curve every
        # learning rate: no early stopping unless the spec asks for it (then sweep validate
        # warns for a scaling study; the rules refuse it for a transfer study).
        if self.scaling is not None or self.transfer is not None:
            given = self.search.model_fields_set
            update = {k: "none" for k in ("pruner", "scheduler") if k not in given}
            if update:
                object.__setattr__(self, "search", self.search.model_copy(update=update))
        return self

    @model_validator(mode="after")
    def _default_experiment(self) -> StudySpec:
        if self.tracking.experiment is None:
            object.__setattr__(self, "tracking",
                               self.tracking.model_copy(update={"experiment": self.name}))
        return self

    # ------------------------------------------------------------------------- accessors
    def to_data(self) -> dict[str, Any]:
        """The spec as plain data that `parse_spec` reads back to an equal spec.

        A scaling or transfer study's ``search.n_trials`` is left out: its trials are its grid
        points, and the rules refuse the field in such a spec.
        """
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if self.scaling is not None or self.transfer is not None:
            data["search"].pop("n_trials", None)
        return data

    def params(self) -> list[SpecParam]:
        """All ``model`` and ``train`` keys in define-by-run order.

        Each key comes after the keys its ``when`` names.
        """
        return ordered(self)

    def searched(self) -> list[SpecParam]:
        """The keys with a domain (the search space), in define-by-run order."""
        return [p for p in self.params() if p.domain is not None]

    def conditions(self, param: SpecParam) -> dict[str, list[Any]]:
        """``param``'s ``when`` with each referenced field as a dotted path."""
        out = {}
        for key, allowed in param.when.items():
            ref = resolve_ref(self, param.section, key)
            out[f"{ref[0]}.{ref[1]}" if ref else key] = allowed
        return out

    def budget(self) -> tuple[str, Any]:
        """The training budget: (``tokens``|``flops``|``steps``|``seconds``, value or domain).

        A scaling study's budget is ``flops``, one of ``scaling.budgets`` per trial.
        """
        if self.scaling is not None:
            from sweep.spec.domains import ChoiceDomain

            return "flops", ChoiceDomain(choice=list(self.scaling.budgets))
        name = next(k for k in _BUDGET_FIELDS if k in self.train)
        return name, self.train[name]

    def objective_directions(self) -> list[tuple[str, str]]:
        return list(zip(self.search.objectives, self.search.directions or [], strict=True))

    def storage_url(self, out_dir: str | Path) -> str:
        """Optuna storage: the spec's RDB URL or journal file, else ``<out>/optuna.journal``."""
        return self.search.storage or str(Path(out_dir) / JOURNAL_FILE)

    def tracking_uri(self, out_dir: str | Path) -> str:
        """MLflow tracking URI: the spec's, ``MLFLOW_TRACKING_URI``, or the study's SQLite file.

        The last is ``sqlite:///<out>/mlflow.db`` with an absolute path.
        """
        from sweep.tracking.uris import default_tracking_uri  # MLflow only when asked

        return (self.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")
                or default_tracking_uri(out_dir))

    def tracking_uri_source(self) -> str:
        """Where `tracking_uri` comes from, for messages.

        Returns:
            ``tracking.uri``, ``MLFLOW_TRACKING_URI`` or ``default``.
        """
        if self.tracking.uri:
            return "tracking.uri"
        return "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "default"

    def default_output_dir(self) -> Path:
        return Path("runs") / self.name


def resolve_ref(spec: StudySpec, section: str, key: str) -> tuple[str, str] | None:
    """The (section, field) a ``when`` key names: dotted, or this section first, or None."""
    if "." in key:
        sec, _, name = key.partition(".")
        return (sec, name) if sec in ("model", "train") and name in getattr(spec, sec) else None
    for sec in (section, "train" if section == "model" else "model"):
        if key in getattr(spec, sec):
            return sec, key
    return None


def ordered(spec: StudySpec) -> list[SpecParam]:
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
            ref = resolve_ref(spec, key[0], ref_key)
            if ref is not None:
                visit(ref)
        visiting.pop()
        done[key] = None

    for key in params:
        visit(key)
    return [params[k] for k in done]
