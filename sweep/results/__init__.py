"""Results of a study read back from MLflow: a pandas table, the study's plots, the MLflow UI.

`load_results` gives one row per trial for scripted analyses (with the corpus's unigram baseline
in its ``attrs``); `study_figures` draws the plots
the parent run keeps; `start_ui` serves a study's store with ``mlflow server`` on 127.0.0.1
(`runs_view_url`: the page to open), `stop_signals` stops it on SIGINT, SIGTERM or SIGHUP.
"""

from sweep.results.plots import close_figures, study_figures
from sweep.results.table import (
    BASELINE_ABOUT,
    BEST_VAL_BPB,
    LEAD_COLUMNS,
    LOSS_OVER_BASELINE,
    StudyNotFoundError,
    load_results,
    read_baseline,
    read_study,
    resolve_study,
    trials_frame,
)
from sweep.results.ui import (
    STOP_SIGNALS,
    Stopped,
    runs_view_url,
    start_ui,
    stop_signals,
    stop_ui,
    ui_command,
)

__all__ = [
    "BASELINE_ABOUT",
    "BEST_VAL_BPB",
    "LEAD_COLUMNS",
    "LOSS_OVER_BASELINE",
    "STOP_SIGNALS",
    "Stopped",
    "StudyNotFoundError",
    "close_figures",
    "load_results",
    "read_baseline",
    "read_study",
    "resolve_study",
    "runs_view_url",
    "start_ui",
    "stop_signals",
    "stop_ui",
    "study_figures",
    "trials_frame",
    "ui_command",
]
