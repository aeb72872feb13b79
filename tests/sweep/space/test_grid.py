"""The IsoFLOP grid of a scaling study: shapes, centre, sizes per budget, drops, re-centring."""

import math
import re

import numpy as np
import pytest

from sweep.kinds.scaling import layout as grid
from sweep.kinds.scaling import shapes
from sweep.space import configs_from_params, corner_params, sample_params
from sweep.spec import parse_spec
from sweep_models.cost import flops_per_token, param_count


def scaling_spec(**scaling):
    rule = scaling.pop("rule", {"d_model": {"min": 16, "max": 192, "step": 8}, "n_layers": 2,
                                "d_head": 8, "d_ff_ratio": 4})
    body = {"budgets": [2e11, 6e11, 2e12], "sizes_per_budget": 5, "tokens_per_param": 40,
            "span": 3, **scaling}
    if "ladder" not in body:
        body["rule"] = rule
    return parse_spec({"name": "iso", "data": "builtin:python-stdlib",
                       "model": {"seq_len": 64}, "train": {"batch_size": 16, "lr": 3e-3},
                       "scaling": body})


def test_rule_shapes_follow_the_rule():
    spec = scaling_spec(rule={"d_model": [64, 128, 256], "aspect": 32, "d_head": 32,
                              "d_ff_ratio": 2.5})
    assert [s.fields() for s in shapes.shapes(spec)] == [
        {"d_model": 64, "n_layers": 2, "n_heads": 2, "d_ff": 160},
        {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": 320},
        {"d_model": 256, "n_layers": 8, "n_heads": 8, "d_ff": 640},
    ]
    paired = scaling_spec(rule={"d_model": [32, 64, 96], "n_layers": [1, 3, 5], "d_head": 16})
    assert [s.n_layers for s in shapes.shapes(paired)] == [1, 3, 5]


def test_ladder_shapes_and_candidates_are_priced_by_the_cost_model():
    ladder = [{"d_model": 96, "n_layers": 3, "n_heads": 3, "d_ff": 384},
              {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64},
              {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 256}]
    spec = scaling_spec(ladder=ladder)
    cands = shapes.candidates(spec)
    assert [c.shape.d_model for c in cands] == [32, 64, 96]  # smallest N first
    for c in cands:
        model, _ = configs_from_params(
            spec, {shapes.SCALING_POINT: shapes.point_label(2e11, c.shape)})
        assert (model.d_model, model.n_layers, model.n_heads, model.d_ff) == \
            (c.shape.d_model, c.shape.n_layers, c.shape.n_heads, c.shape.d_ff)
        assert c.n_params == param_count(model)
        assert c.flops_per_token_train == flops_per_token(model, train=True)


def test_prior_centre_has_the_prior_tokens_per_param():
    spec = scaling_spec()
    cands = shapes.candidates(spec)
    for budget in (2e11, 2e12):
        n = grid.prior_centre(cands, budget, 40)
        # Independent check: FLOPs per token per parameter falls with N, so D/N computed with
        # the next smaller shape's ratio is below 40 and with the next larger one's above.
        below = max((c for c in cands if c.n_params <= n), key=lambda c: c.n_params)
        above = min((c for c in cands if c.n_params >= n), key=lambda c: c.n_params)
        ratio_lo = budget / (below.flops_per_token_train / below.n_params * n) / n
        ratio_hi = budget / (above.flops_per_token_train / above.n_params * n) / n
        assert ratio_lo <= 40 * (1 + 1e-9) and ratio_hi >= 40 * (1 - 1e-9)
        # With FLOPs per token close to 6N, N ~ sqrt(C / (6 * 40)).
        assert n == pytest.approx(math.sqrt(budget / (6 * 40)), rel=0.05)


def test_layout_spans_the_centre_with_whole_steps():
    spec = scaling_spec()
    lay = grid.layout_budget(spec, 2e12)
    assert len(lay.points) == 5 and not lay.dropped
    ns = [p.candidate.n_params for p in lay.points]
    assert ns == sorted(ns) and len(set(ns)) == 5
    assert ns[0] < lay.centre_n_params < ns[-1]
    assert ns[0] >= lay.centre_n_params / 3 / 1.5 and ns[-1] <= lay.centre_n_params * 3 * 1.5
    for p in lay.points:
        step = 16 * 64
        assert p.n_tokens == int(2e12 / p.candidate.flops_per_token_train // step) * step
        assert p.tokens_per_param == p.n_tokens / p.candidate.n_params
        assert p.label.startswith("C2e+12/")


def test_shapes_that_cannot_train_are_dropped_with_a_note():
    spec = scaling_spec()
    # 3.6M training tokens: the smallest shapes would pass over them more than 4 times.
    lay = grid.layout_budget(spec, 6e12, corpus_train_tokens=3_600_000)
    reasons = dict(lay.dropped)
    assert reasons and all("epochs" in r and "scaling.max_epochs=4" in r
                           for r in reasons.values())
    assert all(p.n_tokens <= 4 * 3_600_000 for p in lay.points)
    assert not {p.candidate.shape.label for p in lay.points} & set(reasons)
    # A budget below one optimizer step (16 x 64 tokens) for the largest shapes.
    tiny = grid.layout_budget(spec, 3e8, centre_n_params=500_000)
    assert any("less than one optimizer step" in r for _, r in tiny.dropped)
    assert all(p.n_tokens >= 1024 for p in tiny.points)


def test_curve_optimum_is_the_parabola_vertex_or_the_best_point():
    n = np.geomspace(1e4, 1e6, 7)
    loss = 2.0 + 0.3 * (np.log(n) - math.log(8e4)) ** 2
    assert grid.curve_optimum(n, loss) == pytest.approx(8e4, rel=1e-9)
    falling = 3.0 - 0.1 * np.log(n)  # no minimum inside: the best sampled size
    assert grid.curve_optimum(n, falling) == pytest.approx(1e6)
    assert grid.curve_optimum(n[:2], loss[:2]) is None
    assert grid.curve_optimum([1e4, 2e4, np.nan, 3e4], [2.0, 1.0, 0.5, np.nan]) is None


def test_recentre_extrapolates_the_earlier_optima():
    optima = [(1e11, 2e4), (1e12, 2e4 * 10 ** 0.45)]
    assert grid.recentre(1e13, optima) == pytest.approx(2e4 * 100 ** 0.45, rel=1e-9)
    assert grid.recentre(4e11, [(1e11, 2e4)]) == pytest.approx(4e4)
    assert grid.recentre(4e11, []) is None


def test_labels_round_trip_and_unknown_labels_are_refused():
    spec = scaling_spec()
    labels = shapes.all_labels(spec)
    assert len(labels) == len(set(labels)) == 3 * 23
    budget, shape = shapes.parse_label(spec, labels[30])
    assert shapes.point_label(budget, shape) == labels[30]
    with pytest.raises(ValueError, match=re.escape("scaling.point='C1e+99/x'")):
        shapes.parse_label(spec, "C1e+99/x")


def test_sampling_a_scaling_space_draws_grid_points():
    spec = scaling_spec()
    draws = sample_params(spec, 20, seed=1) + corner_params(spec)
    labels = set(shapes.all_labels(spec))
    for params in draws:
        assert set(params) == {shapes.SCALING_POINT} and params[shapes.SCALING_POINT] in labels
        model, train = configs_from_params(spec, params)
        assert train.flops in (2e11, 6e11, 2e12) and model.n_layers == 2


def test_nearest_shapes_extend_the_rule_past_its_widths():
    spec = scaling_spec(rule={"d_model": {"min": 64, "max": 256, "step": 32}, "aspect": 32,
                              "d_head": 32})
    target = 3e7  # far above the study's largest shape
    found = shapes.nearest_shapes(spec, target, k=3)
    # Independent truth: every multiple of 32 up to 1024 priced, the three nearest in log N.
    pool = []
    for width in range(32, 1025, 32):
        shape = shapes.Shape(width, max(1, round(width / 32)), width // 32, 4 * width)
        model, _ = configs_from_params(spec, {shapes.SCALING_POINT: shapes.all_labels(spec)[0]})
        model = model.replace(**shape.fields())
        pool.append((abs(math.log(param_count(model) / target)), shape))
    expected = sorted(s for _, s in sorted(pool)[:3])
    assert sorted(c.shape for c in found) == expected
    assert all(c.shape.n_layers == round(c.shape.d_model / 32) for c in found)
    ladder = scaling_spec(ladder=[{"d_model": 32 * i, "n_layers": i, "n_heads": i,
                                   "d_ff": 128 * i} for i in (1, 2, 3, 4)])
    assert [c.shape.d_model for c in shapes.nearest_shapes(ladder, 1e9, k=2)] == [96, 128]


def test_shapes_over_the_constraints_are_dropped_with_a_note():
    spec = parse_spec({**scaling_spec().to_data(), "constraints": {"max_params": 60_000}})
    lay = grid.layout_budget(spec, 2e12, device="cpu")
    assert lay.points and all(p.candidate.n_params <= 60_000 for p in lay.points)
    assert len(lay.points) < 5  # short of sizes_per_budget: every shape left out is noted
    over = [r for _, r in lay.dropped if r.startswith("over the constraints")]
    assert len(over) == sum(1 for c in shapes.candidates(spec) if c.n_params > 60_000)


def test_drops_become_the_run_summary_s_notes():
    from sweep.kinds.scaling.driver import layout_notes

    spec = scaling_spec()
    lay = grid.layout_budget(spec, 6e12, corpus_train_tokens=3_600_000)
    short = grid.layout_budget(spec, 1e8, centre_n_params=500_000)
    assert layout_notes([lay]) == [f"C=6e+12: dropped {label}: {reason}"
                                   for label, reason in lay.dropped]
    assert len(short.points) < 3 and layout_notes([short])[-1] == \
        f"C=1e+08: {len(short.points)} sizes; its IsoFLOP curve cannot be fitted"
