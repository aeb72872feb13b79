"""``sweep analyze hparams`` on an hparams study recorded through the project's tracking API.

The losses are `sweep.simulate.law.LAWS["chinchilla-lr"]`'s without noise at each budget's
compute-optimal split, so the vertex fit's answer is the law's: eta_opt = 0.3118 C^-0.125 and
B_opt = 0.2920 C^0.3271 (DeepSeek LLM, sec. 3.1).
"""

import json
import math

import numpy as np
import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from sweep import schema as S
from sweep.cli import app
from sweep.simulate.law import LAWS
from sweep.spec import FromStudyDomain
from sweep.spec.from_study import read_law
from sweep.tracking import StudyTracker

LAW = LAWS["chinchilla-lr"]
BUDGETS = [1e17, 1e18]
LRS = np.exp(np.arange(-7.0, -4.0))           # a factor e apart
BATCHES = [2 ** k for k in range(16, 19)]     # tokens per step
SPEC = {"name": "hp", "data": "builtin:python-stdlib", "model": {"seq_len": 32},
        "train": {"batch_size": 8},
        "hparams": {"budgets": BUDGETS, "lr": {"low": 1e-4, "high": 1e-2, "n": 3},
                    "batch_size": {"values": BATCHES},
                    "shape": {"rule": {"d_model": [32, 64, 96], "aspect": 32, "d_head": 16}}}}


def record(uri):
    tracker = StudyTracker.start(uri, SPEC["name"], SPEC, executor="optuna", algorithm="tpe")
    number = 0
    for c in BUDGETS:
        n, d = LAW.optimal_split(c)
        for lr in LRS:
            for b in BATCHES:
                run = tracker.context.start_trial(number, {
                    "model": {"seq_len": 32}, "train": {"lr": float(lr), "batch_tokens": b}})
                run.log_metrics({S.METRIC_BUDGET_FLOPS: c})
                diverged = lr == LRS[-1] and b == BATCHES[0]
                run.log_result({"state": S.TrialState.DIVERGED if diverged
                                else S.TrialState.COMPLETE,
                                S.METRIC_FINAL_VAL_LOSS: math.nan if diverged
                                else LAW.loss(n, d, lr, b)})
                number += 1
    tracker.finish()
    return tracker


def test_the_laws_of_a_recorded_study_and_its_artifacts(tmp_path, new_store):
    tracker = record(new_store(tmp_path))
    res = CliRunner().invoke(app, ["analyze", "hparams", str(tmp_path), "--bootstrap", "20",
                                   "--target", "1e21", "--json"])
    assert res.exit_code == 0, res.output
    fits = {(f["hparam"], f["method"]): f for f in json.loads(res.stdout)["fits"]}
    lr, batch = fits[("lr", "vertex")], fits[("batch_size", "vertex")]
    assert lr["exponent"] == pytest.approx(-0.125, abs=1e-6)
    assert batch["exponent"] == pytest.approx(0.3271, abs=1e-6)
    (pred,) = lr["predictions"]
    assert pred["value"] == pytest.approx(LAW.lr.optimum(1e21), rel=1e-5)
    assert (tmp_path / "analysis" / "hparams.png").stat().st_size > 0
    written = json.loads((tmp_path / "analysis" / "hparams.json").read_text())
    assert written == {"kind": "hparams", "study": "hp", **json.loads(res.stdout)}
    assert written["verdict"] == {"lr": "vertex", "batch_size": "vertex"}  # inside the grids
    law = read_law(FromStudyDomain(from_study=str(tmp_path)))  # what a later study takes
    assert (law.coef, law.exponent, law.estimator) == (lr["coef"], lr["exponent"], "vertex")
    client = MlflowClient(tracker.context.tracking_uri)
    logged = {a.path for a in client.list_artifacts(tracker.parent_run_id, "hparams_analysis")}
    assert {S.HPARAMS_ANALYSIS_ARTIFACT, S.HPARAMS_PLOTS_ARTIFACT_DIR} <= logged


def test_a_study_of_another_kind_and_a_bad_target_are_refused(tmp_path):
    res = CliRunner().invoke(app, ["analyze", "hparams", str(tmp_path), "--target", "-1"])
    assert res.exit_code == 2 and "--target -1.0: must be a FLOP count > 0" in res.output
    res = CliRunner().invoke(app, ["analyze", "hparams", str(tmp_path), "--band", "2"])
    assert res.exit_code == 2 and "--band 2.0: must be in [0, 1)" in res.output
