"""Checkpointed trials: a retry that continues an interrupted trial's checkpoint equals a trial
never stopped, and trains only the tokens after the checkpoint."""

import errno

import pytest

from sweep.data import load_corpus
from sweep.schema import TrialState
from sweep.train.checkpointed import LATEST, train_checkpointed
from sweep.train.reporter import NullReporter
from sweep.train.trainer import TrainConfig, Trainer
from sweep_models import ModelConfig

MODEL = ModelConfig(vocab_size=16, seq_len=32, d_model=32, n_heads=2, n_layers=1, dropout=0.1)
TRAIN = dict(tokens=8192, batch_size=4, eval_every=1024, precision="fp32", lr=3e-3,
             warmup=0.1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus("synthetic:markov?order=2&vocab=16&tokens=60000",
                       tmp_path_factory.mktemp("cache"))


def factory(corpus, **changes):
    return lambda: Trainer(MODEL, TrainConfig(**(TRAIN | changes)), corpus, device="cpu")


@pytest.fixture(scope="module")
def alone(corpus):
    return factory(corpus)().train()


def curve(result):
    """The evaluations without throughput (timing noise)."""
    return [(h["tokens"], h["val_loss"], h["train_loss"], h["lr_now"]) for h in result.history]


class Recorder(NullReporter):
    def __init__(self, kill_at=None):
        self.points, self.kill_at = [], kill_at

    def report(self, tokens, metrics):
        self.points.append((tokens, metrics["val_loss"]))
        if self.kill_at is not None and tokens >= self.kill_at:
            raise KeyboardInterrupt("killed")  # the process stopped mid-trial


def test_checkpoints_change_nothing_and_leave_no_file(corpus, alone, tmp_path):
    seen = Recorder()
    result, info = train_checkpointed(factory(corpus), seen, tmp_path / "trial-0",
                                      interval=2048)
    assert curve(result) == curve(alone)  # no evaluation added, none changed
    assert [t for t, _ in seen.points] == [1024 * i for i in range(1, 9)]
    assert info.saved == 3 and info.resumed_tokens == 0  # at 2048, 4096, 6144; 8192 is the end
    assert not (tmp_path / "trial-0").exists()


def test_a_retry_continues_the_interrupted_trials_checkpoint(corpus, alone, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        train_checkpointed(factory(corpus), Recorder(kill_at=5120), tmp_path / "trial-3",
                           interval=2048, meta={"trial": 3})
    assert (tmp_path / "trial-3" / LATEST).is_file()  # at 4096 tokens: kept for the retry
    seen = Recorder()
    result, info = train_checkpointed(factory(corpus), seen, tmp_path / "trial-7",
                                      interval=2048, resume_from=tmp_path / "trial-3")
    assert info.resumed_tokens == 4096 and info.source["trial"] == 3 and info.notes == ()
    assert result.final_val_loss == alone.final_val_loss  # exactly, not approximately
    assert curve(result) == curve(alone) and result.tokens == alone.tokens
    # the retry's run and pruner see the whole curve: the checkpoint's 4 evaluations again
    assert [t for t, _ in seen.points] == [1024 * i for i in range(1, 9)]
    assert not (tmp_path / "trial-3").exists() and not (tmp_path / "trial-7").exists()


def test_a_checkpoint_of_other_settings_is_not_continued(corpus, alone, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        train_checkpointed(factory(corpus, lr=1e-3), Recorder(kill_at=3072),
                           tmp_path / "trial-0", interval=2048)
    result, info = train_checkpointed(factory(corpus), NullReporter(), tmp_path / "trial-1",
                                      interval=2048, resume_from=tmp_path / "trial-0")
    assert info.resumed_tokens == 0 and "other settings" in info.notes[0]
    assert result.final_val_loss == alone.final_val_loss


def test_an_unwritable_checkpoint_costs_only_the_resume(corpus, alone, tmp_path, monkeypatch):
    def full(self, path, *, meta=None):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(Trainer, "save_checkpoint", full)
    result, info = train_checkpointed(factory(corpus), NullReporter(), tmp_path / "trial-0",
                                      interval=2048)
    assert result.state == TrialState.COMPLETE and result.final_val_loss == alone.final_val_loss
    assert info.saved == 0 and len(info.notes) == 1 and "No space left" in info.notes[0]


def test_a_pruner_that_stops_during_the_replayed_curve_prunes_the_retry(corpus, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        train_checkpointed(factory(corpus), Recorder(kill_at=5120), tmp_path / "trial-0",
                           interval=2048)

    class StopAtSecond(Recorder):
        def should_stop(self):
            return len(self.points) >= 2

    seen = StopAtSecond()
    result, info = train_checkpointed(factory(corpus), seen, tmp_path / "trial-1",
                                      interval=2048, resume_from=tmp_path / "trial-0")
    assert result.state == TrialState.PRUNED and len(seen.points) == 2
    assert info.resumed_tokens == 4096 and result.tokens == 4096


def test_interval_must_be_positive(corpus, tmp_path):
    with pytest.raises(ValueError, match="interval"):
        train_checkpointed(factory(corpus), NullReporter(), tmp_path, interval=0)
