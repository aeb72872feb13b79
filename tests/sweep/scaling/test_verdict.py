"""The verdict: one estimate per budget from the documented rule, an interval that covers the
truth, and a note whenever approach 2 parts from it.

Independent truth: the law the synthetic points are drawn from (`testsupport.isoflop_frame`)
and its compute-optimal N (Hoffmann et al. 2022 eq. 4, `testsupport.n_opt`).
"""

import dataclasses
import json
import math

import pytest
from testsupport import CHINCHILLA, isoflop_frame, n_opt
from typer.testing import CliRunner

from sweep.cli import app
from sweep.scaling.report import analyze
from sweep.scaling.report_json import report_json
from sweep.scaling.verdict import conclude

ASYMMETRIC = dict(CHINCHILLA, alpha=0.25, beta=0.5)


def differ_beyond_intervals(x, x_interval, y, y_interval):
    """The gap between two log estimates against their facing half-intervals in quadrature."""
    lx, ly = math.log(x), math.log(y)
    if lx < ly:
        return math.log(y / x) > math.hypot(math.log(x_interval[1] / x),
                                            math.log(y / y_interval[0]))
    return math.log(x / y) > math.hypot(math.log(x / x_interval[0]),
                                        math.log(y_interval[1] / y))


@pytest.mark.slow  # 100 studies, each VPNLS and approach 2 with 100 bootstrap refits: 20 s
def test_the_interval_covers_the_true_n_opt_and_every_parting_is_noted():
    """Four designs in turn: centred or drifting (1x -> 3x N_opt), 1% or 0.2% noise."""
    designs = [((1.0, 1.0), 0.01), ((1.0, 3.0), 0.01), ((1.0, 1.0), 0.002), ((1.0, 3.0), 0.002)]
    truth = n_opt(1e22, ASYMMETRIC)
    covered = parted = 0
    for seed in range(100):
        drift, noise = designs[seed % 4]
        report = conclude(analyze(isoflop_frame(ASYMMETRIC, noise=noise, seed=seed, drift=drift),
                                  approaches=("2", "vpnls"), budgets=[1e22], n_bootstrap=100,
                                  seed=seed))
        assert report.verdict.approach == "vpnls"
        (row,) = report.verdict.rows
        lo, hi = row.intervals["n_params"]
        covered += lo <= truth <= hi
        (check,) = report.results["2"].optimal
        apart = differ_beyond_intervals(row.n_params, (lo, hi), check.n_params,
                                        check.intervals["n_params"])
        noted = [n for n in report.notes if n.code == "verdict-disagrees"]
        assert bool(noted) == apart == row.parted, seed
        parted += apart
    assert covered >= 85
    assert parted >= 5  # the drifting designs at low noise part: the rule is exercised


def test_the_verdict_takes_vpnls_then_approach_3_then_approach_2():
    frame = isoflop_frame(noise=0.003)
    both = conclude(analyze(frame, approaches=("2", "3", "vpnls"), budgets=[1e22]))
    assert both.verdict.approach == "vpnls" and both.notes == []
    assert both.verdict.why.startswith("VPNLS fits L(N, D) without the bias")
    assert "no intervals to compare: --bootstrap 0" in both.verdict.why
    (row,) = both.verdict.rows
    vpnls = both.results["vpnls"].optimal[0]
    assert (row.n_params, row.n_tokens, row.loss) == (vpnls.n_params, vpnls.n_tokens, vpnls.loss)
    assert row.cross_check == both.results["2"].optimal[0].n_params and row.extrapolated
    assert row.n_params == pytest.approx(n_opt(1e22), rel=0.1)
    three = conclude(dataclasses.replace(both, results={k: both.results[k] for k in ("2", "3")}))
    assert three.verdict.approach == "3"
    two = conclude(dataclasses.replace(both, results={"2": both.results["2"]}))
    assert two.verdict.approach == "2" and two.verdict.why.startswith("approach 2's IsoFLOP")
    assert conclude(dataclasses.replace(both, results={})).verdict is None


def test_a_degenerate_fit_is_passed_over_and_said_so():
    one = isoflop_frame(budgets=(1e20,), noise=0.003)
    report = conclude(analyze(one, approaches=("vpnls",), budgets=[1e21]))
    assert report.verdict.approach == "vpnls"
    assert report.verdict.why.startswith("approach vpnls, the only fit with a compute-optimal "
                                         "table, though it is not to be trusted")


def test_the_json_has_the_verdict_the_notes_and_the_shapes():
    frame = isoflop_frame(ASYMMETRIC, drift=(1.0, 3.0))
    out = json.loads(json.dumps(report_json(conclude(analyze(
        frame, approaches=("2", "vpnls"), budgets=[1e22]))), allow_nan=False))
    assert list(out) == ["2", "vpnls", "verdict", "notes", "recommendations"]
    verdict = out["verdict"]
    assert verdict["approach"] == "vpnls" and verdict["rule"].startswith("the first converged")
    (row,) = verdict["rows"]
    assert row["budget_flops"] == 1e22 and row["extrapolated"] is True
    assert row["n_params"] == pytest.approx(out["vpnls"]["optimal"][0]["n_params"])
    assert [n["code"] for n in out["notes"]] == ["approach2-bias"]
    assert out["notes"][0]["text"].startswith("approach 2's exponent is biased")
    assert out["recommendations"] == []  # a table has no size rule to make shapes from


@pytest.mark.slow  # three runs of the command, each fitting and plotting: 4.5 s
def test_the_cli_prints_the_verdict_first_and_exclude_leaves_a_point_out(tmp_path):
    frame = isoflop_frame(noise=0.003, seed=1)
    frame.loc[20, "loss"] *= 1.5
    frame.drop(columns=["trial"]).to_csv(tmp_path / "points.csv", index=False)
    base = ["analyze", "scaling", "--csv", str(tmp_path / "points.csv"), "--approach", "2,vpnls",
            "--bootstrap", "0", "--out", str(tmp_path / "out"), "--budget", "1e22"]
    res = CliRunner().invoke(app, base)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert text.index("verdict: approach vpnls") < text.index("approach 2: Chinchilla")
    assert "note [influential-point, approach vpnls]: 1 point off the law moves" in text
    assert "--exclude 20" in text
    res = CliRunner().invoke(app, [*base, "--exclude", "20", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["notes"] == []
    truth = CHINCHILLA["beta"] / (CHINCHILLA["alpha"] + CHINCHILLA["beta"])
    assert out["vpnls"]["a"] == pytest.approx(truth, abs=0.01)
    assert out["vpnls"]["n_points"] == 35
    res = CliRunner().invoke(app, [*base, "--exclude", "20,99"])
    assert res.exit_code == 2
    assert "--exclude 99: no such point among the 36 fitted (trials 0 to 35)" in " ".join(
        res.output.split())


def test_approach_2_parting_from_the_verdict_is_noted_with_both_intervals():
    frame = isoflop_frame(ASYMMETRIC, noise=0.002, drift=(1.0, 3.0))
    report = conclude(analyze(frame, approaches=("2", "vpnls"), budgets=[1e22], n_bootstrap=100))
    assert [n.code for n in report.notes] == ["approach2-bias", "approach2-disagrees",
                                              "verdict-disagrees"]
    (row,) = report.verdict.rows
    assert row.parted and "approach 2 parts from it (see the note)" in report.verdict.why
    assert differ_beyond_intervals(row.n_params, row.intervals["n_params"], row.cross_check,
                                   row.cross_interval)
    note = report.notes[-1]
    assert note.evidence.startswith(f"C=1e+22: {row.n_params:.4g} [")
    assert f"against approach 2's {row.cross_check:.4g} [" in note.evidence
    truth = n_opt(1e22, ASYMMETRIC)
    assert row.intervals["n_params"][0] <= truth <= row.intervals["n_params"][1]
    assert row.cross_check / truth > 1.1  # approach 2's +0.03 on a carried to 10x the budgets


def test_a_power_law_whose_n_opt_shrinks_with_c_gives_no_verdict():
    report = analyze(isoflop_frame(noise=0.0), approaches=("2",), budgets=[1e22])
    result = report.results["2"]
    shrinking = dataclasses.replace(result, params={**result.params, "a": -0.13})
    assert conclude(report).verdict.approach == "2"
    assert conclude(dataclasses.replace(report, results={"2": shrinking})).verdict is None
