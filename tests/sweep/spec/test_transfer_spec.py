"""Transfer studies: the spec's rules, the grid's points and keys, trials' configs."""

import pytest

from sweep.kinds.transfer import grid as tr
from sweep.space import configs_from_params, summarize
from sweep.spec import SpecError, parse_spec
from sweep_models import parametrization as par

LRS = [1e-3, 2e-3, 4e-3]


def spec(**changes):
    data = {
        "name": "t",
        "data": "builtin:python-stdlib",
        "model": {"seq_len": 32, "n_layers": 1, "parametrization": {"choice": ["sp", "mup"]},
                  "base_d_model": 64},
        "train": {"tokens": 4096, "lr": {"choice": LRS}},
        "transfer": {"widths": [128, 64, 256], "d_head": 32},
    }
    for section, fields in changes.items():
        if fields is None:
            data.pop(section)
        elif isinstance(fields, dict) and isinstance(data.get(section), dict):
            data[section] = {**data[section], **fields}
        else:
            data[section] = fields
    return parse_spec(data)


def refused(match, **changes):
    with pytest.raises(SpecError, match=match):
        spec(**changes)


def test_points_are_the_product_widths_outermost():
    s = spec()
    assert s.transfer.widths == [64, 128, 256]
    points = tr.points(s)
    assert len(points) == 3 * 2 * 3
    assert points[0] == {"model.d_model": 64, "model.parametrization": "sp", "train.lr": 1e-3}
    assert [p["model.d_model"] for p in points] == [64] * 6 + [128] * 6 + [256] * 6
    assert len({tr.point_key(s, p) for p in points}) == len(points)
    # pruning off by default, n_trials left out of the stored spec
    assert (s.search.pruner, s.search.scheduler) == ("none", "none")
    assert "n_trials" not in s.to_data()["search"]


def test_each_point_builds_its_width_under_one_base_shape():
    s = spec()
    for point in tr.points(s):
        model, train = configs_from_params(s, point)
        w = point["model.d_model"]
        assert (model.d_model, model.n_heads, model.d_ff) == (w, w // 32, 4 * w)
        assert (model.parametrization, model.base_d_model) == (point["model.parametrization"],
                                                               64)
        assert train.lr == point["train.lr"]
        hidden = par.lr_mult(model, "hidden")
        assert hidden == (64 / w if model.parametrization == "mup" else 1.0)


def test_a_trials_logged_params_give_its_points_key():
    s = spec()
    point = tr.points(s)[7]
    model, train = configs_from_params(s, point)
    logged = {f"model.{k}": v for k, v in model.to_dict().items()} | \
        {f"train.{k}": v for k, v in train.to_dict().items()}
    assert tr.point_key(s, logged) == tr.point_key(s, point)


def test_validate_prices_every_width():
    summary = summarize(spec(), n_samples=8, device="cpu")
    assert summary.n_invalid == 0 and summary.n_infeasible == 0


@pytest.mark.parametrize("field", ["d_model", "n_heads", "d_ff", "d_head", "n_kv_heads"])
def test_the_widths_own_the_shape_fields(field):
    refused(f"model.{field}: a transfer study takes every width from transfer.widths",
            model={field: 64})


def test_the_learning_rate_must_be_a_grid():
    refused("train.lr: a transfer study runs one learning-rate grid", train={"lr": 1e-3})
    refused("train.lr: .* at least 3 rates", train={"lr": {"choice": [1e-3, 2e-3]}})
    refused("train.lr: a transfer study runs one learning-rate grid",
            train={"lr": {"float": [1e-4, 1e-2], "log": True}})


def test_other_searched_fields_must_be_choices():
    refused("train.weight_decay: a transfer study trains the product of its grids",
            train={"weight_decay": {"float": [0.0, 0.1]}})
    assert len(tr.points(spec(train={"weight_decay": {"choice": [0.0, 0.1]}}))) == 36


def test_search_settings_a_grid_cannot_take():
    refused("search.n_trials: a transfer study's trials are its grid points",
            search={"n_trials": 5})
    refused("search.executor: a transfer study runs on the optuna executor",
            search={"executor": "ray"})
    refused("search.pruner: every point of a transfer grid trains to the end",
            search={"pruner": "median"})
    refused("search.objectives: a transfer study compares val_loss only",
            search={"objectives": ["val_loss", "flops_per_token"]})


def test_widths_rules():
    refused(r"transfer: widths \[80\] not divisible by d_head=32", transfer={"widths": [64, 80]})
    refused("transfer.widths", transfer={"widths": [64]})
    refused("transfer.widths.*distinct", transfer={"widths": [64, 64]})


def test_muP_without_a_base_width_is_refused():
    with pytest.raises(SpecError, match="model.base_d_model: parametrization 'mup' needs"):
        parse_spec({"name": "t", "data": "builtin:python-stdlib",
                    "model": {"parametrization": {"choice": ["sp", "mup"]}},
                    "train": {"tokens": 4096, "lr": {"choice": LRS}},
                    "transfer": {"widths": [64, 128]}})


def test_not_a_scaling_study_too():
    with pytest.raises(SpecError, match="transfer: a study is a scaling study or a transfer"):
        parse_spec({"name": "t", "data": "builtin:python-stdlib",
                    "train": {"lr": {"choice": LRS}},
                    "transfer": {"widths": [64, 128]},
                    "scaling": {"budgets": [1e9], "rule": {"d_model": [64, 128, 256],
                                                           "n_layers": 1, "d_head": 32}}})


def test_resume_refuses_a_changed_grid_of_widths():
    from sweep.spec.resume import ResumeError, check_resume_compatible

    old = spec().to_data()
    assert check_resume_compatible(old, spec().to_data()) == []
    with pytest.raises(ResumeError, match=r"transfer.widths changed from \[64, 128, 256\]"):
        check_resume_compatible(old, spec(transfer={"widths": [64, 128]}).to_data())
    with pytest.raises(ResumeError, match="the choices of train.lr changed"):
        check_resume_compatible(old, spec(train={"lr": {"choice": [1e-3, 2e-3, 8e-3]}})
                                .to_data())
