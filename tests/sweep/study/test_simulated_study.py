"""A simulated scaling study end to end: the law in place of training, through the Optuna
executor, MLflow and the analysis, marked simulated everywhere."""

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from sweep.cli import app
from sweep.schema import (
    METRIC_FINAL_VAL_LOSS,
    METRIC_N_PARAMS,
    METRIC_N_TOKENS,
    TAG_NOTE,
    TAG_SIMULATED,
    TrialState,
)
from sweep.simulate.law import LAWS
from sweep.simulate.source import eval_steps
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.tracking import read_trials

ROOT = Path(__file__).resolve().parents[3]


def simulated_spec(name, noise=0.0):
    return parse_spec({
        "name": name,
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 32},
        "train": {"batch_size": 8, "lr": 1e-2, "eval_tokens": 256, "eval_every": 10**9},
        "search": {"executor": "optuna"},
        "scaling": {"budgets": [1e9, 3e9, 1e10], "sizes_per_budget": 3, "span": 3,
                    "rule": {"d_model": {"min": 8, "max": 128, "step": 8}, "n_layers": 1,
                             "d_head": 8}},
        "simulate": {"law": "chinchilla", "noise": noise, "seed": 0},
    })


def test_the_evaluations_are_the_trainers():
    """After the first step reaching each multiple of eval_every, and at the end."""
    assert eval_steps(10, 256, 512) == [2, 4, 6, 8, 10]
    assert eval_steps(10, 300, 1000) == [4, 7, 10]
    assert eval_steps(3, 256, 10_000) == [3]


@pytest.mark.slow
def test_a_simulated_scaling_study_runs_end_to_end_and_recovers_the_law(tmp_path, new_store):
    """Every trial's final loss is the law's at (N, D) (noise 0); VPNLS on them gives the
    law's N_opt at 1e11 FLOPs within 1% (it recovers a noise-free law to 1e-6, test_plan)."""
    out = tmp_path / "out"
    new_store(out)
    spec = simulated_spec("sim-scaling")
    summary = run_study(spec, out_dir=out, quiet=True)
    assert {k: v for k, v in summary.counts.items() if v} == {"COMPLETE": 9}
    client = MlflowClient(summary.tracking_uri)
    parent = client.get_run(summary.parent_run_id)
    assert parent.data.tags[TAG_SIMULATED] == "law chinchilla; noise 0; seed 0"
    assert "SIMULATED" in parent.data.tags[TAG_NOTE]
    trials = read_trials(summary.tracking_uri, parent.info.experiment_id,
                         summary.parent_run_id)
    for t in trials:
        run = client.get_run(t["run_id"])
        assert run.data.tags[TAG_SIMULATED] == "law chinchilla; noise 0; seed 0"
        assert run.data.tags[TAG_NOTE].startswith("SIMULATED")
        m = t["metrics"]
        assert t["state"] is TrialState.COMPLETE
        assert m[METRIC_FINAL_VAL_LOSS] == pytest.approx(
            LAWS["chinchilla"].loss(m[METRIC_N_PARAMS], m[METRIC_N_TOKENS]), rel=1e-9)
    result = CliRunner().invoke(app, ["analyze", "scaling", str(out), "--approach", "vpnls",
                                      "--budget", "1e11", "--out", str(tmp_path / "a")],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("SIMULATED study: every loss drawn from a law")
    result = CliRunner().invoke(app, ["analyze", "scaling", str(out), "--approach", "vpnls",
                                      "--budget", "1e11", "--out", str(tmp_path / "a"),
                                      "--json"])
    report = json.loads(result.stdout)
    assert report["simulated"] == "law chinchilla; noise 0; seed 0"
    n_opt = report["verdict"]["rows"][0]["n_params"]
    assert n_opt == pytest.approx(LAWS["chinchilla"].optimal_split(1e11)[0], rel=0.01)
    shown = CliRunner().invoke(app, ["results", str(out)], terminal_width=200)
    assert shown.exit_code == 0 and "SIMULATED (law chinchilla" in shown.output
    # sweep plan --law STUDY: the law its trials fit (VPNLS), here the one they were drawn from.
    planned = CliRunner().invoke(app, ["plan", str(ROOT / "studies" / "scaling-isoflop.yaml"),
                                       "--law", str(out), "--repeats", "2", "--json"])
    assert planned.exit_code == 0, planned.output
    law = json.loads(planned.stdout)["law"]
    assert law["alpha"] == pytest.approx(0.34, abs=1e-3)
    assert law["beta"] == pytest.approx(0.28, abs=1e-3)


def test_validate_says_a_study_is_simulated(tmp_path):
    import yaml

    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(simulated_spec("sim-validate", noise=0.01).to_data()))
    result = CliRunner().invoke(app, ["validate", str(path), "--samples", "4"],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "SIMULATED: every trial's loss is drawn from a law (law chinchilla; noise 0.01; " \
        "seed 0)" in result.output
    result = CliRunner().invoke(app, ["validate", str(path), "--samples", "4", "--json"])
    assert json.loads(result.stdout)["simulate"] == {"law": "chinchilla", "noise": 0.01,
                                                     "seed": 0}
