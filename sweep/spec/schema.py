"""The sections of a study spec as pydantic models, and `StudySpec`, the validated whole.

Field types and ranges are checked here; the rules across fields live in `sweep.spec.rules`,
which `sweep.spec.loader.parse_spec` runs after these models validate. The sections a study
kind owns (``scaling``, ``transfer``, ``search.pbt``) are its own models (`sweep.kinds`),
validated with the spec's (`sweep.spec.sections`) and read with `StudySpec.section`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from sweep.schema import METRIC_VAL_LOSS
from sweep.spec.domains import Param, SpecParam
from sweep.spec.fields import DATA_SCHEMES, MAX_TOKENS, OBJECTIVES
from sweep.spec.sections import section_of, validate_with_sections
from sweep.spec.simulate import Section, SimulateSpec
from sweep.train.choices import BUDGET_FIELDS as _BUDGET_FIELDS

if TYPE_CHECKING:
    from sweep.kinds import StudyKind


# ---------------------------------------------------------------------------------- sections
class DataSpec(Section):
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


Sampler = Literal["tpe", "gp", "cmaes", "random", "grid", "nsga2"]


Pruner = Literal["hyperband", "sha", "median", "none"]


Scheduler = Literal["asha", "hyperband", "median", "pbt", "none"]


class SearchSpec(Section):
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
    ``n_startup_trials``: the sampler's random draws before it models the results, and the
    trials that must complete before the median pruner stops any; None: a third of
    ``n_trials`` within [2, 10], at least 3 for the pruner (`sweep.space.algorithms`).
    ``prune_warmup``: the fraction of its budget a trial trains before the pruner may stop it
    (early evaluations favour high learning rates; docs/search-quality.md measures it).
    """

    # A study kind may own a section inside it (search.pbt): kept as an extra, validated with
    # the kind's model (sweep.spec.sections).
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

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
    prune_warmup: float = Field(default=0.3, ge=0, lt=1, allow_inf_nan=False)
    population_size: int | None = Field(default=None, ge=2)

    @model_validator(mode="after")
    def _defaults(self) -> SearchSpec:
        multi = len(self.objectives) > 1
        sets = object.__setattr__
        if self.directions is None:
            sets(self, "directions", ["minimize"] * len(self.objectives))
        if self.sampler is None:
            sets(self, "sampler", "tpe")
        if self.pruner is None:
            sets(self, "pruner", "median" if self.executor == "optuna" and not multi
                 else "none")
        if self.scheduler is None:
            sets(self, "scheduler", "asha" if self.executor == "ray" and not multi else "none")
        return self


class ConstraintsSpec(Section):
    """``constraints``: checked with the cost model before a trial trains.

    ``max_memory_gb`` None means the memory of the device the trial runs on.
    """

    max_params: int | None = Field(default=None, gt=0)
    max_flops_per_token: float | None = Field(default=None, gt=0)
    max_memory_gb: float | None = Field(default=None, gt=0)


class ResourcesSpec(Section):
    """``resources``: per-trial Ray resources (GPUs may be fractional) and CPU threads.

    With a fraction of a GPU per trial (``gpus_per_trial: 0.25``: four trials share each GPU),
    a trial may use that fraction of the GPU's memory: the memory constraint's default
    (`sweep.space.memory_limit_bytes`), so the cost model's estimate decides which configs may
    share a GPU. ``gpu_memory_gb`` is the memory of each GPU the trials get, in GB (1e9
    bytes); None reads it from the GPU a trial runs on. ``torch_threads`` is each trial's torch
    intra-op threads with either executor; None is its share of the cores
    (`sweep.train.hardware.default_threads`).
    """

    cpus_per_trial: float = Field(default=1.0, gt=0)
    gpus_per_trial: float = Field(default=0.0, ge=0)
    gpu_memory_gb: float | None = Field(default=None, gt=0)
    torch_threads: int | None = Field(default=None, ge=1)

    @field_validator("gpus_per_trial")
    @classmethod
    def _whole_above_one(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise ValueError(f"{value} GPUs: more than one GPU per trial must be a whole number")
        return value


class TrackingSpec(Section):
    """``tracking``: MLflow URI (None: ``sqlite:///<out>/mlflow.db``) and experiment name."""

    uri: str | None = None
    experiment: str | None = None




#: A study name: no path separators, spaces or leading dot, as it names a folder.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class StudySpec(BaseModel):
    """A validated study spec. Construct with `load_spec` / `parse_spec`.

    Raises:
        pydantic.ValidationError: On direct construction with bad values (`parse_spec` turns
            these into `SpecError`).
    """

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    name: str = Field(max_length=100)
    description: str = ""
    data: DataSpec
    model: dict[str, Param] = Field(default_factory=dict)
    train: dict[str, Param] = Field(default_factory=dict)
    search: SearchSpec = Field(default_factory=SearchSpec)
    constraints: ConstraintsSpec = Field(default_factory=ConstraintsSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    simulate: SimulateSpec | None = None
    _kind: Any = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _kind_sections(cls, data: Any, handler: Any) -> Any:
        return validate_with_sections(cls, data, handler)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"{value!r}: a study name starts with a letter or digit and holds "
                             "only letters, digits, '_', '.' and '-' (it names the study's "
                             "folder and MLflow experiment)")
        return value

    @model_validator(mode="after")
    def _default_experiment(self) -> StudySpec:
        if self.tracking.experiment is None:
            object.__setattr__(self, "tracking",
                               self.tracking.model_copy(update={"experiment": self.name}))
        return self

    # ------------------------------------------------------------------------- accessors
    @property
    def kind(self) -> StudyKind:
        """The study's kind (`sweep.kinds.StudyKind`), chosen when the spec was validated."""
        return self._kind

    def section(self, path: str) -> Any:
        """A kind's section by dotted path (``scaling``, ``search.pbt``), or None if not given.

        Raises:
            KeyError: No registered kind owns a section at ``path``.
        """
        return section_of(self, path)

    def to_data(self) -> dict[str, Any]:
        """The spec as plain data that `parse_spec` reads back to an equal spec.

        The ``search.n_trials`` of a kind whose trials are not counted by it (a scaling or
        transfer study's grid points) is left out: the rules refuse the field in such a spec.
        """
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if self.kind.trials_from is not None:
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

        The kind's own budget where it sets one (a scaling study: ``flops``, one of
        ``scaling.budgets`` per trial), else the ``train`` section's.
        """
        owned = self.kind.budget(self)
        if owned is not None:
            return owned
        name = next(k for k in _BUDGET_FIELDS if k in self.train)
        return name, self.train[name]

    def objective_directions(self) -> list[tuple[str, str]]:
        return list(zip(self.search.objectives, self.search.directions or [], strict=True))

    def storage_url(self, out_dir: str | Path) -> str:
        """Optuna storage: the spec's RDB URL or journal file, else ``<out>/optuna.journal``."""
        from sweep.folder import StudyFolder  # imported for a valid spec only

        return self.search.storage or str(StudyFolder(Path(out_dir)).journal)

    def tracking_uri(self, out_dir: str | Path) -> str:
        """MLflow tracking URI: the spec's, ``MLFLOW_TRACKING_URI``, or the study's SQLite file.

        The last is ``sqlite:///<out>/mlflow.db`` with an absolute path.
        """
        from sweep.folder import StudyFolder

        return (self.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")
                or StudyFolder(Path(out_dir)).tracking_uri())

    def tracking_uri_source(self) -> str:
        """Where `tracking_uri` comes from, for messages.

        Returns:
            ``tracking.uri``, ``MLFLOW_TRACKING_URI`` or ``default``.
        """
        if self.tracking.uri:
            return "tracking.uri"
        return "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "default"

    def default_output_dir(self) -> Path:
        """The study's folder unless ``--out`` names one: ``./runs/<name>``."""
        from sweep.folder import StudyFolder

        return StudyFolder.default(self.name).root


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
