"""``sweep plan``'s simulation: the study's own grid, the analysis's fits, the law recovered."""

import math
import random
from pathlib import Path

import pytest

from sweep.simulate.design import Design, simulate_grid
from sweep.simulate.law import LAWS, SimulatedLaw
from sweep.simulate.plan import plan_targets, run_plan
from sweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
SPEC = load_spec(ROOT / "studies" / "scaling-isoflop.yaml")


@pytest.mark.parametrize("law", ["chinchilla", "asymmetric"])
def test_without_noise_the_fits_of_the_law_recover_it(law):
    """VPNLS and approach 3 fit L(N, D) itself, so without noise they find the law (to their
    optimisers' tolerance). Approach 2's parabolas are biased by the grid: on a centred grid
    spanning N*/4..4N* the reference (Hoffmann's surface, ../shared/reference) has its minimum
    1.3% high; this grid spans N*/3..3N*, re-centred from the earlier budgets, snapped to the
    shapes the rule offers, and alpha != beta grows the bias (Czech 2026): 3% bounds it."""
    plan = run_plan(SPEC, LAWS[law], repeats=2, noise=0.0)
    truth = LAWS[law]
    for key in ("3", "vpnls"):
        assert plan.spread(key, "alpha").median == pytest.approx(truth.alpha, abs=1e-4)
        assert plan.spread(key, "beta").median == pytest.approx(truth.beta, abs=1e-4)
        for c in plan.targets:
            assert abs(plan.spread(key, "n_params", c).bias) < 1e-4, (key, c)
            assert abs(plan.spread(key, "n_tokens", c).bias) < 1e-4, (key, c)
    for c in plan.targets:
        assert abs(plan.spread("2", "n_params", c).bias) < 0.03, c
    assert abs(plan.spread("2", "a").bias) < 2e-3
    # No noise: every repeat is the same study, so the spread is nil.
    assert plan.spread("vpnls", "n_params", plan.targets[-1]).width == pytest.approx(1.0)


def test_noise_widens_the_interval_and_the_target_is_100x_the_largest_budget():
    plan = run_plan(SPEC, LAWS["chinchilla"], repeats=4, noise=0.02, seed=3)
    assert plan.targets == [1e11, 3e11, 1e12, 3e12, 3e14]
    target = plan.spread("vpnls", "n_params", 3e14)
    assert target.n_ok == 4 and target.width > 1.05
    # Extrapolating 100x is wider than interpolating within the budgets.
    assert target.width > plan.spread("vpnls", "n_params", 1e12).width
    assert plan.n_points == 20 and plan.design_flops > 0
    assert plan_targets(SPEC, 1e16)[-1] == 1e16


def test_the_simulated_points_are_the_grid_the_study_lays_out():
    """N is the cost model's count of the laid-out shape, D the tokens its budget buys, and each
    loss the law's at (N, D) when there is no noise."""
    from sweep.kinds.scaling.layout import layout_budget

    design = Design.of(SPEC, LAWS["chinchilla"], 0.0)
    points = simulate_grid(design, random.Random(0))
    first = layout_budget(SPEC, 1e11)
    assert [int(n) for n in points.n_params[:5]] == [p.candidate.n_params for p in first.points]
    assert [int(d) for d in points.n_tokens[:5]] == [p.n_tokens for p in first.points]
    for n, d, y in zip(points.n_params, points.n_tokens, points.loss, strict=True):
        assert y == LAWS["chinchilla"].loss(n, d)
    assert points.total_flops == pytest.approx(sum(
        p.n_tokens * p.candidate.flops_per_token_train for p in first.points) + sum(
        points.train_flops[5:]))
    # Re-centred: the later budgets' layouts say so.
    assert "re-centred" in points.reasons[-1]


def test_a_law_with_an_lr_penalty_reads_the_studys_lr():
    base = LAWS["chinchilla"]
    design = Design.of(SPEC, LAWS["chinchilla-lr"], 0.0)
    assert design.lr == 4e-3
    with_lr = simulate_grid(design, random.Random(0))
    plain = simulate_grid(Design.of(SPEC, base, 0.0), random.Random(0))
    assert (with_lr.loss[:5] > plain.loss[:5]).all()
    assert not math.isnan(SimulatedLaw(**base.as_dict()).loss(1e5, 1e6))
