"""What one trial costs the tracking store: its calls counted exactly, its records all there.

A short trial's cost beside its training is the number of store transactions it makes (each a
SQLite commit or one HTTP request): a trial opens its run, writes its configs, costs, tags,
evaluations and end in one ``log_batch`` (what it opens with is held as an evaluation is), and
ends the run. The counts are taken
on MLflow's SQL store, the layer every client call reaches.
"""

import collections
import functools

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.utils.validation import (
    MAX_ENTITIES_PER_BATCH,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_TAGS_PER_BATCH,
)

from sweep import schema, space
from sweep.adapters import mlflow as mlflow_adapter
from sweep.spec import parse_spec
from sweep.study.trial import StudyContext, evaluate, open_trial, train_trial
from sweep.tracking import StudyTracker, trial_run
from sweep.tracking.batch import batches

DATA = "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000"
#: Store methods a trial's client calls reach (the write path and the reads a trial might make).
COUNTED = ("create_run", "log_batch", "update_run_info", "set_tag", "log_metric", "log_param",
           "get_run", "search_runs", "get_metric_history", "get_experiment")


@pytest.fixture(scope="module", autouse=True)
def warm_trainer(tmp_path_factory):
    """One tiny training first: torch's first-call costs stay out of the tests' calls."""
    from sweep.data import load_corpus
    from sweep.train import NullReporter, TrainConfig, Trainer
    from sweep_models.config import ModelConfig

    corpus = load_corpus(DATA, tmp_path_factory.mktemp("warm"))
    Trainer(ModelConfig(vocab_size=16, seq_len=8, d_model=8, n_heads=1, n_layers=1),
            TrainConfig(steps=1, batch_size=1, eval_tokens=8, device="cpu"), corpus,
            device="cpu").train(NullReporter())


@pytest.fixture
def held(monkeypatch):
    """Evaluations held until the end whatever the machine's speed (`trial_run.EVAL_HOLD_S`)."""
    monkeypatch.setattr(trial_run, "EVAL_HOLD_S", 3600.0)


@pytest.fixture
def counts(monkeypatch):
    seen: collections.Counter = collections.Counter()
    for name in COUNTED:
        method = getattr(SqlAlchemyStore, name)

        def counted(self, *args, _name=name, _method=method, **kwargs):
            seen[_name] += 1
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(SqlAlchemyStore, name, functools.wraps(method)(counted))
    # A SQLite store's batch and end written by the service's own statements, one transaction
    # each (`sweep.adapters.mlflow`), counted as the store calls they stand for.
    for name, stands_for in (("_log_batch", "log_batch"), ("_set_terminated", "update_run_info"),
                             ("_create_run", "create_run")):
        function = getattr(mlflow_adapter, name)

        def counted_sql(*args, _name=stands_for, _function=function, **kwargs):
            seen[_name] += 1
            return _function(*args, **kwargs)

        monkeypatch.setattr(mlflow_adapter, name, counted_sql)
    return seen


def _ctx(tmp_path, new_store, *, steps=1, eval_every=None, max_params=None):
    train = {"steps": steps, "batch_size": 1, "eval_tokens": 8, "device": "cpu",
             "lr": {"float": [1e-3, 1e-2], "log": True}}
    if eval_every:
        train["eval_every"] = eval_every
    spec = parse_spec({
        "name": "writes", "data": DATA,
        "model": {"vocab_size": 16, "seq_len": 8, "d_model": 8, "n_heads": 1, "n_layers": 1},
        "train": train,
        "search": {"sampler": "random", "pruner": "none", "n_trials": 2},
        **({"constraints": {"max_params": max_params}} if max_params else {}),
    })
    tracker = StudyTracker.start(new_store(tmp_path), spec.name, spec.to_data(),
                                 executor="optuna", algorithm="random")
    ctx = StudyContext(spec, tmp_path, tracker.context, device="cpu")
    ctx.corpus()  # prepared before counting, as the driver does
    return ctx


def _configs(ctx):
    return space.configs_from_params(ctx.spec, {"train.lr": 3e-3})


def test_a_trial_makes_three_store_calls_and_keeps_every_record(tmp_path, new_store, counts,
                                                                 held):
    ctx = _ctx(tmp_path, new_store)
    counts.clear()
    outcome = evaluate(ctx, 0, _configs(ctx), raw_params={"train.lr": 3e-3})
    assert outcome.state is schema.TrialState.COMPLETE
    # On SQLite each is one transaction of the service's statements (`sweep.adapters.mlflow`);
    # MLflow's create_run would read the whole experiment first (get_experiment).
    assert dict(counts) == {"create_run": 1, "log_batch": 1, "update_run_info": 1}
    run = MlflowClient(ctx.tracking.tracking_uri).get_run(outcome.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.d_model"] == "8" and float(run.data.params["train.lr"]) == 3e-3
    for name in ("n_params", "flops_per_token", "mem_estimate_bytes", "val_loss", "tokens",
                 "best_val_loss", "final_val_loss"):
        assert name in run.data.metrics, name
    tags = run.data.tags
    assert tags[schema.TAG_STATE] == "COMPLETE"
    assert tags[schema.TAG_TRIAL_NUMBER] == "0"
    assert schema.TAG_TORCH_THREADS in tags and schema.TAG_DEVICE in tags
    assert "COMPLETE" in tags[schema.TAG_NOTE]


def test_an_infeasible_trial_writes_its_records_with_its_end(tmp_path, new_store, counts,
                                                             held):
    ctx = _ctx(tmp_path, new_store, max_params=10)
    counts.clear()
    outcome = evaluate(ctx, 0, _configs(ctx))
    assert outcome.state is schema.TrialState.INFEASIBLE
    assert dict(counts) == {"create_run": 1, "log_batch": 1, "update_run_info": 1}
    run = MlflowClient(ctx.tracking.tracking_uri).get_run(outcome.run_id)
    assert run.data.tags[schema.TAG_STATE] == "INFEASIBLE"
    assert "max_params" in run.data.tags[schema.TAG_FAIL_REASON]
    assert "n_params" in run.data.metrics and "model.d_model" in run.data.params


@pytest.mark.parametrize("hold_s, batches_expected", [(3600.0, 1), (0.0, 2 + 4)])
def test_evaluations_are_held_only_within_the_hold_time(tmp_path, new_store, counts,
                                                        monkeypatch, hold_s, batches_expected):
    # 4 steps of 8 tokens, an evaluation every 8: 4 evaluations, each its own write when the
    # hold time is 0 (a long trial's configs and curve show live, the configs first), all
    # sent with the configs and the end when it is long.
    ctx = _ctx(tmp_path, new_store, steps=4, eval_every=8)
    monkeypatch.setattr(trial_run, "EVAL_HOLD_S", hold_s)
    counts.clear()
    outcome = evaluate(ctx, 0, _configs(ctx))
    assert counts["log_batch"] == batches_expected
    history = MlflowClient(ctx.tracking.tracking_uri).get_metric_history(outcome.run_id,
                                                                         "val_loss")
    assert sorted(m.step for m in history) == [8, 16, 24, 32]


def test_batches_keep_mlflows_limits_and_every_write_in_order():
    metrics = [Metric(f"m{i}", float(i), 0, 0) for i in range(2500)]
    params = [Param(f"p{i}", str(i)) for i in range(150)]
    tags = [RunTag(f"t{i}", str(i)) for i in range(120)]
    calls = list(batches(metrics, params, tags))
    for m, p, t in calls:
        assert len(m) <= MAX_METRICS_PER_BATCH and len(p) + len(t) <= MAX_PARAMS_TAGS_PER_BATCH
        assert len(m) + len(p) + len(t) <= MAX_ENTITIES_PER_BATCH
    assert [x for c in calls for x in c[0]] == metrics
    assert [x for c in calls for x in c[1]] == params
    assert [x for c in calls for x in c[2]] == tags
    # 270 params and tags need 3 calls, and 2500 metrics fit beside them (900 + 900 + 700).
    assert len(calls) == 3


@pytest.mark.parametrize("steps, eval_every, appends", [(1, None, 4), (4, 8, 5)])
def test_an_optuna_trial_appends_to_its_journal_four_or_five_times(tmp_path, new_store, counts,
                                                                   held, monkeypatch, steps,
                                                                   eval_every, appends):
    from optuna.storages.journal import JournalFileBackend

    from sweep.executors.optuna import objective

    ctx = _ctx(tmp_path, new_store, steps=steps, eval_every=eval_every)
    monkeypatch.setattr(objective, "PROGRESS_S", 3600.0)
    study = objective.create_study(ctx)
    appends_per_trial, appends = appends, []
    append = JournalFileBackend.append_logs

    def counted(self, logs):
        appends.append(len(logs))
        return append(self, logs)

    monkeypatch.setattr(JournalFileBackend, "append_logs", counted)
    counts.clear()
    objective.optimize(study, ctx, 3)
    # Per trial: Optuna's new trial, its owner and params in one append, its first evaluation's
    # progress unless that is its last, at the budget's end (the later ones wait PROGRESS_S),
    # its closing records in one, Optuna's end state; each append is one fsync.
    assert len(appends) == 3 * appends_per_trial
    assert counts["log_batch"] == 3 and counts["create_run"] == 3
    assert counts["update_run_info"] == 3 and not counts["search_runs"]
    for t in study.trials:
        assert t.user_attrs[schema.ATTR_STATE] == "COMPLETE"
        for key in (schema.ATTR_RUN_ID, schema.ATTR_BEST_VAL_LOSS, schema.ATTR_MLFLOW_RUN,
                    schema.ATTR_CONSTRAINTS, "n_params", "flops_per_token"):
            assert key in t.user_attrs, key
        assert t.system_attrs  # the constraints the samplers read
        # The first evaluation's progress, where it was not the last (8 of 32 tokens).
        assert t.user_attrs.get(schema.ATTR_PROGRESS, [None])[0] == (8 if steps > 1 else None)


def test_a_held_journal_writes_other_threads_at_once_and_its_own_at_the_end(tmp_path):
    import threading

    import optuna

    from sweep.executors.optuna.storage import held_writes, make_storage

    storage = make_storage(str(tmp_path / "optuna.journal"))
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    with held_writes(storage):
        trial.set_user_attr("mine", 1)
        other = threading.Thread(target=trial.set_user_attr, args=("theirs", 2))
        other.start()
        other.join()
        seen = optuna.load_study(study_name=study.study_name,
                                 storage=make_storage(str(tmp_path / "optuna.journal")))
        assert seen.trials[0].user_attrs == {"theirs": 2}
    assert study.trials[0].user_attrs == {"mine": 1, "theirs": 2}


def test_the_summary_reads_every_curve_in_a_query_per_chunk_not_per_run(tmp_path, new_store,
                                                                        counts, monkeypatch):
    from sweep.tracking import reader, val_loss_histories

    uri = new_store(tmp_path)
    tracker = StudyTracker.start(uri, "curves", {"name": "curves"}, executor="optuna",
                                 algorithm="random")
    runs = []
    for number in range(5):
        with tracker.context.start_trial(number, {"train.lr": 1e-3}) as run:
            for tokens in range(number + 1):  # trial n has n + 1 evaluations
                run.report(8 * (tokens + 1), {"val_loss": 4.0 - 0.1 * tokens - 0.01 * number})
        runs.append(run.run_id)
    monkeypatch.setattr(reader, "HISTORY_CHUNK", 2)
    counts.clear()
    histories = val_loss_histories(uri, runs)
    assert not counts["get_metric_history"]  # 3 bulk queries for 5 runs, none per run
    for number, run_id in enumerate(runs):
        assert histories[run_id] == [(8 * (t + 1), pytest.approx(4.0 - 0.1 * t - 0.01 * number))
                                     for t in range(number + 1)]


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_trial_sends_what_it_holds_before_each_tune_report(tmp_path, new_store, counts,
                                                                 monkeypatch):
    # Ray may end the trial's thread at any report: its configs and evaluations are in the
    # store by then; between reports they wait, so they cost one log_batch per report.
    from sweep.executors.ray import reporting

    ctx = _ctx(tmp_path, new_store, steps=4, eval_every=8)
    client = MlflowClient(ctx.tracking.tracking_uri)
    seen = []

    def tune_report(values):
        run_id = reporter.run.run_id
        stored = client.get_run(run_id).data
        history = client.get_metric_history(run_id, "val_loss")
        seen.append((values["tokens"], "model.d_model" in stored.params,
                     max(m.step for m in history)))

    monkeypatch.setattr(reporting, "session_alive", lambda: True)
    monkeypatch.setattr(reporting.tune, "report", tune_report)
    monkeypatch.setattr(trial_run, "EVAL_HOLD_S", 3600.0)
    opened = open_trial(ctx, 0, _configs(ctx))
    reporter = reporting.TuneReporter(budget_tokens=32, run=opened.run)
    counts.clear()
    outcome = train_trial(ctx, opened, reporter)
    assert outcome.state is schema.TrialState.COMPLETE
    # Reports at 8, 16 and 24 tokens (32, the budget's end, goes with the final report).
    assert seen == [(8, True, 8), (16, True, 16), (24, True, 24)]
    assert counts["log_batch"] == 3 + 1 and counts["update_run_info"] == 1
