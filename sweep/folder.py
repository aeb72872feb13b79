"""A study's folder: what a study writes where, and the one rule for finding a study's store.

``sweep run`` writes everything of a study under its output folder, ``./runs/<name>/`` unless
``--out`` says otherwise (`StudyFolder.default`):

- ``optuna.journal``: the Optuna storage, unless ``search.storage`` names one;
- ``mlflow.db`` (its creation serialised by ``mlflow.db.lock``) and ``mlartifacts/``: the
  default MLflow store, unless ``tracking.uri`` or ``MLFLOW_TRACKING_URI`` names one;
- ``mlflow-buffer/``: a trial's writes kept while the store does not answer, signed with the
  study's key ``mlflow-buffer.key`` (mode 600, beside it, never in it);
- ``data/``: the prepared corpus cache; ``checkpoints/``: trial checkpoints
  (``search.checkpoint_interval``); ``branches/``: WSD trunks (``scaling.branches``);
  ``ray/``: Ray Tune's experiments; ``analysis/``: what ``sweep analyze`` writes;
  ``lr-law.json``: the law a ``train.lr: {from_study}`` study started with
  (`sweep.spec.from_study`);
- ``driver.lock``: held by the one ``sweep run`` driving the study (`sweep.study.lock`).

Commands that read a study take "a study name or a folder" (`find_store`): ``PATH`` itself when
it is a store file (``*.db``), ``PATH/mlflow.db``, or ``runs/PATH/mlflow.db``, in that order.

Commands that write a study take a folder `out_problem` accepts: never the root, the home folder
or a system folder (`SYSTEM_TREES`, `SYSTEM_FOLDERS`), and a non-empty folder only when it is a
study's (`is_study_folder`) or the user says it is theirs to write into (``--force-out``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

__all__ = ["LAYOUT", "RUNS", "SYSTEM_FOLDERS", "SYSTEM_TREES", "StudyFolder", "find_store",
           "is_study_folder", "missing_store", "out_problem", "store_candidates",
           "system_folder"]

#: Where studies go unless ``--out`` says otherwise (relative to the working directory).
RUNS = Path("runs")
_MLFLOW_DB = "mlflow.db"


#: What a study writes where, relative to its folder (module docstring).
LAYOUT = {
    "journal": "optuna.journal",
    "mlflow_db": _MLFLOW_DB,
    "artifacts": "mlartifacts",
    "buffer": "mlflow-buffer",
    "buffer_key": "mlflow-buffer.key",
    "data": "data",
    "checkpoints": "checkpoints",
    "branches": "branches",
    "ray": "ray",
    "analysis": "analysis",
    "lr_law": "lr-law.json",
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
    buffer_key: Path = field(init=False, repr=False)
    data: Path = field(init=False, repr=False)
    checkpoints: Path = field(init=False, repr=False)
    branches: Path = field(init=False, repr=False)
    ray: Path = field(init=False, repr=False)
    analysis: Path = field(init=False, repr=False)
    lr_law: Path = field(init=False, repr=False)
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


#: Folders that hold the system: a study is written neither into them nor anywhere under them.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                "/run", "/sbin", "/sys", "/usr", "/var/cache", "/var/lib", "/var/log",
                "/var/run", "/var/spool", "/Applications", "/Library", "/System",
                "/private/etc", "/private/var/db", "/private/var/log")
#: Folders that hold other folders: a study goes in a folder of its own under them, never in
#: them directly (the home folder too).
SYSTEM_FOLDERS = ("/", "/home", "/media", "/mnt", "/opt", "/private", "/root", "/srv", "/tmp",
                  "/Users", "/Volumes", "/var")

#: What only a study writes at the top of its folder: its stores and what its trials leave.
_STUDY_MARKS = ("journal", "mlflow_db", "artifacts", "buffer", "checkpoints", "branches", "ray")


def system_folder(path: Path | str, *, resolve: bool = True) -> str | None:
    """Why ``path`` is a system folder no study is written into, or None.

    ``resolve`` follows symbolic links first (a link into ``/etc`` is ``/etc``); a path on
    another machine (``sweep submit --out``) is judged as written.
    """
    where = Path(path).expanduser()
    shown = PurePosixPath(where.resolve() if resolve else Path(os.path.normpath(where)))
    home = {PurePosixPath(Path.home()), PurePosixPath(Path.home().resolve())}
    seen = f" ({shown})" if str(shown) != os.path.normpath(path) else ""
    if str(shown) in SYSTEM_FOLDERS or shown in home:
        return f"the root, a home folder or a folder of folders{seen}; give the study a " \
               "folder of its own under it"
    tree = next((t for t in SYSTEM_TREES if shown == PurePosixPath(t)
                 or PurePosixPath(t) in shown.parents), None)
    if tree is not None:
        return f"{tree} and what is under it belong to the system{seen}; give a folder of " \
               "your own"
    return None


def is_study_folder(path: Path) -> bool:
    """Whether the folder ``path`` holds what only a study writes there.

    One of `LAYOUT`'s stores (``optuna.journal``, ``mlflow.db``, ``mlartifacts``),
    ``mlflow-buffer``, ``checkpoints``, ``branches``, ``ray``, or a prepared corpus
    (``data/corpora``).
    """
    folder = StudyFolder(path)
    return any(getattr(folder, mark).exists() for mark in _STUDY_MARKS) \
        or (folder.data / "corpora").is_dir()


def out_problem(flag: str, path: Path | str, *, force: bool = False) -> str | None:
    """Why a command may not write a study into the folder ``path`` (given as ``flag``), or None.

    Refused: a system folder (`system_folder`), a path that is a file, and, unless ``force``
    (``--force-out``), an existing non-empty folder that is not a study's (`is_study_folder`):
    the study's stores would be written among the user's own files.
    """
    where = Path(path)
    reason = system_folder(where)
    if reason is not None:
        return f"{flag} {path}: {reason}"
    if where.exists() and not where.is_dir():
        return f"{flag} {path}: is a file, not a folder"
    if force or not where.is_dir() or is_study_folder(where):
        return None
    try:
        empty = next(os.scandir(where), None) is None
    except OSError as exc:
        return f"{flag} {path}: {exc.strerror or exc}"
    if empty:
        return None
    return (f"{flag} {path}: holds files that are not a study's (no optuna.journal, mlflow.db "
            "or prepared corpus); give a new or empty folder, a study's folder, or add "
            "--force-out to write the study among these files")
