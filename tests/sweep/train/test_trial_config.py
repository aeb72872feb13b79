import math

import pytest

from sweep.train.config import TrainConfig, resolve_budget
from sweep.train.schedule import lr_factor
from sweep_models import ConfigError, ModelConfig


def test_defaults_and_round_trip():
    tc = TrainConfig(tokens=10_000)
    assert (tc.batch_size, tc.lr, tc.weight_decay, tc.betas) == (16, 1e-3, 0.1, (0.9, 0.95))
    assert tc.budget_kind == "tokens"
    d = tc.to_dict()
    assert d["betas"] == [0.9, 0.95]
    assert TrainConfig.from_dict(d) == tc
    assert tc.replace(steps=5).budget_kind == "steps"
    assert TrainConfig(tokens=2e5).tokens == 200_000  # YAML gives 2e5 as a float


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"lr": 0}, "lr"),
        ({"lr": math.nan}, "lr"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"betas": (0.9,)}, "betas"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"warmup": -1}, "warmup"),
        ({"schedule": "step"}, "schedule"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"grad_clip": -1}, "grad_clip"),
        ({"grad_accum": 0}, "grad_accum"),
        ({"batch_tokens": 0}, "batch_tokens"),
        ({"batch_tokens": 4096, "grad_accum": 2}, "batch_tokens"),
        ({"precision": "fp16"}, "precision"),
        ({"compile": "yes"}, "compile"),
        ({"seed": 1.5}, "seed"),
        ({"eval_every": 0}, "eval_every"),
        ({"eval_tokens": 0}, "eval_tokens"),
        ({"device": ""}, "device"),
        ({"tokens": 0}, "tokens"),
        ({"tokens": None, "steps": -1}, "steps"),
        ({"tokens": None, "flops": math.inf}, "flops"),
        ({"tokens": None, "seconds": 0}, "seconds"),
        ({"tokens": None}, "budget"),
        ({"steps": 10}, "budget"),
        ({"tokens": None, "seconds": 5, "warmup": 100}, "warmup"),
    ],
)
def test_validation_names_the_field(kw, field):
    with pytest.raises(ConfigError, match=rf"^{field}"):
        TrainConfig(**{"tokens": 1000, **kw})


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="learning_rate"):
        TrainConfig.from_dict({"tokens": 100, "learning_rate": 1e-3})


def test_resolve_token_and_step_budgets():
    model = ModelConfig(seq_len=64, d_model=32, n_heads=2)
    b = resolve_budget(TrainConfig(tokens=100_000, batch_size=8, warmup=0.1), model)
    assert b.step_tokens == 512 and b.total_steps == 195 and b.total_tokens == 195 * 512
    assert b.warmup_tokens == int(0.1 * 195 * 512)
    assert b.eval_every == 19 * 512
    b = resolve_budget(TrainConfig(steps=10, batch_size=8, grad_accum=3, warmup=1000), model)
    assert (b.grad_accum, b.step_tokens, b.total_tokens, b.warmup_tokens) == (3, 1536, 15360, 1000)
    b = resolve_budget(TrainConfig(steps=10, batch_size=8, batch_tokens=2048), model)
    assert b.grad_accum == 4
    with pytest.raises(ConfigError, match="batch_tokens=1000 is not a multiple"):
        resolve_budget(TrainConfig(steps=10, batch_size=8, batch_tokens=1000), model)
    b = resolve_budget(TrainConfig(seconds=2.5), model)
    assert b.seconds == 2.5 and b.total_tokens is None


def test_flop_budget_uses_the_cost_model():
    from sweep_models.cost import flops_per_token

    model = ModelConfig(seq_len=64, d_model=32, n_heads=2)
    per_token = flops_per_token(model, train=True)
    b = resolve_budget(TrainConfig(flops=per_token * 51_200, batch_size=8), model)
    assert b.total_tokens == 51_200 and b.total_steps == 100


def test_schedule_shapes():
    # warmup: linear from 0 to 1 over the warmup
    assert lr_factor("cosine", 50, 1000, 100, 0.1) == pytest.approx(0.5)
    assert lr_factor("cosine", 100, 1000, 100, 0.1) == pytest.approx(1.0)
    # cosine: halfway through the decay is halfway between peak and floor
    assert lr_factor("cosine", 550, 1000, 100, 0.1) == pytest.approx(0.55)
    assert lr_factor("cosine", 1000, 1000, 100, 0.1) == pytest.approx(0.1)
    assert lr_factor("linear", 325, 1000, 100, 0.0) == pytest.approx(0.75)
    assert lr_factor("constant", 900, 1000, 100, 0.1) == 1.0
    assert lr_factor("cosine", 10, 1000, 0, 0.1) == pytest.approx(
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.01))
    )


def test_wsd_holds_the_peak_then_cools_down_as_one_minus_sqrt():
    # Hagele et al. 2024: warmup, constant, then 1 - sqrt over the last decay_fraction.
    assert lr_factor("wsd", 50, 1000, 100, 0.1) == pytest.approx(0.5)
    assert lr_factor("wsd", 100, 1000, 100, 0.1) == 1.0
    assert lr_factor("wsd", 800, 1000, 100, 0.1, decay_fraction=0.2) == 1.0
    # a quarter of the way through the cooldown: 1 - sqrt(0.25) = 0.5 of the way to the floor
    assert lr_factor("wsd", 850, 1000, 100, 0.1, decay_fraction=0.2) == pytest.approx(0.55)
    assert lr_factor("wsd", 1000, 1000, 100, 0.0, decay_fraction=0.2) == pytest.approx(0.0)
    # a cooldown longer than the post-warmup part starts right after warmup
    assert lr_factor("wsd", 100, 1000, 100, 0.0, decay_fraction=1.0) == pytest.approx(1.0)
    assert lr_factor("wsd", 550, 1000, 100, 0.0, decay_fraction=1.0) == pytest.approx(
        1 - math.sqrt(0.5))
    with pytest.raises(ConfigError, match=r"decay_fraction=0 must be in \(0, 1\]"):
        TrainConfig(tokens=1000, schedule="wsd", decay_fraction=0)


def test_budget_below_one_step_is_an_error():
    model = ModelConfig(seq_len=64, d_model=32, n_heads=2)
    with pytest.raises(ConfigError, match="tokens=100 is less than one optimizer step of 512"):
        resolve_budget(TrainConfig(tokens=100, batch_size=8), model)
    with pytest.raises(ConfigError, match="flops=1 .* less than one optimizer step"):
        resolve_budget(TrainConfig(flops=1.0, batch_size=8), model)


def test_train_compile_in_a_spec_reaches_the_trainer(tmp_path, monkeypatch):
    import torch

    from sweep import space
    from sweep.data import load_corpus
    from sweep.spec import parse_spec
    from sweep.spec.reference import json_schema
    from sweep.train import Trainer

    data = "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000"
    spec = parse_spec({
        "name": "compiled", "data": data,
        "model": {"vocab_size": 16, "seq_len": 8, "d_model": 8, "n_heads": 1, "n_layers": 1},
        "train": {"steps": 1, "batch_size": 1, "compile": True, "device": "cpu",
                  "lr": {"float": [1e-3, 1e-2], "log": True}},
        "search": {"sampler": "random", "n_trials": 1},
    })
    model, train = space.configs_from_params(spec, {"train.lr": 3e-3})
    assert train.compile is True
    # What the trainer hands torch.compile (importing TorchDynamo costs seconds here; compiled
    # steps are measured by bench/model_step.py --compile).
    monkeypatch.setattr(torch, "compile", lambda module: ("compiled", module))
    trainer = Trainer(model, train, load_corpus(data, tmp_path), device="cpu")
    assert trainer._forward == ("compiled", trainer.model)
    eager = Trainer(model, train.replace(compile=False), load_corpus(data, tmp_path),
                    device="cpu")
    assert eager._forward is eager.model
    # `sweep schema` (and docs/study-spec.schema.json) takes it as a boolean.
    compile_field = json_schema()["properties"]["train"]["properties"]["compile"]
    assert {"type": "boolean"} in compile_field["anyOf"] and compile_field["default"] is False
