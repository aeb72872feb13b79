"""The diagnostics find the known traps in synthetic studies of a known law, and only those.

Independent truth: the law L = E + A / N^alpha + B / D^beta the points are drawn from
(`testsupport.isoflop_frame`, seeded log-normal noise), its exponent a = beta / (alpha + beta).
"""

import math

import numpy as np
import pytest
from testsupport import CHINCHILLA, isoflop_frame

from sweep.scaling.report import analyze
from sweep.scaling.verdict import diagnose

#: An asymmetric law (alpha != beta), where a drifting grid biases approach 2 (Czech 2026).
ASYMMETRIC = dict(CHINCHILLA, alpha=0.25, beta=0.5)


def notes_of(frame, approaches=("2", "vpnls"), n_bootstrap=0):
    return diagnose(analyze(frame, approaches=approaches, n_bootstrap=n_bootstrap))


def codes(notes):
    return sorted(n.code for n in notes)


def test_a_drifting_grid_raises_the_approach_2_bias_note_and_a_centred_one_does_not():
    drifting = notes_of(isoflop_frame(ASYMMETRIC, drift=(1.0, 3.0)))
    assert codes(drifting) == ["approach2-bias"]
    (note,) = drifting
    assert note.subject == "2" and "Czech 2026" in note.cause
    assert "1.08x the parabola's vertex at C=1e+18 and 3.03x at C=1e+21" in note.evidence
    bias = float(note.evidence.split("a bias of ")[1].split(",")[0])
    assert 0.02 < bias < 0.04  # the noise-free bias of this design is +0.0265
    assert codes(notes_of(isoflop_frame(ASYMMETRIC))) == []


def test_one_budget_raises_the_degenerate_note_for_approach_3_and_vpnls():
    notes = notes_of(isoflop_frame(budgets=(1e20,)), approaches=("3", "vpnls"))
    assert codes(notes) == ["degenerate-fit", "degenerate-fit"]
    three = next(n for n in notes if n.subject == "3")
    assert "E = " in three.evidence and "sits at its bound 0" in three.evidence
    assert "(1 budget, log D = " in three.evidence
    assert "ended far outside its start grid" in three.evidence
    assert "3 or more budgets" in three.fix


def test_one_loss_times_1_5_is_named_and_excluding_it_restores_the_exponent():
    truth = CHINCHILLA["beta"] / (CHINCHILLA["alpha"] + CHINCHILLA["beta"])
    frame = isoflop_frame(noise=0.003, seed=1)
    frame.loc[20, "loss"] *= 1.5
    moved = analyze(frame, approaches=("vpnls",))
    assert abs(moved.results["vpnls"].params["a"] - truth) > 0.05
    (note,) = diagnose(moved)
    assert note.code == "influential-point"
    assert note.evidence.startswith("trial 20 (")
    assert "1.5x what the others predict" in note.evidence
    assert "--exclude 20" in note.fix
    kept = frame[frame["trial"] != 20]
    assert analyze(kept, approaches=("vpnls",)).results["vpnls"].params["a"] == pytest.approx(
        truth, abs=0.01)


@pytest.mark.slow  # 50 studies with bootstrap intervals: 12 s
def test_a_centred_grid_at_1_percent_noise_raises_at_most_2_notes_over_50_seeds():
    raised = []
    for seed in range(50):
        raised += notes_of(isoflop_frame(noise=0.01, seed=seed), n_bootstrap=100)
    assert len(raised) <= 2, [n.text for n in raised]


def test_a_budget_off_6nd_is_named_with_its_ratio():
    frame = isoflop_frame(noise=0.0)
    frame["budget_flops"] *= 1.3
    (note,) = [n for n in notes_of(frame, approaches=("2",)) if n.code == "budget-convention"]
    assert "budget_flops / (6 N D) is 1.3 (median of 36 rows" in note.evidence


def test_rows_without_a_budget_are_named_for_approach_2():
    frame = isoflop_frame(noise=0.0)
    frame.loc[[3, 7], "budget_flops"] = math.nan
    (note,) = notes_of(frame, approaches=("2",))
    assert note.code == "rows-dropped" and note.subject == "2"
    assert note.evidence.startswith("2 of 36 rows have no finite budget_flops (trials 3, 7)")


def test_rows_left_out_before_the_fits_are_named_with_their_reasons():
    frame = isoflop_frame(noise=0.0)
    frame.attrs["excluded"] = {"FAILED": 2, "non-finite loss": 1}
    (note,) = notes_of(frame, approaches=("2",))
    assert note.code == "rows-dropped" and note.subject == "data"
    assert note.evidence.startswith("3 of 39 rows (2 FAILED, 1 non-finite loss)")


def test_embeddings_as_a_large_share_of_n_are_named():
    frame = isoflop_frame(noise=0.0)
    frame["n_params_non_embedding"] = frame["n_params"] - np.full(len(frame), 0.5) * frame[
        "n_params"].min()
    notes = [n for n in notes_of(frame, approaches=("2",)) if n.code == "embedding-share"]
    assert notes == []  # 50% at the smallest size only: the median share is small
    frame["n_params_non_embedding"] = frame["n_params"] * 0.6
    (note,) = [n for n in notes_of(frame, approaches=("2",)) if n.code == "embedding-share"]
    assert "embeddings are 40% of N at the smallest size" in note.evidence
    assert "--n-params non-embedding for a study" in note.fix
