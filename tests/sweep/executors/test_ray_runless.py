"""A Ray trial whose run could not be created (the MLflow server down) still gets its one run.

The server stops as the searcher hands out trial 1, so trial 1's worker cannot create its run
and the driver's callback cannot either; it stays down until the end of the Tune experiment,
where recording the trial fails too. The driver waits out the fault, and its next attempt reads
the experiment Tune saved in the study folder (as a resume does): trial 1 gets its run,
INTERRUPTED with its params, and is trained again as trial 2.
"""

import logging

import pytest

from sweep.executors.ray import tuning
from sweep.executors.ray.callback import StudyCallback
from sweep.executors.ray.searcher import StudySearch
from sweep.schema import CONFIG_TRIAL_NUMBER
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.tracking import find_study, read_trials

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.server, pytest.mark.slow]

NAME = "ray-runless"


def test_a_ray_trial_interrupted_while_its_run_was_created_gets_an_interrupted_run(
        tmp_path, stoppable_server, monkeypatch):
    server = stoppable_server
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    events = []
    suggest, on_error, record = (StudySearch.suggest, StudyCallback.on_trial_error,
                                 tuning.record_experiments)

    def suggest_then_stop(self, trial_id):
        config = suggest(self, trial_id)
        if config and config[CONFIG_TRIAL_NUMBER] == 1 and "stopped" not in events:
            server.stop()  # the outage: trial 1's worker creates its run next
            events.append("stopped")
        return config

    def on_trial_error(self, *args, **kwargs):
        events.append("errored")
        return on_error(self, *args, **kwargs)  # its run cannot be created here either

    def record_then_start(ctx, stopped_by=None):
        events.append("record")
        try:
            return record(ctx, stopped_by)
        finally:
            if server.proc is None:  # back once the experiment's end found it down
                server.start()

    monkeypatch.setattr(StudySearch, "suggest", suggest_then_stop)
    monkeypatch.setattr(StudyCallback, "on_trial_error", on_trial_error)
    monkeypatch.setattr(tuning, "record_experiments", record_then_start)
    spec = parse_spec({
        "name": NAME,
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 2048, "batch_size": 4, "lr": {"float": [1e-3, 1e-2], "log": True},
                  "eval_every": 1024, "eval_tokens": 256, "device": "cpu"},
        "search": {"executor": "ray", "sampler": "random", "scheduler": "none", "n_trials": 2,
                   "parallel": 1, "seed": 0, "fault_wait_s": 120},
        "resources": {"cpus_per_trial": 1},
        "tracking": {"uri": server.url},
    })
    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level=logging.WARNING)  # workers get the env above
    try:
        summary = run_study(spec, out_dir=tmp_path / "out", quiet=True)
        # The experiment's end found the store down; the next attempt recorded trial 1.
        assert events == ["record", "stopped", "errored", "record", "record", "record"]
        assert {k: v for k, v in summary.counts.items() if v} == {"COMPLETE": 2,
                                                                  "INTERRUPTED": 1}
        runs = read_trials(server.url, *find_study(server.url, NAME))
        assert sorted(r["trial"] for r in runs) == [0, 1, 2]  # one run per trial number
        by_number = {r["trial"]: r for r in runs}
        assert [str(by_number[n]["state"]) for n in (0, 1, 2)] == [
            "COMPLETE", "INTERRUPTED", "COMPLETE"]
        runless, retry = by_number[1], by_number[2]
        assert runless["fail_reason"] == \
            "interrupted: the MLflow tracking server does not answer"
        assert runless["params"]["model.d_model"] == 16
        assert runless["params"]["train.lr"] == retry["params"]["train.lr"]
        assert retry["retry_of"] == 1 and by_number[0]["retry_of"] is None
        assert runless["params"]["train.lr"] != by_number[0]["params"]["train.lr"]

        # Run again: nothing to train, nothing recorded twice.
        del events[:]
        again = run_study(spec, out_dir=tmp_path / "out", quiet=True)
        assert events == ["record"]
        assert again.counts == summary.counts
        after = read_trials(server.url, *find_study(server.url, NAME))
        assert sorted(r["trial"] for r in after) == [0, 1, 2]
        assert {r["run_id"]: str(r["state"]) for r in after} == {
            r["run_id"]: str(r["state"]) for r in runs}
    finally:
        ray.shutdown()
