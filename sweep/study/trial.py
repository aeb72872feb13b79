"""The one trial path of a study, the same for every executor: price, train, track.

The executor (Optuna or Ray Tune) turns its trial into configs through `sweep.space`, then
either calls `evaluate`, or (population-based training, which trains in chunks between Ray's
checkpoints) its two halves:

1. `open_trial` opens the trial's MLflow child run, logs the resolved configs and the cost
   metrics, and checks the spec's constraints with the cost model: an infeasible config is
   recorded as ``INFEASIBLE`` with the reason and costs no training; a feasible one sets the
   process's torch threads (`trial_threads`, tag ``sweep.torch_threads``);
2. `train_trial` trains through `sweep.train.Trainer` (or, for a spec with ``simulate``, draws
   the losses from its law: `sweep.simulate.source`), sending each evaluation to MLflow and
   to the executor's reporter (which may prune), and ends the run in the trial's final state.

`StudyContext` carries what a worker process needs (picklable), so trials run the same way in
the driver, in ``search.parallel`` worker processes and in Ray workers on other machines.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep import space
from sweep.data import Corpus, load_corpus
from sweep.folder import StudyFolder
from sweep.schema import (
    METRIC_BEST_VAL_LOSS,
    METRIC_N_PARAMS,
    METRIC_RESUMED_TOKENS,
    TAG_CHECKPOINT_NOTE,
    TAG_RESUMED_FROM,
    TAG_SIMULATED,
    TAG_TORCH_THREADS,
    TrialState,
    cost_metrics,
    run_name,
)
from sweep.simulate.source import simulate_trial, simulated_tag
from sweep.space import SpaceSummary
from sweep.spec import StudySpec
from sweep.tracking import TrialContext, TrialRun
from sweep.tracking.faults import InfrastructureError, infrastructure_fault
from sweep.train import NullReporter, Reporter, TrainConfig, Trainer
from sweep.train.hardware import default_threads, set_threads
from sweep_models.config import ModelConfig
from sweep_models.errors import ConfigError

__all__ = ["OpenTrial", "StudyContext", "TrialOutcome",
           "evaluate", "open_trial", "train_trial", "trial_threads"]


@dataclass(frozen=True)
class StudyContext:
    """What every trial of a study needs; picklable, so it travels to worker processes.

    Attributes:
        spec: The validated study spec.
        out_dir: The study's output folder (corpus cache, checkpoints, stores).
        tracking: The study's MLflow experiment and parent run.
        device: Device override for training (``None``: the train config's ``device``).
        summary: The space priced once by preflight (`sweep.space.SpaceSummary`), or None.
        points: Flat params of trials to run next, in order (a scaling study's grid points,
            ``{"scaling.point": label}``); when given, the executor runs exactly these.
    """

    spec: StudySpec
    out_dir: Path
    tracking: TrialContext
    device: str | None = None
    summary: SpaceSummary | None = None
    points: tuple[dict[str, Any], ...] = ()
    _corpus: list = field(default_factory=list, compare=False, repr=False)

    def corpus(self) -> Corpus:
        """The study's corpus, prepared once per study folder and reused by every trial."""
        if not self._corpus:
            data = self.spec.data
            self._corpus.append(load_corpus(data.uri, StudyFolder(self.out_dir).data,
                                            vocab_size=data.vocab_size))
        return self._corpus[0]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_corpus"] = []  # memory maps are reopened from the cache in each process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


@dataclass
class TrialOutcome:
    """What an executor needs to know about a finished trial.

    Attributes:
        number: Trial number (run ``trial-<number>``).
        state: A final `TrialState`.
        best_val_loss: Lowest finite val loss, nats/token; nan if none.
        reason: Why the trial was infeasible, diverged or failed.
        cost: The cost metrics logged for the trial (``n_params``, ``flops_per_token``...).
        run_id: MLflow run id of the trial.
        constraints: Optuna constraint values (<= 0 feasible) of the cost check, if it ran.
        tokens: Training tokens the trial trained (0 for an infeasible one, whose run logs no
            ``tokens`` metric, so the results table shows nan).
    """

    number: int
    state: TrialState
    best_val_loss: float = math.nan
    reason: str | None = None
    cost: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    constraints: list[float] | None = None
    tokens: int = 0

    def metrics(self) -> dict[str, float]:
        """Its ``best_val_loss`` and cost metrics by name (`sweep.study.policy.told`)."""
        return {**self.cost, METRIC_BEST_VAL_LOSS: self.best_val_loss}


@dataclass
class OpenTrial:
    """A feasible trial whose run is open and priced, ready to train (`open_trial`).

    Attributes:
        number: Trial number.
        run: Its open MLflow child run; the caller ends it (`train_trial` does).
        model: The resolved model config.
        train: The resolved train config.
        cost: The cost metrics logged for it.
        constraints: Optuna constraint values of the cost check.
        retry_of: The interrupted trial it retries (whose checkpoint it continues), or None.
    """

    number: int
    run: TrialRun
    model: ModelConfig
    train: TrainConfig
    cost: dict[str, float]
    constraints: list[float]
    retry_of: int | None = None


def trial_threads(spec: StudySpec) -> int:
    """The torch intra-op threads each of the study's trials trains with.

    ``resources.torch_threads`` when set; else a Ray trial's whole ``resources.cpus_per_trial``,
    an Optuna trial's share of the cores among ``search.parallel`` trials
    (`sweep.train.hardware.default_threads`).
    """
    resources = spec.resources
    if resources.torch_threads is not None:
        return resources.torch_threads
    if spec.search.executor == "ray":
        return default_threads(cpus_per_trial=resources.cpus_per_trial)
    return default_threads(spec.search.parallel)


class _Tee:
    """Send each evaluation to MLflow and to the executor's reporter."""

    def __init__(self, run: TrialRun, reporter: Reporter) -> None:
        self.run, self.reporter = run, reporter

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        self.run.report(tokens, metrics)
        self.reporter.report(tokens, metrics)

    def should_stop(self) -> bool:
        return self.reporter.should_stop()


@contextlib.contextmanager
def _infrastructure_faults():
    """Raise an infrastructure fault (store, storage, disk) as `InfrastructureError`.

    The trial is interrupted by it, not failed.
    """
    try:
        yield
    except Exception as exc:
        what = infrastructure_fault(exc)
        if what is None:
            raise
        raise InfrastructureError(what, exc) from exc


def open_trial(
    ctx: StudyContext,
    number: int,
    configs: tuple[ModelConfig, TrainConfig] | ConfigError,
    *,
    raw_params: dict[str, Any] | None = None,
    retry_of: int | None = None,
    heartbeat: Callable[[], None] | None = None,
) -> OpenTrial | TrialOutcome:
    """Open trial ``number``'s run and price its config; record it if it cannot train.

    Params are the resolved configs under flat dotted keys (``model.d_model``, ``train.lr``),
    and beside them the sampled params the configs hold under other names, as the spec writes
    them (``model.d_head``, ``model.d_ff_ratio``: `sweep.tracking.TrialRun.log_searched`);
    the cost metrics are `sweep_models.cost.estimate`'s (through `sweep.space.check_constraints`,
    with the memory of the device the trial runs on). A feasible trial sets this process's torch
    threads to `trial_threads` and records them (tag ``sweep.torch_threads``).

    Args:
        ctx: The study context.
        number: Trial number.
        configs: The trial's resolved configs, or the `ConfigError` the search space raised
            for an invalid combination (recorded as ``INFEASIBLE``).
        raw_params: The sampled params (dotted spec paths), logged as they are when
            ``configs`` is an error, else where the resolved configs do not hold them.
        retry_of: The number of the interrupted trial this one retries (tag
            ``sweep.retry_of``), or None.
        heartbeat: Called with each beat of the run's heartbeat (the executor's own record
            of the trial's liveness), or None.

    Returns:
        An `OpenTrial` to train, or the ``INFEASIBLE`` `TrialOutcome` of an invalid config or
        one outside the constraints (its run ended). An exception while pricing ends the run
        ``FAILED`` and is re-raised.

    Raises:
        sweep.tracking.faults.InfrastructureError: The tracking store or the disk failed (the
            run, if it opened, ends ``INTERRUPTED``).
    """
    with _infrastructure_faults():
        return _open_trial(ctx, number, configs, raw_params=raw_params, retry_of=retry_of,
                           heartbeat=heartbeat)


def _open_trial(ctx: StudyContext, number: int,
                configs: tuple[ModelConfig, TrainConfig] | ConfigError, *,
                raw_params: dict[str, Any] | None, retry_of: int | None,
                heartbeat: Callable[[], None] | None) -> OpenTrial | TrialOutcome:
    if isinstance(configs, ConfigError):
        with ctx.tracking.start_trial(number, raw_params or {}, retry_of=retry_of,
                                      heartbeat=heartbeat) as run:
            run.end(TrialState.INFEASIBLE, fail_reason=str(configs))
        return TrialOutcome(number, TrialState.INFEASIBLE, reason=str(configs),
                            run_id=run.run_id)
    model, train = configs
    with contextlib.ExitStack() as owner:
        run = owner.enter_context(
            ctx.tracking.start_trial(number, retry_of=retry_of, heartbeat=heartbeat))
        # The configs, costs and tags in one write, held as an evaluation is
        # (`sweep.tracking.trial_run.EVAL_HOLD_S`): a short trial sends them with its end.
        with run.deferred(hold=True):
            run.log_params({"model": model.to_dict(), "train": train.to_dict()})
            device = ctx.device or train.device
            ok, reason, estimate = space.check_constraints(ctx.spec, model, train, device=device)
            cost = cost_metrics(estimate)
            run.log_costs(cost)
            metrics, params = ctx.spec.kind.trial_records(ctx.spec, model, train, cost)
            if metrics:
                run.log_costs(metrics)
            if params:
                run.log_params(params)
            run.log_searched(raw_params or {})
            constraints = space.constraint_values(
                ctx.spec, cost, memory_limit_bytes=space.memory_limit_bytes(ctx.spec, device))
            if not ok:
                run.end(TrialState.INFEASIBLE, fail_reason=reason)
                return TrialOutcome(number, TrialState.INFEASIBLE, reason=reason, cost=cost,
                                    run_id=run.run_id, constraints=constraints)
            run.set_tags({TAG_TORCH_THREADS: str(set_threads(trial_threads(ctx.spec)))})
        owner.pop_all()  # the caller ends the run from here on
    return OpenTrial(number, run, model, train, cost, constraints, retry_of)


def train_trial(ctx: StudyContext, trial: OpenTrial,
                reporter: Reporter | None = None) -> TrialOutcome:
    """Train an `OpenTrial` to its end and record the outcome in its run.

    Each evaluation goes to MLflow and to ``reporter`` (`NullReporter` if None), which may
    prune the trial. Exceptions inside training end the run ``FAILED`` and are re-raised; an
    infrastructure fault ends it ``INTERRUPTED`` and is raised as
    `sweep.tracking.faults.InfrastructureError`.
    """
    with _infrastructure_faults(), trial.run as run:
        tee = _Tee(run, reporter or NullReporter())
        if ctx.spec.simulate is not None:  # the law in place of training, for every kind
            run.set_tags({TAG_SIMULATED: simulated_tag(ctx.spec)})
            result = simulate_trial(ctx.spec, trial.number, trial.model, trial.train,
                                    trial.cost[METRIC_N_PARAMS], tee, ctx.corpus())
        else:
            result = ctx.spec.kind.train(ctx, trial, run, tee)  # the kind's own, if it has one
        interval = ctx.spec.search.checkpoint_interval
        if result is None and interval:
            result = _train_checkpointed(ctx, trial, run, tee, interval)
        elif result is None:
            trainer = Trainer(trial.model, trial.train, ctx.corpus(), device=ctx.device)
            result = trainer.train(tee)
        run.log_result(result)
    return TrialOutcome(trial.number, result.state, result.best_val_loss, result.fail_reason,
                        trial.cost, run.run_id, trial.constraints, result.tokens)


def _train_checkpointed(ctx: StudyContext, trial: OpenTrial, run: TrialRun, tee: _Tee,
                        interval: int) -> Any:
    """Train with checkpoints, continuing the interrupted trial's (`sweep.train.checkpointed`).

    The folder is kept for a retry when an interruption or an infrastructure fault stops the
    trial, and deleted when the trial's own error does.
    """
    from sweep.train.checkpointed import train_checkpointed

    root = StudyFolder(ctx.out_dir).checkpoints
    folder = root / f"trial-{trial.number}"
    source = root / f"trial-{trial.retry_of}" if trial.retry_of is not None else None
    try:
        result, info = train_checkpointed(
            lambda: Trainer(trial.model, trial.train, ctx.corpus(), device=ctx.device), tee,
            folder, interval=interval, resume_from=source,
            meta={"run_id": run.run_id, "trial": trial.number})
    except Exception as exc:
        if infrastructure_fault(exc) is None:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)  # failed for good: never retried
        raise
    tags = {}
    resumed = info.source.get("trial", trial.retry_of)
    if info.resumed_tokens and resumed is not None:
        run.log_metrics({METRIC_RESUMED_TOKENS: info.resumed_tokens})
        tags[TAG_RESUMED_FROM] = run_name(int(resumed))
    if info.notes:
        tags[TAG_CHECKPOINT_NOTE] = "; ".join(info.notes)
    run.set_tags(tags)
    return result


def evaluate(
    ctx: StudyContext,
    number: int,
    configs: tuple[ModelConfig, TrainConfig] | ConfigError,
    reporter: Reporter | None = None,
    *,
    raw_params: dict[str, Any] | None = None,
    retry_of: int | None = None,
    heartbeat: Callable[[], None] | None = None,
) -> TrialOutcome:
    """Run trial ``number`` end to end (`open_trial`, then `train_trial`) and record it.

    Args:
        ctx: The study context.
        number: Trial number.
        configs: The trial's resolved configs, or the `ConfigError` of an invalid combination.
        reporter: The executor's reporter (pruning); `NullReporter` if None.
        raw_params: The sampled params, logged when ``configs`` is an error.
        retry_of: The number of the interrupted trial this one retries, or None.
        heartbeat: Called with each beat of the run's heartbeat, or None.

    Returns:
        The trial's `TrialOutcome`. Exceptions inside training end the run ``FAILED`` and are
        re-raised.
    """
    opened = open_trial(ctx, number, configs, raw_params=raw_params, retry_of=retry_of,
                        heartbeat=heartbeat)
    if isinstance(opened, TrialOutcome):
        return opened
    return train_trial(ctx, opened, reporter)
