"""Encoder-decoder fields in study specs: searchable where arch is encoder_decoder, refused at
validate time where no trial could build, and kept out of PBT mutations and scaling studies."""

import pytest

from sweep.space.sampling import configs_from_params, sample_params
from sweep.spec import SpecError, parse_spec

DATA = "synthetic:reverse?vocab=16&length=8"


def spec(model, search=None, **extra):
    data = {"name": "t", "data": DATA,
            "model": {"vocab_size": 16, "seq_len": 16, "d_model": 32, "n_heads": 4, **model},
            "train": {"tokens": 100000}, **extra}
    if search:
        data["search"] = search
    return data


def problems(model, search=None, **extra):
    with pytest.raises(SpecError) as info:
        parse_spec(spec(model, search, **extra))
    return info.value.problems


def test_encoder_decoder_knobs_are_searchable_and_every_draw_builds():
    parsed = parse_spec(spec({"arch": "encoder_decoder",
                              "n_encoder_layers": {"int": [1, 3]},
                              "n_decoder_layers": {"choice": [1, 2]},
                              "n_kv_heads": {"choice": [1, 4]}}))
    seen = set()
    for params in sample_params(parsed, 24, seed=0):
        model, _ = configs_from_params(parsed, params)
        assert model.arch == "encoder_decoder" and model.src_len == 8
        seen.add((model.n_encoder_layers, model.n_decoder_layers))
    assert {e for e, _ in seen} == {1, 2, 3} and {d for _, d in seen} == {1, 2}


def test_arch_is_searchable_with_conditioned_stack_depths():
    parsed = parse_spec(spec({
        "arch": {"choice": ["decoder_only", "encoder_decoder"]},
        "n_encoder_layers": {"choice": [1, 2], "when": {"arch": ["encoder_decoder"]}}}))
    archs = set()
    for params in sample_params(parsed, 16, seed=1):
        model, _ = configs_from_params(parsed, params)
        archs.add(model.arch)
        assert (model.n_encoder_layers is None) == (model.arch == "decoder_only")
    assert archs == {"decoder_only", "encoder_decoder"}


@pytest.mark.parametrize(("model", "expected"), [
    ({"src_len": 8}, "model.src_len: needs model.arch: encoder_decoder"),
    ({"arch": {"choice": ["decoder_only", "encoder_decoder"]}, "n_decoder_layers": 2},
     "model.n_decoder_layers: set while model.arch can be 'decoder_only', which refuses it; "
     "add when: {arch: [encoder_decoder]}"),
    ({"arch": "encoder_decoder", "src_len": {"choice": [16, 20]}},
     "model.src_len: 16 is not below any model.seq_len of the space (at most 16)"),
    ({"arch": "encoder_decoder", "causal": False},
     "model.causal: arch 'encoder_decoder' needs causal: true"),
    ({"arch": "encoder_decoder", "attn_pattern": "local", "attn_sparsity": 0.5},
     "model.attn_pattern: arch 'encoder_decoder' supports only attn_pattern: dense"),
    ({"arch": "encoder_decoder", "parametrization": "completep", "base_d_model": 32,
      "base_n_layers": 2},
     "model.parametrization: arch 'encoder_decoder' supports sp and mup, not completep"),
])
def test_spaces_that_never_build_are_refused_naming_the_field(model, expected):
    found = problems(model)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_out_of_range_values_name_the_rule():
    assert problems({"arch": "encoder_decoder", "src_len": 0}) == [
        "model.src_len: value 0 is outside the rule integer >= 1"]


def test_pbt_keeps_the_architecture_fixed():
    pbt = {"executor": "ray", "scheduler": "pbt", "n_trials": 2,
           "pbt": {"perturbation_interval": 1000, "hyperparam_mutations": {
               "model.src_len": {"choice": [4, 8]}}}}
    found = problems({"arch": "encoder_decoder"}, pbt)
    assert any(p.startswith("search.pbt.hyperparam_mutations.model.src_len: PBT cannot "
                            "mutate 'src_len'") for p in found), found
    found = problems({"arch": "encoder_decoder", "n_decoder_layers": {"choice": [1, 2]}},
                     {**pbt, "pbt": {"perturbation_interval": 1000,
                                     "hyperparam_mutations": {"train.lr": {"float": [1e-4,
                                                                                    1e-2]}}}})
    assert found == ["model.n_decoder_layers: a PBT population shares one shape (a member "
                     "that exploits copies the donor's weights), so shape fields must be "
                     "fixed values, not searched"], found
    # a fixed encoder-decoder shape is a valid population
    parse_spec(spec({"arch": "encoder_decoder"}, {
        **pbt, "pbt": {"perturbation_interval": 1000,
                       "hyperparam_mutations": {"train.lr": {"float": [1e-4, 1e-2]}}}}))


def test_scaling_studies_refuse_encoder_decoder_models():
    scaling = {"budgets": [1e12, 3e12], "sizes_per_budget": 3,
               "rule": {"d_model": {"min": 16, "max": 64, "step": 16}, "n_layers": 2,
                        "d_head": 8}}
    data = spec({"arch": "encoder_decoder"}, scaling=scaling)
    for key in ("d_model", "n_heads"):
        del data["model"][key]
    del data["train"]["tokens"]
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert any(p.startswith("model.arch: a scaling study's shapes are decoder-only")
               for p in info.value.problems), info.value.problems
