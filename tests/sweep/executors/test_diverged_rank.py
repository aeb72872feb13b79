"""A diverged trial never ranks first in MLflow, whatever loss metric a search orders by.

A trial that learns well and then diverges has, before the fix, finite ``val_loss``,
``train_loss`` and ``final_val_loss`` values lower than those of a complete trial that learned
little; ordering by any of them ranked the diverged run first. The trials run through the
Optuna executor (in this process, one worker) into a real SQLite MLflow store; the divergence
is a nan loss injected into the trainer at a known step, as `sweep.train` tests do.
"""

import math

import torch
from mlflow import MlflowClient

from sweep.results import load_results
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.study import trial as trial_path

GOOD_LR, BAD_LR = 3e-2, 1e-6
NAN_STEP = 50  # of 64; the good trial has evaluated 6 times by then


def test_a_diverged_run_never_comes_first_by_any_loss(tmp_path, monkeypatch, new_store):
    real = trial_path.Trainer

    class DivergesLate(real):
        """A trainer whose lr-3e-2 trials get a nan training loss at step `NAN_STEP`."""

        def __init__(self, model, train, *args, **kwargs):
            super().__init__(model, train, *args, **kwargs)
            if train.lr == GOOD_LR:
                forward, calls = self._forward, []

                def poisoned(x, y):
                    logits, loss = forward(x, y)
                    calls.append(torch.is_grad_enabled())
                    if sum(calls) >= NAN_STEP:
                        loss = loss * math.nan
                    return logits, loss

                self._forward = poisoned

    monkeypatch.setattr(trial_path, "Trainer", DivergesLate)
    spec = parse_spec({
        "name": "rank",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=60000",
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 8192, "batch_size": 4, "lr": {"choice": [GOOD_LR, BAD_LR]},
                  "eval_every": 1024, "eval_tokens": 1024},
        "search": {"executor": "optuna", "sampler": "grid", "pruner": "none", "n_trials": 2},
    })
    new_store(tmp_path)
    summary = run_study(spec, out_dir=tmp_path, quiet=True)
    client = MlflowClient(summary.tracking_uri)
    parent = client.get_run(summary.parent_run_id)
    runs = client.search_runs([parent.info.experiment_id],
                              f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    by_lr = {float(r.data.params["train.lr"]): r for r in runs}
    diverged, complete = by_lr[GOOD_LR], by_lr[BAD_LR]
    assert diverged.data.tags["sweep.state"] == "DIVERGED"
    assert complete.data.tags["sweep.state"] == "COMPLETE"
    history = client.get_metric_history(diverged.info.run_id, "val_loss")
    finite = [m for m in history if math.isfinite(m.value)]
    # The premise: before diverging it learned far more than the complete trial did.
    assert len(finite) >= 5
    assert max(m.value for m in finite[2:]) < complete.data.metrics["final_val_loss"]
    assert "final_val_loss" not in diverged.data.metrics
    assert "best_val_loss" not in diverged.data.metrics
    # Its loss curves end in one nan, after the last finite point.
    (last,) = [m for m in history if not math.isfinite(m.value)]
    assert last.step > max(m.step for m in finite)
    for metric in ("final_val_loss", "val_loss", "best_val_loss", "train_loss"):
        for direction in ("ASC", "DESC"):
            ranked = client.search_runs(
                [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
                order_by=[f"metrics.{metric} {direction}"])
            assert ranked[0].info.run_id == complete.info.run_id, (metric, direction)
    # The results table still shows it: DIVERGED, no loss to rank by, after the complete one.
    frame = load_results(tmp_path)
    assert list(frame["state"]) == ["COMPLETE", "DIVERGED"]
    row = frame.iloc[1]
    assert math.isnan(row["best_val_loss"]) and math.isnan(row["final_val_loss"])
    assert "non-finite loss" in row["fail_reason"]
    assert summary.counts["DIVERGED"] == 1 and summary.counts["COMPLETE"] == 1
