"""Held out on real runs: the shipped IsoFLOP study's smaller budgets predict its largest.

``data/scaling-isoflop.csv`` is `sweep.scaling.load_runs` of a run of
``studies/scaling-isoflop.yaml`` on a 2-core CPU (``sweep run studies/scaling-isoflop.yaml``,
then ``load_runs("runs/scaling-isoflop").to_csv(...)``), kept so that this check needs no
20-minute study in CI.
"""

from pathlib import Path

import pandas as pd
import pytest

from sweep.kinds.scaling import shapes
from sweep.kinds.scaling.recommend import cost_model_flops_per_token
from sweep.scaling import fit_parametric, fit_vpnls, optimal_allocation
from sweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
POINTS = pd.read_csv(Path(__file__).parent / "data" / "scaling-isoflop.csv")
SPEC = load_spec(ROOT / "studies" / "scaling-isoflop.yaml")


def test_the_points_are_the_shipped_study_s_grid():
    assert sorted(POINTS.budget_flops.unique()) == SPEC.scaling.budgets
    labels = set(shapes.all_labels(SPEC))
    assert set(POINTS["scaling.point"]) <= labels
    assert POINTS.groupby("budget_flops").size().min() >= 5
    family = {c.shape.label: c.n_params for c in shapes.candidates(SPEC)}
    for _, row in POINTS.iterrows():
        assert family[row["scaling.point"].split("/")[1]] == row.n_params


@pytest.mark.parametrize("fit", [fit_vpnls, fit_parametric], ids=["vpnls", "approach3"])
def test_smaller_budgets_predict_the_best_loss_at_the_largest_within_5_percent(fit):
    largest = POINTS.budget_flops.max()
    train = POINTS[POINTS.budget_flops < largest]
    held = POINTS[POINTS.budget_flops == largest]
    law = fit(train.n_params, train.n_tokens, train.loss)
    first = optimal_allocation(law, largest)
    split = optimal_allocation(law, largest,
                               flops_per_token=cost_model_flops_per_token(SPEC, first.n_params))
    observed = held.loss.min()
    assert abs(split.loss - observed) / observed < 0.05
