"""The runs table MLflow's UI opens on for a study: its trials, with what a researcher compares.

MLflow 3's runs page keeps its state (columns, sort, filter, chart axes) in the browser, and
takes a few search settings from the URL: ``searchFilter``, ``orderByKey``, ``orderByAsc``
(read in ``mlflow/server/js``, MLflow 3.17). A saved view, experiment tag
``mlflow.sharedViewState.<key>`` holding the state as JSON, sets the rest: ``selectedColumns``
(``metrics.`n_params```, ``params.`model.d_head```, ``tags.`sweep.state```) and
``globalLineChartConfig`` (x axis ``metric`` = ``tokens``, so the charts label their x axis
``tokens``); ``?viewStateShareKey=<key>`` opens it. The UI ignores ``runsExpanded`` from a
saved view, so the view filters to the parent's child runs, which the table then lists flat,
one row per trial.

`study_view` is the view, a pure function; `save_view` writes it at a study's start, so
``sweep ui`` (which serves the store read-only) finds it; `landing_query` is the URL query of
a study's runs table, the saved view where the study has one, else the filter and sort alone.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from mlflow import MlflowClient
from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

from sweep.schema import (
    METRIC_BEST_VAL_LOSS,
    METRIC_FINAL_VAL_LOSS,
    METRIC_FLOPS_PER_TOKEN,
    METRIC_N_PARAMS,
    METRIC_TOKENS,
    TAG_STATE,
    TAG_VIEW_PREFIX,
    UI_MODEL_TRAINING,
    VIEW_KEY,
)

#: The columns every study's view shows, by MLflow's groups (attributes, metrics, params,
#: tags): the run's description beside its name, its state and why
#: (`sweep.tracking.notes.trial_note`: ``PRUNED at 2,048 tokens``, where the status icon shows
#: PRUNED and COMPLETE alike as finished), the losses, the size and cost per token; the
#: searched params follow, then tag ``sweep.state``. Few enough that the searched params are in
#: view on a 1920-pixel screen (the columns are drawn only when in view).
LEAD_COLUMNS = (
    "attributes.`Description`",
    f"metrics.`{METRIC_BEST_VAL_LOSS}`",
    f"metrics.`{METRIC_FINAL_VAL_LOSS}`",
    f"metrics.`{METRIC_N_PARAMS}`",
    f"metrics.`{METRIC_FLOPS_PER_TOKEN}`",
)


def children_filter(parent_run_id: str) -> str:
    """The MLflow search filter of a parent run's child runs (the study's trials)."""
    return f"tags.`mlflow.parentRunId` = '{parent_run_id}'"


def study_view(parent_run_id: str, searched: Sequence[str] = ()) -> dict[str, Any]:
    """The saved view of a study's trials: one row per trial, best first, columns that matter.

    Args:
        parent_run_id: The study's parent run; the view lists its child runs.
        searched: The searched params' dotted names (``model.d_head``, ``train.lr``).

    Returns:
        The view as MLflow's runs page stores it (search settings and UI state).
    """
    columns = [*LEAD_COLUMNS, *(f"params.`{name}`" for name in searched), f"tags.`{TAG_STATE}`"]
    return {
        "searchFilter": children_filter(parent_run_id),
        "orderByKey": f"metrics.`{METRIC_BEST_VAL_LOSS}`",
        "orderByAsc": True,
        "selectedColumns": columns,
        "globalLineChartConfig": {"xAxisKey": "metric", "selectedXAxisMetricKey": METRIC_TOKENS,
                                  "lineSmoothness": 0},
        "viewMaximized": False,
        "runListHidden": False,
    }


def save_view(client: MlflowClient, experiment_id: str, parent_run_id: str,
              searched: Sequence[str] = ()) -> None:
    """Write `study_view` as the experiment's saved view `VIEW_KEY` (replacing an older one).

    A view longer than MLflow's tag limit (thousands of searched params) keeps the lead columns
    and as many searched params as fit.
    """
    names = list(searched)
    while True:
        text = json.dumps(study_view(parent_run_id, names), separators=(",", ":"))
        if len(text) <= MAX_TAG_VAL_LENGTH or not names:
            break
        names.pop()
    client.set_experiment_tag(experiment_id, TAG_VIEW_PREFIX + VIEW_KEY, text)


def landing_query(experiment_tags: Mapping[str, str], parent_run_id: str | None) -> str:
    """The URL query of a study's runs table (after ``#/experiments/<id>/runs?``).

    The saved view where the experiment has one (`save_view`), else, for a study from before
    saved views, its trials filtered and sorted by ``best_val_loss`` from the URL alone.
    Always in MLflow's model-training layout (`UI_MODEL_TRAINING`).
    """
    if TAG_VIEW_PREFIX + VIEW_KEY in experiment_tags:
        return f"viewStateShareKey={VIEW_KEY}&{UI_MODEL_TRAINING}"
    if parent_run_id is None:
        return UI_MODEL_TRAINING
    query = urllib.parse.urlencode({"searchFilter": children_filter(parent_run_id),
                                    "orderByKey": f"metrics.`{METRIC_BEST_VAL_LOSS}`",
                                    "orderByAsc": "true"}, quote_via=urllib.parse.quote)
    return f"{query}&{UI_MODEL_TRAINING}"


#: Where ``sweep ui`` serves a study in a folder (its default port): the address a link to a
#: run in a SQLite store is given.
LOCAL_UI = "http://127.0.0.1:5000"


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """A link to a run's page in MLflow's UI, in its model-training layout.

    On a tracking server, the server's address (without credentials); for a store in a study
    folder, `LOCAL_UI`, where ``sweep ui`` serves it by default.
    """
    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme in ("http", "https"):
        netloc = parts.netloc.rsplit("@", 1)[-1]
        base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    else:
        base = LOCAL_UI
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{UI_MODEL_TRAINING}"


def read_landing_query(tracking_uri: str, experiment_id: str, parent_run_id: str | None) -> str:
    """`landing_query` of a study in the store at ``tracking_uri`` (read only)."""
    tags = MlflowClient(tracking_uri).get_experiment(experiment_id).tags
    return landing_query(tags, parent_run_id)
