"""Search-space translation: define-by-run sampling, configs, constraints, samplers."""

import json
import math
import os

import optuna
import pytest

from sweep import space
from sweep.kinds.pbt.mutations import pbt_mutations
from sweep.schema import cost_metrics
from sweep.spec import parse_spec
from sweep.train.config import TrainConfig
from sweep_models.config import ModelConfig
from sweep_models.cost import estimate, param_count

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {
    "name": "t",
    "data": "builtin:python-stdlib",
    "model": {
        "seq_len": 64,
        "n_layers": {"int": [1, 3]},
        "d_model": {"int": [32, 128], "step": 32},
        "d_head": {"choice": [16, 32]},
        "d_ff_ratio": {"choice": [2, 4]},
        "attn_pattern": {"choice": ["dense", "local", "strided"]},
        "attn_sparsity": {"float": [0.3, 0.6], "when": {"attn_pattern": ["local", "strided"]}},
    },
    "train": {
        "tokens": 100000,
        "lr": {"float": [1e-4, 1e-2], "log": True},
        "betas": {"choice": [[0.9, 0.95], [0.9, 0.99]]},
    },
}


def make(**search):
    return parse_spec({**SPACE, "search": search} if search else SPACE)


def test_suggest_with_fixed_trial_builds_derived_shapes():
    spec = make()
    params = {"model.n_layers": 2, "model.d_model": 96, "model.d_head": 32,
              "model.d_ff_ratio": 4, "model.attn_pattern": "local",
              "model.attn_sparsity": 0.5, "train.lr": 1e-3, "train.betas": "[0.9, 0.99]"}
    model, train = space.suggest(optuna.trial.FixedTrial(params), spec)
    assert (model.d_model, model.n_heads, model.d_ff, model.n_layers) == (96, 3, 384, 2)
    assert model.seq_len == 64 and model.attn_pattern == "local"
    assert model.attn_sparsity == 0.5 and model.attn_layout.window is not None
    assert train.betas == (0.9, 0.99) and train.tokens == 100000 and train.lr == 1e-3


def test_conditional_field_is_not_sampled_when_condition_is_false():
    spec = make()
    params = {"model.n_layers": 1, "model.d_model": 64, "model.d_head": 16,
              "model.d_ff_ratio": 2, "model.attn_pattern": "dense", "train.lr": 1e-3,
              "train.betas": "[0.9, 0.95]"}
    model, _ = space.suggest(optuna.trial.FixedTrial(params), spec)
    assert model.attn_sparsity == ModelConfig().attn_sparsity == 0.0
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        model, _ = space.suggest(trial, spec)
        has = "model.attn_sparsity" in trial.params
        assert has == (model.attn_pattern != "dense")
        seen.add(has)
        study.tell(trial, 1.0)
    assert seen == {True, False}


def test_real_study_produces_valid_configs():
    spec = make(n_trials=12, seed=3)
    study = optuna.create_study(sampler=space.make_sampler(spec),
                                pruner=space.make_pruner(spec))
    for _ in range(12):
        trial = study.ask()
        model, train = space.suggest(trial, spec)
        assert isinstance(model, ModelConfig) and isinstance(train, TrainConfig)
        assert model.d_model % model.n_heads == 0
        assert model.d_head == trial.params["model.d_head"]
        assert 1e-4 <= train.lr <= 1e-2
        study.tell(trial, model.d_model / 128 + train.lr)
    # params recorded by optuna rebuild the same configs
    best = study.best_trial
    assert space.configs_from_params(spec, best.params) == space.suggest(
        optuna.trial.FixedTrial(best.params), spec)


def test_independent_heads_raise_invalid_config():
    spec = parse_spec({**SPACE, "model": {"d_model": {"choice": [64, 96]},
                                          "n_heads": {"choice": [3, 4]}}})
    with pytest.raises(space.InvalidConfig, match="d_model=64 is not divisible by n_heads=3"):
        space.suggest(optuna.trial.FixedTrial(
            {"model.d_model": 64, "model.n_heads": 3, "train.lr": 1e-3,
             "train.betas": "[0.9, 0.95]"}), spec)


def test_configs_from_params_checks_and_overrides():
    spec = make()
    base = {"model.n_layers": 1, "model.d_model": 64, "model.d_head": 16,
            "model.d_ff_ratio": 2, "model.attn_pattern": "dense", "train.lr": 1e-3,
            "train.betas": [0.9, 0.95]}
    model, train = space.configs_from_params(spec, {**base, "train.weight_decay": 0.3,
                                                    "model.dropout": 0.1, "other": 1})
    assert train.weight_decay == 0.3 and model.dropout == 0.1 and train.betas == (0.9, 0.95)
    with pytest.raises(space.InvalidConfig, match="train.lr=1.0 is outside"):
        space.configs_from_params(spec, {**base, "train.lr": 1.0})
    with pytest.raises(space.InvalidConfig, match="model.n_layers: missing"):
        space.configs_from_params(spec, {k: v for k, v in base.items() if k != "model.n_layers"})
    with pytest.raises(space.InvalidConfig, match="model.d_modle: unknown model field"):
        space.configs_from_params(spec, {**base, "model.d_modle": 3})


def test_define_by_run_matches_ray_optuna_search_contract():
    from ray.tune.search.optuna.optuna_search import _OptunaTrialSuggestCaptor

    spec = make()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    captor = _OptunaTrialSuggestCaptor(trial)
    assert space.define_by_run(spec)(captor) is None
    assert captor.captured_values == trial.params
    model, _ = space.configs_from_params(spec, captor.captured_values)
    assert model.d_model == trial.params["model.d_model"]


def test_check_constraints_against_cost_model():
    model = ModelConfig(vocab_size=256, seq_len=64, d_model=64, n_heads=4, n_layers=2)
    train = TrainConfig(tokens=1000, batch_size=4, device="cpu")
    n = param_count(model)
    mem = estimate(model, batch_size=4, seq_len=64, dtype="fp32", device="cpu").memory.total
    tight = parse_spec({**SPACE, "constraints": {"max_params": n - 1, "max_memory_gb": 10}})
    ok, reason, cost = space.check_constraints(tight, model, train)
    assert not ok and "max_params" in reason and cost.n_params == n
    assert cost.memory.total == mem
    loose = parse_spec({**SPACE, "constraints": {"max_params": n, "max_memory_gb": mem / 1e9}})
    ok, reason, _ = space.check_constraints(loose, model, train)
    assert ok and reason is None
    small = parse_spec({**SPACE, "constraints": {"max_memory_gb": mem / 2e9}})
    ok, reason, _ = space.check_constraints(small, model, train)
    assert not ok and "memory" in reason
    values = space.constraint_values(tight, cost_metrics(cost), memory_limit_bytes=2 * mem)
    assert values[0] == pytest.approx(n / (n - 1) - 1) and values[0] > 0
    assert values[1] == -1.0 and values[2] == pytest.approx(-0.5)


def test_default_memory_limit_is_device_memory():
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert space.device_memory_bytes("cpu") == ram
    assert space.memory_limit_bytes(make(), "cpu") == ram


def test_a_share_of_a_gpu_limits_memory_to_that_share():
    def spec(gpus, executor="ray", **extra):
        return parse_spec({**SPACE, "search": {"executor": executor},
                           "resources": {"gpus_per_trial": gpus, "gpu_memory_gb": 16}, **extra})

    assert space.memory_limit(spec(0.25), "auto") == (
        4e9, "resources.gpus_per_trial=0.25 of resources.gpu_memory_gb")
    assert space.memory_limit_bytes(spec(0.5), "cuda") == 8e9
    assert space.memory_limit_bytes(spec(2), "auto") == 16e9  # a trial trains on one GPU
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert space.memory_limit_bytes(spec(0.5), "cpu") == ram  # train.device: cpu ignores it
    assert space.memory_limit_bytes(spec(0.5, "optuna"), "auto") == \
        space.device_memory_bytes("auto")  # only Ray places trials on GPUs
    assert space.memory_limit_bytes(spec(0.5, constraints={"max_memory_gb": 3}), "auto") == 3e9
    # The cost model's estimate decides which configs share a GPU.
    model = ModelConfig(vocab_size=256, seq_len=64, d_model=64, n_heads=4, n_layers=2)
    train = TrainConfig(tokens=1000, batch_size=4, device="auto")
    mem = space.training_cost(model, train, "auto").memory.total
    fits = parse_spec({**SPACE, "search": {"executor": "ray"},
                       "resources": {"gpus_per_trial": 0.5, "gpu_memory_gb": 2.1 * mem / 1e9}})
    assert space.check_constraints(fits, model, train)[0]
    quarter = fits.model_copy(update={"resources": fits.resources.model_copy(
        update={"gpus_per_trial": 0.25})})
    ok, reason, _ = space.check_constraints(quarter, model, train)
    assert not ok and reason.endswith(
        f"> resources.gpus_per_trial=0.25 of resources.gpu_memory_gb "
        f"({0.25 * 2.1 * mem / 1e9:.3g} GB)")


def test_recorded_constraints_steer_tpe_and_nsga2():
    for search in ({"sampler": "tpe"}, {"sampler": "nsga2", "pruner": "none",
                                        "objectives": ["val_loss", "flops_per_token"]}):
        spec = make(**search)
        study = optuna.create_study(sampler=space.make_sampler(spec),
                                    directions=["minimize"] * len(spec.search.objectives))
        trial = study.ask()
        space.suggest(trial, spec)
        space.record_constraints(trial, [0.5, -1.0, -0.2])
        study.tell(trial, [1.0] * len(spec.search.objectives))
        frozen = study.trials[0]
        assert frozen.constraints == {"max_params": 0.5, "max_flops_per_token": -1.0,
                                      "max_memory": -0.2}
        assert space.constraints_func(frozen) == [0.5, -1.0, -0.2]
    # TPE ranks a feasible trial above an infeasible one with a better value
    spec = make(sampler="tpe")
    study = optuna.create_study(sampler=space.make_sampler(spec))
    for value, excess in ((0.1, 1.0), (0.9, -1.0)):
        trial = study.ask()
        space.suggest(trial, spec)
        space.record_constraints(trial, [excess, -1.0, -1.0])
        study.tell(trial, value)
    assert study.best_trials[0].value == 0.9


def _proposals(spec, n_trials=6):
    """The params a sampler made from ``spec`` proposes in a real study of ``n_trials``.

    The objective is a fixed function of the config, so the sequence depends only on the
    sampler (past its startup trials TPE, GP, CMA-ES and NSGA-II use the values told).
    """
    objectives = spec.search.objectives
    study = optuna.create_study(sampler=space.make_sampler(spec),
                                directions=["minimize"] * len(objectives))
    proposed = []
    for _ in range(n_trials):
        trial = study.ask()
        model, train = space.suggest(trial, spec)
        proposed.append(dict(trial.params))
        loss = model.d_model / 128 + model.n_layers / 3 + abs(math.log10(train.lr) + 3)
        study.tell(trial, [loss, model.d_model * model.n_layers][:len(objectives)])
    return proposed


@pytest.mark.parametrize(("sampler", "cls"), [
    ("tpe", optuna.samplers.TPESampler), ("gp", optuna.samplers.GPSampler),
    ("cmaes", optuna.samplers.CmaEsSampler), ("random", optuna.samplers.RandomSampler),
    ("nsga2", optuna.samplers.NSGAIISampler)])
def test_make_sampler_is_seeded_with_the_specs_seed(sampler, cls):
    extra = {"objectives": ["val_loss", "n_params"], "pruner": "none"} \
        if sampler == "nsga2" else {}
    # n_trials=8: two startup trials (four for NSGA-II's first generation), then the model's
    spec = make(sampler=sampler, seed=7, n_trials=8, **extra)
    assert isinstance(space.make_sampler(spec), cls)
    first, again = _proposals(spec), _proposals(spec)
    assert first == again
    assert len({json.dumps(p, sort_keys=True) for p in first}) == len(first)  # not stuck
    other = _proposals(make(sampler=sampler, seed=8, n_trials=8, **extra))
    assert other != first
    assert other[0] != first[0]  # the seed already changes the first (random) proposal


def test_grid_sampler_enumerates_the_whole_grid():
    spec = parse_spec({
        "name": "g", "data": "builtin:python-stdlib",
        "model": {"d_model": {"int": [32, 64], "step": 32}, "n_heads": 4,
                  "attn_temperature": {"float": [0.5, 1.5], "step": 0.5}},
        "train": {"tokens": 1000, "betas": {"choice": [[0.9, 0.95], [0.9, 0.99]]}},
        "search": {"sampler": "grid"},
    })
    grid = space.grid_search_space(spec)
    assert grid == {"model.d_model": [32, 64], "model.attn_temperature": [0.5, 1.0, 1.5],
                    "train.betas": ["[0.9, 0.95]", "[0.9, 0.99]"]}
    study = optuna.create_study(sampler=space.make_sampler(spec))
    seen = set()

    def objective(trial):
        model, train = space.suggest(trial, spec)
        seen.add((model.d_model, model.attn_temperature, train.betas))
        return 0.0

    study.optimize(objective, n_trials=20)  # the grid sampler stops the study when done
    assert len(seen) == len(study.trials) == 12


def _pruned_at(study, curve, n_steps=9):
    """Report ``curve(step)`` for steps 1..n_steps as one trial; the step it is pruned at."""
    trial = study.ask()
    for step in range(1, n_steps + 1):
        trial.report(curve(step), step)
        if trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return step
    study.tell(trial, curve(n_steps))
    return None


@pytest.mark.parametrize("name", ["hyperband", "sha", "median", "none"])
def test_make_pruner_stops_a_clearly_bad_trial_and_none_never_prunes(name):
    spec = make(pruner=name)
    # A fixed study name: Hyperband puts trials into brackets by a hash of name and number.
    study = optuna.create_study(study_name="pruning", pruner=space.make_pruner(spec),
                                sampler=optuna.samplers.RandomSampler(seed=0))
    good = [_pruned_at(study, lambda step, i=i: 3.0 - 0.1 * step - 0.01 * i)
            for i in range(15)]
    bad = [_pruned_at(study, lambda step: 10.0) for _ in range(5)]
    if name == "none":
        assert good == [None] * 15 and bad == [None] * 5
        return
    assert good == [None] * 15  # each good trial is the best so far: never pruned
    # Every pruner first judges at the warm-up (30% of the 11 evaluations' tokens: the 4th):
    # Hyperband's one bracket (min_resource 4, max_resource 11, reduction factor 3) and
    # successive halving at their first rung, the median rule at its first step.
    assert space.warmup_step(spec) == 4
    assert bad == [4] * 5, bad
    assert study.trials[-1].state == optuna.trial.TrialState.PRUNED


def test_pbt_mutations_and_initial_population():
    spec = parse_spec({
        "name": "p", "data": "builtin:python-stdlib",
        "model": {"d_model": 64, "n_heads": 4, "attn_temperature": {"float": [0.7, 1.5]}},
        "train": {"tokens": 409600, "lr": {"float": [3e-4, 3e-3], "log": True}},
        "search": {"executor": "ray", "scheduler": "pbt", "n_trials": 4, "pbt": {
            "perturbation_interval": 40960, "hyperparam_mutations": {
                "lr": {"float": [1e-4, 1e-2], "log": True},
                "weight_decay": {"choice": [0.0, 0.1]}}}},
    })
    mutations = pbt_mutations(spec)
    assert set(mutations) == {"train.lr", "train.weight_decay"}
    assert mutations["train.weight_decay"] == [0.0, 0.1]
    assert 1e-4 <= mutations["train.lr"].sample() <= 1e-2
    population = space.sample_params(spec, 4)
    assert len({p["train.lr"] for p in population}) == 4
    model, train = space.configs_from_params(spec, {**population[0], "train.weight_decay": 0.0})
    assert train.weight_decay == 0.0 and model.d_model == 64
