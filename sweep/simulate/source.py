"""The simulated trial source: a trial's losses drawn from the spec's law instead of training.

With a ``simulate`` section (`sweep.spec.schema.SimulateSpec`) every trial of the study, of any
kind, is priced and tracked as usual and then, in place of `sweep.train.Trainer`, evaluated at
the same points a trained trial would be (every ``eval_every`` tokens of its budget, whole
optimizer steps, and at its end): the loss at ``t`` tokens is the law's L(N, t, eta, B)
(`sweep.simulate.law.SimulatedLaw`) with N the cost model's parameter count of the trial's
model, eta its peak ``train.lr`` and B its tokens per optimizer step, times one log-normal seed
draw per trial (``random.Random(f"{seed}:{trial number}")``). The curve is the law's, not a
schedule's: a cosine run's loss part-way through its budget would sit above it. Each
evaluation goes to the executor's reporter, so pruners see it; the result is a `TrialResult`
as the trainer's, with no wall time and no MFU.
"""

from __future__ import annotations

import math
import random
from typing import Any

from sweep.schema import METRIC_TOKENS, METRIC_VAL_LOSS, TrialState
from sweep.simulate.law import SimulatedLaw, law_from_data
from sweep.spec import StudySpec
from sweep.train import Reporter, TrainConfig, TrialResult
from sweep.train.config import resolve_budget
from sweep.train.evaluation import eval_metrics
from sweep.train.schedule import budget_lr_factor
from sweep_models.config import ModelConfig
from sweep_models.cost import flops_per_token
from sweep_models.errors import ConfigError

__all__ = ["eval_steps", "simulated_law", "simulated_tag", "simulate_trial"]


def simulated_law(spec: StudySpec) -> SimulatedLaw:
    """The law of ``spec.simulate`` (a name of `LAWS` or its numbers).

    Raises:
        ValueError: The spec has no ``simulate`` section.
    """
    if spec.simulate is None:
        raise ValueError(f"{spec.name}: not a simulated study (no simulate section)")
    law = spec.simulate.law
    return law_from_data(law if isinstance(law, str) else law.model_dump(exclude_none=True),
                         "simulate.law")


def simulated_tag(spec: StudySpec) -> str:
    """Tag ``sweep.simulated``'s value: the law, the noise and the seed, in one line."""
    sim = spec.simulate
    if sim is None:
        raise ValueError(f"{spec.name}: not a simulated study (no simulate section)")
    law = sim.law if isinstance(sim.law, str) else ", ".join(
        f"{k}={v:g}" for k, v in sim.law.model_dump(exclude_none=True).items()
        if isinstance(v, float | int))
    return f"law {law}; noise {sim.noise:g}; seed {sim.seed}"


def eval_steps(total_steps: int, step_tokens: int, every: int) -> list[int]:
    """The optimizer steps after which `sweep.train.Trainer` evaluates, ascending.

    After the first step whose tokens reach each multiple of ``every`` before the last step,
    and after the last step.
    """
    out: list[int] = []
    k = 1
    while True:
        step = math.ceil(k * every / step_tokens)
        if step >= total_steps:
            break
        if not out or step > out[-1]:
            out.append(step)
        k = (step * step_tokens) // every + 1
    return [*out, total_steps]


def simulate_trial(spec: StudySpec, number: int, model: ModelConfig, train: TrainConfig,
                   n_params: float, reporter: Reporter, corpus: Any) -> TrialResult:
    """One trial's evaluations drawn from the law, reported as the trainer reports them.

    Args:
        spec: A study with a ``simulate`` section.
        number: The trial's number (its noise draw).
        model: The trial's model.
        train: Its train config (a token, step or FLOP budget).
        n_params: N, the cost model's parameter count.
        reporter: Gets each evaluation; may prune.
        corpus: The study's corpus (byte-level or not, its baselines).

    Raises:
        ConfigError: A ``train.seconds`` budget (a simulated trial takes no time).
    """
    law = simulated_law(spec)
    budget = resolve_budget(train, model)
    if budget.total_steps is None:
        raise ConfigError("train.seconds: a simulated trial takes no time; give it a budget in "
                          "tokens, steps or FLOPs")
    sim = spec.simulate
    assert sim is not None  # simulated_law checked it
    factor = math.exp(sim.noise * random.Random(f"{sim.seed}:{number}").gauss(0.0, 1.0))
    history: list[dict[str, float]] = []
    state = TrialState.COMPLETE
    step = 0
    for step in eval_steps(budget.total_steps, budget.step_tokens, budget.eval_every):
        tokens = step * budget.step_tokens
        loss = law.loss(n_params, tokens, train.lr, budget.step_tokens) * factor
        lr = train.lr * budget_lr_factor(train, budget, tokens - budget.step_tokens, 0.0)
        metrics = eval_metrics(loss, loss, math.nan, lr, byte_level=corpus.byte_level)
        history.append({METRIC_TOKENS: tokens, **metrics})
        reporter.report(tokens, metrics)
        if reporter.should_stop():
            state = TrialState.PRUNED
            break
    losses = [h[METRIC_VAL_LOSS] for h in history]
    tokens = step * budget.step_tokens
    return TrialResult(state=state, best_val_loss=min(losses), final_val_loss=losses[-1],
                       tokens=tokens, steps=step, wall_s=0.0,
                       train_flops=flops_per_token(model, train=True) * tokens, mfu=None,
                       n_params=int(n_params),
                       baseline_unigram_loss=corpus.baseline_unigram_loss,
                       entropy_rate=corpus.entropy_rate, history=history, device="simulated")
