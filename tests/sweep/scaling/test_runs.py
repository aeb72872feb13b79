"""A scaling study's MLflow runs read back as fit points: rows, exclusions, units.

The store is written through the project's own tracking API (`StudyTracker`, `TrialRun`), the
way a study's trials write it, so these tests check that the reader and the writer agree.
"""

import math
import re

import numpy as np
import pandas as pd
import pytest

from sweep import schema
from sweep.results import StudyNotFoundError
from sweep.scaling.points_csv import read_csv_points
from sweep.scaling.runs import (
    LOSS,
    POINT_COLUMNS,
    PointsError,
    load_curves,
    load_runs,
    load_study,
)
from sweep.tracking import StudyTracker

S = schema
LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def law(n, d):
    return LAW["E"] + LAW["A"] / n ** LAW["alpha"] + LAW["B"] / d ** LAW["beta"]


EMBED = 0.2  # fraction of each made-up model's parameters in its embeddings
# (budget C, n_params N) of the COMPLETE trials; D = C / (6 N) and the loss follows `law`.
GOOD = [(c, n) for c in (1e17, 1e18) for n in (2e7, 4e7, 8e7)]
EVALS = (0.25, 0.5, 1.0)  # evaluations at these fractions of D


def log_trial(ctx, number, budget, n, end, *, final_loss=None, budget_metric=True):
    """One trial of the made-up study; ``end`` is the state it ends in."""
    d = budget / (6 * n)
    config = {"model": {"d_model": int(n // 1e5), "n_layers": 4, "n_heads": 4, "d_ff": None,
                        "vocab_size": 256},
              "train": {"flops": budget, "tokens": None, "lr": 1e-3}}
    run = ctx.start_trial(number, config)
    run.log_costs({S.METRIC_N_PARAMS: n, S.METRIC_N_PARAMS_NON_EMBEDDING: n * (1 - EMBED),
                   S.METRIC_FLOPS_PER_TOKEN: 2 * n, S.METRIC_FLOPS_PER_TOKEN_DENSE: 2 * n,
                   S.METRIC_FLOPS_PER_TOKEN_TRAIN: 6 * n, S.METRIC_MEM_ESTIMATE: 1e9})
    if budget_metric:
        run.log_metrics({S.METRIC_BUDGET_FLOPS: budget, S.METRIC_N_TOKENS: d,
                         S.METRIC_TOKENS_PER_PARAM: d / n})
    if end is S.TrialState.INFEASIBLE:
        run.end(end, fail_reason="n_params over max_params")
        return run
    if end is S.TrialState.FAILED:
        run.end(end, fail_reason="RuntimeError: out of memory")
        return run
    if end is S.TrialState.RUNNING:  # the process died: the run never ended
        run.report(int(d * EVALS[0]), {S.METRIC_VAL_LOSS: law(n, d * EVALS[0])})
        return run
    for fraction in EVALS if end is not S.TrialState.PRUNED else EVALS[:2]:
        run.report(int(d * fraction), {S.METRIC_VAL_LOSS: law(n, d * fraction)})
    if end is S.TrialState.PRUNED:
        run.end(end)
        return run
    loss = law(n, d) if final_loss is None else final_loss
    run.log_result({"state": end, S.METRIC_BEST_VAL_LOSS: loss, S.METRIC_FINAL_VAL_LOSS: loss,
                    S.METRIC_TOKENS: d, S.METRIC_TRAIN_FLOPS: 6 * n * d, S.METRIC_WALL_S: 1.0,
                    "fail_reason": "non-finite loss" if end is S.TrialState.DIVERGED else None})
    return run


@pytest.fixture(scope="module")
def study(tmp_path_factory, new_store):
    """The made-up scaling study: 6 COMPLETE trials and one of every way a trial can fail."""
    out = tmp_path_factory.mktemp("scaling")
    tracker = StudyTracker.start(new_store(out), "law", {"name": "law"},
                                 executor="optuna", algorithm="grid")
    ctx = tracker.context
    number = 0
    for budget, n in GOOD:
        log_trial(ctx, number, budget, n, S.TrialState.COMPLETE)
        number += 1
    others = [(S.TrialState.FAILED, {}), (S.TrialState.DIVERGED, {"final_loss": math.nan}),
              (S.TrialState.INFEASIBLE, {}), (S.TrialState.PRUNED, {}),
              (S.TrialState.RUNNING, {}),
              # COMPLETE with a non-finite final loss: never logged, so read back as missing
              (S.TrialState.COMPLETE, {"final_loss": math.nan}),
              (S.TrialState.COMPLETE, {"final_loss": math.inf})]
    for end, kw in others:
        log_trial(ctx, number, 1e18, 3e7, end, **kw)
        number += 1
    tracker.finish()
    return {"out": out, "uri": tracker.context.tracking_uri, "tracker": tracker}


def test_only_trials_trained_to_the_end_with_a_finite_loss_are_rows(study):
    frame = load_runs(study["out"])
    assert list(frame["trial"]) == list(range(len(GOOD)))
    assert set(frame["state"]) == {S.TrialState.COMPLETE.value}
    assert frame.attrs["excluded"] == {"FAILED": 1, "DIVERGED": 1, "INFEASIBLE": 1, "PRUNED": 1,
                                       "RUNNING": 1, "non-finite loss": 2}
    assert frame.attrs["n_trials"] == len(GOOD) + 7
    assert frame.attrs["study"] == "law"
    assert frame.attrs["parent_run_id"] == study["tracker"].parent_run_id
    assert frame.attrs["n_params_convention"] == "total"


def test_columns_hold_the_logged_values_in_their_units(study):
    frame = load_runs(study["out"])
    assert list(frame.columns[:len(POINT_COLUMNS)]) == list(POINT_COLUMNS)
    for (budget, n), (_, row) in zip(GOOD, frame.iterrows(), strict=True):
        d = budget / (6 * n)
        assert row[S.METRIC_N_PARAMS] == n
        assert row[S.METRIC_N_PARAMS_NON_EMBEDDING] == pytest.approx(n * (1 - EMBED))
        assert row[S.METRIC_N_TOKENS] == pytest.approx(d)  # tokens, not FLOPs or steps
        assert row[S.METRIC_TRAIN_FLOPS] == pytest.approx(budget)  # 6ND = C
        assert row[S.METRIC_BUDGET_FLOPS] == budget
        assert row[LOSS] == pytest.approx(law(n, d))
        assert row["model.n_layers"] == 4 and row["train.flops"] == budget
        assert isinstance(row["run_id"], str) and len(row["run_id"]) == 32


def test_the_non_embedding_convention_changes_only_n_params(study):
    total = load_runs(study["out"])
    kaplan = load_runs(study["out"], n_params="non-embedding")
    assert kaplan.attrs["n_params_convention"] == "non-embedding"
    np.testing.assert_allclose(kaplan[S.METRIC_N_PARAMS], total[S.METRIC_N_PARAMS] * (1 - EMBED))
    pd.testing.assert_series_equal(kaplan[LOSS], total[LOSS])
    with pytest.raises(ValueError, match="n_params='kaplan'.*total, non-embedding"):
        load_runs(study["out"], n_params="kaplan")


def test_a_study_that_is_not_a_scaling_study_still_loads(tmp_path, new_store):
    tracker = StudyTracker.start(new_store(tmp_path), "plain", {"name": "plain"},
                                 executor="optuna", algorithm="tpe")
    # no budget metrics; the first trial has a FLOP budget param, the second a token budget
    log_trial(tracker.context, 0, 1e18, 2e7, S.TrialState.COMPLETE, budget_metric=False)
    run = tracker.context.start_trial(1, {"model": {"d_model": 64}, "train": {"tokens": 5000}})
    run.log_costs({S.METRIC_N_PARAMS: 1e6, S.METRIC_FLOPS_PER_TOKEN_TRAIN: 6e6})
    run.log_result({"state": S.TrialState.COMPLETE, S.METRIC_FINAL_VAL_LOSS: 3.0,
                    S.METRIC_TOKENS: 5000})
    tracker.finish()
    frame = load_runs(tmp_path)
    assert list(frame["trial"]) == [0, 1]
    assert frame[S.METRIC_BUDGET_FLOPS].iloc[0] == 1e18  # from the train.flops param
    assert math.isnan(frame[S.METRIC_BUDGET_FLOPS].iloc[1])
    assert frame[S.METRIC_N_TOKENS].iloc[1] == 5000
    # train_flops was not logged: tokens x flops_per_token_train
    assert frame[S.METRIC_TRAIN_FLOPS].iloc[1] == pytest.approx(5000 * 6e6)
    assert math.isnan(frame[S.METRIC_N_PARAMS_NON_EMBEDDING].iloc[1])


def test_curves_are_every_evaluation_of_the_trained_trials(study):
    curves = load_curves(study["out"])
    per_trial = curves.groupby("trial").size().to_dict()
    pruned = len(GOOD) + 3
    # COMPLETE trials (including the two without a final loss) and the PRUNED one's evaluations
    assert per_trial == {**dict.fromkeys(range(len(GOOD)), 3), pruned: 2,
                         len(GOOD) + 5: 3, len(GOOD) + 6: 3}
    assert curves.attrs["excluded"] == {"FAILED": 1, "DIVERGED": 1, "INFEASIBLE": 1,
                                        "RUNNING": 1}
    first = curves[curves["trial"] == 0]
    budget, n = GOOD[0]
    d = budget / (6 * n)
    np.testing.assert_array_equal(first[S.METRIC_TOKENS], [int(d * f) for f in EVALS])
    np.testing.assert_allclose(first["flops"], first[S.METRIC_TOKENS] * 6 * n)
    np.testing.assert_allclose(first[S.METRIC_VAL_LOSS],
                               [law(n, int(d * f)) for f in EVALS], rtol=1e-6)
    assert (first[S.METRIC_N_PARAMS] == n).all()


def test_load_study_reads_both_at_once(study):
    points, curves = load_study(study["out"], n_params="non-embedding")
    pd.testing.assert_frame_equal(points, load_runs(study["out"], n_params="non-embedding"))
    pd.testing.assert_frame_equal(curves, load_curves(study["out"], n_params="non-embedding"))
    assert load_study(study["out"], curves=False)[1] is None


def test_a_missing_study_is_named(tmp_path):
    with pytest.raises(StudyNotFoundError, match="nothing/mlflow.db"):
        load_runs(tmp_path / "nothing")


# ---------------------------------------------------------------------------- CSV points
def test_csv_points_keep_finite_rows_and_count_the_others(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text("n_params,n_tokens,loss,budget,flops,note\n"
                    "1e7,1e9,3.0,6e16,6e16,a\n"
                    "2e7,5e8,3.1,6e16,6e16,b\n"
                    "3e7,nan,3.2,6e16,6e16,c\n"
                    "4e7,1e9,inf,6e16,6e16,e\n")
    frame = read_csv_points(path)
    assert list(frame[S.METRIC_N_PARAMS]) == [1e7, 2e7]
    assert list(frame[S.METRIC_BUDGET_FLOPS]) == [6e16, 6e16]
    assert list(frame[S.METRIC_TRAIN_FLOPS]) == [6e16, 6e16]
    assert list(frame["note"]) == ["a", "b"]
    assert frame.attrs["excluded"] == {"non-finite n_tokens": 1, "non-finite loss": 1}
    assert frame.attrs["source"] == str(path)


@pytest.mark.parametrize(("row", "expected"), [
    ("-1,1e9,3.3,6e16", "column n_params, line 3: '-1' is negative"),
    ("4e7,1e9,oops,6e16", "column loss, line 3: 'oops' is not a number"),
    ("4e7,0,3.0,6e16", "column n_tokens, line 3: '0' is zero (a count must be > 0)"),
    ("4e7,1e9,3.0,-6e16", "column budget, line 3: '-6e16' is negative"),
])
def test_csv_values_that_are_wrong_not_missing_are_refused(tmp_path, row, expected):
    path = tmp_path / "points.csv"
    path.write_text(f"n_params,n_tokens,loss,budget\n1e7,1e9,3.0,6e16\n{row}\n")
    with pytest.raises(PointsError, match=re.escape(expected)):
        read_csv_points(path)


def test_csv_budget_and_flops_are_optional(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text("loss,n_tokens,n_params\n3.0,1e9,1e7\n")
    frame = read_csv_points(path)
    assert math.isnan(frame[S.METRIC_BUDGET_FLOPS].iloc[0])
    assert math.isnan(frame[S.METRIC_TRAIN_FLOPS].iloc[0])


def test_a_load_runs_frame_saved_as_csv_reads_back(study, tmp_path):
    frame = load_runs(study["out"])
    frame.to_csv(tmp_path / "runs.csv", index=False)
    back = read_csv_points(tmp_path / "runs.csv")
    for column in (S.METRIC_N_PARAMS, S.METRIC_N_TOKENS, S.METRIC_TRAIN_FLOPS,
                   S.METRIC_BUDGET_FLOPS, LOSS):
        np.testing.assert_allclose(back[column], frame[column], rtol=1e-12)


@pytest.mark.parametrize("text, message", [
    ("n_params,loss\n1,2\n", "missing column.*n_tokens; it has n_params, loss"),
    ("a,b\n1,2\n", r"missing column.*loss, n_params, n_tokens"),
    ("n_params,n_tokens,loss\n1e7,inf,3\nnan,1e9,3\n", "no row has a finite loss"),
    ("n_params,n_tokens,loss\n", "no row has a finite loss"),
    ("", "cannot be read as CSV"),
])
def test_bad_csv_tables_are_refused_naming_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(PointsError, match=message):
        read_csv_points(path)


def test_a_missing_csv_is_named(tmp_path):
    with pytest.raises(PointsError, match="nope.csv: no such file"):
        read_csv_points(tmp_path / "nope.csv")
