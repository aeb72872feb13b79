"""Store files a study finds in place: recognised as Optuna's or MLflow's, else refused.

A study never writes to a file it did not create or recognise. An existing Optuna storage file
(``search.storage`` as a journal path, or a ``sqlite:///`` file; default
``<out>/optuna.journal``) must be empty or an Optuna journal (its first line a journal record),
or a SQLite database with Optuna's tables (``studies``, ``version_info``) or none. An existing
MLflow SQLite store (``tracking.uri`` or ``MLFLOW_TRACKING_URI`` as ``sqlite:///``; default
``<out>/mlflow.db``) must be empty, a SQLite database with no tables, or an MLflow store
(`sweep.store_files.mlflow_store_problem`, the check every command that opens a store makes).
The two may not be one file. Files are only read: SQLite databases are opened read-only
(``mode=ro``), so their bytes and mtime stay as they are.
"""

from __future__ import annotations

import os
from pathlib import Path

from sweep.folder import StudyFolder
from sweep.spec import StudySpec
from sweep.store_files import (
    OPTUNA_TABLES,
    mlflow_store_problem,
    optuna_storage_problem,
    sqlite_file,
    sqlite_tables,
)

__all__ = ["sqlite_file", "store_problem"]


def store_problem(spec: StudySpec, out: Path | None = None) -> str | None:
    """Why a store file that exists is not what the study would write there; None if none is.

    A study never writes to a file it did not create or recognise. An existing Optuna storage
    file (``search.storage`` as a journal path, or a ``sqlite:///`` file; default
    ``<out>/optuna.journal``) must be empty or an Optuna journal (its first line a journal
    record), or a SQLite database with Optuna's tables (``studies``, ``version_info``) or none.
    An existing MLflow SQLite store (``tracking.uri`` or ``MLFLOW_TRACKING_URI`` as
    ``sqlite:///``; default ``<out>/mlflow.db``) must be empty, hold no tables, or be an MLflow
    store (`sweep.store_files.mlflow_store_problem`). The two may not be one file. Files are
    only read: SQLite databases are opened read-only (``mode=ro``), so their bytes and mtime
    stay as they are. Files that do not exist yet, RDB servers and tracking servers are not checked
    here (`preflight` connects to them).

    Args:
        spec: The study spec.
        out: The study's output folder (``--out``, default ``./runs/<name>``), which holds
            the default stores; None (``sweep validate``) checks only the files the spec or
            ``MLFLOW_TRACKING_URI`` names.

    Returns:
        One line naming ``search.storage`` or the tracking URI's source, the file and what it
        is; None when every existing store file is one the study may use.
    """
    storage = spec.search.storage or (str(StudyFolder(out).journal) if out is not None else None)
    storage_source = ("search.storage" if spec.search.storage
                      else f"search.storage (default, in --out {out})")
    tracking = spec.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")
    tracking_source = spec.tracking_uri_source() if tracking else f"--out {out}"
    tracking_file = (sqlite_file(tracking) if tracking
                     else StudyFolder(out).mlflow_db if out is not None else None)
    if storage is None:
        storage_file, journal = None, False
    elif "://" not in storage:
        storage_file, journal = Path(storage), True
    else:
        storage_file, journal = sqlite_file(storage), False
    if (storage_file is not None and tracking_file is not None
            and os.path.abspath(storage_file) == os.path.abspath(tracking_file)):
        return (f"{storage_source} and {tracking_source} name one file, {storage_file}; Optuna "
                "and MLflow each need a store of their own")
    if storage_file is not None and storage_file.exists():
        problem = optuna_storage_problem(storage_file, journal=journal, new_ok=True)
        if problem is not None:
            tables = None if storage_file.is_dir() else sqlite_tables(storage_file)
            hint = (f"; for an Optuna SQLite storage write sqlite:///{storage_file}"
                    if journal and tables is not None and OPTUNA_TABLES <= tables else
                    "; point it at a new file, or at an Optuna storage")
            return (f"{storage_source} {storage}: {problem}; the study writes only to a "
                    f"storage it created or recognises, and leaves this file as it is{hint}")
    if tracking_file is not None and tracking_file.exists():
        problem = mlflow_store_problem(tracking_file, new_ok=True)
        if problem is not None:
            return (
                f"{tracking_source} sqlite:///{tracking_file}: {problem}; the study writes only "
                "to a store it created or recognises, and leaves this file as it is; point the "
                "tracking URI at a new file, or at an MLflow store")
    return None
