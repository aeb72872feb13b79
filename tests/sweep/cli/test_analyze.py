"""``sweep analyze scaling``: on a CSV made from the Chinchilla law, and on a real MLflow study.

Independent truth: Hoffmann et al. 2022's fitted law (E=1.69, A=406.4, B=410.7, alpha=0.34,
beta=0.28; ``shared/reference/cost_vectors.md``), whose allocation exponent is
a = beta / (alpha + beta) = 0.451613.
"""

import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from sweep import schema as S
from sweep.cli import app
from sweep.scaling.report_json import FITS_ARTIFACT, PLOTS_ARTIFACT_DIR
from sweep.tracking import StudyTracker

LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
A_EXPONENT = LAW["beta"] / (LAW["alpha"] + LAW["beta"])
BUDGETS = (1e18, 1e19, 1e20, 1e21)


def law(n, d):
    return LAW["E"] + LAW["A"] / n ** LAW["alpha"] + LAW["B"] / d ** LAW["beta"]


def n_star(c):
    a, b = LAW["alpha"], LAW["beta"]
    return (a * LAW["A"] / (b * LAW["B"])) ** (1 / (a + b)) * (c / 6) ** (b / (a + b))


def chinchilla_points():
    """7 sizes per budget, log-spaced over [N*/4, 4 N*], D = C / (6N), loss from the law."""
    rows = []
    for c in BUDGETS:
        for n in n_star(c) * np.geomspace(0.25, 4, 7):
            d = c / (6 * n)
            rows.append({"n_params": n, "n_tokens": d, "loss": law(n, d), "budget": c,
                         "flops": 6 * n * d})
    return pd.DataFrame(rows)


@pytest.fixture
def csv(tmp_path):
    path = tmp_path / "chinchilla.csv"
    chinchilla_points().to_csv(path, index=False)
    return path


def run(*args):
    return CliRunner().invoke(app, ["analyze", "scaling", *map(str, args)])


def one_line(text):
    return " ".join(text.split())


def test_csv_fit_matches_the_law_to_three_digits(csv, tmp_path):
    res = run("--csv", csv, "--approach", "2,3", "--bootstrap", 20, "--json",
              "--out", tmp_path / "plots", "--budget", "5.88e23")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"2", "3", "verdict", "notes", "recommendations"}
    three = out["3"]
    for name in ("alpha", "beta"):
        assert round(three[name], 3) == LAW[name], name
    for name in ("E", "A", "B"):
        assert three[name] == pytest.approx(LAW[name], rel=1e-3), name
    assert round(three["a"], 3) == round(A_EXPONENT, 3) == 0.452
    assert round(out["2"]["a"], 3) == 0.452
    assert set(three["intervals"]) >= {"E", "A", "B", "alpha", "beta", "a", "b"}
    (row,) = three["optimal"]
    assert row["n_params"] == pytest.approx(3.249e10, rel=1e-3)
    assert row["n_tokens"] == pytest.approx(3.016e12, rel=1e-3)
    assert three["flop_convention"] == "C = 6ND"
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert {p.name for p in pngs} >= {"isoflop_curves.png", "frontier.png",
                                      "loss_vs_n_and_d_3.png", "residuals.png"}
    for path in pngs:
        image = mpimg.imread(path)
        assert image.ndim == 3 and min(image.shape[:2]) > 100, path.name


@pytest.mark.slow  # a process of its own: its imports and a full approach-3 fit, 3 s
def test_the_module_entry_point_prints_only_json(csv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sweep.cli", "analyze", "scaling", "--csv",
                           str(csv), "--approach", "3", "--bootstrap", "0", "--json", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert round(out["3"]["alpha"], 3) == 0.34 and round(out["3"]["beta"], 3) == 0.28
    assert "wrote 4 plots" not in proc.stdout


def test_text_report_prints_parameters_and_the_compute_optimal_table(csv, tmp_path):
    res = run("--csv", csv, "--approach", "3", "--bootstrap", 20, "--budget", "1e22",
              "--out", tmp_path)
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "approach 3:" in text and "alpha" in text and "0.34" in text
    assert "N_opt" in text and "D_opt" in text and "C = 6ND" in text
    assert "1e+22 *" in text  # beyond the largest budget fitted
    assert "90% interval" in text


def test_an_approach_that_cannot_fit_is_reported_and_the_others_run(csv, tmp_path):
    frame = pd.read_csv(csv).drop(columns=["budget", "flops"])
    frame.to_csv(tmp_path / "no_budget.csv", index=False)
    res = run("--csv", tmp_path / "no_budget.csv", "--approach", "2,3", "--bootstrap", 0,
              "--json", "--out", tmp_path / "out")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert "budget_flops" in out["2"]["error"]
    assert round(out["3"]["alpha"], 3) == 0.34


def test_exit_1_when_no_approach_could_fit(tmp_path):
    chinchilla_points().head(5).to_csv(tmp_path / "few.csv", index=False)
    res = run("--csv", tmp_path / "few.csv", "--approach", "2,3", "--out", tmp_path / "out")
    assert res.exit_code == 1, res.output
    assert "no fit:" in res.stdout


def test_default_out_for_a_csv_is_analysis_in_the_working_folder(csv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run("--csv", csv, "--approach", "2", "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "analysis" / "isoflop_curves.png").stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (["--csv", "{tmp}/missing_column.csv"], "missing column(s) n_tokens"),
    (["--csv", "{tmp}/no_finite.csv"], "no row has a finite loss"),
    (["--csv", "{tmp}/nope.csv"], "--csv {tmp}/nope.csv: no such file"),
    (["--csv", "{tmp}/ok.csv", "--approach", "4"], "--approach 4: unknown; choose from 1, 2, "
                                                   "3, vpnls or all"),
    (["--csv", "{tmp}/ok.csv", "--budget", "-1e21"], "--budget '-1e21': must be a positive"),
    (["--csv", "{tmp}/ok.csv", "--budget", "lots"], "--budget 'lots': must be a positive"),
    (["--csv", "{tmp}/ok.csv", "--budget", "inf"], "--budget 'inf': must be a positive"),
    (["--csv", "{tmp}/ok.csv", "--budget", "1e308"], "--budget '1e308': must be a positive "
                                                     "number of FLOPs up to 1e+42"),
    (["{tmp}/no_such_study"], "no study '{tmp}/no_such_study'"),
    ([], "give a study (STUDY_OR_DIR) or --csv FILE"),
    (["study", "--csv", "{tmp}/ok.csv"], "not both"),
    (["--csv", "{tmp}/ok.csv", "--n-params", "some"], "--n-params 'some': choose total or "
                                                     "non-embedding"),
])
def test_bad_input_exits_2_naming_it(tmp_path, args, message):
    (tmp_path / "missing_column.csv").write_text("n_params,loss\n1e8,3\n")
    (tmp_path / "no_finite.csv").write_text("n_params,n_tokens,loss\n1e8,1e9,nan\n")
    chinchilla_points().to_csv(tmp_path / "ok.csv", index=False)
    res = run(*(a.format(tmp=tmp_path) for a in args))
    assert res.exit_code == 2, res.output
    assert message.format(tmp=tmp_path) in one_line(res.stderr)


_PROBE = """
import sys
from typer.testing import CliRunner
from sweep.cli import app
res = CliRunner().invoke(app, ["analyze", "scaling", *sys.argv[1:]])
heavy = sorted(m for m in ("mlflow", "matplotlib", "torch") if m in sys.modules)
print(res.exit_code, ",".join(heavy) or "-")
"""


@pytest.mark.parametrize("args", [
    ["--csv", "{tmp}/bad.csv"],
    ["--csv", "{tmp}/bad.csv", "--approach", "9"],
    ["--csv", "{tmp}/bad.csv", "--budget", "0"],
    ["{tmp}/no_study"],
])
def test_bad_input_is_refused_before_mlflow_or_matplotlib_load(tmp_path, args):
    (tmp_path / "bad.csv").write_text("n_params,loss\n1e8,3\n")
    proc = subprocess.run([sys.executable, "-c", _PROBE, *(a.format(tmp=tmp_path) for a in args)],
                          capture_output=True, text=True, timeout=60)
    code, heavy = proc.stdout.split()
    assert (code, heavy) == ("2", "-"), proc.stderr


# ------------------------------------------------------------------------ a real study
@pytest.fixture(scope="module")
def study(tmp_path_factory, new_store):
    """A scaling study in MLflow through the project's tracking API: the law's 28 points, one
    FAILED trial and one DIVERGED trial."""
    out = tmp_path_factory.mktemp("study")
    tracker = StudyTracker.start(new_store(out), "chinchilla", {"name": "chinchilla"},
                                 executor="optuna", algorithm="grid")
    rows = chinchilla_points().to_dict("records")
    for number, row in enumerate(rows + [rows[0], rows[1]]):
        n, d, c = row["n_params"], row["n_tokens"], row["budget"]
        run_ = tracker.context.start_trial(number, {"model": {"d_model": 64},
                                                    "train": {"flops": c}})
        run_.log_costs({S.METRIC_N_PARAMS: n, S.METRIC_N_PARAMS_NON_EMBEDDING: 0.9 * n,
                        S.METRIC_FLOPS_PER_TOKEN_TRAIN: 6 * n})
        run_.log_metrics({S.METRIC_BUDGET_FLOPS: c, S.METRIC_N_TOKENS: d,
                          S.METRIC_TOKENS_PER_PARAM: d / n})
        for fraction in (0.125, 0.25, 0.5, 1.0):  # a training curve, for approach 1
            run_.report(int(fraction * d), {S.METRIC_VAL_LOSS: law(n, int(fraction * d))})
        if number == len(rows):
            run_.end(S.TrialState.FAILED, fail_reason="RuntimeError: out of memory")
            continue
        state = S.TrialState.DIVERGED if number > len(rows) else S.TrialState.COMPLETE
        run_.log_result({"state": state, S.METRIC_FINAL_VAL_LOSS: row["loss"]
                         if state is S.TrialState.COMPLETE else float("nan"),
                         S.METRIC_TOKENS: d, S.METRIC_TRAIN_FLOPS: 6 * n * d})
    tracker.finish()
    return {"out": out, "uri": tracker.context.tracking_uri,
            "parent_run_id": tracker.parent_run_id}


def test_a_study_is_analysed_plotted_and_logged_to_its_parent_run(study):
    res = run(study["out"], "--approach", "2,3", "--bootstrap", 20, "--json",
              "--huber-delta", "1e9")  # least squares: the law's points fit it exactly too
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert round(out["3"]["alpha"], 3) == 0.34 and out["3"]["n_points"] == 28
    assert out["3"]["huber_delta"] == 1e9  # and in the copy on the parent run, below
    assert out["3"]["n_params_convention"] == "total"
    folder = study["out"] / "analysis"
    assert (folder / "frontier.png").stat().st_size > 0
    client = MlflowClient(study["uri"])
    logged = {a.path for a in client.list_artifacts(study["parent_run_id"],
                                                    str(Path(FITS_ARTIFACT).parent))}
    assert FITS_ARTIFACT in logged
    plots = {a.path for a in client.list_artifacts(study["parent_run_id"], PLOTS_ARTIFACT_DIR)}
    assert f"{PLOTS_ARTIFACT_DIR}/frontier.png" in plots
    local = client.download_artifacts(study["parent_run_id"], FITS_ARTIFACT,
                                      str(study["out"] / "downloaded"))
    assert json.loads(Path(local).read_text()) == out


def test_a_study_text_report_names_its_exclusions_and_convention(study, tmp_path):
    res = run(study["out"], "--approach", "2", "--n-params", "non-embedding", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    text = one_line(res.stdout)
    assert "28 points (excluded: DIVERGED 1, FAILED 1)" in text
    assert "parameter count N: non-embedding" in text


def test_every_approach_runs_on_a_study_by_default(study, tmp_path):
    res = run(study["out"], "--bootstrap", 0, "--json", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert list(out) == ["1", "2", "3", "vpnls", "verdict", "notes", "recommendations"]
    assert round(out["3"]["alpha"], 3) == 0.34
    assert round(out["vpnls"]["alpha"], 3) == 0.34
    # The envelope's N_opt steps between the 7 trained sizes per budget, so its exponent is
    # near the law's, not equal to it.
    assert out["1"]["a"] == pytest.approx(A_EXPONENT, abs=0.05), out["1"]


def test_a_study_without_a_usable_trial_exits_2(tmp_path, new_store):
    tracker = StudyTracker.start(new_store(tmp_path), "broken", {"name": "broken"},
                                 executor="optuna", algorithm="tpe")
    tracker.context.start_trial(0, {"model": {"d_model": 64}}).end(
        S.TrialState.FAILED, fail_reason="RuntimeError: out of memory")
    tracker.finish()
    res = run(tmp_path, "--approach", "2")
    assert res.exit_code == 2, res.output
    assert ("study 'broken': none of its 1 trials trained to the end with a finite loss "
            "(excluded: FAILED 1)") in one_line(res.stderr)
