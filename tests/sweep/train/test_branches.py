"""WSD branches: a run cooled down from another budget's trunk equals a run trained alone."""

import errno

import pytest

from sweep.data import load_corpus
from sweep.train import branches
from sweep.train.branches import stable_end_tokens, train_branch, trunk_key
from sweep.train.trainer import TrainConfig, Trainer
from sweep_models import ModelConfig

MODEL = ModelConfig(vocab_size=16, seq_len=32, d_model=32, n_heads=2, n_layers=1, dropout=0.1)
STEP = 4 * 32
WSD = dict(batch_size=4, eval_every=1024, precision="fp32", schedule="wsd", warmup=512,
           decay_fraction=0.25, lr=3e-3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus("synthetic:markov?order=2&vocab=16&tokens=60000",
                       tmp_path_factory.mktemp("cache"))


def factory(corpus, tokens, **changes):
    return lambda: Trainer(MODEL, TrainConfig(tokens=tokens, **(WSD | changes)), corpus,
                           device="cpu")


@pytest.fixture(scope="module")
def alone(corpus):
    """Each budget trained on its own, from step 0."""
    return {t: factory(corpus, t)().train() for t in (4096, 12288)}


def _curve(result):
    """The evaluations without throughput (timing noise)."""
    return [(h["tokens"], h["val_loss"], h["train_loss"], h["lr_now"]) for h in result.history]


def _end(result):
    return _curve(result)[-1]


def test_stable_end_is_the_last_step_before_the_cooldown(corpus):
    t = factory(corpus, 4300)()  # 33 whole steps: the cooldown starts at 0.75 x 4224 = 3168
    assert t.budget.total_tokens == 33 * STEP
    assert stable_end_tokens(t) == 24 * STEP  # 3168 / 128 = 24.75 -> 24 whole steps


def test_branch_equals_a_run_trained_alone(corpus, alone, tmp_path):
    first, info1 = train_branch(factory(corpus, 4096), None, tmp_path, meta={"run_id": "r1"})
    assert info1.reused_tokens == 0 and info1.saved_tokens == 3072
    # the run that leaves the trunk is itself the lone run, plus one evaluation at the trunk
    assert _end(first) == _end(alone[4096])
    assert [c for c in _curve(first) if c[0] != 3072] == [
        c for c in _curve(alone[4096]) if c[0] != 3072]
    key = trunk_key(factory(corpus, 4096)())
    assert [p.name for p in (tmp_path / key).iterdir()] == ["stable-3072.pt"]

    second, info2 = train_branch(factory(corpus, 12288), None, tmp_path, meta={"run_id": "r2"})
    assert info2.reused_tokens == 3072 and info2.source == {"run_id": "r1"}
    assert info2.saved_tokens == 9216 and info2.notes == ()
    # the cooled-down end, and every evaluation after the trunk point, are the lone run's
    assert second.final_val_loss == alone[12288].final_val_loss
    assert second.tokens == alone[12288].tokens and second.steps == alone[12288].steps
    scheduled = {c[0]: c for c in _curve(alone[12288])}
    after = [c for c in _curve(second) if c[0] > 3072 and c[0] != 9216]
    assert len(after) == 8 and all(c == scheduled[c[0]] for c in after)
    assert [p.name for p in (tmp_path / key).iterdir()] == ["stable-9216.pt"]  # latest only


def test_other_settings_get_another_trunk(corpus, tmp_path):
    train_branch(factory(corpus, 4096), None, tmp_path)
    _, info = train_branch(factory(corpus, 12288, lr=1e-3), None, tmp_path)
    assert info.reused_tokens == 0  # another lr: another trajectory, never mixed
    assert len(list(tmp_path.iterdir())) == 2


def test_unreadable_trunk_trains_from_step_zero(corpus, alone, tmp_path):
    key = trunk_key(factory(corpus, 4096)())
    (tmp_path / key).mkdir()
    (tmp_path / key / "stable-3072.pt").write_bytes(b"not a checkpoint")
    result, info = train_branch(factory(corpus, 12288), None, tmp_path)
    assert info.reused_tokens == 0 and "stable-3072.pt not used" in info.notes[0]
    assert result.final_val_loss == alone[12288].final_val_loss
    assert info.saved_tokens == 9216
    assert [p.name for p in (tmp_path / key).iterdir()] == ["stable-9216.pt"]


def test_trunk_that_cannot_be_written_costs_nothing_but_reuse(corpus, alone, tmp_path,
                                                              monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Trainer, "save_checkpoint", full)
    result, info = train_branch(factory(corpus, 4096), None, tmp_path)
    assert result.state == "COMPLETE" and result.final_val_loss == alone[4096].final_val_loss
    assert info.saved_tokens is None and "No space left on device" in info.notes[0]


@pytest.mark.parametrize(("changes", "what"), [
    ({"schedule": "cosine"}, "schedule 'wsd'"),
    ({"warmup": 0.05}, "warmup in tokens"),
])
def test_refuses_runs_that_cannot_share_a_trunk(corpus, tmp_path, changes, what):
    with pytest.raises(ValueError, match=what):
        train_branch(factory(corpus, 4096, **changes), None, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_module_documents_the_trade_off():
    assert "trade-off" in branches.__doc__ and "Hagele" in branches.__doc__
