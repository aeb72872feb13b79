"""The simulated trial source: the trainer's evaluation points, the law's losses, pruning."""

import math
from types import SimpleNamespace

import pytest
from testsupport import tiny_spec

from sweep.schema import METRIC_VAL_BPB, METRIC_VAL_LOSS, TrialState
from sweep.simulate.law import LAWS
from sweep.simulate.source import simulate_trial, simulated_tag
from sweep.space.sampling import build_configs, fixed_values
from sweep.spec import parse_spec
from sweep.train.config import resolve_budget

CORPUS = SimpleNamespace(byte_level=True, baseline_unigram_loss=2.7, entropy_rate=None)


class Reporter:
    def __init__(self, stop_after=None):
        self.seen, self.stop_after = [], stop_after

    def report(self, tokens, metrics):
        self.seen.append((tokens, metrics[METRIC_VAL_LOSS]))

    def should_stop(self):
        return self.stop_after is not None and len(self.seen) >= self.stop_after


def _trial(simulate, steps=40):
    spec = parse_spec({**tiny_spec("sim"), "simulate": simulate,
                       "train": {**tiny_spec("sim")["train"], "steps": steps}})
    model, train = build_configs(spec, fixed_values(spec))
    return spec, model, train


def test_a_complete_trial_reports_the_laws_loss_where_the_trainer_evaluates():
    spec, model, train = _trial({"law": "chinchilla", "noise": 0.0})
    reporter = Reporter()
    result = simulate_trial(spec, 3, model, train, 5000, reporter, CORPUS)
    budget = resolve_budget(train, model)
    assert result.state is TrialState.COMPLETE and result.tokens == budget.total_tokens
    assert [t for t, _ in reporter.seen] == [h["tokens"] for h in result.history]
    assert reporter.seen[-1][0] == budget.total_tokens and len(reporter.seen) == 10
    for tokens, loss in reporter.seen:
        assert loss == LAWS["chinchilla"].loss(5000, tokens)
    assert result.final_val_loss == reporter.seen[-1][1] == result.best_val_loss
    assert result.history[-1][METRIC_VAL_BPB] == pytest.approx(result.final_val_loss / math.log(2))
    assert result.device == "simulated" and result.wall_s == 0.0 and result.mfu is None


def test_the_noise_is_one_seeded_draw_per_trial_and_a_pruned_trial_stops():
    spec, model, train = _trial({"law": "chinchilla", "noise": 0.05, "seed": 7})
    first = simulate_trial(spec, 1, model, train, 5000, Reporter(), CORPUS)
    again = simulate_trial(spec, 1, model, train, 5000, Reporter(), CORPUS)
    other = simulate_trial(spec, 2, model, train, 5000, Reporter(), CORPUS)
    assert first.history == again.history and first.final_val_loss != other.final_val_loss
    ratios = {h[METRIC_VAL_LOSS] / LAWS["chinchilla"].loss(5000, h["tokens"])
              for h in first.history}
    assert len({round(r, 12) for r in ratios}) == 1  # the same factor at every evaluation
    pruned = simulate_trial(spec, 1, model, train, 5000, Reporter(stop_after=2), CORPUS)
    assert pruned.state is TrialState.PRUNED and len(pruned.history) == 2
    assert pruned.tokens == pruned.history[-1]["tokens"]


def test_the_tag_names_the_law():
    spec, _, _ = _trial({"law": {"E": 1.5, "A": 300, "B": 200, "alpha": 0.3, "beta": 0.3},
                         "noise": 0.02})
    assert simulated_tag(spec) == "law E=1.5, A=300, B=200, alpha=0.3, beta=0.3; noise 0.02; " \
        "seed 0"
