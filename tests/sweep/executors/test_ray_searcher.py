"""What the Ray executor tells its searcher's Optuna study, against the Optuna executor.

The same faulty trials run through both executors (a config that diverges, one that raises, one
a pruner stops), and the Optuna trial states their samplers learn from must agree. Trial
outcomes follow from each trial's own params (see `test_ray_executor`): lr 10 with weight decay
1 diverges within 10 steps, before the first evaluation; vocab_size 8 < the corpus's 16 makes
the trainer raise; lr 1e-6 learns nothing and is stopped at the first evaluation after a trial
at lr 3e-2 set the bar.
"""

import logging
import math
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState as OptunaState

from sweep import space
from sweep.executors.optuna import make_storage
from sweep.spec import parse_spec
from sweep.study import run_study

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.slow]

DATA = "synthetic:markov?order=1&vocab=16&seed=0&tokens=60000"
GOOD_LR, BAD_LR, HUGE_LR = 3e-2, 1e-6, 10.0


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level=logging.WARNING)
    yield
    ray.shutdown()


def faulty_spec(executor, seed):
    # pruning may start at the first evaluation (2,048 tokens), after one completed trial
    search = {"executor": executor, "sampler": "random", "n_trials": 4, "parallel": 1,
              "seed": seed, "n_startup_trials": 1, "prune_warmup": 0.25}
    search.update({"scheduler": "asha"} if executor == "ray" else {"pruner": "median"})
    return parse_spec({
        "name": f"faulty-{executor}",
        "data": DATA,
        "model": {"vocab_size": {"choice": [8, 16]}, "seq_len": 32, "d_model": 32,
                  "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 8192, "batch_size": 4, "lr": {"choice": [GOOD_LR, BAD_LR, HUGE_LR]},
                  "weight_decay": 1.0, "warmup": 0.0, "schedule": "constant",
                  "eval_every": 2048, "eval_tokens": 1024},
        "search": search,
        "resources": {"cpus_per_trial": 1},
    })


def kind(params):
    """The sweep state a trial with these params ends in (module docstring)."""
    if params["model.vocab_size"] == 8:
        return "FAILED"
    return {GOOD_LR: "COMPLETE", BAD_LR: "PRUNED", HUGE_LR: "DIVERGED"}[params["train.lr"]]


def faulty_seed():
    """A seed whose 4 draws start with a good trial and hold each faulty kind once."""
    for seed in range(500):
        draws = space.sample_params(faulty_spec("ray", seed), 4, seed=seed)
        kinds = [kind(p) for p in draws]
        if kinds[0] == "COMPLETE" and sorted(kinds) == ["COMPLETE", "DIVERGED", "FAILED",
                                                        "PRUNED"]:
            return seed, draws
    raise AssertionError("no seed gives the draws this test needs")


def key(params):
    return params["model.vocab_size"], params["train.lr"]


def mlflow_states(summary):
    client = MlflowClient(summary.tracking_uri)
    runs = client.search_runs(
        [client.get_run(summary.parent_run_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{summary.parent_run_id}'")
    return {(int(r.data.params["model.vocab_size"]), float(r.data.params["train.lr"])):
            (r.data.tags["sweep.state"], r.data.tags.get("sweep.fail_reason", ""))
            for r in runs}


def ray_searcher_study(out):
    """The searcher's Optuna study as Ray saved it with the experiment."""
    from ray.tune.search.optuna import OptunaSearch

    (experiment,) = (out / "ray").iterdir()
    searcher = OptunaSearch()
    searcher.restore_from_dir(str(experiment))
    return searcher._ot_study


def test_both_executors_tell_their_sampler_the_same_states(tmp_path, new_store):
    seed, draws = faulty_seed()
    expected = {key(p): kind(p) for p in draws}
    studies, states = {}, {}
    for executor in ("optuna", "ray"):
        out = tmp_path / executor
        new_store(out)
        summary = run_study(faulty_spec(executor, seed), out_dir=out, quiet=True)
        states[executor] = mlflow_states(summary)
        assert {k: s for k, (s, _) in states[executor].items()} == expected, executor
        if executor == "optuna":
            studies[executor] = optuna.load_study(
                study_name="faulty-optuna", storage=make_storage(str(out / "optuna.journal")))
        else:
            studies[executor] = ray_searcher_study(out)
    told = {executor: {(t.params["model.vocab_size"], t.params["train.lr"]): t.state
                       for t in study.trials} for executor, study in studies.items()}
    want = {"COMPLETE": OptunaState.COMPLETE, "PRUNED": OptunaState.PRUNED,
            "DIVERGED": OptunaState.FAIL, "FAILED": OptunaState.FAIL}
    assert told["ray"] == told["optuna"] == {k: want[s] for k, s in expected.items()}
    # Only the trial that trained its budget can rank best, in either sampler.
    for study in studies.values():
        assert (study.best_trial.params["model.vocab_size"],
                study.best_trial.params["train.lr"]) == (16, GOOD_LR)
    # A trial that raised names its exception in MLflow under both executors.
    for executor in ("optuna", "ray"):
        (reason,) = [r for s, r in states[executor].values() if s == "FAILED"]
        assert "vocab_size=8" in reason and "trial raised" not in reason, executor


def test_study_search_tells_each_state_without_training():
    from sweep.adapters.ray import search_study
    from sweep.executors.ray.searcher import StudySearch

    def space_fn(trial):
        trial.suggest_float("train.lr", 1e-3, 1e-1, log=True)

    searcher = StudySearch(spec=faulty_spec("ray", 0), baseline=math.log(16), space=space_fn,
                           metric="val_loss", mode="min",
                           sampler=optuna.samplers.RandomSampler(seed=0))
    results = {
        "complete": ({"sweep_state": "COMPLETE", "val_loss": 2.0}, False),
        # diverged after finite evaluations: its best finite loss is the lowest here
        "diverged": ({"sweep_state": "DIVERGED", "val_loss": 1.0}, False),
        "nan": ({"sweep_state": "DIVERGED", "val_loss": float("nan")}, False),
        "stopped": ({"val_loss": 0.5, "tokens": 1024}, False),  # the scheduler stopped it
        "pruned": ({"sweep_state": "PRUNED", "val_loss": 0.7}, False),
        "raised": (None, True),
    }
    for trial_id, (result, error) in results.items():
        searcher.suggest(trial_id)
        searcher.on_trial_complete(trial_id, result, error=error)
    study = search_study(searcher)
    states = [t.state for t in study.trials]
    assert states == [OptunaState.COMPLETE, OptunaState.FAIL, OptunaState.FAIL,
                      OptunaState.PRUNED, OptunaState.PRUNED, OptunaState.FAIL]
    assert study.best_value == 2.0


def test_a_trial_that_raises_outside_its_run_records_the_exception(tmp_path, new_store):
    """A trainable that raises before it opens its run, and one whose worker dies."""
    import os
    import signal

    from ray import tune

    from sweep.executors.ray.callback import StudyCallback
    from sweep.study.trial import StudyContext
    from sweep.tracking import StudyTracker

    spec = faulty_spec("ray", 0)
    tracker = StudyTracker.start(new_store(tmp_path), spec.name, spec.to_data(),
                                 executor="ray", algorithm="random+asha")
    ctx = StudyContext(spec, tmp_path, tracker.context)

    def trainable(config):
        if config["sweep.trial_number"] == 0:
            raise ValueError("the corpus shard 42 is unreadable")
        os.kill(os.getpid(), signal.SIGKILL)

    tuner = tune.Tuner(
        trainable,
        param_space={"sweep.trial_number": tune.grid_search([0, 1]), "train.lr": GOOD_LR},
        run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), verbose=0,
                                  callbacks=[StudyCallback(ctx, None)],
                                  failure_config=tune.FailureConfig(max_failures=0)))
    tuner.fit()
    client = MlflowClient(ctx.tracking.tracking_uri)
    runs = {int(r.data.tags["sweep.trial_number"]): r for r in client.search_runs(
        [ctx.tracking.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{ctx.tracking.parent_run_id}'")}
    assert sorted(runs) == [0, 1]
    assert all(r.data.tags["sweep.state"] == "FAILED" for r in runs.values())
    raised = runs[0].data.tags["sweep.fail_reason"]
    assert raised == "ValueError: the corpus shard 42 is unreadable"
    died = runs[1].data.tags["sweep.fail_reason"]
    assert "trial raised" not in died and "Error" in died.split(":")[0]
    # The worker's traceback is kept with the run.
    path = client.download_artifacts(runs[0].info.run_id, "fail_reason.txt", str(tmp_path))
    text = Path(path).read_text()
    assert 'raise ValueError("the corpus shard 42 is unreadable")' in text
    assert "\x1b[" not in text
