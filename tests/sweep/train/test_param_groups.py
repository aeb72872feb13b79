"""The optimizer's parameter groups under muP and CompleteP: each group's learning rate and
weight decay are the base values times its multipliers, through the schedule, PBT's live
changes and checkpoints."""

import pytest

from sweep.data import load_corpus
from sweep.train.checkpoint import read_checkpoint, write_checkpoint
from sweep.train.trainer import TrainConfig, Trainer
from sweep_models import ModelConfig
from sweep_models import parametrization as par

SHAPE = {"vocab_size": 16, "seq_len": 32, "d_model": 64, "n_heads": 4, "n_layers": 2}
MUP = ModelConfig(**SHAPE, parametrization="mup", base_d_model=16)
COMPLETEP = ModelConfig(**SHAPE, parametrization="completep", base_d_model=16, base_n_layers=1,
                        completep_alpha=0.5)
TRAIN = TrainConfig(tokens=4096, batch_size=4, lr=2e-3, weight_decay=0.1, warmup=0.25,
                    precision="fp32", eval_every=2048)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus("synthetic:markov?order=1&vocab=16&tokens=50000",
                       tmp_path_factory.mktemp("cache"))


def _per_parameter(trainer):
    """name -> (lr, weight_decay, lr_mult) of the group holding it."""
    group_of = {id(p): g for g in trainer.optimizer.param_groups for p in g["params"]}
    return {name: (group_of[id(p)]["lr"], group_of[id(p)]["weight_decay"],
                   group_of[id(p)]["lr_mult"]) for name, p, _ in trainer.model.param_roles()}


def _assert_consistent(trainer, base_lr, base_wd):
    roles = {name: role for name, _, role in trainer.model.param_roles()}
    config = trainer.model_config
    for name, (lr, wd, _) in _per_parameter(trainer).items():
        assert lr == pytest.approx(base_lr * par.lr_mult(config, roles[name]), rel=1e-12), name
        decayed = name.endswith("weight") and roles[name] in ("hidden", "hidden_out", "readout")
        expected_wd = base_wd * par.wd_mult(config, roles[name]) if decayed else 0.0
        assert wd == pytest.approx(expected_wd, rel=1e-12), name


@pytest.mark.parametrize("config", [MUP, COMPLETEP], ids=["mup", "completep"])
def test_groups_hold_every_parameter_once_with_its_multipliers(corpus, config):
    trainer = Trainer(config, TRAIN, corpus, device="cpu")
    groups = trainer.optimizer.param_groups
    held = [p for g in groups for p in g["params"]]
    assert len(held) == len({id(p) for p in held}) == len(list(trainer.model.parameters()))
    _assert_consistent(trainer, 2e-3, 0.1)
    assert all(g["eps"] == par.adamw_eps(config) for g in groups)
    # muP: hidden matrices at lr / 4 with decay 0.1 * 4; CompleteP alpha 0.5 over depth 2:
    # lr / 4 / sqrt(2), its block biases and norms at lr / sqrt(2)
    per = _per_parameter(trainer)
    hidden = per["blocks.0.attn.c_attn.weight"]
    if config is MUP:
        assert hidden[2] == 0.25 and per["blocks.0.ln_1.bias"][2] == 1.0
    else:
        assert hidden[2] == pytest.approx(0.25 / 2**0.5)
        assert per["blocks.0.ln_1.bias"][2] == pytest.approx(2**-0.5)
        assert groups[0]["eps"] == pytest.approx(1e-8 / 4 / 2**0.5)
    assert hidden[1] == pytest.approx(0.4) and per["wte.weight"][2] == 1.0


def test_sp_keeps_two_groups_with_unit_multipliers(corpus):
    trainer = Trainer(ModelConfig(**SHAPE), TRAIN, corpus, device="cpu")
    groups = trainer.optimizer.param_groups
    assert [(g["lr_mult"], g["wd_mult"], g["weight_decay"]) for g in groups] == [
        (1.0, 1.0, 0.1), (1.0, 0.0, 0.0)]
    assert groups[0]["eps"] == 1e-8


def test_schedule_and_live_changes_scale_every_group(corpus):
    trainer = Trainer(MUP, TRAIN, corpus, device="cpu")
    trainer.train(until_tokens=512)  # inside warmup: the schedule's factor is below 1
    scheduled = trainer._last_lr
    assert 0 < scheduled < 2e-3
    _assert_consistent(trainer, scheduled, 0.1)
    trainer.set_hparams(lr=8e-3, weight_decay=0.02)  # PBT's explore step
    assert trainer.hparams()["lr"] == 8e-3 and trainer.hparams()["weight_decay"] == 0.02
    _assert_consistent(trainer, scheduled, 0.02)  # weight decay now, lr at the next step
    trainer.train(until_tokens=1536)
    assert trainer._last_lr > scheduled  # the new peak, later in warmup
    _assert_consistent(trainer, trainer._last_lr, 0.02)


def test_checkpoint_restores_groups_and_multipliers(corpus, tmp_path):
    donor = Trainer(COMPLETEP, TRAIN, corpus, device="cpu")
    donor.set_hparams(lr=3e-3, weight_decay=0.05)
    donor.train(until_tokens=1024)
    path = donor.save_checkpoint(tmp_path / "donor.pt")
    member = Trainer(COMPLETEP, TRAIN.replace(lr=1e-4), corpus, device="cpu")
    member.load_checkpoint(path)
    assert member.hparams()["weight_decay"] == 0.05
    _assert_consistent(member, donor._last_lr, 0.05)
    # a checkpoint whose groups carry no multipliers (written before they existed)
    state = read_checkpoint(path)
    for group in state["optimizer"]["param_groups"]:
        del group["lr_mult"], group["wd_mult"]
    write_checkpoint(tmp_path / "old.pt", state)
    member = Trainer(COMPLETEP, TRAIN, corpus, device="cpu")
    member.load_checkpoint(tmp_path / "old.pt")
    member.train(until_tokens=2048)
    _assert_consistent(member, member._last_lr, 0.05)
