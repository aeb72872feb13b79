"""The ETA of progress lines: the cost model's FLOPs left over the throughput measured so far."""

import io

import pytest
from rich.console import Console
from testsupport import tiny_spec

from sweep.schema import TrialState
from sweep.study.eta import Eta, TrialCost, format_eta, spec_cost
from sweep.study.progress import ProgressView, TrialRow

RUNNING, COMPLETE = TrialState.RUNNING, TrialState.COMPLETE


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _eta(costs, n_trials=3):
    clock = Clock()
    return Eta(n_trials, lambda row: costs.get(row.number), clock=clock), clock


def test_the_eta_is_the_flops_left_over_the_flops_per_second_so_far():
    costs = {0: TrialCost(1000, 6.0), 1: TrialCost(2000, 3.0)}
    eta, clock = _eta(costs)
    eta.observe([TrialRow(0, RUNNING, tokens=0)])
    assert eta.seconds_left() is None  # nothing trained yet: no throughput
    clock.now += 10
    eta.observe([TrialRow(0, RUNNING, tokens=500)])
    # 500 tokens * 6 FLOPs in 10 s: 300 FLOP/s. Left: trial 0's other 500 tokens (3,000
    # FLOPs) and two trials not started, each the mean budget seen (6,000): 15,000 FLOPs.
    assert eta.seconds_left() == pytest.approx(15_000 / 300)
    clock.now += 10
    eta.observe([TrialRow(0, COMPLETE, tokens=900), TrialRow(1, RUNNING, tokens=0)])
    # A complete trial trained its whole budget (6,000 FLOPs in 20 s: 300 FLOP/s); left: trial
    # 1's 6,000 and one trial of the mean budget (6,000 and 6,000): 12,000 FLOPs.
    assert eta.seconds_left() == pytest.approx(12_000 / 300)


def test_trials_seen_already_trained_do_not_count_as_throughput():
    """A resumed study: what its trials did before this run is not this run's speed."""
    eta, clock = _eta({0: TrialCost(1000, 1.0), 1: TrialCost(1000, 1.0)}, n_trials=2)
    eta.observe([TrialRow(0, COMPLETE, tokens=1000), TrialRow(1, RUNNING, tokens=400)])
    clock.now += 4
    eta.observe([TrialRow(0, COMPLETE, tokens=1000), TrialRow(1, RUNNING, tokens=600)])
    assert eta.seconds_left() == pytest.approx(400 / (200 / 4))


def test_interrupted_trials_run_again_and_infeasible_ones_cost_nothing():
    eta, clock = _eta({0: TrialCost(100, 1.0), 1: TrialCost(10**9, 1.0),
                       2: TrialCost(100, 1.0)}, n_trials=3)
    eta.observe([TrialRow(0, TrialState.INTERRUPTED, tokens=0),
                 TrialRow(1, TrialState.INFEASIBLE), TrialRow(2, RUNNING, tokens=0)])
    clock.now += 1
    eta.observe([TrialRow(0, TrialState.INTERRUPTED, tokens=0),
                 TrialRow(1, TrialState.INFEASIBLE), TrialRow(2, RUNNING, tokens=50)])
    # 50 FLOP/s; left: trial 2's 50 and one trial again (the interrupted one) of mean 100.
    assert eta.seconds_left() == pytest.approx(150 / 50)


def test_the_progress_lines_carry_the_eta():
    eta, clock = _eta({0: TrialCost(1000, 6.0)})
    out = io.StringIO()
    view = ProgressView("s", 3, console=Console(file=out, width=300), progress_every_s=0,
                        eta=eta)
    view.update([TrialRow(0, RUNNING, {"train.lr": 0.001}, 0)])
    assert "ETA" not in view.heartbeat()
    clock.now += 10
    view.update([TrialRow(0, RUNNING, {"train.lr": 0.001}, 500)])
    assert view.summary().endswith("best val_loss -; ETA 50s")
    assert view.heartbeat().count("ETA 50s") == 1


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (44.2, "45s"), (200, "3m20s"),
                                          (3725, "1h02m")])
def test_format_eta(seconds, text):
    assert format_eta(seconds) == text


def test_a_trials_cost_is_its_budget_times_the_cost_models_training_flops():
    from sweep.spec import parse_spec
    from sweep_models import ModelConfig
    from sweep_models.cost import flops_per_token

    spec = parse_spec(tiny_spec("eta", model={"d_model": {"choice": [16, 32]}}))
    cost = spec_cost(spec)(TrialRow(0, RUNNING, {"model.d_model": 32}))
    model = ModelConfig(vocab_size=16, seq_len=8, d_model=32, n_heads=2, n_layers=1)
    # 2 steps of batch_size 2 x seq_len 8 tokens
    assert cost == TrialCost(2 * 2 * 8, flops_per_token(model, train=True))
    assert spec_cost(spec)(TrialRow(1, RUNNING, {"model.d_model": 24})) is None  # off the domain
