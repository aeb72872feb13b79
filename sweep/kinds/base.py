"""`StudyKind`: what a kind of study (search, PBT, IsoFLOP scaling, width transfer) adds.

A kind is one object whose methods the rest of the service calls without asking which kind it
is. Every method has a default that does nothing special, so a kind writes only what it adds:

- its spec section (`section`, `section_model`) and the rules across fields (`problems`), the
  search defaults it needs (`search_defaults`), the trial budget it sets (`budget`) and where
  its trials come from if not ``search.n_trials`` (`trials_from`);
- the search axes it adds to every trial (`sample`, `resolve`, `corner`) and what a trial
  records besides the configs (`trial_records`) or how it trains (`train`);
- how the driver runs it (`prepare`, `run`: a search, budgets in order, grid points, a
  population) and its resume rule (`point_key`: which point a trial's params stand for, so a
  resumed study skips what ended and retries what was interrupted);
- its analysis command and what ``sweep validate`` shows of it (`add_commands`, `describe`).

Kinds are registered in one place, `sweep.kinds`; a spec's kind is `StudySpec.kind`.
"""

from __future__ import annotations

import importlib
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pydantic import BaseModel

    from sweep.spec.schema import StudySpec
    from sweep.study.trial import OpenTrial, StudyContext
    from sweep.train.peaks import NamedGpu
    from sweep_models.config import ModelConfig

__all__ = ["Described", "KindRun", "Prepared", "StudyKind"]


@dataclass
class Prepared:
    """What a kind checked and laid out once the corpus is known, before the study starts.

    Attributes:
        problems: One line per reason the study could never give its result (exit 2).
        total: Trials the progress view expects; None: ``search.n_trials``.
        notes: Lines to print before the trials start.
        plan: Whatever the kind laid out, handed back to its `StudyKind.run`.
    """

    problems: list[str] = field(default_factory=list)
    total: int | None = None
    notes: list[str] = field(default_factory=list)
    plan: Any = None


@dataclass
class Described:
    """What ``sweep validate`` found in a kind's study besides what it printed.

    Attributes:
        problems: One line per reason the study could never give its result (exit 2).
        warnings: One line per trap the study would fall into but may run with (exit 0):
            printed to stderr as ``warning: ...``, listed in ``--json``.
        record: Fields the kind adds to ``sweep validate --json``'s object.
    """

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)


@dataclass
class KindRun:
    """What a kind's `StudyKind.run` drives the trials with.

    Attributes:
        executor: The study's executor (`sweep.executors.Executor`): ``executor.run(ctx,
            n_trials, view, address=...)`` runs ``n_trials`` draws of the sampler, or exactly
            ``ctx.points`` when they are given.
        ctx: The study context (`sweep.study.trial.StudyContext`).
        view: The progress view.
        address: The Ray address, for the ``ray`` executor.
        prepared: What `StudyKind.prepare` returned.
        say: Prints one line (None when quiet).
    """

    executor: Any
    ctx: StudyContext
    view: Any
    address: str | None = None
    prepared: Prepared = field(default_factory=Prepared)
    say: Any = None


class StudyKind:
    """A kind of study. Subclass it, set `name`, and override what the kind adds.

    Attributes:
        name: The kind's name (``search``, ``pbt``, ``scaling``, ``transfer``).
        section: The spec section it owns, a dotted path (``scaling``, ``search.pbt``), or None.
        section_model: The pydantic model of that section.
        search_defaults: ``search`` fields the kind sets when the spec does not give them.
        trials_from: Where the trials come from when ``search.n_trials`` does not count them
            (``"its grid points (transfer.widths x every choice)"``); None for a search.
        owned_model_fields: ``model`` fields the kind sets for every trial (a spec may not).
        analysis: The module of the kind's ``sweep analyze`` command (it defines ``NAME``,
            ``HELP`` and the command function ``command``), or None.
        plannable: Whether ``sweep plan`` can simulate the kind's design (`sweep.simulate`).
        samples_lr_factor: Whether the sampler draws a ``train.lr: {from_study}`` factor
            (`sweep.spec.from_study`); a grid kind's points train at eta_opt(C) itself.
    """

    name: ClassVar[str] = ""
    section: ClassVar[str | None] = None
    section_model: ClassVar[type[BaseModel] | None] = None
    search_defaults: ClassVar[Mapping[str, Any]] = {}
    trials_from: ClassVar[str | None] = None
    owned_model_fields: ClassVar[tuple[str, ...]] = ()
    analysis: ClassVar[str | None] = None
    plannable: ClassVar[bool] = False
    samples_lr_factor: ClassVar[bool] = True

    # ------------------------------------------------------------------------------- spec
    def selects(self, spec: StudySpec) -> bool:
        """Whether ``spec`` is of this kind; by default, when its section is given."""
        return self.section is not None and spec.section(self.section) is not None

    def misplaced(self, kind: StudyKind) -> str:
        """The problem of this kind's section given in a study of another ``kind``."""
        return (f"{self.section}: a study is a {kind.name} study or a {self.name} study, "
                "not both")

    def problems(self, spec: StudySpec) -> Iterable[str]:
        """The rules across fields a spec of this kind breaks, one line each."""
        return ()

    def budget(self, spec: StudySpec) -> tuple[str, Any] | None:
        """The budget the kind gives every trial, as `StudySpec.budget`; None: the spec's."""
        return None

    # ------------------------------------------------------------------------------ space
    def sample(self, trial: Any, spec: StudySpec) -> dict[str, Any]:
        """Suggest the kind's own axes on ``trial``; the dotted config values they set."""
        return {}

    def resolve(self, spec: StudySpec, params: dict[str, Any]) -> dict[str, Any]:
        """Pop the kind's own axes from ``params``; the dotted config values they set.

        Raises:
            sweep.space.InvalidConfig: An axis missing or off its domain.
        """
        return {}

    def corner(self, spec: StudySpec, end: int) -> dict[str, Any]:
        """The kind's axes at the low (``end=0``) or high (``end=-1``) end of their domains."""
        return {}

    # ------------------------------------------------------------------------------ trial
    def trial_records(self, spec: StudySpec, model: ModelConfig, train: Any,
                      cost: Mapping[str, float]) -> tuple[dict[str, float], dict[str, Any]]:
        """Metrics (step 0) and params a trial logs besides its configs and cost."""
        return {}, {}

    def train(self, ctx: StudyContext, trial: OpenTrial, run: Any, reporter: Any) -> Any:
        """Train ``trial`` the kind's own way (``reporter`` gets each evaluation).

        Returns:
            A `sweep.train.TrialResult`, or None for the study's usual path (plain, or
            checkpointed with ``search.checkpoint_interval``).
        """
        return None

    # ----------------------------------------------------------------------------- driver
    def prepare(self, spec: StudySpec, *, corpus_train_tokens: int | None,
                device: str | None) -> Prepared:
        """Lay out and check what the study will train, once the corpus is known."""
        return Prepared()

    def run(self, job: KindRun) -> tuple[Any, list[str]]:
        """Run the study's trials; returns the Optuna study (or None) and notes for the summary.

        By default a search: ``search.n_trials`` draws of the sampler.
        """
        spec = job.ctx.spec
        return job.executor.run(job.ctx, spec.search.n_trials, job.view,
                                address=job.address), []

    def point_key(self, spec: StudySpec, params: Mapping[str, Any]) -> Hashable | None:
        """The point of the kind's grid that a trial's ``params`` stand for (None: no grid).

        A resumed study skips the points whose trials ended, and trains an interrupted trial's
        point as that trial's retry.
        """
        return None

    def disk_needs(self, spec: StudySpec, largest_n_params: float) -> dict[str, float]:
        """Bytes the kind's own files need at once on the study's disk, by what they are."""
        return {}

    # -------------------------------------------------------------------------------- CLI
    def trial_count(self, spec: StudySpec) -> str:
        """How many trials the study runs, as ``sweep validate``'s header says it."""
        return str(spec.search.n_trials)

    def describe(self, spec: StudySpec, say: Any, *, device: str | None, as_json: bool,
                 gpu: NamedGpu) -> Described:
        """What ``sweep validate`` shows of the kind (``say`` prints nothing with ``as_json``).

        ``say`` prints a line or a rich renderable; ``device`` is ``--device`` (None: the
        spec's); ``gpu`` is the named GPU and MFU a kind prices its study on (``--gpu``,
        ``--mfu``).

        Returns:
            Its problems (exit 2), warnings and ``--json`` fields (`Described`).
        """
        return Described()

    def widths(self, spec: StudySpec) -> tuple[list[int], dict[str, Any]] | None:
        """The widths the study compares, and the model fields each sets (coord-check).

        ``sweep coord-check --spec`` checks these widths; None when the study compares none.
        """
        return None

    def add_commands(self, analyze: Any) -> None:
        """Add the kind's analysis command (`analysis`) to the ``sweep analyze`` Typer group."""
        if self.analysis is not None:
            module = importlib.import_module(self.analysis)
            analyze.command(module.NAME, help=module.HELP)(module.command)

    # ---------------------------------------------------------------------------- identity
    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and getattr(other, "name", None) == self.name

    def __hash__(self) -> int:
        return hash((type(self).__qualname__, self.name))

    def __repr__(self) -> str:
        return f"<study kind {self.name}>"
