import json
import math

import pytest
import torch

from sweep.data import DataError, load_corpus
from sweep.train.trainer import NullReporter, Reporter, TrainConfig, Trainer, run_trial
from sweep_models import ConfigError, ModelConfig
from sweep_models.cost import flops_per_token

MARKOV = "synthetic:markov?order=1&vocab=16&alpha=0.3&seed=0&tokens=200000"



@pytest.fixture(scope="module")
def markov(tmp_path_factory):
    return load_corpus(MARKOV, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def stdlib(tmp_path_factory):
    return load_corpus("builtin:python-stdlib?max_bytes=1000000", tmp_path_factory.mktemp("c"))


def _small(vocab=16, **kw):
    return ModelConfig(**{"vocab_size": vocab, "seq_len": 32, "d_model": 32, "n_heads": 2,
                          "n_layers": 1, **kw})


class Recorder:
    def __init__(self, stop_after=None):
        self.reports, self.stop_after = [], stop_after

    def report(self, tokens, metrics):
        self.reports.append((tokens, dict(metrics)))

    def should_stop(self):
        return self.stop_after is not None and len(self.reports) >= self.stop_after


def test_markov_reaches_the_entropy_rate(markov):
    tc = TrainConfig(tokens=60_000, lr=1e-2, batch_size=16, eval_tokens=4096)
    result = run_trial(_small(), tc, markov)
    assert result.state == "COMPLETE"
    assert markov.entropy_rate is not None
    # The floor is the entropy rate; a model that learned the bigram table gets within 10%.
    assert markov.entropy_rate * 0.98 < result.final_val_loss < 1.10 * markov.entropy_rate
    assert result.entropy_rate == markov.entropy_rate
    assert "val_bpb" not in result.history[-1]


def test_stdlib_loss_falls_well_below_unigram(stdlib):
    model = ModelConfig(vocab_size=256, seq_len=64, d_model=64, n_heads=4, n_layers=2)
    tc = TrainConfig(tokens=60_000, lr=3e-3, batch_size=8, eval_tokens=8192)
    result = run_trial(model, tc, stdlib)
    assert result.state == "COMPLETE"
    assert result.best_val_loss < stdlib.baseline_unigram_loss - 0.25
    last = result.history[-1]
    assert last["val_bpb"] == pytest.approx(last["val_loss"] / math.log(2))
    assert result.history[0]["val_loss"] > last["val_loss"]


def test_metrics_result_fields_and_reports(markov):
    rec = Recorder()
    assert isinstance(rec, Reporter) and isinstance(NullReporter(), Reporter)
    tc = TrainConfig(tokens=8192, batch_size=8, eval_every=2048, warmup=0.25)
    trainer = Trainer(_small(), tc, markov)
    result = trainer.train(rec)
    assert [t for t, _ in rec.reports] == [2048, 4096, 6144, 8192]
    assert [h["tokens"] for h in result.history] == [2048, 4096, 6144, 8192]
    for (_, m), h in zip(rec.reports, result.history, strict=True):
        assert set(m) == {"val_loss", "train_loss", "tokens_per_s", "lr_now"}
        assert m == {k: v for k, v in h.items() if k != "tokens"}
        assert m["tokens_per_s"] > 0
    assert rec.reports[0][1]["lr_now"] == pytest.approx(1e-3 * 2048 / 2048)  # end of warmup
    assert rec.reports[-1][1]["lr_now"] == pytest.approx(1e-4)  # min_lr_ratio at the end
    assert result.tokens == 8192 and result.steps == 32
    assert result.best_val_loss == min(h["val_loss"] for h in result.history)
    assert result.final_val_loss == result.history[-1]["val_loss"]
    assert result.train_flops == pytest.approx(flops_per_token(_small(), train=True) * 8192)
    assert result.mfu is None  # CPU: no datasheet peak
    assert result.n_params == sum(p.numel() for p in trainer.model.parameters())
    assert result.baseline_unigram_loss == markov.baseline_unigram_loss
    json.dumps(result.to_dict())


def test_same_seed_same_losses_other_seed_other_losses(markov):
    model = _small(dropout=0.1)
    tc = TrainConfig(tokens=4096, batch_size=8, eval_every=1024)
    a = run_trial(model, tc, markov)
    b = run_trial(model, tc, markov)
    c = run_trial(model, tc.replace(seed=1), markov)
    losses = [[(h["val_loss"], h["train_loss"]) for h in r.history] for r in (a, b, c)]
    assert losses[0] == losses[1]
    assert all(x != y for x, y in zip(losses[0], losses[2], strict=True))


def test_pruning_stops_after_the_report(markov):
    rec = Recorder(stop_after=2)
    result = run_trial(_small(), TrainConfig(tokens=8192, batch_size=8, eval_every=2048),
                       markov, rec)
    assert result.state == "PRUNED" and result.tokens == 4096 and len(rec.reports) == 2


def _diverging(**kw):
    # AdamW's decoupled decay multiplies every matrix by (1 - lr * wd) = -9 per step, so the
    # weights grow ninefold a step until the logits overflow fp32.
    return TrainConfig(**{"steps": 200, "lr": 10.0, "weight_decay": 1.0, "warmup": 0,
                          "schedule": "constant", "batch_size": 4, "eval_every": 128, **kw})


def test_lr_10_diverges_at_the_first_non_finite_step(markov, tmp_path):
    rec = Recorder()
    trainer = Trainer(_small(), _diverging(), markov)
    result = trainer.train(rec)
    assert result.state == "DIVERGED"
    # One evaluation per step: every state before the first non-finite loss was kept and
    # reported. The blow-up shows either in a training step's loss or in the evaluation of the
    # weights a step produced.
    m = len(result.history)
    assert 0 < m < 200 and len(rec.reports) == m
    assert all(math.isfinite(h["val_loss"]) for h in result.history)
    if "val_loss" in result.fail_reason:
        assert result.steps == m + 1 and f"after step {m + 1}" in result.fail_reason
    else:
        assert result.steps == m and f"in step {m + 1}" in result.fail_reason
    # Independent check of "first": the same run stopped after m steps is finite throughout
    # and identical; one step more is not.
    shorter = run_trial(_small(), _diverging(steps=m), markov)
    assert shorter.state == "COMPLETE"
    assert [h["val_loss"] for h in shorter.history] == [h["val_loss"] for h in result.history]
    assert run_trial(_small(), _diverging(steps=m + 1), markov).state == "DIVERGED"
    with pytest.raises(RuntimeError, match="DIVERGED"):
        trainer.save_checkpoint(tmp_path / "ckpt.pt")
    assert not any(tmp_path.iterdir())
    assert trainer.train(rec).steps == result.steps and len(rec.reports) == m  # ended for good


def test_injected_nan_ends_the_trial_at_that_step(markov, monkeypatch):
    trainer = Trainer(_small(), TrainConfig(steps=20, batch_size=4, eval_every=128), markov)
    forward, calls = trainer._forward, []

    def poisoned(x, y):
        logits, loss = forward(x, y)
        calls.append(torch.is_grad_enabled())
        if sum(calls) == 6:  # the sixth training micro-batch
            loss = loss * math.nan
        return logits, loss

    monkeypatch.setattr(trainer, "_forward", poisoned)
    result = trainer.train()
    assert result.state == "DIVERGED" and result.steps == 5
    assert "non-finite loss in step 6" in result.fail_reason
    assert [h["tokens"] for h in result.history] == [128 * i for i in range(1, 6)]


def test_grad_accum_and_budgets(markov):
    tc = TrainConfig(steps=3, batch_size=4, grad_accum=2)
    assert run_trial(_small(), tc, markov).tokens == 3 * 2 * 4 * 32
    fpt = flops_per_token(_small(), train=True)
    result = run_trial(_small(), TrainConfig(flops=fpt * 4096, batch_size=8), markov)
    assert result.tokens == 4096 and result.train_flops == pytest.approx(fpt * 4096)
    timed = run_trial(_small(), TrainConfig(seconds=0.5, batch_size=4), markov)
    assert timed.state == "COMPLETE" and timed.wall_s >= 0.5 and timed.steps > 1  # it ended


def test_decay_groups_exclude_embeddings_norms_biases(markov):
    trainer = Trainer(_small(), TrainConfig(steps=1), markov)
    decay, no_decay = (g["params"] for g in trainer.optimizer.param_groups)
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    assert {names[id(p)] for p in decay} == {
        n for n, p in trainer.model.named_parameters() if p.dim() == 2 and "wte" not in n
        and "wpe" not in n
    }
    assert all(("wte" in names[id(p)] or "wpe" in names[id(p)]) or p.dim() == 1
               for p in no_decay)
    assert len(decay) + len(no_decay) == len(list(trainer.model.parameters()))
    assert trainer.optimizer.param_groups[1]["weight_decay"] == 0.0


def test_trainer_input_errors(markov, tmp_path):
    with pytest.raises(ConfigError, match="vocab_size=8 is smaller"):
        Trainer(_small(vocab=8), TrainConfig(steps=1), markov)
    (tmp_path / "short.txt").write_bytes(b"abc" * 100)
    short = load_corpus(f"text:{tmp_path / 'short.txt'}", tmp_path)
    with pytest.raises(DataError, match="short.txt"):
        Trainer(_small(vocab=256, seq_len=64), TrainConfig(steps=1), short)
