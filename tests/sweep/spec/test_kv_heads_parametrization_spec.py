"""Grouped-query attention and the parametrizations in study specs: searchable, and refused at
validate time where no trial could ever build."""

import pytest

from sweep.space.sampling import InvalidConfig, configs_from_params, sample_params
from sweep.spec import SpecError, parse_spec


def spec(model, search=None):
    """A spec of 8 heads of d_model 64 unless ``model`` says otherwise (``d_head``: no n_heads)."""
    data = {"name": "t", "data": "builtin:python-stdlib",
            "model": {"seq_len": 32, "d_model": 64, "n_heads": 8, **model},
            "train": {"tokens": 100000}}
    if "d_head" in model:
        del data["model"]["n_heads"]
    if search:
        data["search"] = search
    return data


def problems(model, search=None):
    with pytest.raises(SpecError) as info:
        parse_spec(spec(model, search))
    return info.value.problems


@pytest.mark.parametrize(("n_kv_heads", "n_values"),
                         [({"choice": [1, 2, 8]}, 3), ({"int": [1, 2]}, 2), (4, 1)])
def test_n_kv_heads_is_searchable_and_every_draw_builds(n_kv_heads, n_values):
    parsed = parse_spec(spec({"n_kv_heads": n_kv_heads, "d_model": {"choice": [64, 128]}}))
    seen = set()
    for params in sample_params(parsed, 24, seed=0):
        model, _ = configs_from_params(parsed, params)
        assert model.n_heads % model.n_kv_heads == 0
        seen.add(model.n_kv_heads)
    assert len(seen) == n_values


@pytest.mark.parametrize(("model", "expected"), [
    ({"n_kv_heads": 3}, "model.n_kv_heads: value 3 divides no value of model.n_heads (8)"),
    ({"n_kv_heads": {"choice": [1, 2, 5]}},
     "model.n_kv_heads: choice 5 divides no value of model.n_heads (8)"),
    ({"n_kv_heads": {"int": [1, 4]}},
     "model.n_kv_heads: range value 3 divides no value of model.n_heads (8)"),
    ({"n_heads": {"choice": [4, 8]}, "n_kv_heads": {"choice": [2, 16]}},
     "model.n_kv_heads: choice 16 divides no value of model.n_heads (4, 8)"),
    # n_heads = d_model / d_head is 4 or 8: 3 never divides it
    ({"d_model": {"choice": [64, 128]}, "d_head": 16, "n_kv_heads": 3},
     "model.n_kv_heads: value 3 divides no n_heads = d_model / d_head of the space"),
])
def test_n_kv_heads_that_never_divides_n_heads_is_refused_naming_the_field(model, expected):
    found = problems(model)
    assert len(found) == 1 and found[0].startswith(expected), found
    assert found[0].endswith("n_heads must be divisible by n_kv_heads (each key/value head "
                             "serves the same number of query heads)")


def test_n_kv_heads_below_one_is_outside_its_rule():
    assert problems({"n_kv_heads": 0}) == [
        "model.n_kv_heads: value 0 is outside the rule integer >= 1"]


def test_a_combination_that_does_not_divide_is_an_infeasible_draw_not_a_refused_spec():
    # 8 key/value heads divide the 8 heads of d_model 128 (d_head 16), not the 4 of d_model
    # 64: the space is valid, that one combination is infeasible, as other cross-field ones.
    parsed = parse_spec(spec({"d_model": {"choice": [64, 128]}, "d_head": 16,
                              "n_kv_heads": {"choice": [2, 8]}}))
    base = {"model.d_model": 128, "model.n_kv_heads": 8}
    assert configs_from_params(parsed, base)[0].n_heads == 8
    with pytest.raises(InvalidConfig, match="n_heads=4 is not divisible by n_kv_heads=8"):
        configs_from_params(parsed, {**base, "model.d_model": 64})


@pytest.mark.parametrize(("model", "expected"), [
    ({"parametrization": "mup"}, "model.base_d_model: parametrization 'mup' needs base_d_model"),
    ({"parametrization": {"choice": ["sp", "completep"]}, "base_d_model": 32},
     "model.base_n_layers: parametrization 'completep' needs base_n_layers"),
    ({"parametrization": "completep", "base_d_model": 32, "base_n_layers": 1,
      "completep_alpha": 0.4},
     "model.completep_alpha: value 0.4 is outside the rule 0.5 <= value <= 1"),
    ({"parametrization": "ntk"}, "model.parametrization"),
    ({"base_d_model": {"int": [0, 64]}},
     "model.base_d_model: lower bound 0 is outside the rule integer >= 1"),
])
def test_parametrization_rules(model, expected):
    found = problems(model)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_sp_and_mup_side_by_side_with_one_base_width():
    parsed = parse_spec(spec({"parametrization": {"choice": ["sp", "mup"]}, "base_d_model": 32,
                              "d_model": {"choice": [64, 128]}}))
    drawn = {configs_from_params(parsed, p)[0].parametrization
             for p in sample_params(parsed, 16, seed=0)}
    assert drawn == {"sp", "mup"}


@pytest.mark.parametrize("field", ["n_kv_heads", "parametrization", "base_d_model"])
def test_pbt_keeps_grouping_and_parametrization_fixed(field):
    value = {"n_kv_heads": {"choice": [2, 4]}, "parametrization": {"choice": ["sp", "mup"]},
             "base_d_model": {"choice": [16, 32]}}[field]
    search = {"executor": "ray", "scheduler": "pbt", "n_trials": 4,
              "pbt": {"perturbation_interval": 20480,
                      "hyperparam_mutations": {"lr": {"float": [1e-4, 1e-2]}}}}
    found = problems({"base_d_model": 32, field: value}, search)
    assert any(p.startswith(f"model.{field}: a PBT population shares one shape") for p in found)
    search["pbt"]["hyperparam_mutations"] = {field: value}
    found = problems({"base_d_model": 32}, search)
    assert any(p.startswith(f"search.pbt.hyperparam_mutations.{field}: PBT cannot mutate")
               for p in found), found


def test_a_scaling_study_owns_the_heads_and_takes_a_parametrization():
    data = {"name": "s", "data": "builtin:python-stdlib",
            "model": {"seq_len": 64, "n_kv_heads": 1},
            "train": {"batch_size": 16},
            "scaling": {"budgets": [1e12, 3e12],
                        "rule": {"d_model": {"min": 16, "max": 64, "step": 16},
                                 "n_layers": 2, "d_head": 8, "d_ff_ratio": 4}}}
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert info.value.problems == [
        "model.n_kv_heads: a scaling study takes every shape from scaling.rule; remove it"]
    data["model"] = {"seq_len": 64, "parametrization": "mup", "base_d_model": 32}
    assert parse_spec(data).model["parametrization"] == "mup"


D_FF_RULE = ("use model.d_ff_ratio so d_ff scales with d_model")


@pytest.mark.parametrize(("model", "shown", "parametrization"), [
    ({"parametrization": "mup", "d_ff": 256}, "d_ff=256", "mup"),
    ({"parametrization": "completep", "base_n_layers": 2, "d_ff": 256}, "d_ff=256",
     "completep"),
    ({"parametrization": {"choice": ["sp", "mup"]}, "d_ff": {"int": [128, 256], "step": 64}},
     "a d_ff domain of its own", "mup"),
])
def test_a_d_ff_of_its_own_while_d_model_varies_under_mup_is_refused(model, shown,
                                                                       parametrization):
    found = problems({"d_model": {"choice": [64, 128]}, "base_d_model": 64, **model})
    assert found == [f"model.d_ff: {shown} while model.d_model varies breaks parametrization "
                     f"{parametrization!r} (the feed-forward width no longer scales with "
                     "d_model, so its weights get the wrong multipliers); " + D_FF_RULE]


@pytest.mark.parametrize("model", [
    {"parametrization": "mup", "d_ff_ratio": 2.0, "d_model": {"choice": [64, 128]}},
    {"parametrization": "mup", "d_ff": 256},  # d_model fixed: every trial has one width
    {"parametrization": "sp", "d_ff": 256, "d_model": {"choice": [64, 128]}},
    {"parametrization": {"choice": ["sp", "mup"]}, "d_model": {"choice": [64, 128]},
     "d_ff": {"choice": [256], "when": {"parametrization": ["sp"]}}},
])
def test_a_d_ff_that_follows_d_model_or_needs_no_scaling_is_accepted(model):
    parse_spec(spec({"base_d_model": 64, **model}))
