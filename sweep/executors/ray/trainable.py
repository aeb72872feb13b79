"""The Ray Tune trainable of a searched trial (every scheduler but PBT).

The one trial path, `sweep.study.trial.evaluate`, with a `TuneReporter`.

Trials run in actors that Ray keeps for the next trial (``reuse_actors``): a worker process,
its imports, the study's corpus (`StudyContext.corpus`) and its MLflow store are set up once
per actor, not once per trial. Ray's `FunctionTrainable.reset_config` waits for the previous
trial's thread to end before the next trial starts; a thread still training after Ray ended
its trial (a stop between two evaluations) ends at its next evaluation, and an actor whose
thread does not end within ``TUNE_FUNCTION_THREAD_TIMEOUT_S`` (2 s) is replaced by a new one.

Infeasible trials train nothing and report once with val loss = the corpus's unigram baseline,
so schedulers carry on, and their constraint values, so the searcher is told them as under the
Optuna executor (`sweep.study.policy`); trials that raise end ``FAILED`` and the study
continues.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from sweep import space
from sweep.executors.ray.reporting import (
    Ended,
    TuneReporter,
    cost_report,
    final_report,
    trial_params,
)
from sweep.schema import (
    ATTR_CONSTRAINTS,
    ATTR_REASON,
    ATTR_RUN_ID,
    ATTR_STATE,
    CONFIG_RETRY_OF,
    CONFIG_TRIAL_NUMBER,
    METRIC_BEST_VAL_LOSS,
    METRIC_VAL_LOSS,
    TrialState,
)
from sweep.study.trial import StudyContext, TrialOutcome, open_trial, train_trial
from sweep.train.config import resolve_budget
from sweep_models.errors import ConfigError

if TYPE_CHECKING:
    from sweep.train.config import TrainConfig
    from sweep_models.config import ModelConfig

__all__ = ["search_trainable"]


def search_trainable(ctx: StudyContext):
    """The function trainable of ``ctx``'s searched trials (picklable closure over ``ctx``).

    Ray passes each trial's config: the sampled params under dotted keys, the trial number
    (`sweep.schema.CONFIG_TRIAL_NUMBER`) and, for a trial that retries an interrupted one, that
    trial's number (`sweep.schema.CONFIG_RETRY_OF`, tag ``sweep.retry_of``). The trial's last
    report carries its state (which
    `sweep.executors.ray.searcher.StudySearch` turns into the Optuna trial's state), run id and
    ``val_loss`` = its best val loss (what the Optuna executor tells its sampler), nan for a
    diverged trial, or the corpus's unigram baseline for an infeasible config.
    """
    spec = ctx.spec

    def trainable(config: dict[str, Any]) -> None:
        try:
            run_trial(config)
        except Ended:  # Ray ended the trial; the driver ends its run (`TuneReporter`)
            # Ray's own way out of a stopped trial's thread: returning would report once more
            # and wait there for the next `train` call, which never comes, so a kept actor
            # could not take its next trial (`reset_config` waits for the thread).
            raise SystemExit(0) from None

    def run_trial(config: dict[str, Any]) -> None:
        number = int(config[CONFIG_TRIAL_NUMBER])
        retry_of = config.get(CONFIG_RETRY_OF)
        retry_of = int(retry_of) if retry_of is not None else None
        params = trial_params(config)
        configs: tuple[ModelConfig, TrainConfig] | space.InvalidConfig
        try:
            configs = space.configs_from_params(spec, params)
        except space.InvalidConfig as err:
            configs = err
        opened = open_trial(ctx, number, configs, raw_params=params, retry_of=retry_of)
        if isinstance(opened, TrialOutcome):
            outcome, reporter = opened, TuneReporter()
        else:
            try:
                total = resolve_budget(opened.train, opened.model).total_tokens
            except ConfigError:  # the trainer raises it again, inside the trial's run
                total = None
            # Ray may end this thread at any report: the reporter sends what the run holds
            # before each (`TuneReporter`).
            # Multi-objective searches read the cost objectives from every report.
            reporter = TuneReporter(cost_report(spec, opened.cost), budget_tokens=total,
                                    run=opened.run)
            outcome = train_trial(ctx, opened, reporter)
        final: dict[str, float | str | list[float] | None] = {
            ATTR_STATE: outcome.state.value, ATTR_RUN_ID: outcome.run_id,
            **cost_report(spec, outcome.cost)}
        if outcome.state is TrialState.INFEASIBLE:
            # Schedulers carry on with the baseline; the searcher is told as the policy says.
            final[METRIC_VAL_LOSS] = ctx.corpus().baseline_unigram_loss
            if outcome.constraints is not None:
                final[ATTR_CONSTRAINTS] = list(outcome.constraints)
        else:
            # A diverged trial's loss ranks nowhere (`StudySearch` tells it FAIL; Tune's own
            # best-result filters nan); its best finite loss still shows in the progress view.
            final[METRIC_VAL_LOSS] = (math.nan if outcome.state is TrialState.DIVERGED
                                      else outcome.best_val_loss)
            final[METRIC_BEST_VAL_LOSS] = outcome.best_val_loss
        if outcome.reason:
            final[ATTR_REASON] = outcome.reason[:500]
        final_report(reporter, outcome.tokens, final)
        if reporter.stopped:  # Ray ended the trial at its last report
            raise Ended

    return trainable
