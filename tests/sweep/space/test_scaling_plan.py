"""Plans that can bracket the optimum: sweep validate's warnings, compute and wall time."""

import json
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sweep.cli import app
from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling import shapes
from sweep.kinds.scaling.driver import plan_notes
from sweep.kinds.scaling.plan_checks import MIN_STEPS, bracket_warning, short_run_warnings
from sweep.spec import parse_spec
from sweep_models import ModelConfig
from sweep_models.cost import flops_per_token, param_count

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()
STEP_TOKENS = 16 * 64  # batch_size x seq_len below


def spec_data(*, d_min=16, d_max=192, budgets=(1e11, 3e11, 1e12, 3e12), **train):
    return {"name": "plan", "data": "builtin:python-stdlib", "model": {"seq_len": 64},
            "train": {"batch_size": 16, "lr": 3e-3, **train},
            "scaling": {"budgets": list(budgets), "sizes_per_budget": 5,
                        "tokens_per_param": 40, "span": 3,
                        "rule": {"d_model": {"min": d_min, "max": d_max, "step": 8},
                                 "n_layers": 2, "d_head": 8}}}


def family(spec):
    cands = shapes.candidates(spec)
    return cands[0].n_params, cands[-1].n_params


def validate_json(tmp_path, data, *flags):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["validate", str(path), "--json", *flags])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_smallest_budget_whose_prior_optimum_is_below_every_shape_warns(tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = spec_data(d_min=24)
    spec = parse_spec(data)
    smallest = shapes.candidates(spec)[0]
    lays = grid.layout(spec)
    first = lays[0]
    assert first.centre_n_params <= smallest.n_params  # the prior N_opt sits below the rule
    warnings = [w for w in (bracket_warning(spec, lay, family(spec)) for lay in lays) if w]
    assert len(warnings) == 1  # the larger budgets are centred
    assert warnings[0].startswith(f"C=1e+11: N_opt {first.centre_n_params:,.0f} (prior: 40 "
                                  "tokens per parameter) is at or below the smallest size it "
                                  "trains")
    low, high = family(spec)
    assert f"the size rule makes N from {low:,} to {high:,}" in warnings[0]
    assert "Fix: add widths below 24 in scaling.rule.d_model, or raise this budget" in \
        warnings[0]
    out = validate_json(tmp_path, data)
    assert out["warnings"] == warnings  # a warning, listed in --json, exit 0
    path = tmp_path / "plan.yaml"
    text = runner.invoke(app, ["validate", str(path)], terminal_width=200)
    assert text.exit_code == 0
    assert f"warning: {warnings[0]}" in text.output.replace("\n", "")
    assert not (tmp_path / "runs").exists()


def test_the_shipped_scaling_studies_are_centred(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("scaling-isoflop", "scaling-wsd"):
        data = yaml.safe_load((ROOT / "studies" / f"{name}.yaml").read_text())
        assert validate_json(tmp_path, data)["warnings"] == []


def test_an_optimum_at_either_edge_of_the_sizes_is_named():
    spec = parse_spec(spec_data())
    cands = shapes.candidates(spec)
    low = grid.layout_budget(spec, 1e12, centre_n_params=cands[0].n_params * 1.2,
                             centre_source="re-centred on the optimum of 2 earlier budget(s)")
    sizes = [p.candidate.n_params for p in low.points]
    assert sizes[0] < low.centre_n_params <= math.sqrt(sizes[0] * sizes[1])
    warning = bracket_warning(spec, low, family(spec))
    assert warning is not None and "(re-centred on the optimum of 2 earlier budget(s)) is at " \
        f"the low edge of its sizes (only {low.points[0].candidate.shape.label}, " \
        f"N={sizes[0]:,}, lies below it)" in warning
    assert plan_notes(spec, [low]) == [f"warning: {warning}"]  # the run's notes too
    high = grid.layout_budget(spec, 1e12, centre_n_params=cands[-1].n_params * 2)
    warning = bracket_warning(spec, high, family(spec))
    assert warning is not None and "is at or above the largest size it trains" in warning
    assert "add widths above 192 in scaling.rule.d_model, or lower this budget" in warning
    centred = grid.layout_budget(spec, 1e12)
    assert bracket_warning(spec, centred, family(spec)) is None


def test_the_short_run_rule_fires_below_its_threshold_and_not_at_it():
    spec = parse_spec(spec_data())
    base = grid.layout_budget(spec, 1e11)
    largest = base.points[-1].candidate
    for steps in (MIN_STEPS, MIN_STEPS - 1):
        budget = largest.flops_per_token_train * STEP_TOKENS * (steps + 0.5)
        lay = grid.layout_budget(spec, budget, centre_n_params=base.centre_n_params)
        assert lay.points[-1].candidate == largest
        assert lay.points[-1].steps == math.floor(budget / largest.flops_per_token_train
                                                  / STEP_TOKENS) == steps
        assert min(p.steps for p in lay.points) == steps  # the largest trains fewest
        warnings = short_run_warnings(spec, [lay])
        if steps == MIN_STEPS:
            assert warnings == []
        else:
            assert warnings == [
                f"C={budget:.4g}: 1 of 5 sizes train fewer than {MIN_STEPS} optimizer steps "
                f"({largest.shape.label} (N={largest.n_params:,}): {steps} steps); warmup and "
                "decay take most of such a run, so its loss is not that of a trained model of "
                "its size. Fix: a smaller train.batch_size (or batch_tokens), or a budget about "
                f"{MIN_STEPS / steps:.2g}x larger"]


def test_compute_is_the_sum_of_each_trial_s_cost_model_flops(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = spec_data()
    out = validate_json(tmp_path, data)
    total = six_nd = 0.0
    for row in out["grid"]:
        d, layers, heads, ff = (int(x[1:]) if not x.startswith("ff") else int(x[2:])
                                for x in row["shape"].split("-"))
        model = ModelConfig(vocab_size=256, seq_len=64, d_model=d, n_layers=layers,
                            n_heads=heads, d_ff=ff)
        per_token = flops_per_token(model, train=True)
        tokens = math.floor(row["budget_flops"] / per_token / STEP_TOKENS) * STEP_TOKENS
        assert row["n_tokens"] == tokens
        total += per_token * tokens
        six_nd += 6 * param_count(model) * tokens
    compute = out["compute"]
    assert compute["n_trials"] == len(out["grid"]) == 20
    assert compute["train_flops"] == pytest.approx(total, rel=1e-12)
    assert compute["flops_6nd"] == pytest.approx(six_nd, rel=1e-12)


@pytest.mark.parametrize(("precision", "peak"), [("auto", 312.0e12), ("fp32", 19.5e12)])
def test_gpu_time_is_compute_over_peak_times_mfu(tmp_path, monkeypatch, precision, peak):
    monkeypatch.chdir(tmp_path)
    out = validate_json(tmp_path, spec_data(precision=precision), "--gpu", "a100",
                        "--mfu", "0.25")
    gpu, flops = out["compute"]["named_gpu"], out["compute"]["train_flops"]
    assert (gpu["gpu"], gpu["mfu"], gpu["peak_flops"]) == ("A100", 0.25, peak)
    assert gpu["seconds"] == pytest.approx(flops / (peak * 0.25), rel=1e-12)
    here = out["compute"]["this_device"]  # a CPU, no finished trials: no estimate, and why
    if here["device"] == "cpu":
        assert here["seconds"] is None and "no datasheet peak for cpu" in here["assumes"]


def test_gpu_defaults_and_unknown_gpus(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = validate_json(tmp_path, spec_data())
    assert (out["compute"]["named_gpu"]["gpu"], out["compute"]["named_gpu"]["mfu"]) == \
        ("H100", 0.4)
    path = tmp_path / "plan.yaml"
    for flags, expected in ((["--gpu", "V100"], "--gpu 'V100' is not a GPU whose peak is known; "
                                                "known: H200, H100 PCIe, H100, A100, L40S, L4, "
                                                "A10"),
                            (["--mfu", "1.5"], "--mfu 1.5: MFU is the fraction of the peak")):
        result = runner.invoke(app, ["validate", str(path), *flags], terminal_width=200)
        assert result.exit_code == 2
        assert expected in result.output.replace("\n", "")
    assert not (tmp_path / "runs").exists()


def test_a_ladder_s_fix_names_the_ladder():
    data = spec_data()
    del data["scaling"]["rule"]
    data["scaling"]["ladder"] = [{"d_model": 16 * i, "n_layers": 2, "n_heads": 2, "d_ff": 64 * i}
                                 for i in (2, 3, 4, 5, 6)]
    spec = parse_spec(data)
    lay = grid.layout_budget(spec, 1e11)
    assert lay.centre_n_params < lay.points[0].candidate.n_params
    warning = bracket_warning(spec, lay, family(spec))
    assert warning is not None and warning.endswith(
        "Fix: add smaller shapes in scaling.ladder, or raise this budget (or drop it)")
