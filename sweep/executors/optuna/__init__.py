"""The Optuna executor.

Trials in this process or ``search.parallel`` worker processes sharing the study's Optuna storage;
other machines join with ``sweep worker``.
"""

from sweep.executors.optuna.executor import reconcile, run, run_worker
from sweep.executors.optuna.journal import JournalError, check_journal
from sweep.executors.optuna.objective import OptunaReporter, create_study
from sweep.executors.optuna.storage import StorageError, check_storage, make_storage, study_exists

__all__ = ["JournalError", "OptunaReporter", "StorageError", "check_journal", "check_storage",
           "create_study", "make_storage", "reconcile", "run", "run_worker", "study_exists"]
