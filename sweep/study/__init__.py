"""A study.

The one trial path every executor runs, the driver behind ``sweep run``, its preflight checks and
its live progress view.
"""

from sweep.study.driver import StudySummary, algorithm_name, run_study, with_overrides
from sweep.study.preflight import PreflightError, preflight
from sweep.study.progress import ProgressView, TrialRow, format_params
from sweep.study.summary import finish_study
from sweep.study.trial import (
    OpenTrial,
    StudyContext,
    TrialOutcome,
    evaluate,
    objective_values,
    open_trial,
    train_trial,
)

__all__ = [
    "OpenTrial",
    "PreflightError",
    "ProgressView",
    "StudyContext",
    "StudySummary",
    "TrialOutcome",
    "TrialRow",
    "algorithm_name",
    "evaluate",
    "finish_study",
    "format_params",
    "objective_values",
    "open_trial",
    "preflight",
    "train_trial",
    "run_study",
    "with_overrides",
]
