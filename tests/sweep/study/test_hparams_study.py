"""A tiny hparams study end to end on the Optuna executor, then its analysis and a resume.

Two budgets (3e9 and 9e9 FLOPs) x three learning rates at one batch size (256 tokens per step)
on the Python standard library sources: 6 trials of a few seconds each, every one trained to its
D = C / 6N tokens and recorded with its budget and grid point.
"""

import json

import pytest
from typer.testing import CliRunner

from sweep.cli import app
from sweep.kinds.hparams import grid as hp
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.tracking import find_study, read_trials

SPEC = {"name": "hparams-e2e", "data": "builtin:python-stdlib",
        "model": {"seq_len": 32}, "train": {"batch_size": 8, "warmup": 0.1,
                                            "eval_tokens": 8192},
        "hparams": {"budgets": [3e9, 9e9], "lr": {"low": 2e-3, "high": 3.2e-2, "n": 3},
                    "batch_size": {"values": [256]},
                    "shape": {"rule": {"d_model": [16, 24, 32], "aspect": 16, "d_head": 8}}},
        "search": {"executor": "optuna"}}


@pytest.mark.slow
def test_a_tiny_hparams_study_trains_its_grid_and_fits_the_lr_law(tmp_path, new_store):
    spec = parse_spec(SPEC)
    uri = new_store(tmp_path / "run")
    summary = run_study(spec, out_dir=tmp_path / "run", quiet=True)
    assert summary.counts.get("COMPLETE") == 6 == sum(summary.counts.values()), summary.counts
    trials = read_trials(uri, *find_study(uri, spec.name))
    expected = {p.label: p for p in hp.points(spec)}
    assert {t["params"][hp.POINT] for t in trials} == set(expected)
    for t in trials:
        point = expected[t["params"][hp.POINT]]
        assert t["metrics"]["budget_flops"] == point.budget_flops
        assert t["params"]["train.lr"] == point.lr
        assert t["params"]["train.batch_tokens"] == point.batch_tokens
        assert t["metrics"]["n_params"] == point.candidate.n_params
        # whole optimizer steps of D = C / 6N
        assert point.n_tokens - point.batch_tokens < t["metrics"]["tokens"] <= point.n_tokens
    res = CliRunner().invoke(app, ["analyze", "hparams", str(tmp_path / "run"), "--bootstrap",
                                   "50", "--target", "1e12", "--json"])
    assert res.exit_code == 0, res.output
    fits = {(f["hparam"], f["method"]) for f in json.loads(res.stdout)["fits"]}
    assert ("lr", "band") in fits
    assert (tmp_path / "run" / "analysis" / "hparams.png").stat().st_size > 0
    again = run_study(spec, out_dir=tmp_path / "run", quiet=True)  # resumed: nothing to train
    assert again.counts == summary.counts
