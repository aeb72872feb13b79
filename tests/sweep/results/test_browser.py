"""The MLflow UI a researcher lands on, in a real headless Chromium (Debian's ``chromium``).

A tiny study runs (trials trained to their end, pruned, and infeasible ones over
``max_params``; ``d_head`` and ``d_ff_ratio`` searched), `sweep ui` serves its store, and
Playwright drives the system browser through the printed URL: the landing page is the study's
saved view, one row per trial with its state, val_loss, n_params and the searched params; then
a trial's page with its cost metrics and its ``val_loss`` chart against tokens, the parent's
summary and its artifacts. Each page is saved as a screenshot in ``$SWEEP_BROWSER_ARTIFACTS``
(default: the test's tmp folder), which the test prints.
"""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.tracking import read_trials

CHROMIUM = Path("/usr/bin/chromium")
# Chromium as a test runs it: no GPU, no network of its own (updates, sync, QUIC), no first-run UI.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 90_000  # the UI's scripts load slowly on a busy 2-core machine
SPEC = {
    "name": "browser-study",
    "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=60000",
    "model": {"vocab_size": 16, "seq_len": 32, "d_model": {"choice": [16, 32]},
              "d_head": {"choice": [8, 16]}, "d_ff_ratio": {"choice": [2.0, 4.0]}, "n_layers": 1},
    "train": {"tokens": 12288, "batch_size": 8, "lr": {"float": [1e-3, 3e-2], "log": True},
              "eval_every": 2048, "eval_tokens": 1024},
    "constraints": {"max_params": 9000},  # d_model 32 is over it: INFEASIBLE
    # the median rule from the first completed trial and the first evaluation: PRUNED trials
    "search": {"executor": "optuna", "sampler": "random", "pruner": "median", "n_trials": 6,
               "n_startup_trials": 1, "prune_warmup": 0.0, "seed": 0},
}
SEARCHED = ("model.d_model", "model.d_head", "model.d_ff_ratio", "train.lr")


@pytest.fixture(scope="module")
def study(tmp_path_factory, new_store):
    out = tmp_path_factory.mktemp("browser") / "browser-study"
    new_store(out)
    summary = run_study(parse_spec(SPEC), out_dir=out, quiet=True)
    trials = read_trials(summary.tracking_uri, *_ids(summary))
    return {"out": out, "summary": summary, "trials": {t["trial"]: t for t in trials}}


def _ids(summary):
    parent = MlflowClient(summary.tracking_uri).get_run(summary.parent_run_id)
    return parent.info.experiment_id, summary.parent_run_id


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    """Debian's Chromium, headless, with a new empty profile, driven by Playwright."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM),
            headless=True, args=CHROMIUM_ARGS, viewport={"width": 1920, "height": 1080})
        context.set_default_timeout(TIMEOUT_MS)
        yield context
        context.close()


@pytest.fixture(scope="module")
def ui_url(study):
    """`sweep ui` on the study's folder, as a user runs it (blocking, stopped by SIGTERM)."""
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "sweep.cli", "ui", str(study["out"]),
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/\S+)", line)
        assert match, line
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    folder = Path(os.environ.get("SWEEP_BROWSER_ARTIFACTS")
                  or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _rows(page):
    """``{run name: {col-id: text}}`` of the runs table's rows (ag-grid splits a row in two:
    pinned name columns and the rest, joined by ``row-index``)."""
    by_index = {}
    for row in page.locator("[role=row][row-index]").all():
        cells = by_index.setdefault(row.get_attribute("row-index"), {})
        for cell in row.locator("[role=gridcell][col-id]").all():
            cells[cell.get_attribute("col-id")] = cell.inner_text().strip()
    return {cells["attributes.`Run Name`"].split("\n")[-1]: cells for cells in by_index.values()
            if "attributes.`Run Name`" in cells}


def _shot(page, folder, name, capsys):
    path = folder / name
    page.screenshot(path=str(path))
    with capsys.disabled():
        print(f"\nscreenshot: {path}")


@pytest.mark.browser
@pytest.mark.server
@pytest.mark.slow
def test_mlflow_ui_shows_the_study_as_a_researcher_needs_it(study, chromium, ui_url, shots,
                                                            capsys):
    summary, trials = study["summary"], study["trials"]
    counts = summary.counts
    assert counts["COMPLETE"] >= 1 and counts["PRUNED"] >= 1 and counts["INFEASIBLE"] >= 1, counts
    experiment_id, parent_id = _ids(summary)
    base = ui_url.split("/#/")[0]
    assert ui_url == (f"{base}/#/experiments/{experiment_id}/runs?viewStateShareKey=sweep-trials"
                      "&workflowType=machine_learning")
    page = chromium.new_page()

    # The landing page: the study's trials, one row each (the parent is filtered out), best
    # first, with their state, losses, size and searched params in view.
    page.goto(ui_url)
    name_cells = page.locator("[role=gridcell][col-id='attributes.`Run Name`']")
    name_cells.first.wait_for()
    page.get_by_role("button", name="Close", exact=True).click()  # the assistant, first visit
    for n in trials:
        name_cells.filter(has=page.get_by_role("link", name=f"trial-{n}", exact=True)).wait_for()
    assert name_cells.count() == len(trials)
    assert name_cells.filter(has_text="browser-study").count() == 0  # no parent row
    headers = page.locator("[role=columnheader]").all_inner_texts()
    for header in ("Description", "best_val_loss", "final_val_loss", "n_params",
                   "flops_per_token", *SEARCHED):
        assert header in headers, (header, headers)
    rows = _rows(page)
    assert set(rows) == {f"trial-{n}" for n in trials}
    for n, trial in trials.items():
        cells = rows[f"trial-{n}"]
        state = trial["state"].value
        assert cells["attributes.`Description`"].startswith(state), cells
        assert cells["metrics.`n_params`"] == f"{trial['metrics']['n_params']:.0f}"
        for name in SEARCHED:
            assert cells[f"params.`{name}`"] == str(trial["params"][name]), (name, cells)
        best = trial["metrics"].get("best_val_loss")
        if best is None:  # INFEASIBLE: never trained
            assert cells["metrics.`best_val_loss`"] == "-"
        else:
            assert float(cells["metrics.`best_val_loss`"]) == pytest.approx(best, rel=1e-6)
    # Pruned and complete trials differ at a glance: "PRUNED at 2,048 tokens" beside the name.
    descriptions = {c["attributes.`Description`"].split(" ")[0].split(":")[0]
                    for c in rows.values()}
    assert {"COMPLETE", "PRUNED", "INFEASIBLE"} <= descriptions, descriptions
    _shot(page, shots, "01-landing-trials.png", capsys)

    # A trial's page: its cost metrics, then its val_loss chart (a line against the step).
    best = summary.best_trial
    page.get_by_role("link", name=f"trial-{best}", exact=True).click()
    page.wait_for_url(re.compile(rf"/runs/{trials[best]['run_id']}"))
    for metric in ("n_params", "flops_per_token", "mem_estimate_bytes"):
        page.get_by_role("link", name=metric, exact=True).wait_for()
    # ... in the model-training layout, though the table's link has no workflowType: the side
    # bar lists the experiment's runs, not GenAI's evaluation runs (sweep.tracking.ui_app).
    assert "workflowType" not in page.url
    assert page.evaluate("localStorage.getItem('mlflow.workflowType_v1')") == '"machine_learning"'
    page.get_by_role("link", name="Runs", exact=True).first.wait_for()
    assert page.get_by_role("link", name="Evaluation runs", exact=True).count() == 0
    _shot(page, shots, "02-trial-overview.png", capsys)
    page.get_by_role("tab", name="Model metrics", exact=True).click()
    page.get_by_placeholder("Search metric charts").fill("val_loss")
    page.get_by_text("val_loss", exact=True).wait_for()
    page.get_by_text(f"trial-{best} (val_loss)", exact=True).wait_for()  # a line's legend
    page.locator(".js-plotly-plot").first.wait_for()
    _shot(page, shots, "03-trial-val-loss-chart.png", capsys)

    # The study's charts: val_loss of every trained trial against the metric tokens.
    page.goto(ui_url)
    name_cells.first.wait_for()
    page.locator("label:has(input[value=CHART])").click()  # the table/charts switch
    page.get_by_placeholder(re.compile("Search metric charts")).fill("val_loss")
    page.locator(".js-plotly-plot").first.wait_for()
    page.get_by_text("tokens", exact=True).first.wait_for()  # the x axis's title
    _shot(page, shots, "06-study-charts-against-tokens.png", capsys)

    # The parent's page: its summary (the description), then its artifacts with the plots.
    page.goto(f"{base}/#/experiments/{experiment_id}/runs/{parent_id}"
              "?workflowType=machine_learning")
    page.get_by_text(re.compile(rf"^best trial: trial-{best}, best val loss")).wait_for()
    page.get_by_text(re.compile(r"x the unigram baseline")).first.wait_for()
    _shot(page, shots, "04-parent-summary.png", capsys)
    page.goto(f"{base}/#/experiments/{experiment_id}/runs/{parent_id}/artifacts"
              "?workflowType=machine_learning")
    page.get_by_text("plots", exact=True).first.click()
    for plot in ("val_loss_curves.png", "optimization_history.png"):
        page.get_by_text(plot, exact=True).first.wait_for()
    page.get_by_text("val_loss_curves.png", exact=True).first.click()
    page.get_by_text("plots/val_loss_curves.png", exact=True).wait_for()  # the preview's title
    page.locator("img[src^='blob:']").first.wait_for()  # the plot itself, shown
    _shot(page, shots, "05-parent-artifacts-plots.png", capsys)
