"""``scaling.adaptive``: its fields' rules and the rules across sections, one line each, exit 2."""

import pytest
import yaml
from typer.testing import CliRunner

from sweep.cli import app
from sweep.spec import SpecError, parse_spec


def data(adaptive=None, **changes):
    scaling = {"budgets": [1e11, 3e11, 1e12], "span": 3,
               "rule": {"d_model": {"min": 8, "max": 192, "step": 8}, "n_layers": 2, "d_head": 8},
               "adaptive": {} if adaptive is None else adaptive}
    out = {"name": "ad", "data": "builtin:python-stdlib", "model": {"seq_len": 64},
           "train": {"batch_size": 16}, "scaling": scaling}
    for section, fields in changes.items():
        out[section] = {**out.get(section, {}), **fields}
    return out


@pytest.mark.parametrize(("adaptive", "changes", "match"), [
    ({"target_rel_ci": 1.0}, {}, r"scaling\.adaptive\.target_rel_ci.*greater than 1"),
    ({"sizes": 2}, {}, r"scaling\.adaptive\.sizes.*greater than or equal to 3"),
    ({"growth": 1}, {}, r"scaling\.adaptive\.growth"),
    ({"n_bootstrap": 1}, {}, r"scaling\.adaptive\.n_bootstrap"),
    ({"target_flops": -1}, {}, r"scaling\.adaptive\.target_flops"),
    ({"rounds": 3}, {}, r"scaling\.adaptive\.rounds"),
    ({"target_flops": 2e11}, {}, r"scaling\.adaptive\.target_flops: 2e\+11 is below the first "
                                 r"round's largest budget 3e\+11"),
    ({"allowance_flops": 1e12}, {}, r"scaling\.adaptive\.allowance_flops: 1e\+12 does not buy "
                                    r"the first round \(3 sizes at C=1e\+11 and C=3e\+11"),
    ({}, {"scaling": {"budgets": [1e11]}}, r"scaling\.adaptive: needs at least 2 "
                                           r"scaling\.budgets"),
    ({}, {"scaling": {"branches": True}, "train": {"schedule": "wsd", "warmup": 1000}},
     r"scaling\.adaptive: not with scaling\.branches"),
    ({}, {"train": {"seed": {"int": [0, 3]}}}, r"train\.seed: must be a fixed integer"),
])
def test_a_bad_adaptive_section_is_one_line_naming_its_field(adaptive, changes, match):
    spec = data(adaptive)
    for section, fields in changes.items():
        spec[section] = {**spec[section], **fields}
    with pytest.raises(SpecError, match=match):
        parse_spec(spec)


def test_sweep_run_refuses_it_with_exit_2_and_writes_nothing(tmp_path):
    path = tmp_path / "ad.yaml"
    path.write_text(yaml.safe_dump(data({"allowance_flops": 1e12})))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 2
    assert "scaling.adaptive.allowance_flops: 1e+12 does not buy the first round" in \
        result.output
    assert not out.exists()


def test_validate_describes_the_first_round_and_the_stopping_rule(tmp_path):
    path = tmp_path / "ad.yaml"
    path.write_text(yaml.safe_dump(data({"target_flops": 1e13, "allowance_flops": 5e12})))
    result = CliRunner().invoke(app, ["validate", str(path), "--samples", "4"],
                                terminal_width=240)
    assert result.exit_code == 0, result.output
    assert "first round: 6 trials" in result.output
    assert "the table is the first round only (C=1e+11, C=3e+11, 3 sizes each, span 6)" in \
        result.output
    assert "target: N_opt at C=1e+13 FLOPs; allowance 5e+12 training FLOPs" in result.output
    assert "stops when N_opt's interval at the target (q95 / q05) is at most x1.5" in \
        result.output
    assert "C=1e+12" not in result.output  # later rounds are not known in advance
