"""The transfer analysis against curves whose optimum moves by a known amount."""

import math

import numpy as np
import pandas as pd
import pytest

from sweep.scaling.transfer import analyze_transfer, transfer_figure, transfer_points
from sweep.schema import METRIC_FINAL_VAL_LOSS, TrialState

WIDTHS = [64, 128, 256, 512]
LOG_LRS = np.arange(-12, -3)  # 2^-12 .. 2^-4: a grid of factors of 2


def curves(drift, *, noise=0.0, seed=0, group="all", centre=-8.0):
    """loss = 2 + 0.05 (log2 lr - c_w)^2, c_w = centre + drift log2(w / 64)."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in WIDTHS:
        c = centre + drift * math.log2(w / 64)
        for e in LOG_LRS:
            rows.append({"group": group, "width": w, "lr": 2.0 ** e,
                         "loss": 2 + 0.05 * (e - c) ** 2 + noise * rng.standard_normal()})
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("drift", "steps"), [(0.0, 0), (-1.0, 3), (-0.5, None)])
def test_exact_curves_give_their_drift(drift, steps):
    (rep,) = analyze_transfer(curves(drift), n_bootstrap=50)
    assert rep.drift == pytest.approx(drift, abs=1e-9)
    assert rep.interval == pytest.approx((drift, drift), abs=1e-9)  # exact curves: no spread
    assert rep.grid_ratio == pytest.approx(2.0)
    optima = [-8.0 + drift * math.log2(w / 64) for w in WIDTHS]
    assert [math.log2(c.lr_vertex) for c in rep.curves] == pytest.approx(optima, abs=1e-9)
    if steps is not None:  # optima on grid points (at -0.5 every other one is a tie)
        assert [math.log2(c.lr_best) for c in rep.curves] == optima
        assert rep.grid_steps == steps and rep.drift_grid == pytest.approx(drift)


def test_the_interval_covers_the_drift_and_tells_sp_from_mup():
    reports = analyze_transfer(pd.concat([curves(-1.0, noise=0.01, group="sp"),
                                          curves(0.0, noise=0.01, seed=1, group="mup")]),
                               n_bootstrap=400, seed=0)
    sp, mup = reports
    assert (sp.group, mup.group) == ("sp", "mup")
    assert sp.interval[0] <= -1.0 <= sp.interval[1] and sp.interval[1] < -0.5
    assert mup.interval[0] <= 0.0 <= mup.interval[1] and mup.interval[0] > -0.5
    assert sp.grid_steps == 3 and mup.grid_steps <= 1


def test_diverged_points_rank_last_and_stay_out_of_the_parabola():
    frame = curves(0.0)
    frame.loc[frame["lr"] >= 2.0 ** -6, "loss"] = math.inf  # diverged above 2^-7
    (rep,) = analyze_transfer(frame, n_bootstrap=0)
    assert rep.interval is None
    assert all(c.lr_best == 2.0 ** -8 for c in rep.curves)
    # the parabola through the finite neighbours only: still the exact vertex
    assert all(math.log2(c.lr_vertex) == pytest.approx(-8.0) for c in rep.curves)


def test_a_best_point_at_the_grids_edge_is_noted():
    (rep,) = analyze_transfer(curves(0.0, centre=-13.0), n_bootstrap=0)
    assert all(c.best_index == 0 for c in rep.curves)
    assert len(rep.notes) == 4 and "bottom" in rep.notes[0]


def test_points_from_trial_records(tmp_path):
    def trial(state, width, lr, loss=None, p="mup"):
        return {"state": state, "params": {"model.d_model": width, "train.lr": lr,
                                           "model.parametrization": p},
                "metrics": {} if loss is None else {METRIC_FINAL_VAL_LOSS: loss}}

    points = transfer_points([trial(TrialState.COMPLETE, 64, 1e-3, 2.5),
                              trial(TrialState.DIVERGED, 64, 1e-1),
                              trial(TrialState.PRUNED, 64, 1e-2, 2.4),
                              trial(TrialState.COMPLETE, 128, 1e-3, 2.4, p="sp")],
                             ["model.parametrization", "train.lr"])
    assert points.to_dict(orient="records") == [
        {"group": "parametrization=mup", "width": 64, "lr": 1e-3, "seed": None, "loss": 2.5},
        {"group": "parametrization=mup", "width": 64, "lr": 1e-1, "seed": None,
         "loss": math.inf},
        {"group": "parametrization=sp", "width": 128, "lr": 1e-3, "seed": None, "loss": 2.4}]
    fig = transfer_figure(analyze_transfer(curves(-1.0), n_bootstrap=0), tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0 and len(fig.axes) == 1


def test_seeds_are_averaged_per_point_not_grouped():
    # Two seeds whose noise alone moves each one's best point; their mean is the exact curve.
    exact = curves(0.0)
    rng = np.random.default_rng(3)
    noise = 0.2 * rng.standard_normal(len(exact))
    trials = [{"state": TrialState.COMPLETE,
               "params": {"model.d_model": int(r.width), "train.lr": r.lr, "train.seed": seed},
               "metrics": {METRIC_FINAL_VAL_LOSS: r.loss + sign * n}}
              for seed, sign in ((0, 1.0), (1, -1.0))
              for r, n in zip(exact.itertuples(), noise, strict=True)]
    trials.append({"state": TrialState.DIVERGED,  # a diverged seed makes its point +inf
                   "params": {"model.d_model": 64, "train.lr": 2.0 ** -4, "train.seed": 2},
                   "metrics": {}})
    points = transfer_points(trials, ["train.lr", "train.seed"])
    assert set(points["group"]) == {"all"} and set(points["seed"]) == {0, 1, 2}
    (rep,) = analyze_transfer(points, n_bootstrap=0)
    assert rep.replicates == 2  # the point 2^-4 at width 64 has three seeds, the rest two
    assert rep.curves[0].losses[-1] == math.inf
    assert [c.best_index for c in rep.curves] == [4] * len(WIDTHS) and rep.grid_steps == 0
    assert rep.drift == pytest.approx(0.0, abs=1e-9)
    for seed in (0, 1):  # alone, either seed's best point moves
        (one,) = analyze_transfer(points[points["seed"] == seed], n_bootstrap=0)
        assert one.grid_steps >= 1
