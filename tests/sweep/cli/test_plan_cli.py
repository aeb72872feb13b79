"""``sweep plan``: its refusals are one line, exit 2 and no heavy library; its JSON output."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from testsupport import cli_probe, tiny_spec
from typer.testing import CliRunner

from sweep.cli import app

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "studies" / "scaling-isoflop.yaml"
HEAVY = ("torch", "mlflow", "optuna", "scipy", "pandas", "numpy")


def _probe(args, cwd):
    proc = subprocess.run([sys.executable, "-c", cli_probe(HEAVY), *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _bad_inputs(tmp_path):
    search = tmp_path / "search.yaml"
    search.write_text(yaml.safe_dump(tiny_spec("search")))
    not_a_law = tmp_path / "law.yaml"
    not_a_law.write_text(yaml.safe_dump({"E": 1.7, "A": 400, "alpha": 0.3}))
    negative = tmp_path / "negative.yaml"
    negative.write_text(yaml.safe_dump({"law": {"E": 1.7, "A": 400, "B": 400, "alpha": -0.3,
                                                "beta": 0.3}}))
    return {
        "unknown law": ([SPEC, "--law", "kaplan"], "--law kaplan: not a law name"),
        "not a law file": ([SPEC, "--law", not_a_law], "missing B, beta"),
        "a law out of range": ([SPEC, "--law", negative], "alpha=-0.3: must be > 0"),
        "not a scaling study": ([search], "a search study; sweep plan simulates a scaling"),
        "repeats": ([SPEC, "--repeats", "1"], "--repeats 1: must be 2 to 10000"),
        "noise": ([SPEC, "--noise", "0.9"], "--noise 0.9: must be 0 to 0.5"),
        "target": ([SPEC, "--target", "-1"], "--target -1.0: must be a finite number"),
        "design": ([SPEC, "--design", "greedy"], "--design greedy: must be one of fixed, "
                                                 "adaptive"),
        "gpu": ([SPEC, "--gpu", "tpu"], "--gpu 'tpu' is not a GPU whose peak is known"),
    }


@pytest.mark.parametrize("case", ["unknown law", "not a law file", "a law out of range",
                                  "not a scaling study", "repeats", "noise", "target",
                                  "design", "gpu"])
def test_bad_input_is_refused_before_any_heavy_library_loads(tmp_path, case):
    args, message = _bad_inputs(tmp_path)[case]
    result, stderr = _probe(["plan", *args], tmp_path)
    assert result == {"code": 2, "loaded": []}, stderr
    assert stderr.count("error:") == 1 and message in " ".join(stderr.split()), stderr
    assert "Traceback" not in stderr and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in tmp_path.iterdir() if p.suffix == ".yaml")


def test_json_reports_every_estimator_at_the_target(tmp_path):
    law = tmp_path / "law.yaml"
    law.write_text(yaml.safe_dump({"simulate": {"law": {"E": 1.69, "A": 406.4, "B": 410.7,
                                                        "alpha": 0.34, "beta": 0.28}}}))
    result = CliRunner().invoke(app, ["plan", str(SPEC), "--law", str(law), "--repeats", "2",
                                      "--noise", "0", "--target", "1e15", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["design"] == "fixed" and plan["gpu"] == "H100" and plan["mfu"] == 0.4
    assert plan["gpu_seconds"] == pytest.approx(plan["design_flops"] / (0.4 * 989e12), rel=0.01)
    assert plan["targets"][-1] == 1e15 and plan["repeats"] == 2
    at = {(s["estimator"], s["quantity"]): s for s in plan["spreads"]
          if s["budget_flops"] == 1e15}
    assert set(at) == {(k, q) for k in ("2", "3", "vpnls") for q in ("n_params", "n_tokens")}
    assert abs(at["vpnls", "n_params"]["bias"]) < 1e-4


def test_the_adaptive_design_takes_the_specs_settings():
    """studies/scaling-adaptive.yaml: its target 3e12 (not 100 x its largest budget) and its
    allowance 1.3e13 FLOPs (not the fixed grid's 2.2e13)."""
    result = CliRunner().invoke(app, ["plan", str(ROOT / "studies" / "scaling-adaptive.yaml"),
                                      "--design", "adaptive", "--repeats", "2", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["design"] == "adaptive" and plan["targets"][-1] == 3e12
    assert 1.2e12 < plan["design_flops"] <= 1.3e13
