"""Study spec validation: every rule rejects a bad spec with an error naming the path."""

import copy

import pytest
import yaml
from testsupport import tiny_spec

from sweep.spec import ChoiceDomain, SpecError, load_spec, parse_spec, spec_hash

BASE = {
    "name": "t",
    "data": "builtin:python-stdlib",
    "model": {
        "seq_len": 64,
        "d_model": {"int": [32, 128], "step": 32},
        "d_head": {"choice": [16, 32]},
        "attn_pattern": {"choice": ["dense", "local"]},
        "attn_sparsity": {"float": [0.3, 0.6], "when": {"attn_pattern": ["local"]}},
    },
    "train": {"tokens": 100000, "lr": {"float": [1e-4, 1e-2], "log": True}},
}


def spec_with(**sections):
    data = copy.deepcopy(BASE)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return data


def problems(data):
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return str(info.value)


def test_base_spec_is_valid_with_defaults():
    spec = parse_spec(spec_with())
    assert spec.search.sampler == "tpe" and spec.search.pruner == "median"
    assert spec.search.scheduler == "none" and spec.search.directions == ["minimize"]
    assert spec.tracking.experiment == "t"
    assert [p.path for p in spec.searched()][:2] == ["model.d_model", "model.d_head"]
    assert spec.budget() == ("tokens", 100000)


@pytest.mark.parametrize(
    ("sections", "path", "rule"),
    [
        ({"model": {"d_model": {"int": [128, 32]}}}, "model.d_model", "lo=128 > hi=32"),
        ({"train": {"lr": {"float": [0.0, 1e-2], "log": True}}}, "train.lr", "lo > 0"),
        ({"model": {"attn_pattern": {"choice": []}}}, "model.attn_pattern.choice",
         "at least 1"),
        ({"model": {"d_model": {"float": [32, "x"]}}}, "model.d_model.float[1]",
         "valid number"),
        ({"model": {"d_model": {"float": [32.0, 64.0]}}}, "model.d_model", "is an integer"),
        ({"model": {"d_model": {"int": [32, 100], "step": 32}}}, "model.d_model",
         "not a multiple of step"),
        ({"model": {"d_model": {"int": [32, 64], "lag": 1}}}, "model.d_model.lag",
         "unknown key"),
        ({"model": {"d_model": {"range": [1, 2]}}}, "model.d_model", "exactly one of"),
        ({"model": {"d_modle": 64}}, "model.d_modle", "did you mean 'd_model'"),
        ({"train": {"learning_rate": 1e-3}}, "train.learning_rate", "unknown field"),
        ({"model": {"n_heads": 4}}, "model.d_head", "not both"),
        ({"model": {"activation": {"choice": ["gelu", "tanh"]}}},
         "model.activation.choice[1]", "'tanh' is not one of"),
        ({"model": {"n_layers": "two"}}, "model.n_layers", "not an integer"),
        ({"model": {"preset": "gpt5"}}, "model.preset", "not one of"),
        ({"train": {"steps": 100}}, "train", "exactly one budget"),
        ({"search": {"sampler": "bayes"}}, "search.sampler", "Input should be"),
        ({"search": {"n_trials": 0}}, "search.n_trials", "greater than or equal to 1"),
        ({"search": {"sampler": "nsga2"}}, "search.sampler", "needs >= 2 objectives"),
        ({"search": {"objectives": ["val_loss", "flops_per_token"], "pruner": "sha"}},
         "search.pruner",
         "cannot prune multi-objective"),
        ({"search": {"objectives": ["val_loss", "n_params"], "directions": ["minimize"]}},
         "search.directions", "1 direction(s) for 2"),
        ({"search": {"scheduler": "asha"}}, "search.scheduler", "belong to executor ray"),
        ({"search": {"executor": "ray", "pruner": "median"}}, "search.pruner",
         "belong to executor optuna"),
        ({"search": {"sampler": "grid"}}, "train.lr", "grid sampler needs"),
        ({"search": {"executor": "optuna", "pbt": {"perturbation_interval": 10,
                                                   "hyperparam_mutations": {"lr": [1e-3]}}}},
         "search.pbt", "need executor ray"),
        ({"search": {"storage": "redis://host/0"}}, "search.storage", "neither a journal"),
        ({"constraints": {"max_params": -1}}, "constraints.max_params", "greater than 0"),
        ({"constraints": {"max_gpus": 1}}, "constraints.max_gpus", "unknown key"),
        ({"resources": {"gpus_per_trial": 1.5}}, "resources.gpus_per_trial", "whole number"),
        ({"data": "s3://bucket"}, "data.uri", "scheme one of"),
        ({"name": "bad name!"}, "name", "starts with a letter or digit and holds only"),
        ({"extra_section": 1}, "extra_section", "unknown key"),
        ({"model": {"attn_sparsity": {"float": [0.3, 0.6]}}}, "model.attn_sparsity",
         "add when"),
        ({"model": {"attn_sparsity": {"float": [0.3, 0.6], "when": {"attn_patern": "local"}}}},
         "model.attn_sparsity.when.attn_patern", "names no model or train field"),
        ({"model": {"attn_sparsity": {"float": [0.3, 0.6],
                                      "when": {"attn_pattern": ["sparse"]}}}},
         "model.attn_sparsity.when.attn_pattern", "'sparse' is never taken"),
        ({"train": {"lr": {"float": []}}}, "train.lr.float",
         "give the range as [lo, hi], two numbers; got []"),
        ({"model": {"d_model": {"int": 64}}}, "model.d_model.int", "got 64"),
        ({"model": {"d_model": {"int": [32, 64, 96]}}}, "model.d_model.int", "got [32, 64, 96]"),
        ({"model": {"d_model": {"int": [32, 64], "stp": 32}}}, "model.d_model.stp",
         "unknown key (did you mean 'step'?); known: int, log, step, when"),
        ({"serach": {"sampler": "tpe"}}, "serach", "unknown key (did you mean 'search'?)"),
        ({"search": {"samplr": "tpe"}}, "search.samplr", "did you mean 'sampler'?"),
        ({"search": {"pbt": {"perturbation_interval": 10, "hyperparam_mutations": {"lr": 1},
                             "quantile": 0.2}}}, "search.pbt.quantile",
         "did you mean 'quantile_fraction'?"),
        ({"search": {"n_trials": 0}}, "search.n_trials", "got 0"),
        ({"search": {"sampler": "bayes"}}, "search.sampler", "got 'bayes'"),
        ({"search": 5}, "search", "expected a mapping of keys, got 5"),
        ({"train": ["tokens", 1]}, "train", "expected a mapping of keys, got a list"),
        ({"search": {"objectives": "val_loss"}}, "search.objectives",
         "expected a list, got 'val_loss'"),
        ({"name": "runs/../x"}, "name", "'runs/../x': a study name"),
        ({"name": ".hidden"}, "name", "starts with a letter or digit"),
        ({"model": {"dropout": {"choice": [[1, 2], [1, 2]]}}}, "model.dropout.choice",
         "duplicate choice(s): [1, 2]"),
        ({"model": {"dropout": {"choice": [{"a": 1, "b": 2}, {"b": 2, "a": 1}]}}},
         "model.dropout.choice", 'duplicate choice(s): {"a": 1, "b": 2}'),
    ],
)
def test_bad_spec_names_path_and_rule(sections, path, rule):
    message = problems(spec_with(**sections))
    line = next((ln for ln in message.splitlines() if ln.strip().startswith(path + ":")), None)
    assert line is not None, message
    assert rule in line, message


def test_when_cycle_is_rejected():
    model = {
        "d_model": 64, "n_heads": 4,
        "dropout": {"choice": [0.0, 0.1], "when": {"attn_temperature": [1.0]}},
        "attn_temperature": {"choice": [1.0, 2.0], "when": {"dropout": [0.0]}},
    }
    message = problems({**BASE, "model": model})
    assert "cycle" in message and "model.dropout" in message


def pbt_spec(mutations, *, perturb=40960, ckpt=20480, tokens=409600):
    data = spec_with(
        train={"tokens": tokens},
        search={"executor": "ray", "scheduler": "pbt", "n_trials": 4,
                "pbt": {"perturbation_interval": perturb, "checkpoint_interval": ckpt,
                        "hyperparam_mutations": mutations}},
    )
    data["model"] = {"seq_len": 64, "d_model": 64, "n_heads": 4}  # one shape for everyone
    return data


@pytest.mark.parametrize("field", ["d_model", "n_layers", "n_heads", "d_ff", "d_head",
                                   "model.d_model"])
def test_pbt_rejects_shape_mutations(field):
    message = problems(pbt_spec({field: {"int": [32, 64]}}))
    assert f"search.pbt.hyperparam_mutations.{field}: PBT cannot mutate" in message


def test_pbt_checkpoint_interval_must_divide_perturbation_interval():
    message = problems(pbt_spec({"lr": {"float": [1e-4, 1e-2]}}, perturb=40960, ckpt=30000))
    assert "search.pbt.checkpoint_interval: 30000 tokens does not divide" in message
    assert parse_spec(pbt_spec({"lr": {"float": [1e-4, 1e-2]}}, perturb=40960, ckpt=10240))


def test_pbt_other_rules():
    message = problems(pbt_spec({"lr": {"float": [1e-4, 1e-2]}}, perturb=409600))
    assert "search.pbt.perturbation_interval" in message and "budget" in message
    data = pbt_spec({"lr": {"float": [1e-4, 1e-2]}})
    data["search"]["sampler"] = "tpe"
    assert "search.sampler: pbt draws its population at random" in problems(data)
    data = pbt_spec({"lr": {"float": [1e-4, 1e-2]}})
    del data["search"]["pbt"]
    assert "search.pbt: scheduler pbt needs a pbt section" in problems(data)
    data = {**pbt_spec({"lr": {"float": [1e-4, 1e-2]}}), "simulate": {"law": "chinchilla"}}
    assert "simulate: population-based training trains its members in chunks" in problems(data)


def test_a_simulated_trial_takes_no_time():
    data = {**tiny_spec("sim"), "simulate": {"law": "asymmetric"}}
    data["train"] = {**data["train"], "seconds": 5}
    del data["train"]["steps"]
    assert "train.seconds: a simulated trial (simulate) takes no time" in problems(data)
    spec = parse_spec(pbt_spec({"lr": {"float": [1e-4, 1e-2], "log": True},
                                "dropout": {"choice": [0.0, 0.1]}}))
    assert spec.search.sampler == "random" and spec.search.pruner == "none"
    assert not spec.search.pbt.synch
    data = pbt_spec({"lr": {"float": [1e-4, 1e-2]}})
    data["search"]["pbt"]["synch"] = "sometimes"
    assert "search.pbt.synch" in problems(data)
    data["search"]["pbt"]["synch"] = True
    assert parse_spec(data).search.pbt.synch


def test_never_valid_shapes_are_rejected():
    # every d_model in {36, 60, 84} is odd multiple of 12 -> not divisible by 8 or 16
    data = spec_with(model={"d_model": {"int": [36, 84], "step": 24},
                            "d_head": {"choice": [8, 16]}})
    assert "model.d_head: no value of model.d_model is divisible" in problems(data)
    # n_heads searched independently: a huge d_model range with one valid value still passes
    data = spec_with(model={"d_model": {"int": [1001, 1_000_001], "step": 2}})
    data["model"].pop("d_head")
    data["model"]["n_heads"] = {"choice": [2, 7]}
    assert parse_spec(data)  # 1001 = 7 * 143
    data["model"]["n_heads"] = {"choice": [2, 4]}
    assert "model.n_heads: no value" in problems(data)  # every d_model is odd
    # rope needs an even head dimension: d_model 96 with 32 heads gives 3
    data = spec_with(model={"d_model": 96, "pos_encoding": "rope"})
    data["model"].pop("d_head")
    data["model"]["n_heads"] = 32
    assert "model.n_heads: no value" in problems(data)


def test_spec_hash_ignores_order_comments_spelling(tmp_path):
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text("name: t\ndata: builtin:python-stdlib\ntrain: {tokens: 1e5, lr: 0.001}\n")
    b.write_text("# comment\ndescription: other\ntrain:\n  lr: 1.0e-3\n  tokens: 100000\n"
                 "name: t\ndata: {uri: 'builtin:python-stdlib'}\n")
    assert spec_hash(load_spec(a)) == spec_hash(load_spec(b))
    c = tmp_path / "c.yaml"
    c.write_text(a.read_text().replace("0.001", "0.002"))
    assert spec_hash(load_spec(c)) != spec_hash(load_spec(a))


def test_load_spec_file_errors_name_the_file(tmp_path):
    with pytest.raises(SpecError, match="missing.yaml"):
        load_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match=r"bad\.yaml.*\n.*invalid YAML"):
        load_spec(bad)
    listing = tmp_path / "list.yaml"
    listing.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(SpecError, match="expected a mapping"):
        load_spec(listing)


def test_scientific_notation_reads_as_numbers(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\ndata: builtin:python-stdlib\n"
                    "train: {tokens: 2e5, lr: {float: [1e-4, 3e-3], log: true}}\n")
    spec = load_spec(path)
    assert spec.train["tokens"] == 200000 and isinstance(spec.train["tokens"], int)
    assert spec.train["lr"].bounds == (1e-4, 3e-3)


@pytest.mark.parametrize("field", ["d_model", "n_layers", "attn_pattern"])
def test_pbt_population_shares_one_shape(field):
    data = pbt_spec({"lr": {"float": [1e-4, 1e-2]}})
    data["model"][field] = ({"choice": ["dense", "local"]} if field == "attn_pattern"
                            else {"choice": [32, 64]} if field == "d_model"
                            else {"int": [1, 2]})
    assert f"model.{field}: a PBT population shares one shape" in problems(data)


def test_spec_that_is_not_utf8_is_a_spec_error(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(path)


def test_each_problem_is_one_line_naming_its_field():
    data = spec_with()
    del data["data"]
    assert problems(data).splitlines()[1:] == ["  data: required, but not given"]
    message = problems(spec_with(search={"n_trials": 0, "seed": "x", "sampler": 3}))
    lines = message.splitlines()[1:]
    assert [ln.split(":")[0].strip() for ln in lines] == \
        ["search.sampler", "search.n_trials", "search.seed"], message
    assert all(", got " in ln and "https://" not in ln for ln in lines), message


def test_choices_differ_by_json_type_as_before():
    # 1, 1.0 and true are three choices; equal lists are one (compared by content).
    options = [1, 1.0, True, "1", [1], None, {"a": 1}]
    assert ChoiceDomain(choice=options).options == options
    assert "duplicate choice(s): 1" in problems(spec_with(train={"seed": {"choice": [1, 2, 1]}}))
    many = list(range(60_000))
    assert parse_spec(spec_with(train={"seed": {"choice": many}})).train["seed"].options == many
    assert "duplicate choice(s): 7, 9" in problems(
        spec_with(train={"seed": {"choice": [*many, 9, 7]}}))


def test_trial_checkpoints_are_tokens_and_not_for_pbt():
    assert parse_spec(spec_with(search={"checkpoint_interval": 8192})).search.\
        checkpoint_interval == 8192
    assert "search.checkpoint_interval" in problems(spec_with(search={"checkpoint_interval": 0}))
    data = pbt_spec({"lr": {"float": [1e-4, 1e-2]}})
    data["search"]["checkpoint_interval"] = 8192
    message = problems(data)
    assert "search.checkpoint_interval: PBT members checkpoint every" in message


@pytest.mark.parametrize(("law", "message"), [
    ("kaplan", "simulate.law: 'kaplan': unknown law; choose from chinchilla, asymmetric"),
    ({"E": 1.7, "A": 400, "B": 400, "alpha": -0.3, "beta": 0.3},
     "simulate.law: alpha: Input should be greater than 0"),
    ({"E": 1.7, "A": 400}, "simulate.law: B: Field required; alpha: Field required"),
    (3, "simulate.law: 3: a law's name"),
])
def test_a_bad_simulated_law_is_one_line_naming_its_field(law, message):
    text = problems({**tiny_spec("sim"), "simulate": {"law": law}})
    assert message in text and text.count("\n") == 1, text
