"""`FIELD_RULES` against the configs' own validation, and the spec's exact check of each domain."""

import math
import typing
from dataclasses import fields

import pytest

from sweep.spec import SpecError, parse_spec
from sweep.spec.fields import DERIVED_MODEL_KEYS, FIELD_RULES, MAX_TOKENS, Rule, show_number
from sweep.train.config import TrainConfig
from sweep_models.config import ModelConfig
from sweep_models.errors import ConfigError

#: Other fields a config needs for a field to sit at its bound (d_model 1 needs 1 head).
CONTEXT = {"model.d_model": {"n_heads": 1}, "model.n_heads": {"d_model": 1},
           "model.attn_sparsity": {"attn_pattern": "local"}, "train.seconds": {"warmup": 0.0},
           **{f"model.{name}": {"arch": "encoder_decoder"}
              for name in ("n_encoder_layers", "n_decoder_layers", "src_len")}}
#: Values just inside a bound where a rule across fields stops the config short of the bound:
#: the local pattern's sparsest mask at seq_len 256 removes 0.9922 of the pairs.
JUST_INSIDE = {("model.attn_sparsity", "hi"): 0.99}
CONFIG_RULES = {p: r for p, r in FIELD_RULES.items()
                if p.removeprefix("model.") not in DERIVED_MODEL_KEYS}


def build(path: str, value):
    """Construct the config that ``path`` belongs to with ``value`` there."""
    section, name = path.split(".")
    extra = dict(CONTEXT.get(path, {}))
    if section == "model":
        return ModelConfig(**extra, **{name: value})
    if name == "betas":
        value = (value, 0.5)
    budget = {} if name in ("tokens", "steps", "flops", "seconds") else {"tokens": 1000}
    return TrainConfig(**budget, **extra, **{name: value})


def accepted(path: str, value) -> bool:
    try:
        build(path, value)
    except ConfigError:
        return False
    return True


def edges(path: str, rule: Rule) -> list[tuple[float, bool]]:
    """Values at, just beyond and just inside each bound, with whether the rule admits them."""
    out = []
    for side, bound, is_open, outward in (("lo", rule.lo, rule.lo_open, -math.inf),
                                          ("hi", rule.hi, rule.hi_open, math.inf)):
        if bound is None:
            continue
        if rule.integer:
            step = -1 if outward < 0 else 1
            out += [(int(bound), True), (int(bound) + step, False)]
        else:
            inside = JUST_INSIDE.get((path, side), math.nextafter(bound, -outward))
            out += [(float(bound), not is_open), (math.nextafter(bound, outward), False),
                    (inside, True)]
    return out


@pytest.mark.parametrize("path", sorted(CONFIG_RULES))
def test_each_rule_agrees_with_the_config_at_and_beyond_its_bounds(path):
    rule = CONFIG_RULES[path]
    cases = edges(path, rule)
    assert cases, f"{path} has no bound to test"
    for value, admitted in cases:
        assert rule.admits(value) is admitted, (path, value)
        assert accepted(path, value) is admitted, (path, value, rule)
    if not rule.integer:
        assert not accepted(path, math.inf) and not rule.admits(math.inf)
        assert not accepted(path, math.nan) and not rule.admits(math.nan)


def numeric_fields(cls) -> list[str]:
    hints = typing.get_type_hints(cls)
    return [f.name for f in fields(cls) if f.init and any(
        t in (int, float) for t in (hints[f.name], *typing.get_args(hints[f.name])))]


@pytest.mark.parametrize(("section", "cls"), [("model", ModelConfig), ("train", TrainConfig)])
def test_every_numeric_field_without_a_rule_takes_any_integer(section, cls):
    # A field the table leaves out must have no range in the config either.
    for name in numeric_fields(cls):
        path = f"{section}.{name}"
        if path not in FIELD_RULES:
            for value in (-(10**9), 0, 10**9):
                assert accepted(path, value), (path, value)


def test_rules_read_as_arithmetic():
    assert [str(FIELD_RULES[p]) for p in ("model.attn_sparsity", "train.tokens", "train.lr",
                                          "train.decay_fraction", "train.min_lr_ratio")] == \
        ["0 <= value < 1", "integer >= 1", "value > 0", "0 < value <= 1", "0 <= value <= 1"]
    assert [show_number(v) for v in (64, 0.5, 1e15, 10**15, int(1e100), 6e11, 1.5e-4)] == \
        ["64", "0.5", "1e15", "1e15", "1e100", "6e11", "0.00015"]


def spec(model=None, train=None, search=None) -> dict:
    """A spec with these sections; ``train`` replaces the default ``{tokens: 100000}``."""
    data = {"name": "t", "data": "builtin:python-stdlib", "model": model or {},
            "train": train or {"tokens": 100000}}
    if search:
        data["search"] = search
    return data


def problems(**sections) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(spec(**sections))
    return info.value.problems


@pytest.mark.parametrize(("model", "train", "expected"), [
    ({"attn_pattern": "local", "attn_sparsity": {"float": [0.5, 1.5]}}, {},
     "model.attn_sparsity: upper bound 1.5 is outside the rule 0 <= value < 1"),
    ({"attn_pattern": "local", "attn_sparsity": {"float": [0.5, 1.0]}}, {},
     "model.attn_sparsity: upper bound 1 is outside the rule 0 <= value < 1"),
    ({"dropout": {"float": [-0.1, 0.2]}}, {},
     "model.dropout: lower bound -0.1 is outside the rule 0 <= value < 1"),
    ({"attn_temperature": {"choice": [0.0, 1.0]}}, {},
     "model.attn_temperature: choice 0 is outside the rule value > 0"),
    ({"n_layers": {"int": [0, 4]}}, {}, "model.n_layers: lower bound 0 is outside the rule "
                                        "integer >= 1"),
    ({"d_head": 0}, {}, "model.d_head: value 0 is outside the rule integer >= 1"),
    ({"d_ff_ratio": {"choice": [0, 4]}}, {}, "model.d_ff_ratio: choice 0 is outside the rule "
                                             "value > 0"),
    ({"rope_base": float("inf")}, {}, "model.rope_base: value inf is outside the rule"),
    ({}, {"tokens": 0}, "train.tokens: value 0 is outside the rule integer >= 1"),
    ({}, {"tokens": int(1e100)}, f"train.tokens: value 1e100 is above the limit of "
                                 f"{show_number(MAX_TOKENS)} tokens"),
    ({}, {"tokens": {"choice": [100000, 10**16]}}, "train.tokens: choice 1e16 is above the "
                                                  "limit of 1e15 tokens"),
    ({}, {"steps": 10**16}, "train.steps: value 1e16 is above the limit of "
                                            "1e15 tokens a trial may train on (each step"),
    ({}, {"lr": {"float": [0.0, 0.1]}}, "train.lr: lower bound 0 is outside the rule value > 0"),
    ({}, {"betas": [0.9, 1.0]}, "train.betas: value 1 is outside the rule 0 <= value < 1"),
    ({}, {"betas": {"choice": [[0.9, 0.95], [0.9, 1.5]]}},
     "train.betas: choice 1.5 is outside the rule 0 <= value < 1"),
    ({}, {"min_lr_ratio": 1.5}, "train.min_lr_ratio: value 1.5 is outside the rule "
                                "0 <= value <= 1"),
    ({}, {"warmup": {"float": [-1, 0.1]}}, "train.warmup: lower bound -1 is outside"),
])
def test_domains_outside_the_rule_are_refused_exactly(model, train, expected):
    found = problems(model=model, train={"tokens": 100000, **train} if "steps" not in train
                     else train)
    assert len(found) == 1 and found[0].startswith(expected), found


@pytest.mark.parametrize(("model", "train"), [
    ({"attn_pattern": "local", "attn_sparsity": {"float": [0.0, 0.99]}}, {}),
    ({"attn_temperature": {"float": [1e-3, 10.0], "log": True}}, {}),
    ({"dropout": {"choice": [0.0, 0.5]}}, {}),
    ({}, {"tokens": MAX_TOKENS, "min_lr_ratio": {"float": [0.0, 1.0]}}),
    ({}, {"betas": {"choice": [[0.9, 0.95], [0.0, 0.999]]}, "warmup": 0}),
])
def test_domains_inside_the_rule_pass(model, train):
    assert parse_spec(spec(model=model, train={"tokens": 100000, **train}))


def test_pbt_mutations_are_checked_against_their_field_rule():
    found = problems(
        model={"seq_len": 64, "d_model": 64, "n_heads": 4},
        train={"tokens": 409600},
        search={"executor": "ray", "scheduler": "pbt", "n_trials": 4,
                "pbt": {"perturbation_interval": 40960,
                        "hyperparam_mutations": {"dropout": {"float": [0.0, 1.0]}}}})
    assert found == ["search.pbt.hyperparam_mutations.dropout: upper bound 1 is outside the "
                     "rule 0 <= value < 1"]


@pytest.mark.parametrize("storage", ["sqlite:///", "sqlite://", "sqlite:///:memory:",
                                     "sqlite+pysqlite:///:memory:",
                                     "sqlite:///file:db?mode=memory&uri=true"])
def test_an_in_memory_storage_cannot_serve_parallel_workers(storage):
    found = problems(search={"storage": storage, "parallel": 2})
    assert len(found) == 1 and found[0].startswith(f"search.storage: {storage} is an in-memory "
                                                   "database")
    assert "search.parallel=2" in found[0]
    assert parse_spec(spec(search={"storage": storage, "parallel": 1}))


@pytest.mark.parametrize("storage", ["sqlite:///optuna.db", "sqlite:////abs/optuna.db",
                                     "postgresql://u@h/db", "runs/optuna.journal"])
def test_a_shared_storage_serves_parallel_workers(storage):
    assert parse_spec(spec(search={"storage": storage, "parallel": 4}))
