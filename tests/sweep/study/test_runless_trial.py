"""A trial whose run could not be created (the MLflow server down) still gets its one run."""

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage

from sweep.schema import ATTR_RETRY_OF, ATTR_STATE
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.tracking import TrialContext, find_study, read_trials

NAME = "runless"


@pytest.mark.server
@pytest.mark.slow
def test_a_trial_interrupted_while_its_run_was_created_gets_an_interrupted_run(
        tmp_path, stoppable_server, monkeypatch):
    server = stoppable_server
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    real, calls = TrialContext.start_trial, []

    def start_trial(self, number, *args, **kwargs):
        calls.append(number)
        if len(calls) != 2:
            return real(self, number, *args, **kwargs)
        server.stop()  # the outage: the server is gone while trial 1's run is created
        try:
            return real(self, number, *args, **kwargs)
        finally:
            server.start()  # back for the study's retry

    monkeypatch.setattr(TrialContext, "start_trial", start_trial)
    spec = parse_spec({
        "name": NAME,
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 4096, "batch_size": 4, "lr": {"float": [1e-3, 1e-2], "log": True},
                  "eval_every": 1024, "eval_tokens": 256, "device": "cpu"},
        "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 3,
                   "seed": 0, "fault_wait_s": 120},
        "tracking": {"uri": server.url},
    })
    summary = run_study(spec, out_dir=tmp_path / "out", quiet=True)
    assert {k: v for k, v in summary.counts.items() if v} == {"COMPLETE": 3, "INTERRUPTED": 1}
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "out" / "optuna.journal")))
    trials = optuna.load_study(study_name=NAME, storage=storage).get_trials()
    assert [t.user_attrs.get(ATTR_STATE) for t in trials] == [
        "COMPLETE", "INTERRUPTED", "COMPLETE", "COMPLETE"]
    assert trials[2].user_attrs[ATTR_RETRY_OF] == 1
    runs = read_trials(server.url, *find_study(server.url, NAME))
    assert sorted(r["trial"] for r in runs) == [0, 1, 2, 3]  # one run per trial number
    (run,) = [r for r in runs if r["trial"] == 1]
    assert str(run["state"]) == "INTERRUPTED"
    assert run["fail_reason"].startswith("interrupted: the MLflow tracking server does not")
    assert run["params"]["train.lr"] == trials[1].params["train.lr"]
    assert run["params"]["model.d_model"] == 16
