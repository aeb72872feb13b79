"""Writing and reading a study's MLflow runs; the names themselves live in `sweep.schema`.

`StudyTracker` (``study_run``) is the study's parent run, `TrialContext` (``trial_context``)
opens, attaches, reads and ends its trials' child runs, `TrialRun` (``trial_run``) writes one,
``reader`` reads runs back, ``artifacts`` adds an analysis's files to a run and reads a study's
stored spec, ``uris`` handles store addresses, ``view`` the runs table MLflow's UI opens on.
Every write names its run id explicitly, so trials in threads, processes or Ray workers on
other machines do not collide.
"""

from sweep.spec.resume import ResumeError, check_resume_compatible
from sweep.tracking.artifacts import (
    StoredSpecError,
    log_files,
    log_json,
    read_parent_metrics,
    read_searched,
    read_simulated,
    read_stored_spec,
)
from sweep.tracking.reader import (
    find_study,
    find_trial_run,
    list_studies,
    mutated_params,
    read_trials,
    val_loss_histories,
)
from sweep.tracking.stores import StoreSchemaError, ensure_store
from sweep.tracking.study_run import StudyTracker
from sweep.tracking.trial_context import TrialContext
from sweep.tracking.trial_run import TrialRun
from sweep.tracking.uris import (
    UnreachableStoreError,
    absolute_uri,
    check_reachable,
    default_tracking_uri,
    shown_uri,
)
from sweep.tracking.view import read_landing_query, run_url, save_view, study_view

__all__ = [
    "ResumeError",
    "StoreSchemaError",
    "StoredSpecError",
    "StudyTracker",
    "TrialContext",
    "TrialRun",
    "UnreachableStoreError",
    "absolute_uri",
    "check_reachable",
    "check_resume_compatible",
    "default_tracking_uri",
    "ensure_store",
    "find_study",
    "find_trial_run",
    "list_studies",
    "log_files",
    "log_json",
    "mutated_params",
    "read_landing_query",
    "read_parent_metrics",
    "read_searched",
    "read_simulated",
    "read_stored_spec",
    "read_trials",
    "run_url",
    "save_view",
    "shown_uri",
    "study_view",
    "val_loss_histories",
]
