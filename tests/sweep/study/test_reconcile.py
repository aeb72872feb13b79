"""The Optuna executor's reconcile on real stores: dead, alive and half-finished trials."""

import socket

import pytest
from optuna.trial import TrialState as OptunaState

from sweep.executors.optuna.executor import create_study
from sweep.executors.optuna.recovery import reconcile
from sweep.schema import ATTR_OWNER, ATTR_RETRY_OF, ATTR_STATE, TrialState
from sweep.spec import parse_spec
from sweep.study.policy import MAX_RETRIES
from sweep.study.trial import StudyContext
from sweep.tracking import StudyTracker, read_trials
from sweep.tracking.owner import _boot_id, current_owner

DEAD = f"{socket.gethostname()}/{_boot_id()}/4194000/1"  # above any pid_max in use


@pytest.fixture
def ctx(tmp_path, new_store):
    spec = parse_spec({
        "name": "reconcile",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 4096, "lr": {"float": [1e-3, 1e-2], "log": True}},
        "search": {"sampler": "random", "pruner": "none", "n_trials": 4},
    })
    tracker = StudyTracker.start(new_store(tmp_path), spec.name,
                                 spec.to_data(), executor="optuna", algorithm="random+none")
    return StudyContext(spec, tmp_path, tracker.context)


def running_trial(study, owner):
    trial = study.ask()
    trial.suggest_float("train.lr", 1e-3, 1e-2, log=True)
    trial.set_user_attr(ATTR_OWNER, owner)
    return trial


def test_a_dead_trial_is_interrupted_and_queued_again_a_live_one_left_alone(ctx):
    study = create_study(ctx)
    dead = running_trial(study, DEAD)
    live = running_trial(study, current_owner())
    run = ctx.tracking.start_trial(dead.number, {"train": {"lr": 3e-3}})
    done = reconcile(ctx, study)
    assert done.interrupted == [dead.number] and done.retried == [dead.number]
    assert done.running == [live.number] and done.runs_ended == [run.run_id]
    trials = {t.number: t for t in study.get_trials()}
    assert trials[dead.number].state == OptunaState.FAIL
    assert trials[dead.number].user_attrs[ATTR_STATE] == TrialState.INTERRUPTED
    assert trials[live.number].state == OptunaState.RUNNING
    waiting = [t for t in study.get_trials() if t.state == OptunaState.WAITING]
    assert len(waiting) == 1 and waiting[0].user_attrs[ATTR_RETRY_OF] == dead.number
    assert waiting[0].system_attrs["fixed_params"] == trials[dead.number].params
    runs = read_trials(ctx.tracking.tracking_uri, ctx.tracking.experiment_id,
                       ctx.tracking.parent_run_id)
    assert [(r["trial"], r["state"]) for r in runs] == [(dead.number, TrialState.INTERRUPTED)]
    # reconciling again changes nothing: the retry is queued once
    again = reconcile(ctx, study)
    assert again.interrupted == again.retried == [] and again.running == [live.number]


def test_a_trial_killed_after_its_run_ended_takes_the_runs_result(ctx):
    study = create_study(ctx)
    trial = running_trial(study, DEAD)
    run = ctx.tracking.start_trial(trial.number, {"train": {"lr": 3e-3}})
    run.report(4096, {"val_loss": 2.5})
    run.end(TrialState.COMPLETE)
    done = reconcile(ctx, study)
    assert done.adopted == [trial.number] and done.interrupted == done.retried == []
    frozen = study.get_trials()[trial.number]
    assert frozen.state == OptunaState.COMPLETE and frozen.value == 2.5
    assert not [t for t in study.get_trials() if t.state == OptunaState.WAITING]


def test_a_point_interrupted_every_time_is_given_up(ctx):
    study = create_study(ctx)
    origin = running_trial(study, DEAD)
    reconcile(ctx, study)
    for _ in range(MAX_RETRIES):
        retry = study.ask()  # the queued retry, run and interrupted again
        assert retry.user_attrs[ATTR_RETRY_OF] is not None
        retry.set_user_attr(ATTR_OWNER, DEAD)
        reconcile(ctx, study)
    interrupted = [t for t in study.get_trials()
                   if t.user_attrs.get(ATTR_STATE) == TrialState.INTERRUPTED]
    assert len(interrupted) == MAX_RETRIES + 1
    assert not [t for t in study.get_trials() if t.state == OptunaState.WAITING]
    assert interrupted[0].number == origin.number


def test_a_trial_killed_before_it_recorded_its_owner_is_interrupted_and_recorded(ctx,
                                                                                monkeypatch):
    import sweep.executors.optuna.recovery as recovery

    monkeypatch.setattr(recovery, "OWNERLESS_S", 0.2)
    study = create_study(ctx)
    trial = study.ask()  # killed before the objective's first line: no owner, no run
    trial.suggest_float("train.lr", 1e-3, 1e-2, log=True)
    done = reconcile(ctx, study)
    assert done.interrupted == [trial.number] and done.retried == [trial.number]
    runs = read_trials(ctx.tracking.tracking_uri, ctx.tracking.experiment_id,
                       ctx.tracking.parent_run_id)
    assert [(r["trial"], r["state"]) for r in runs] == [(trial.number, TrialState.INTERRUPTED)]
    assert runs[0]["params"]["train.lr"] == pytest.approx(study.get_trials()[0].params[
        "train.lr"])


def test_a_parent_killed_before_its_spec_was_logged_resumes(tmp_path, new_store):
    from mlflow import MlflowClient

    from sweep.schema import KIND_STUDY, SPEC_ARTIFACT, TAG_KIND
    from sweep.tracking import ResumeError

    uri = new_store(tmp_path)
    spec = {"name": "half", "search": {"n_trials": 2}}
    first = StudyTracker.start(uri, "half", spec, executor="optuna", algorithm="tpe+none")
    client = MlflowClient(uri)
    half = client.create_run(first.experiment_id, tags={TAG_KIND: KIND_STUDY},
                             run_name="half")  # newest parent, killed before spec.yaml
    again = StudyTracker.start(uri, "half", spec, executor="optuna", algorithm="tpe+none",
                               resume=True)
    assert again.parent_run_id == half.info.run_id
    assert [a.path for a in client.list_artifacts(half.info.run_id)] == [SPEC_ARTIFACT]
    # a parent that holds trials but no spec cannot be compared, so it is refused
    other = client.create_run(first.experiment_id, tags={TAG_KIND: KIND_STUDY}, run_name="x")
    again.context.__class__(uri, first.experiment_id, other.info.run_id).start_trial(0).end(
        TrialState.COMPLETE)
    with pytest.raises(ResumeError, match="holds trials but no spec.yaml"):
        StudyTracker.start(uri, "half", spec, executor="optuna", algorithm="tpe+none",
                           resume=True)


def test_a_retry_still_queued_when_the_goal_is_reached_is_dropped_then_run_on_a_larger_one(ctx):
    from sweep.executors.optuna.executor import drop_unstarted_retries

    study = create_study(ctx)
    dead = running_trial(study, DEAD)
    reconcile(ctx, study)  # dead interrupted, its retry queued
    import optuna

    lr = optuna.distributions.FloatDistribution(1e-3, 1e-2, log=True)
    for value in (2e-3, 4e-3):  # meanwhile trials elsewhere reach the goal of 2
        study.add_trial(optuna.trial.create_trial(params={"train.lr": value},
                                                  distributions={"train.lr": lr}, value=2.0))
    assert drop_unstarted_retries(study, 3) == []  # not reached yet: the retry stays queued
    queued = [t for t in study.get_trials() if t.state == OptunaState.WAITING]
    assert len(queued) == 1
    assert drop_unstarted_retries(study, 2) == [queued[0].number]
    trials = {t.number: t for t in study.get_trials()}
    dropped = trials[queued[0].number]
    assert dropped.state == OptunaState.FAIL
    assert dropped.user_attrs[ATTR_STATE] == TrialState.INTERRUPTED
    assert not [t for t in trials.values() if t.state == OptunaState.WAITING]
    # A resume with a larger n_trials queues the dropped retry's params first, once.
    done = reconcile(ctx, study)
    assert done.retried == [dropped.number]
    again = [t for t in study.get_trials() if t.state == OptunaState.WAITING]
    assert len(again) == 1 and again[0].user_attrs[ATTR_RETRY_OF] == dropped.number
    assert again[0].system_attrs["fixed_params"] == trials[dead.number].params


def test_a_trial_killed_within_its_first_second_gets_its_params_in_its_run(ctx, monkeypatch):
    from sweep import space
    from sweep.study.trial import open_trial
    from sweep.tracking import trial_run

    monkeypatch.setattr(trial_run, "EVAL_HOLD_S", 3600.0)  # its opening records still wait
    study = create_study(ctx)
    dead = running_trial(study, DEAD)
    opened = open_trial(ctx, dead.number, space.configs_from_params(ctx.spec, dead.params))
    opened.run._stop_heartbeat()  # the process "dies": nothing of it writes again

    def runs():
        return read_trials(ctx.tracking.tracking_uri, ctx.tracking.experiment_id,
                           ctx.tracking.parent_run_id)

    assert [r["params"] for r in runs()] == [{}]
    done = reconcile(ctx, study)
    assert done.interrupted == [dead.number]
    (run,) = runs()
    assert run["state"] == TrialState.INTERRUPTED and run["run_id"] == opened.run.run_id
    assert run["params"]["train.lr"] == pytest.approx(dead.params["train.lr"])
    assert run["params"]["model.d_model"] == 16
