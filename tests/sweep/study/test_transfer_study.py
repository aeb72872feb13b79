"""studies/mup-transfer.yaml, made small enough for CI: muP's best learning rate stays, SP's moves.

The variant keeps the shipped study's corpus, widths (64, 128, 256), head width, base width and
grid spacing (factors of 2) and shrinks the rest: 1 layer instead of 2, 6e4 tokens instead of
3e5, 5 learning rates (2^-10 to 2^-6) instead of 7, one evaluation at the end: about 100
CPU-seconds. Measured (twice, the same numbers: CPU training is deterministic), the best grid
index per width was 3, 2, 1 under SP (2 steps down, vertex drift -1.21 doublings of lr per
doubling of width, 90% bootstrap interval [-2, -0.51]) and 3, 3, 3 under muP (drift 0.00,
[-0.68, +0.85]). The full study, at 5x the tokens, measured SP moving one step only (its
header), so this result has been seen on one machine and one seed, with the 0.02-0.1 nats
between neighbouring rates that such short training leaves. The assertion is the issue's:
under muP the best learning rate moves by at most one grid step across the widths, under SP
by more.
"""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sweep.cli import app
from sweep.spec import parse_spec
from sweep.study import run_study

STUDY = Path(__file__).resolve().parents[3] / "studies" / "mup-transfer.yaml"
LRS = [2.0 ** e for e in range(-10, -5)]


def small_variant():
    data = yaml.safe_load(STUDY.read_text())
    data["name"] = "mup-transfer-ci"
    data["model"]["n_layers"] = 1
    data["train"].update(tokens=60_000, eval_every=60_000, lr={"choice": LRS})
    return parse_spec(data)


@pytest.mark.slow
def test_mup_keeps_its_best_learning_rate_across_widths_and_sp_does_not(tmp_path):
    spec = small_variant()
    assert spec.transfer.widths == [64, 128, 256]
    summary = run_study(spec, out_dir=tmp_path / "run", quiet=True)
    assert summary.counts.get("COMPLETE", 0) + summary.counts.get("DIVERGED", 0) == 30, \
        summary.counts
    result = CliRunner().invoke(app, ["analyze", "transfer", str(tmp_path / "run"),
                                      "--bootstrap", "200", "--json"])
    assert result.exit_code == 0, result.output
    reports = {r["group"]: r for r in json.loads(result.stdout)}
    best = {group: [w["best_index"] for w in r["widths"]] for group, r in reports.items()}
    assert reports["parametrization=mup"]["grid_steps"] <= 1, best
    assert reports["parametrization=sp"]["grid_steps"] >= 2, best
    assert (tmp_path / "run" / "analysis" / "transfer.png").stat().st_size > 0

    again = run_study(spec, out_dir=tmp_path / "run", quiet=True)  # resumed: nothing to train
    assert again.counts == summary.counts
