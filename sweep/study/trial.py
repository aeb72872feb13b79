"""One trial of a study, the same for every executor: check, train, track.

The executor (Optuna or Ray Tune) turns its trial into configs through `sweep.space`, then calls
`evaluate`, which

1. opens the trial's MLflow child run and logs the resolved configs and cost metrics;
2. checks the spec's constraints with the cost model: an infeasible config is recorded as
   ``INFEASIBLE`` with the reason and costs no training;
3. trains through `sweep.trial.Trainer`, sending each evaluation to MLflow and to the
   executor's reporter (which may prune);
4. ends the run in the trial's final state.

`StudyContext` carries what a worker process needs (picklable), so trials run the same way in
the driver, in ``search.parallel`` worker processes and in Ray workers on other machines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.config import ModelConfig
from models.errors import ConfigError
from sweep import space
from sweep.data import Corpus, load_corpus
from sweep.spec import StudySpec
from sweep.tracking import TrialContext, TrialRun, cost_metrics
from sweep.train_config import TrainConfig
from sweep.trial import NullReporter, Reporter, Trainer

__all__ = ["StudyContext", "TrialOutcome", "evaluate", "objective_values"]


@dataclass(frozen=True)
class StudyContext:
    """What every trial of a study needs; picklable, so it travels to worker processes.

    Attributes:
        spec: The validated study spec.
        out_dir: The study's output folder (corpus cache, checkpoints, stores).
        tracking: The study's MLflow experiment and parent run.
        device: Device override for training (``None``: the train config's ``device``).
    """

    spec: StudySpec
    out_dir: Path
    tracking: TrialContext
    device: str | None = None
    _corpus: list = field(default_factory=list, compare=False, repr=False)

    def corpus(self) -> Corpus:
        """The study's corpus, prepared once per study folder and reused by every trial."""
        if not self._corpus:
            data = self.spec.data
            self._corpus.append(load_corpus(data.uri, self.out_dir / "data",
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
        state: ``COMPLETE``, ``PRUNED``, ``DIVERGED``, ``FAILED`` or ``INFEASIBLE``.
        best_val_loss: Lowest finite val loss, nats/token; nan if none.
        reason: Why the trial was infeasible, diverged or failed.
        cost: The cost metrics logged for the trial (``n_params``, ``flops_per_token``...).
        run_id: MLflow run id of the trial.
        constraints: Optuna constraint values (<= 0 feasible) of the cost check, if it ran.
    """

    number: int
    state: str
    best_val_loss: float = math.nan
    reason: str | None = None
    cost: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    constraints: list[float] | None = None


class _Tee:
    """Send each evaluation to MLflow and to the executor's reporter."""

    def __init__(self, run: TrialRun, reporter: Reporter) -> None:
        self.run, self.reporter = run, reporter

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        self.run.report(tokens, metrics)
        self.reporter.report(tokens, metrics)

    def should_stop(self) -> bool:
        return self.reporter.should_stop()


def start_run(
    ctx: StudyContext, number: int, model: ModelConfig, train: TrainConfig
) -> TrialRun:
    """Open trial ``number``'s MLflow run with its resolved configs as params.

    Params are the flat dotted keys of `sweep.tracking` (``model.d_model``, ``train.lr``).
    """
    return ctx.tracking.start_trial(number, {"model": model.to_dict(), "train": train.to_dict()})


def evaluate(
    ctx: StudyContext,
    number: int,
    configs: tuple[ModelConfig, TrainConfig] | ConfigError,
    reporter: Reporter | None = None,
    *,
    raw_params: dict[str, Any] | None = None,
) -> TrialOutcome:
    """Run trial ``number`` end to end and record it in MLflow.

    Args:
        ctx: The study context.
        number: Trial number.
        configs: The trial's resolved configs, or the `ConfigError` the search space raised
            for an invalid combination (recorded as ``INFEASIBLE``).
        reporter: The executor's reporter (pruning); `NullReporter` if None.
        raw_params: The sampled params, logged when ``configs`` is an error.

    Returns:
        The trial's `TrialOutcome`. Exceptions inside training end the run ``FAILED`` and are
        re-raised.
    """
    reporter = reporter or NullReporter()
    if isinstance(configs, ConfigError):
        with ctx.tracking.start_trial(number, raw_params or {}) as run:
            run.end("INFEASIBLE", fail_reason=str(configs))
        return TrialOutcome(number, "INFEASIBLE", reason=str(configs), run_id=run.run_id)
    model, train = configs
    with start_run(ctx, number, model, train) as run:
        device = ctx.device or train.device
        ok, reason, estimate = space.check_constraints(ctx.spec, model, train, device=device)
        cost = cost_metrics(estimate)
        run.log_costs(cost)
        constraints = space.constraint_values(
            ctx.spec, estimate, memory_limit_bytes=space.memory_limit_bytes(ctx.spec, device))
        if not ok:
            run.end("INFEASIBLE", fail_reason=reason)
            return TrialOutcome(number, "INFEASIBLE", reason=reason, cost=cost,
                                run_id=run.run_id, constraints=constraints)
        trainer = Trainer(model, train, ctx.corpus(), device=ctx.device)
        result = trainer.train(_Tee(run, reporter))
        run.log_result(result)
    return TrialOutcome(number, result.state, result.best_val_loss, result.fail_reason, cost,
                        run.run_id, constraints)


def objective_values(spec: StudySpec, outcome: TrialOutcome) -> list[float]:
    """The values of the spec's objectives for a trial, in ``search.objectives`` order.

    ``val_loss`` is the best val loss; the cost objectives come from the cost model.
    """
    values = []
    for name in spec.search.objectives:
        values.append(outcome.best_val_loss if name == "val_loss"
                      else float(outcome.cost.get(name, math.nan)))
    return values
