import math

import pytest
import torch

from sweep.data import load_corpus
from sweep.train.checkpoint import CheckpointError
from sweep.train.trainer import TrainConfig, Trainer
from sweep_models import ConfigError, ModelConfig

MODEL = ModelConfig(vocab_size=16, seq_len=32, d_model=32, n_heads=2, n_layers=1, dropout=0.1)
TRAIN = TrainConfig(tokens=8192, batch_size=4, grad_accum=2, eval_every=1024, precision="fp32",
                    warmup=0.2)



@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus("synthetic:markov?order=2&vocab=16&tokens=50000",
                       tmp_path_factory.mktemp("cache"))


def _curve(result):
    return [(h["tokens"], h["val_loss"], h["train_loss"], h["lr_now"]) for h in result.history]


@pytest.fixture(scope="module")
def uninterrupted(corpus):
    return Trainer(MODEL, TRAIN, corpus, device="cpu").train()


def test_resume_from_checkpoint_gives_identical_losses(corpus, uninterrupted, tmp_path):
    first = Trainer(MODEL, TRAIN, corpus, device="cpu")
    first.train(until_tokens=3072)
    path = first.save_checkpoint(tmp_path / "member" / "ckpt.pt")
    assert [p.name for p in path.parent.iterdir()] == ["ckpt.pt"]  # no temp file left
    # A fresh process-like trainer with another seed: everything comes from the checkpoint.
    resumed = Trainer(MODEL, TRAIN.replace(seed=7), corpus, device="cpu")
    torch.manual_seed(1234)  # global RNG noise must not leak into the trainer
    resumed.load_checkpoint(path)
    assert resumed.tokens_seen == 3072
    result = resumed.train()
    assert result.state == "COMPLETE"
    assert _curve(result) == _curve(uninterrupted)


def test_chunked_training_matches_one_call(corpus, uninterrupted):
    trainer = Trainer(MODEL, TRAIN, corpus, device="cpu")
    seen = []
    for until in (1000, 2500, 2600, 6000, None):
        r = trainer.train(until_tokens=until)
        seen.append(r.state)
    assert seen == ["RUNNING"] * 4 + ["COMPLETE"]
    scheduled = {t for t, *_ in _curve(uninterrupted)}
    # chunk ends add evaluations; the scheduled ones are exactly the uninterrupted run's
    assert [c for c in _curve(r) if c[0] in scheduled] == _curve(uninterrupted)
    assert len(r.history) > len(uninterrupted.history)
    assert r.tokens == uninterrupted.tokens and r.steps == uninterrupted.steps


def test_pbt_exploit_and_explore(corpus, tmp_path):
    donor = Trainer(MODEL, TRAIN, corpus, device="cpu")
    donor.set_hparams(lr=2e-3, dropout=0.2, attn_temperature=0.8, weight_decay=0.05)
    donor.train(until_tokens=2048)
    donor.save_checkpoint(tmp_path / "donor.pt")
    member = Trainer(MODEL, TRAIN.replace(lr=5e-4), corpus, device="cpu")
    member.load_checkpoint(tmp_path / "donor.pt")
    assert member.hparams() == pytest.approx(
        {"lr": 2e-3, "weight_decay": 0.05, "dropout": 0.2, "attn_temperature": 0.8})
    assert member.model.config.attn_temperature == 0.8
    for a, b in zip(member.model.parameters(), donor.model.parameters(), strict=True):
        assert torch.equal(a, b)
    member.set_hparams(lr=4e-3)
    r = member.train(until_tokens=4096)
    # the reported lr is the new peak times the schedule (past warmup, cosine decay)
    assert 0.1 * 4e-3 < r.history[-1]["lr_now"] < 4e-3
    assert all(math.isfinite(h["val_loss"]) for h in r.history)


def test_set_hparams_validation(corpus):
    trainer = Trainer(MODEL, TRAIN, corpus, device="cpu")
    with pytest.raises(ConfigError, match="lr"):
        trainer.set_hparams(lr=-1.0)
    with pytest.raises(ConfigError, match="weight_decay"):
        trainer.set_hparams(weight_decay=math.nan)
    with pytest.raises(ConfigError, match="dropout"):
        trainer.set_hparams(dropout=1.5)
    with pytest.raises(ConfigError, match="attn_temperature"):
        trainer.set_hparams(attn_temperature=0.0)


def test_checkpoint_of_another_shape_or_garbage(corpus, tmp_path):
    trainer = Trainer(MODEL, TRAIN, corpus, device="cpu")
    trainer.save_checkpoint(tmp_path / "a.pt")
    other = Trainer(MODEL.replace(d_model=64), TRAIN, corpus, device="cpu")
    with pytest.raises(CheckpointError, match="d_model"):
        other.load_checkpoint(tmp_path / "a.pt")
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot be read"):
        trainer.load_checkpoint(tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        trainer.load_checkpoint(tmp_path / "missing.pt")


class _RunsCode:
    """Pickles as a call of os.system, which an unrestricted unpickler would make."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("writer", ["torch", "pickle"])
def test_checkpoint_that_would_run_code_is_refused_and_runs_none(corpus, tmp_path, writer):
    import pickle

    marker = tmp_path / "pwned"
    state = {"format": 1, "model": _RunsCode(marker)}
    path = tmp_path / "evil.pt"
    if writer == "torch":
        torch.save(state, path)
    else:
        path.write_bytes(pickle.dumps(state))
    trainer = Trainer(MODEL, TRAIN, corpus, device="cpu")
    with pytest.raises(CheckpointError) as info:
        trainer.load_checkpoint(path)
    message = str(info.value)
    assert str(path) in message
    assert "weights_only" not in message  # never the advice to load it unrestricted
    if writer == "torch":
        assert "is refused" in message and "system" in message
    assert not marker.exists()
    pickle.loads(pickle.dumps(_RunsCode(marker)))  # noqa: S301 - the payload is real
    assert marker.exists()
