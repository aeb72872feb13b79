"""A study's folder: what a study writes where, and the one rule for finding a study's store.

``sweep run`` writes everything of a study under its output folder, ``./runs/<name>/`` unless
``--out`` says otherwise (`StudyFolder.default`):

- ``optuna.journal``: the Optuna storage, unless ``search.storage`` names one;
- ``mlflow.db`` (its creation serialised by ``mlflow.db.lock``) and ``mlartifacts/``: the
  default MLflow store, unless ``tracking.uri`` or ``MLFLOW_TRACKING_URI`` names one;
- ``mlflow-buffer/``: a trial's writes kept while the store does not answer;
- ``data/``: the prepared corpus cache; ``checkpoints/``: trial checkpoints
  (``search.checkpoint_interval``); ``branches/``: WSD trunks (``scaling.branches``);
  ``ray/``: Ray Tune's experiments; ``analysis/``: what ``sweep analyze`` writes;
- ``driver.lock``: held by the one ``sweep run`` driving the study (`sweep.study.lock`).

Commands that read a study take "a study name or a folder" (`find_store`): ``PATH`` itself when
it is a store file (``*.db``), ``PATH/mlflow.db``, or ``runs/PATH/mlflow.db``, in that order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LAYOUT", "RUNS", "StudyFolder", "find_store", "missing_store", "store_candidates"]

#: Where studies go unless ``--out`` says otherwise (relative to the working directory).
RUNS = Path("runs")
_MLFLOW_DB = "mlflow.db"


#: What a study writes where, relative to its folder (module docstring).
LAYOUT = {
    "journal": "optuna.journal",
    "mlflow_db": _MLFLOW_DB,
    "artifacts": "mlartifacts",
    "buffer": "mlflow-buffer",
    "data": "data",
    "checkpoints": "checkpoints",
    "branches": "branches",
    "ray": "ray",
    "analysis": "analysis",
    "driver_lock": "driver.lock",
}


@dataclass(frozen=True)
class StudyFolder:
    """The layout of one study's output folder: each entry of `LAYOUT` under ``root``.

    Attributes:
        root: The folder.
    """

    root: Path
    journal: Path = field(init=False, repr=False)
    mlflow_db: Path = field(init=False, repr=False)
    artifacts: Path = field(init=False, repr=False)
    buffer: Path = field(init=False, repr=False)
    data: Path = field(init=False, repr=False)
    checkpoints: Path = field(init=False, repr=False)
    branches: Path = field(init=False, repr=False)
    ray: Path = field(init=False, repr=False)
    analysis: Path = field(init=False, repr=False)
    driver_lock: Path = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name, relative in LAYOUT.items():
            object.__setattr__(self, name, self.root / relative)

    @classmethod
    def default(cls, name: str) -> StudyFolder:
        """``./runs/<name>``: a study's folder unless ``--out`` names one."""
        return cls(RUNS / name)

    def tracking_uri(self) -> str:
        """The default MLflow store: ``sqlite:///<root>/mlflow.db``, the path absolute."""
        return f"sqlite:///{self.mlflow_db.resolve()}"


def store_candidates(study_or_path: str | Path) -> list[Path]:
    """Where a study named or placed at ``study_or_path`` keeps its store, in order."""
    path = Path(study_or_path)
    found = [path, path / _MLFLOW_DB, StudyFolder.default(str(study_or_path)).mlflow_db]
    return list(dict.fromkeys(found))


def find_store(study_or_path: str | Path) -> Path | None:
    """The SQLite store of a study given by name or folder (module docstring), or None."""
    return next((db for db in store_candidates(study_or_path)
                 if db.suffix == ".db" and db.is_file()), None)


def missing_store(study_or_path: str | Path) -> str:
    """The message for a study `find_store` does not find, naming where it looked."""
    stores = [str(db) for db in store_candidates(study_or_path)[1:]]
    if len(stores) == 1:
        return f"no study {str(study_or_path)!r}: {stores[0]} does not exist"
    return f"no study {str(study_or_path)!r}: neither {stores[0]} nor {stores[1]} exists"
