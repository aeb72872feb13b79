"""The Optuna objective of a study, and the study in its storage.

The objective runs a trial through the one trial path (`sweep.study.trial.evaluate`): each
evaluation's val loss goes to the pruner (step = evaluation index), and the trial's end is told
to Optuna as the trial policy says (`sweep.study.policy.told`): an infeasible config to samplers
that rank constraints (TPE, GP, NSGA-II) as a constraint violation, to the others as a pruned
trial; a diverged or failed one as ``FAIL``. The trial records its owner process; its run's
heartbeat also beats here (``sweep_heartbeat``), so a reconcile can tell a dead trial
(`sweep.executors.optuna.recovery`). A resumed study's sampler is seeded with the spec's seed
plus the number of trials already stored, so it does not replay its first draws.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState as OptunaState

from sweep import space
from sweep.adapters import optuna as private
from sweep.executors.optuna.storage import held_writes, make_storage
from sweep.schema import (
    ATTR_BEST_VAL_LOSS,
    ATTR_HEARTBEAT,
    ATTR_MLFLOW_RUN,
    ATTR_OWNER,
    ATTR_PROGRESS,
    ATTR_REASON,
    ATTR_RETRY_OF,
    ATTR_RUN_ID,
    ATTR_STATE,
    METRIC_BEST_VAL_LOSS,
    METRIC_FLOPS_PER_TOKEN,
    METRIC_FLOPS_PER_TOKEN_TRAIN,
    METRIC_N_PARAMS,
    METRIC_VAL_LOSS,
    TrialState,
)
from sweep.study import policy
from sweep.study.trial import StudyContext, TrialOutcome, evaluate
from sweep.tracking.faults import InfrastructureError, infrastructure_fault
from sweep.tracking.owner import current_owner
from sweep.tracking.view import run_url
from sweep.train.config import resolve_budget
from sweep_models.errors import ConfigError, required

if TYPE_CHECKING:
    from sweep.train.config import TrainConfig
    from sweep_models.config import ModelConfig

#: Seconds between a trial's progress records (its first comes this long after it starts).
PROGRESS_S = 1.0

__all__ = ["OptunaReporter", "create_study", "metric_names", "optimize", "trial_state"]


class OptunaReporter:
    """`sweep.train.Reporter` for an Optuna trial.

    Each evaluation's ``val_loss`` goes to ``trial.report`` (step = evaluation index, 1-based;
    single-objective studies only) and, with the tokens seen, to user attr ``sweep_progress``
    for the progress view: the first at once (a trial shows as training from its first
    evaluation), the later ones at most once per `PROGRESS_S` (each is a journal write, and the
    view refreshes about once a second), none at ``budget_tokens`` (the trial's last, whose
    closing records follow at once). ``should_stop`` asks the pruner.
    """

    def __init__(self, trial: optuna.Trial, *, prune: bool,
                 budget_tokens: int | None = None) -> None:
        self.trial, self.prune, self.n_evals = trial, prune, 0
        self.budget_tokens = budget_tokens
        self._shown_at = -math.inf

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        self.n_evals += 1
        value = metrics.get(METRIC_VAL_LOSS)
        if value is None or not math.isfinite(value):
            return
        if self.prune:
            self.trial.report(float(value), step=self.n_evals)
        if self.budget_tokens is not None and tokens >= self.budget_tokens:
            return
        if time.monotonic() - self._shown_at >= PROGRESS_S:
            self.trial.set_user_attr(ATTR_PROGRESS, [int(tokens), float(value)])
            self._shown_at = time.monotonic()

    def should_stop(self) -> bool:
        return self.prune and self.trial.should_prune()


class _Interrupted(KeyboardInterrupt):
    """Carries an `InfrastructureError` through Optuna, which records the trial ``FAIL``."""

    def __init__(self, fault: InfrastructureError) -> None:
        super().__init__()
        self.fault = fault


def _mark_interrupted(trial: optuna.Trial, reason: str) -> None:
    try:  # the storage may be what failed: then the next reconcile marks it
        trial.set_user_attr(ATTR_STATE, TrialState.INTERRUPTED.value)
        trial.set_user_attr(ATTR_REASON, reason[:500])
    except Exception:  # noqa: BLE001
        pass



def _objective(ctx: StudyContext) -> Any:
    spec = ctx.spec
    multi = len(spec.search.objectives) > 1
    prune = not multi and spec.search.pruner != "none"

    def objective(trial: optuna.Trial) -> Any:
        try:
            return _run(trial)
        except (KeyboardInterrupt, SystemExit):
            _mark_interrupted(trial, "interrupted (Ctrl-C or SIGTERM)")
            raise
        except InfrastructureError as err:
            _mark_interrupted(trial, f"interrupted: {err.what}")
            # Optuna records the trial FAIL for a KeyboardInterrupt only; `optimize` raises
            # the fault itself again.
            raise _Interrupted(err) from err

    def _run(trial: optuna.Trial) -> Any:
        configs: tuple[ModelConfig, TrainConfig] | space.InvalidConfig
        # The owner and the sampled params in one journal append: Optuna's trial reads its own
        # params from its cache, not from the storage.
        with held_writes(trial.storage):
            trial.set_user_attr(ATTR_OWNER, current_owner())
            try:
                configs = space.suggest(trial, spec)
            except space.InvalidConfig as err:
                configs = err
        # The trial's run keeps the one heartbeat of the trial, in MLflow and here.
        reporter = OptunaReporter(trial, prune=prune, budget_tokens=_budget_tokens(configs))
        outcome = evaluate(ctx, trial.number, configs, reporter,
                           raw_params=dict(trial.params),
                           retry_of=trial.user_attrs.get(ATTR_RETRY_OF),
                           heartbeat=lambda: trial.set_user_attr(ATTR_HEARTBEAT, time.time()))
        with held_writes(trial.storage):  # one journal append for the trial's records
            trial.set_user_attr(ATTR_STATE, outcome.state.value)
            trial.set_user_attr(ATTR_RUN_ID, outcome.run_id)
            _show(trial, ctx, outcome)
            if outcome.reason:
                trial.set_user_attr(ATTR_REASON, outcome.reason[:500])
            if math.isfinite(outcome.best_val_loss):
                trial.set_user_attr(ATTR_BEST_VAL_LOSS, outcome.best_val_loss)
            if outcome.constraints is not None:
                space.record_constraints(trial, outcome.constraints)
        told = policy.told(spec, outcome.state, outcome.metrics(), constraints=outcome.constraints,
                           baseline=ctx.corpus().baseline_unigram_loss
                           if outcome.state is TrialState.INFEASIBLE else math.nan)
        if told.state == OptunaState.PRUNED:
            raise optuna.TrialPruned(outcome.reason)
        if told.state == OptunaState.FAIL:
            # nan makes Optuna record the trial FAIL: it never ranks as best.
            return [math.nan] * len(spec.search.objectives) if multi else math.nan
        return told.value(len(spec.search.objectives))

    return objective


def _budget_tokens(configs: Any) -> int | None:
    """The tokens a trial trains in all, or None (a budget in seconds, an invalid config)."""
    if isinstance(configs, space.InvalidConfig):
        return None
    try:
        return resolve_budget(configs[1], configs[0]).total_tokens
    except ConfigError:  # the trainer raises it again, inside the trial's run
        return None


def _show(trial: optuna.Trial, ctx: StudyContext, outcome: TrialOutcome) -> None:
    """What optuna-dashboard shows of a trial: its size and cost, a link to its MLflow run."""
    for name in (METRIC_N_PARAMS, METRIC_FLOPS_PER_TOKEN, METRIC_FLOPS_PER_TOKEN_TRAIN):
        if math.isfinite(outcome.cost.get(name, math.nan)):
            trial.set_user_attr(name, outcome.cost[name])
    if outcome.run_id:
        trial.set_user_attr(ATTR_MLFLOW_RUN, run_url(ctx.tracking.tracking_uri,
                                                     ctx.tracking.experiment_id, outcome.run_id))


def metric_names(objectives: list[str]) -> list[str]:
    """The names optuna-dashboard gives a study's objective values (`sweep.study.policy`).

    ``val_loss`` is told as the trial's best val loss, so it is named ``best_val_loss``.
    """
    return [METRIC_BEST_VAL_LOSS if name == METRIC_VAL_LOSS else name for name in objectives]


class _NoInterruptTracebacks(logging.Filter):
    """Drop Optuna's two warnings of an interrupted trial.

    They are "failed because of ... KeyboardInterrupt" with its traceback, then "failed with
    value None" (this objective returns None for no other trial). The driver reports an
    interrupt once, and the trial is recorded ``INTERRUPTED``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            return False
        return not str(record.msg).endswith("failed with value None.")


logging.getLogger(private.OPTIMIZE_LOGGER).addFilter(_NoInterruptTracebacks())


def create_study(ctx: StudyContext, *, seed_offset: int = 0) -> optuna.Study:
    """Create or load the study in its storage, with the spec's sampler and pruner.

    Its objective values are named (`metric_names`), which optuna-dashboard shows.
    """
    spec = ctx.spec
    if seed_offset:
        spec = spec.model_copy(
            update={"search": spec.search.model_copy(update={"seed": spec.search.seed
                                                              + seed_offset})})
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=ctx.spec.name,
        storage=make_storage(ctx.spec.storage_url(ctx.out_dir)),
        sampler=space.make_sampler(spec),
        pruner=space.make_pruner(spec),
        directions=list(required("search.directions", spec.search.directions)),
        load_if_exists=True,
    )
    names = metric_names(list(spec.search.objectives))
    if study.metric_names != names:
        with warnings.catch_warnings():  # experimental since Optuna 3.2, still in 5.1
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)
    return study


def optimize(study: optuna.Study, ctx: StudyContext, n_trials: int) -> None:
    """Run ``n_trials`` trials of ``study`` in this process.

    Raises:
        sweep.tracking.faults.InfrastructureError: The store, the storage or the disk failed
            (its trial is ``INTERRUPTED``).
    """
    # A trial that raises is recorded FAILED (run and Optuna trial); the study goes on. An
    # infrastructure fault stops it here, its trial INTERRUPTED.
    try:
        study.optimize(_objective(ctx), n_trials=n_trials, catch=(Exception,),
                       timeout=ctx.spec.search.timeout_s)
    except _Interrupted as carried:
        raise carried.fault from None
    except Exception as exc:  # the storage, outside any trial
        what = infrastructure_fault(exc)
        if what is None:
            raise
        raise InfrastructureError(what, exc) from exc



# What a trial the objective never finished (no ATTR_STATE) is, from Optuna's own state.
_FROM_OPTUNA = {OptunaState.RUNNING: TrialState.RUNNING, OptunaState.WAITING: TrialState.RUNNING,
                OptunaState.PRUNED: TrialState.PRUNED, OptunaState.COMPLETE: TrialState.COMPLETE}


def trial_state(trial: optuna.trial.FrozenTrial) -> TrialState:
    """The `TrialState` of an Optuna trial: the objective's record, else Optuna's state.

    A trial still running in Optuna is ``RUNNING`` whatever it recorded; one that raised before
    recording its state is ``FAILED``.
    """
    if trial.state == OptunaState.RUNNING:
        return TrialState.RUNNING
    recorded = trial.user_attrs.get(ATTR_STATE)
    if recorded is not None:
        return TrialState(recorded)
    return _FROM_OPTUNA.get(trial.state, TrialState.FAILED)

