"""hparams studies: the section's rules, the grid's points and shapes, trials' configs."""

import json
import math

import pytest
from typer.testing import CliRunner

from sweep.cli import app
from sweep.kinds.hparams import KIND
from sweep.kinds.hparams import grid as hp
from sweep.space import configs_from_params
from sweep.spec import SpecError, parse_spec
from sweep_models.cost import param_count


def spec(**changes):
    data = {
        "name": "h",
        "data": "builtin:python-stdlib",
        "model": {"seq_len": 32},
        "train": {"batch_size": 8},
        "hparams": {"budgets": [3e11, 1e11, 1e12], "lr": {"low": 1e-3, "high": 1.6e-2, "n": 5},
                    "batch_size": {"values": [512, 256]},
                    "shape": {"rule": {"d_model": [32, 64, 96, 128], "aspect": 32,
                                       "d_head": 16}}},
    }
    for section, fields in changes.items():
        if isinstance(fields, dict) and isinstance(data.get(section), dict):
            data[section] = {**data[section], **fields}
        else:
            data[section] = fields
    return parse_spec(data)


def refused(match, **changes):
    with pytest.raises(SpecError, match=match):
        spec(**changes)


def test_points_are_budgets_x_lrs_x_batches_each_on_the_prior_shape():
    s = spec()
    assert s.kind is KIND and s.section("hparams").budgets == [1e11, 3e11, 1e12]
    assert s.section("hparams").lr.values() == [0.001, 0.002, 0.004, 0.008, 0.016]
    points = hp.points(s)
    assert len(points) == 3 * 5 * 2 == len(set(hp.all_labels(s)))
    assert points[0].label == "C1e+11/lr0.001/B256"
    for p in points:
        # the rule's shape nearest in log N to N* = sqrt(C / (6 * 20)); D = C / 6N
        target = math.sqrt(p.budget_flops / 120)
        sizes = sorted({q.candidate.n_params for q in hp.points(s)} | {p.candidate.n_params})
        assert all(abs(math.log(p.candidate.n_params / target))
                   <= abs(math.log(n / target)) + 1e-12 for n in sizes)
        assert p.n_tokens == round(p.budget_flops / (6 * p.candidate.n_params))
    assert points[0].candidate.shape.d_model < points[-1].candidate.shape.d_model


def test_a_points_config_trains_its_shape_lr_batch_and_tokens():
    s = spec()
    p = hp.points(s)[-1]
    model, train = configs_from_params(s, {hp.POINT: p.label})
    shape = p.candidate.shape
    assert (model.d_model, model.n_layers, model.n_heads) == (shape.d_model, shape.n_layers,
                                                              shape.d_model // 16)
    assert param_count(model) == p.candidate.n_params
    assert (train.lr, train.batch_tokens, train.tokens) == (0.016, 512, p.n_tokens)
    metrics, params = KIND.trial_records(s, model, train, {"n_params": p.candidate.n_params})
    assert metrics["budget_flops"] == 1e12 and params == {hp.POINT: p.label}
    assert KIND.point_key(s, {hp.POINT: p.label}) == p.label


def test_a_range_of_batches_rounds_to_micro_batches():
    s = spec(hparams={"batch_size": {"low": 256, "high": 2000, "n": 4}})
    assert hp.batch_values(s) == [256, 512, 1024, 2048]  # multiples of 8 x 32 tokens


@pytest.mark.parametrize(("changes", "match"), [
    ({"model": {"seq_len": 32, "d_model": 64}}, "model.d_model: an hparams study trains"),
    ({"train": {"batch_size": 8, "tokens": 1000}}, "train.tokens: an hparams study trains"),
    ({"train": {"batch_size": 8, "lr": 1e-3}}, "train.lr: an hparams study takes every"),
    ({"train": {"batch_size": 8, "seed": {"choice": [0, 1]}}}, "train.seed: an hparams study"),
    ({"hparams": {"batch_size": {"values": [300]}}},
     "hparams.batch_size: 300 tokens not a multiple of train.batch_size x model.seq_len = 256"),
    ({"hparams": {"batch_size": {"values": [256], "low": 1, "high": 2, "n": 2}}},
     "give values"),
    ({"hparams": {"lr": {"low": 1e-2, "high": 1e-3, "n": 5}}}, "high=0.001 must be above"),
    ({"hparams": {"lr": {"low": 1e-3, "high": 1e-2, "n": 2}}}, r"hparams.lr.n"),
    ({"hparams": {"budgets": [1e11]}}, "hparams.budgets"),
    ({"hparams": {"band": 1.5}}, "hparams.band"),
    ({"hparams": {"budgets": [1e6, 1e12]}}, "trains 8 tokens, less than one step of 256"),
    ({"search": {"pruner": "median"}}, "search.pruner: every point of an hparams grid"),
])
def test_bad_fields_are_refused_by_name(changes, match):
    refused(match, **changes)


def test_validate_shows_the_grid_and_its_compute(tmp_path):
    path = tmp_path / "h.yaml"
    path.write_text(json.dumps(spec().to_data()))
    result = CliRunner().invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    rows = record["grid"]
    assert [r["budget_flops"] for r in rows] == [1e11, 3e11, 1e12]
    assert rows[0]["lrs"] == [0.001, 0.002, 0.004, 0.008, 0.016]
    assert rows[0]["batch_tokens"] == [256, 512]
    assert record["compute"]["n_trials"] == 30
    # each point's 6ND is its budget, to the rounding of D to whole tokens
    assert record["compute"]["flops_6nd"] == pytest.approx(10 * (1e11 + 3e11 + 1e12), rel=1e-4)
    text = CliRunner().invoke(app, ["validate", str(path)])
    assert "hparams grid: 30 trials" in text.stdout
    assert "learning rates (hparams.lr): 0.001, 0.002, 0.004, 0.008, 0.016" in text.stdout


def test_a_resume_refuses_a_changed_grid():
    from sweep.spec.resume import ResumeError, check_resume_compatible

    old = spec().to_data()
    assert check_resume_compatible(old, spec().to_data()) == []
    with pytest.raises(ResumeError, match=r"hparams.lr changed from"):
        check_resume_compatible(old, spec(hparams={"lr": {"low": 1e-3, "high": 1.6e-2, "n": 3}})
                                .to_data())
