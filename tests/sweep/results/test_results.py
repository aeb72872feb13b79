"""Reading a study back: the results table, `sweep results`, `sweep ui` on a live MLflow server."""

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import pandas as pd
import pytest
from testsupport import free_port
from typer.testing import CliRunner

from sweep.cli import app
from sweep.results import StudyNotFoundError, load_results, resolve_study
from sweep.tracking import StudyTracker, default_tracking_uri

runner = CliRunner()
SPEC = {"model": {"d_model": {"choice": [32, 64]}}, "train": {"lr": 1e-3}}
# trial -> (d_model, lr, val losses at 100/200/300 tokens, state); made-up outcomes
TRIALS = {
    0: (64, 1e-3, [2.0, 1.8, 1.9], "COMPLETE"),
    1: (32, 3e-3, [2.5, math.nan], "DIVERGED"),
    2: (32, 1e-3, [2.2, 1.6, 1.5], "COMPLETE"),
    3: (64, 1e-2, [], "INFEASIBLE"),
    4: (64, 3e-4, [2.4], "FAILED"),
}


def log_study(out, name):
    tracker = StudyTracker.start(
        default_tracking_uri(out), name, SPEC, executor="optuna", algorithm="random"
    )
    for n, (d_model, lr, losses, state) in TRIALS.items():
        params = {"model": {"d_model": d_model, "tie_embeddings": True}, "train": {"lr": lr}}
        with tracker.start_trial(n, params) as run:
            run.log_costs({"n_params": 1000.0 * d_model, "flops_per_token": 2000.0 * d_model})
            for step, loss in enumerate(losses, start=1):
                run.report(100 * step, {"val_loss": loss, "train_loss": 3.0})
            finite = [v for v in losses if math.isfinite(v)]
            run.log_result(
                {
                    "state": state,
                    "tokens": 100 * len(finite),
                    "final_val_loss": losses[-1] if losses else math.nan,
                    "fail_reason": None if state == "COMPLETE" else f"{state.lower()} on purpose",
                }
            )
    return tracker


@pytest.fixture(scope="module")
def store(tmp_path_factory, new_store):
    root = tmp_path_factory.mktemp("results")
    new_store(root / "runs" / "demo")
    tracker = log_study(root / "runs" / "demo", "demo")
    return {"root": root, "out": root / "runs" / "demo", "tracker": tracker}


def test_load_results_one_row_per_trial_best_first_nan_last(store):
    frame = load_results(store["out"])
    assert list(frame["trial"]) == [2, 0, 1, 3, 4]
    assert list(frame["state"]) == ["COMPLETE", "COMPLETE", "DIVERGED", "INFEASIBLE", "FAILED"]
    assert list(frame["best_val_loss"].iloc[:2]) == [1.5, 1.8]
    assert frame["best_val_loss"].iloc[2:].isna().all()
    assert list(frame["final_val_loss"].iloc[:2]) == [1.5, 1.9]
    assert frame["final_val_loss"].iloc[2:4].isna().all()  # diverged, infeasible
    assert frame["final_val_loss"].iloc[4] == 2.4  # failed after one evaluation
    assert list(frame["tokens"].iloc[:3]) == [300, 300, 100]
    assert list(frame["model.d_model"]) == [32, 64, 32, 64, 64]
    assert frame["train.lr"].tolist() == [1e-3, 1e-3, 3e-3, 1e-2, 3e-4]
    assert frame["model.tie_embeddings"].tolist() == [True] * 5
    assert frame["n_params"].tolist() == [32000.0, 64000.0, 32000.0, 64000.0, 64000.0]
    assert frame.loc[frame["trial"] == 4, "fail_reason"].item() == "failed on purpose"
    assert frame.attrs["study"] == "demo"
    assert frame.attrs["parent_run_id"] == store["tracker"].parent_run_id


def test_study_is_found_by_name_folder_db_file_or_uri(store, monkeypatch):
    uri = default_tracking_uri(store["out"])
    monkeypatch.chdir(store["root"])
    assert resolve_study("demo") == (uri, "demo")
    assert resolve_study(store["out"] / "mlflow.db") == (uri, "demo")
    assert resolve_study("demo", tracking_uri=uri) == (uri, "demo")
    assert resolve_study(store["out"], tracking_uri=uri) == (uri, "demo")
    assert len(load_results("demo")) == len(TRIALS)


def test_unknown_study_names_it(store, monkeypatch):
    monkeypatch.chdir(store["root"])
    with pytest.raises(StudyNotFoundError, match="nosuch"):
        load_results("nosuch")
    with pytest.raises(StudyNotFoundError, match=r"'other'.*\['demo'\]"):
        load_results("other", tracking_uri=default_tracking_uri(store["out"]))


def test_store_with_two_studies_needs_the_name(tmp_path, new_store):
    new_store(tmp_path)
    log_study(tmp_path, "a")
    StudyTracker.start(default_tracking_uri(tmp_path), "b", SPEC, executor="ray", algorithm="x")
    with pytest.raises(StudyNotFoundError, match=r"\['a', 'b'\]|\['b', 'a'\]"):
        resolve_study(tmp_path)
    assert len(load_results("b", tracking_uri=default_tracking_uri(tmp_path))) == 0
    assert len(load_results("a", tracking_uri=default_tracking_uri(tmp_path))) == len(TRIALS)


def test_cli_results_table_json_and_csv(store, tmp_path):
    result = runner.invoke(app, ["results", str(store["out"])], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "demo" in result.output and "DIVERGED" in result.output
    assert result.output.index("1.5") < result.output.index("DIVERGED")

    result = runner.invoke(app, ["results", str(store["out"]), "--json", "--top", "3"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["trial"] for r in records] == [2, 0, 1]
    assert records[2]["best_val_loss"] is None and records[0]["model.d_model"] == 32

    csv = tmp_path / "trials.csv"
    result = runner.invoke(app, ["results", str(store["out"]), "--csv", str(csv), "--top", "1"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(csv)
    assert list(table["trial"]) == [2, 0, 1, 3, 4]


def test_cli_results_table_fits_the_terminal(store, monkeypatch):
    from rich.console import Console

    from sweep.cli import common as cli

    # A pipe or a file: every column, whole lines, numbers never split.
    result = runner.invoke(app, ["results", str(store["out"])], env={"COLUMNS": "40"})
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "best val" in line)
    assert all(h in header for h in ("d_model", "lr", "reason", "params", "FLOPs/tok"))
    assert "64k" in result.output and "128k" in result.output  # counts with SI suffixes
    assert "not shown" not in result.output
    # A terminal 72 columns wide: the leading columns stay, the rest are named below.
    monkeypatch.setattr(cli, "console", Console(force_terminal=True, width=72,
                                                color_system=None))
    result = runner.invoke(app, ["results", str(store["out"])])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 72
    header = next(line for line in lines if "best val" in line)
    assert all(h in header for h in ("#", "state", "final val", "params", "FLOPs/tok"))
    assert "d_model" not in header
    shown = " ".join(result.output.split())
    assert "not shown (terminal too narrow): reason, d_model, lr;" in shown


def test_cli_results_unknown_study_exits_2(store, monkeypatch):
    monkeypatch.chdir(store["root"])
    result = runner.invoke(app, ["results", "missing-study"])
    assert result.exit_code == 2
    assert "missing-study" in result.output


def fetch_json(url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.server
@pytest.mark.slow
def test_cli_ui_serves_the_study_runs(store, tmp_path, monkeypatch):
    port = free_port()
    opened = tmp_path / "opened.txt"  # --open hands the URL to $BROWSER, here a script
    monkeypatch.setenv("BROWSER", f"{sys.executable} -c \"import sys; "
                       f"open({str(opened)!r}, 'w').write(sys.argv[1])\" %s")
    result = runner.invoke(app, ["ui", str(store["out"]), "--port", str(port), "--no-block",
                                 "--open"])
    assert result.exit_code == 0, result.output
    pid = int(re.search(r"server pid (\d+)", result.output).group(1))
    try:
        url = f"http://127.0.0.1:{port}"
        experiment_id = store["tracker"].experiment_id
        # the study's saved view of its trials, in the model-training layout
        page = (f"{url}/#/experiments/{experiment_id}/runs?viewStateShareKey=sweep-trials"
                "&workflowType=machine_learning")
        assert page in result.output
        assert opened.read_text() == page
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
            assert response.status == 200
        experiments = fetch_json(f"{url}/api/2.0/mlflow/experiments/search", {"max_results": 10})
        assert "demo" in [e["name"] for e in experiments["experiments"]]
        runs = fetch_json(f"{url}/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment_id]})
        names = sorted(r["info"]["run_name"] for r in runs["runs"])
        assert names == sorted(["demo"] + [f"trial-{n}" for n in TRIALS])
    finally:
        os.killpg(pid, signal.SIGTERM)
    # A second server on a port in use is refused before it starts.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        result = runner.invoke(app, ["ui", str(store["out"]), "--port", str(taken), "--no-block"])
    assert result.exit_code == 2 and str(taken) in result.output


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_cli_ui_stops_its_server_on_sigterm_and_sighup(store, sig):
    """`timeout 60 sweep ui` (SIGTERM) or a closed terminal (SIGHUP) leaves no server behind."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sweep.cli", "ui", str(store["out"]),
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()  # printed once the server answers
        assert f"http://127.0.0.1:{port}/#/experiments/" in first, first
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
            assert response.status == 200
        proc.send_signal(sig)  # to the command only, as timeout(1) or a terminal sends it
        rest = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0 and f"stopped the MLflow UI ({sig.name})" in rest, rest
    with socket.socket() as probe:  # nothing answers on the port any more
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_cli_ui_without_a_store_exits_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["ui", "--no-block"])
    assert result.exit_code == 2 and "./runs" in result.output
    result = runner.invoke(app, ["ui", "nosuch", "--no-block"])
    assert result.exit_code == 2 and "nosuch" in result.output


def test_results_refuses_a_sqlite_file_that_is_not_an_mlflow_store(tmp_path):
    import sqlite3

    db = tmp_path / "mydata.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    before = db.read_bytes()
    result = CliRunner().invoke(app, ["results", str(db)])
    assert result.exit_code == 2 and "not an MLflow tracking store" in result.output
    assert db.read_bytes() == before


def test_results_csv_to_a_missing_folder_exits_2(store, tmp_path):
    result = CliRunner().invoke(app, ["results", str(store["out"]), "--csv",
                                      str(tmp_path / "missing" / "x.csv")])
    assert result.exit_code == 2 and "--csv" in result.output


# ---------------------------------------------------------------- the unigram baseline
BASELINE = 2.5  # nats/token, as a study's driver logs it from its corpus


@pytest.fixture(scope="module")
def byte_store(tmp_path_factory, new_store):
    """A study on a byte-level corpus: the parent logged the baseline, trials ``val_bpb``."""
    out = tmp_path_factory.mktemp("bytes") / "runs" / "bytes"
    new_store(out)
    tracker = StudyTracker.start(default_tracking_uri(out), "bytes", SPEC, executor="optuna",
                                 algorithm="random")
    tracker.log_baseline(BASELINE)
    for n, losses in ((0, [2.2, 2.0]), (1, [2.4, 1.5])):
        with tracker.start_trial(n, {"model": {"d_model": 32}, "train": {"lr": 1e-3}}) as run:
            for step, loss in enumerate(losses, start=1):
                run.report(100 * step, {"val_loss": loss, "val_bpb": loss / math.log(2)})
            run.log_result({"state": "COMPLETE", "tokens": 200, "final_val_loss": losses[-1]})
    return out


def test_load_results_carries_the_baseline_and_bits_per_byte(byte_store, store):
    frame = load_results(byte_store)
    assert frame.attrs["baseline_unigram_loss"] == BASELINE
    assert "nats per token" in frame.attrs["baseline_about"]
    assert frame.attrs["byte_level"] is True
    assert frame["loss_over_baseline"].tolist() == [1.5 / BASELINE, 2.0 / BASELINE]
    assert frame["best_val_bpb"].tolist() == [1.5 / math.log(2), 2.0 / math.log(2)]
    # A study that logged no baseline, on a corpus that is not byte-level: NaN, said so.
    plain = load_results(store["out"])
    assert math.isnan(plain.attrs["baseline_unigram_loss"]) and plain.attrs["byte_level"] is False
    assert plain["loss_over_baseline"].isna().all() and plain["best_val_bpb"].isna().all()


def test_cli_results_shows_loss_over_baseline_and_bpb(byte_store, store):
    result = runner.invoke(app, ["results", str(byte_store)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "unigram baseline 2.5000 nats/token (3.6067 bits/byte)" in text
    header = next(line for line in result.output.splitlines() if "best val" in line)
    assert "loss / baseline" in header and "bpb" in header
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in result.output.splitlines()
            if "COMPLETE" in line]
    # trial, state, best val, loss / baseline (1.5 / 2.5), bpb (1.5 / ln 2), final val, ...
    assert [r[:6] for r in rows] == [["1", "COMPLETE", "1.5", "0.6", "2.164", "1.5"],
                                     ["0", "COMPLETE", "2", "0.8", "2.885", "2"]]
    result = runner.invoke(app, ["results", str(store["out"])], env={"COLUMNS": "200"})
    assert "loss / baseline" not in result.output and "bpb" not in result.output


def _curves(ax, *, lines_only=False):
    """Trial curves drawn: solid lines (the best trial's) and the others' collection."""
    solid = sum(1 for line in ax.get_lines() if line.get_linestyle() == "-")
    return solid if lines_only else solid + sum(len(c.get_segments()) for c in ax.collections)


def test_val_loss_curves_draw_the_baseline_dashed(byte_store):
    from sweep.results import study_figures
    from sweep.tracking import val_loss_histories

    frame = load_results(byte_store)
    histories = val_loss_histories(frame.attrs["tracking_uri"], frame["run_id"])
    figures = study_figures(frame, histories)
    try:
        ax = figures["val_loss_curves"].axes[0]
        dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert len(dashed) == 1 and list(dashed[0].get_ydata()) == [BASELINE, BASELINE]
        assert "unigram baseline 2.500" in [t.get_text() for t in ax.get_legend().get_texts()]
        assert _curves(ax) == 2 and len(ax.get_lines()) - _curves(ax, lines_only=True) == 1
    finally:
        from sweep.results import close_figures

        close_figures(figures)
    frame.attrs["baseline_unigram_loss"] = math.nan
    figures = study_figures(frame, histories)
    try:
        ax = figures["val_loss_curves"].axes[0]
        assert all(line.get_linestyle() == "-" for line in ax.get_lines())
        assert _curves(ax) == 2  # the two trials' curves, no baseline
    finally:
        close_figures(figures)


def test_the_end_of_run_table_has_the_loss_over_baseline_column(byte_store, capsys):
    """``sweep run``'s closing table shows the loss over the baseline as ``sweep results``."""
    from sweep.cli.study import _print_top_trials
    from sweep.study.driver import StudySummary

    summary = StudySummary(name="bytes", out_dir=byte_store,
                           tracking_uri=default_tracking_uri(byte_store), parent_run_id="-",
                           state="COMPLETE", counts={"COMPLETE": 2}, best_val_loss=1.5,
                           best_trial=1, baseline_unigram_loss=BASELINE)
    _print_top_trials(summary, "bytes")
    out = capsys.readouterr().out
    head = out.split("┡", 1)[0]  # the header, its words wrapped onto two lines at 80 columns
    assert "loss /" in head and "baseline" in head, out
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()
            if "COMPLETE" in line]
    # trial, state, best val_loss, loss / baseline (1.5 / 2.5), n_params (not logged here)
    assert [r[:5] for r in rows] == [["1", "COMPLETE", "1.5000", "0.6000", "-"],
                                     ["0", "COMPLETE", "2.0000", "0.8000", "-"]]
