"""One trial policy: both executors' resume paths make the same decisions on one history.

A study's MLflow store holds trials that ended in every state, interrupted trials and retries
interrupted again. The Optuna executor's reconcile (its trials RUNNING with a dead owner, their
runs ended) and the Ray executor's resume (a new searcher seeded from MLflow, the interrupted
trials queued) must tell the sampler the same state, value and constraints for each trial, and
queue the same retries.
"""

import math
import socket

import pytest
from optuna.trial import TrialState as OptunaState

from sweep.executors.optuna.objective import create_study
from sweep.executors.optuna.recovery import reconcile
from sweep.schema import ATTR_CONSTRAINTS, ATTR_OWNER, ATTR_RETRY_OF, TrialState
from sweep.spec import parse_spec
from sweep.study import policy
from sweep.study.trial import StudyContext
from sweep.tracking import StudyTracker
from sweep.tracking.owner import _boot_id

pytest.importorskip("ray")

DEAD = f"{socket.gethostname()}/{_boot_id()}/4194000/1"  # above any pid_max in use
COST = {"n_params": 5000.0, "n_params_non_embedding": 4000.0, "flops_per_token": 9000.0,
        "flops_per_token_dense": 9000.0, "flops_per_token_train": 27000.0,
        "mem_estimate_bytes": 2.0e6}
#: number -> (state, retry_of, val loss reported, cost logged)
HISTORY = {
    0: (TrialState.COMPLETE, None, 2.5, True),
    1: (TrialState.INFEASIBLE, None, None, True),    # priced, over max_params
    2: (TrialState.DIVERGED, None, 3.0, True),
    3: (TrialState.PRUNED, None, 2.9, True),
    4: (TrialState.FAILED, None, None, True),
    5: (TrialState.INTERRUPTED, None, None, True),
    6: (TrialState.INTERRUPTED, 5, None, True),       # a retry interrupted again
    7: (TrialState.INTERRUPTED, None, None, True),
    8: (TrialState.INTERRUPTED, 7, None, True),
    9: (TrialState.INTERRUPTED, 8, None, True),
    10: (TrialState.INTERRUPTED, 9, None, True),      # its 4th attempt: given up
    11: (TrialState.INFEASIBLE, None, None, False),  # an invalid config, never priced
}


def lr(number):
    return 1e-3 * (1.2 ** number)


@pytest.fixture
def ctx(tmp_path, new_store):
    spec = parse_spec({
        "name": "policy",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 4096, "lr": {"float": [1e-3, 1e-2], "log": True}},
        "search": {"sampler": "tpe", "pruner": "none", "n_trials": 20},
        "constraints": {"max_params": 1000},
    })
    tracker = StudyTracker.start(new_store(tmp_path), spec.name,
                                 spec.to_data(), executor="optuna", algorithm="tpe+none")
    ctx = StudyContext(spec, tmp_path, tracker.context, device="cpu")
    for number, (state, retry_of, loss, priced) in HISTORY.items():
        with ctx.tracking.start_trial(number, {"train": {"lr": lr(number)}},
                                      retry_of=retry_of) as run:
            if priced:
                run.log_costs(COST)
            if loss is not None:
                run.report(2048, {"val_loss": loss})
            run.end(state)
    return ctx


def optuna_path(ctx):
    """The Optuna executor: each trial RUNNING in its storage, its process dead."""
    study = create_study(ctx)
    for number, (_, retry_of, _, _) in HISTORY.items():
        study.enqueue_trial({"train.lr": lr(number)})
        trial = study.ask()
        assert trial.number == number
        trial.suggest_float("train.lr", 1e-3, 1e-2, log=True)
        trial.set_user_attr(ATTR_OWNER, DEAD)
        if retry_of is not None:
            trial.set_user_attr(ATTR_RETRY_OF, retry_of)
    done = reconcile(ctx, study)
    return study, done.retried


def ray_path(ctx):
    """The Ray executor's rerun: a new searcher given MLflow's finished trials, retries queued."""
    from sweep.adapters.ray import search_study
    from sweep.executors.ray.search import search_plan
    from sweep.executors.ray.tuning import Held

    held = Held.read(ctx)
    plan = search_plan(ctx, held, 5, ctx.out_dir / "ray", None)
    study = search_study(plan.tune_config.search_alg)
    retried = [t.user_attrs[ATTR_RETRY_OF] for t in study.get_trials(
        deepcopy=False, states=(OptunaState.WAITING,))]
    return study, retried


def told(study, numbers):
    """``number -> (state, value, constraints)`` of each trial, matched by its ``train.lr``."""
    by_lr = {round(t.params["train.lr"], 12): t for t in study.trials if t.params}
    out = {}
    for number in numbers:
        t = by_lr[round(lr(number), 12)]
        out[number] = (t.state, t.value, t.user_attrs.get(ATTR_CONSTRAINTS))
    return out


def test_both_executors_tell_the_same_and_retry_the_same(ctx):
    finished = [n for n, (state, *_) in HISTORY.items() if state.finished]
    optuna_study, optuna_retried = optuna_path(ctx)
    ray_study, ray_retried = ray_path(ctx)
    assert told(optuna_study, finished) == told(ray_study, finished)
    assert optuna_retried == ray_retried == [6]
    decisions = told(ray_study, finished)
    baseline = ctx.corpus().baseline_unigram_loss
    assert decisions[0] == (OptunaState.COMPLETE, 2.5, None)
    state, value, constraints = decisions[1]  # told to TPE as a constraint violation
    assert (state, value) == (OptunaState.COMPLETE, pytest.approx(baseline))
    assert constraints[0] == pytest.approx(5000 / 1000 - 1) and constraints[1] == -1.0
    assert decisions[2][0] == decisions[4][0] == OptunaState.FAIL
    assert decisions[3][0] == decisions[11][0] == OptunaState.PRUNED


def test_the_policy_table():
    spec = parse_spec({"name": "p", "data": "builtin:python-stdlib",
                       "train": {"tokens": 4096, "lr": {"float": [1e-3, 1e-2]}},
                       "search": {"sampler": "random"}})
    metrics = {"best_val_loss": 2.0}
    assert policy.told(spec, TrialState.COMPLETE, metrics, baseline=5.0).values == [2.0]
    assert policy.told(spec, TrialState.COMPLETE, {"best_val_loss": math.nan},
                       baseline=5.0).state == OptunaState.FAIL
    # random takes no constraints: an infeasible trial is hidden from it as pruned
    assert policy.told(spec, TrialState.INFEASIBLE, metrics, baseline=5.0,
                       constraints=[1.0, -1.0, -1.0]).state == OptunaState.PRUNED
    for state in (TrialState.DIVERGED, TrialState.FAILED, TrialState.INTERRUPTED):
        assert policy.told(spec, state, metrics, baseline=5.0).state == OptunaState.FAIL
    chain = [policy.Attempt(0, TrialState.INTERRUPTED)] + [
        policy.Attempt(n, TrialState.INTERRUPTED, n - 1) for n in range(1, policy.MAX_RETRIES)]
    assert policy.to_retry(chain) == [policy.MAX_RETRIES - 1]
    given_up = [*chain, policy.Attempt(policy.MAX_RETRIES, TrialState.INTERRUPTED,
                                       policy.MAX_RETRIES - 1)]
    assert policy.to_retry(given_up) == []
