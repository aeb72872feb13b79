"""``sweep analyze transfer`` on a transfer study recorded through the project's tracking API.

The losses follow loss = 2 + 0.05 (log2 lr - c_w)^2 with c_w = -8 - log2(w / 64) under SP (the
best lr halves per doubling of width) and c_w = -8 under muP, so the answer is known: SP moves
2 grid steps from width 64 to 256 with drift -1, muP none with drift 0.
"""

import json
import math

from mlflow import MlflowClient
from typer.testing import CliRunner

from sweep import schema as S
from sweep.cli import app
from sweep.tracking import StudyTracker

SPEC = {"name": "tr", "data": "builtin:python-stdlib",
        "model": {"parametrization": {"choice": ["sp", "mup"]}, "base_d_model": 64},
        "train": {"tokens": 4096, "lr": {"choice": [2.0 ** e for e in range(-11, -4)]}},
        "transfer": {"widths": [64, 128, 256]}}


def record(uri, spec):
    tracker = StudyTracker.start(uri, spec["name"], spec,
                                 executor="optuna", algorithm="tpe")
    number = 0
    for par in ("sp", "mup"):
        for w in (64, 128, 256):
            for e in range(-11, -4):
                c = -8 - (math.log2(w / 64) if par == "sp" else 0)
                run = tracker.context.start_trial(number, {
                    "model": {"d_model": w, "parametrization": par},
                    "train": {"lr": 2.0 ** e}})
                diverged = e == -5 and par == "sp"
                run.log_result({"state": S.TrialState.DIVERGED if diverged
                                else S.TrialState.COMPLETE,
                                S.METRIC_FINAL_VAL_LOSS: math.nan if diverged
                                else 2 + 0.05 * (e - c) ** 2})
                number += 1
    tracker.finish()
    return tracker


def test_the_drift_of_a_recorded_study_and_its_artifacts(tmp_path, new_store):
    tracker = record(new_store(tmp_path), SPEC)
    res = CliRunner().invoke(app, ["analyze", "transfer", str(tmp_path), "--bootstrap", "100",
                                   "--json"])
    assert res.exit_code == 0, res.output
    reports = {r["group"]: r for r in json.loads(res.stdout)}
    sp, mup = reports["parametrization=sp"], reports["parametrization=mup"]
    assert [w["lr_best"] for w in sp["widths"]] == [2.0 ** -8, 2.0 ** -9, 2.0 ** -10]
    assert (sp["grid_steps"], mup["grid_steps"]) == (2, 0)
    assert abs(sp["drift"] + 1) < 1e-9 and abs(mup["drift"]) < 1e-9
    assert sp["widths"][0]["losses"][-1] is None  # the diverged point
    assert (tmp_path / "analysis" / "transfer.png").stat().st_size > 0
    client = MlflowClient(tracker.context.tracking_uri)
    logged = {a.path for a in client.list_artifacts(tracker.parent_run_id,
                                                    "transfer_analysis")}
    assert {S.TRANSFER_ANALYSIS_ARTIFACT, S.TRANSFER_PLOTS_ARTIFACT_DIR} <= logged
    res = CliRunner().invoke(app, ["analyze", "transfer", str(tmp_path), "--bootstrap", "0"])
    text = " ".join(res.output.split())
    assert res.exit_code == 0 and "moves 2 grid step(s) (x2 each)" in text


def test_bad_input_exits_2(tmp_path, new_store):
    res = CliRunner().invoke(app, ["analyze", "transfer", str(tmp_path / "none")])
    assert res.exit_code == 2 and "no study" in res.output
    record(new_store(tmp_path), {k: v for k, v in SPEC.items() if k != "transfer"})
    res = CliRunner().invoke(app, ["analyze", "transfer", str(tmp_path)])
    assert res.exit_code == 2
    assert "is not a transfer study" in " ".join(res.output.split())
