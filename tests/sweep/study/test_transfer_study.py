"""studies/mup-transfer.yaml at three widths and five rates, for CI: muP's best rate stays.

The variant is the shipped study (1 layer, 6e4 tokens, one evaluation on 64 Ki tokens) at widths
64, 128 and 256 with the rates 2^-10 to 2^-6 and one seed (seed 0) instead of two: 30 trials,
about 100 CPU-seconds. The assertion is the issue's: under muP the best learning rate moves by
at most one grid step across the widths, under SP by more. Measured (torch 2.13 CPU;
deterministic): best rates 2^-7, 2^-8, 2^-9 under SP (2 steps; vertex drift -1.31 doublings of
lr per doubling of width, 90% bootstrap interval [-1.84, -0.50]) and 2^-7 at every width under
muP (drift 0.00, [-0.66, +0.86]). With both seeds, as shipped, the best rates were the same
(drifts -0.97 and +0.05; 193 CPU-seconds).
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweep.cli import app
from sweep.spec import parse_spec
from sweep.spec.loader import read_yaml
from sweep.study import run_study

STUDY = Path(__file__).resolve().parents[3] / "studies" / "mup-transfer.yaml"
LRS = [2.0 ** e for e in range(-10, -5)]


def small_variant():
    data = read_yaml(STUDY.read_text())  # the spec loader: 6.0e4 is a number, as in sweep run
    data["name"] = "mup-transfer-ci"
    data["train"]["lr"] = {"choice": LRS}
    data["train"]["seed"] = 0
    data["transfer"]["widths"] = [64, 128, 256]
    return parse_spec(data)


@pytest.mark.slow
def test_mup_keeps_its_best_learning_rate_across_widths_and_sp_does_not(tmp_path, new_store):
    spec = small_variant()
    new_store(tmp_path / "run")
    assert spec.transfer.widths == [64, 128, 256]
    summary = run_study(spec, out_dir=tmp_path / "run", quiet=True)
    assert summary.counts.get("COMPLETE", 0) + summary.counts.get("DIVERGED", 0) == 30, \
        summary.counts
    result = CliRunner().invoke(app, ["analyze", "transfer", str(tmp_path / "run"),
                                      "--bootstrap", "200", "--json"])
    assert result.exit_code == 0, result.output
    reports = {r["group"]: r for r in json.loads(result.stdout)}
    assert set(reports) == {"parametrization=sp", "parametrization=mup"}
    best = {group: [w["best_index"] for w in r["widths"]] for group, r in reports.items()}
    assert reports["parametrization=mup"]["grid_steps"] <= 1, best
    assert reports["parametrization=sp"]["grid_steps"] >= 2, best
    assert (tmp_path / "run" / "analysis" / "transfer.png").stat().st_size > 0

    again = run_study(spec, out_dir=tmp_path / "run", quiet=True)  # resumed: nothing to train
    assert again.counts == summary.counts
