"""A signal that arrives once every trial has ended does not cut the study's summary short."""

import os
import signal

from mlflow import MlflowClient

from sweep.schema import TAG_STATE, TrialState
from sweep.spec import parse_spec
from sweep.study import driver, run_study
from sweep.tracking import find_study


def test_sigterm_during_the_summary_is_held_until_the_study_is_recorded(tmp_path, monkeypatch,
                                                                       new_store):
    spec = parse_spec({
        "name": "summary-signal",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 2048, "batch_size": 4, "lr": {"float": [1e-3, 1e-2], "log": True},
                  "eval_tokens": 256, "device": "cpu"},
        "search": {"sampler": "random", "pruner": "none", "n_trials": 2},
    })
    real = driver.finish_study
    sent = []

    def finish_with_a_signal(*args, **kwargs):
        if kwargs.get("interrupted") is None:
            os.kill(os.getpid(), signal.SIGTERM)  # e.g. `sweep stop` just as the last trial ended
            sent.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "finish_study", finish_with_a_signal)
    before = signal.getsignal(signal.SIGTERM)
    new_store(tmp_path / "out")
    summary = run_study(spec, out_dir=tmp_path / "out", quiet=True)
    assert sent == [True]
    assert summary.state == "COMPLETE" and summary.counts["COMPLETE"] == 2
    uri = summary.tracking_uri
    _, parent = find_study(uri, spec.name)
    run = MlflowClient(uri).get_run(parent)
    assert run.info.status == "FINISHED" and run.data.tags[TAG_STATE] == TrialState.COMPLETE
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored, not left ignored
