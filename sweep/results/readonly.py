"""An Optuna storage opened for reading only, for `sweep dashboard`.

optuna-dashboard (0.21) has no read-only mode: its API renames and deletes studies, writes
notes, tells trials and sets user attributes through the storage it is given. So the dashboard
gets `ReadOnlyStorage`, which hands every read to the real storage and refuses every write
(`ReadOnlyError`, or the error its caller names: the dashboard's is an HTTP 403 with the
reason); nothing is written. A journal
file is also opened without write access at all (`ReadOnlyJournal`: no file created, no lock
taken), so a live study's workers are never blocked by the dashboard. Imported on first use by
`sweep.results.dashboard`, so ``import sweep.results`` loads no Optuna.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optuna.storages import BaseStorage
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend, JournalStorage

from sweep.store_files import is_optuna_journal, read_only_url, sqlite_file

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.study import StudyDirection
    from optuna.trial import FrozenTrial, TrialState

    from sweep.adapters.optuna import FrozenStudy


class ReadOnlyError(PermissionError):
    """A write to a storage opened read-only (`sweep dashboard` without ``--allow-writes``)."""


def _reason(what: str) -> str:
    return (f"cannot {what}: the storage is open read-only (sweep dashboard --allow-writes "
            "opens it for writing)")


class ReadOnlyJournal(BaseJournalBackend):
    """An Optuna journal file read as it grows (while its study runs), never written.

    Args:
        path: An existing journal file (`JournalFileBackend`'s format).

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: Its first line is not an Optuna journal record
            (`sweep.store_files.is_optuna_journal`); Optuna itself would read such a file as
            an empty journal.
    """

    def __init__(self, path: str | Path) -> None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no journal file {path}")
        if not is_optuna_journal(Path(path)):
            raise ValueError(f"{path} is not an Optuna journal (its first line is no "
                             "journal record)")
        # JournalFileBackend writes only in append_logs (and creates a missing file, which
        # cannot happen here); its reading is the one to reuse, offsets cached and all.
        self._file = JournalFileBackend(str(path))

    def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
        return self._file.read_logs(log_number_from)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        raise ReadOnlyError(_reason("append to the journal"))


def open_read_only(url: str, refuse: Callable[[str], Exception] = ReadOnlyError
                   ) -> ReadOnlyStorage:
    """The Optuna storage at ``url`` (a journal file path or an RDB URL), read-only.

    ``refuse`` makes the exception a write raises from its reason (`ReadOnlyStorage`).

    Raises:
        FileNotFoundError: A journal path that is not a file.
        ValueError: A file that is not an Optuna journal.
        sqlalchemy.exc.SQLAlchemyError: An RDB that cannot be read.
    """
    if "://" in url:
        from optuna.storages import RDBStorage

        # No table creation: an RDB that holds no Optuna tables is refused, not initialised;
        # a SQLite file is opened read-only besides.
        path = sqlite_file(url)
        opened = read_only_url(path) if path is not None else url
        return ReadOnlyStorage(RDBStorage(opened, skip_table_creation=True), refuse)
    return ReadOnlyStorage(JournalStorage(ReadOnlyJournal(url)), refuse)


class ReadOnlyStorage(BaseStorage):
    """A storage's reads, with every write refused.

    Args:
        storage: The storage to read.
        refuse: Makes the exception a write raises from its reason (default `ReadOnlyError`).
    """

    def __init__(self, storage: BaseStorage,
                 refuse: Callable[[str], Exception] = ReadOnlyError) -> None:
        self._wrapped = storage
        self._refuse = lambda what: refuse(_reason(what))

    # ------------------------------------------------------------------ writes: refused
    def create_new_study(self, directions: Sequence[StudyDirection],
                         study_name: str | None = None) -> int:
        raise self._refuse("create a study")

    def delete_study(self, study_id: int) -> None:
        raise self._refuse("delete a study")

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        raise self._refuse("set a study attribute")

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        raise self._refuse("set a study attribute (a note)")

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        raise self._refuse("create a trial")

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                        distribution: BaseDistribution) -> None:
        raise self._refuse("set a trial parameter")

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        raise self._refuse("tell a trial")

    def set_trial_intermediate_value(self, trial_id: int, step: int,
                                     intermediate_value: float) -> None:
        raise self._refuse("report a trial's value")

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        raise self._refuse("set a trial attribute")

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        raise self._refuse("set a trial attribute (a note)")

    # -------------------------------------------------------------------- reads: handed on
    def get_study_id_from_name(self, study_name: str) -> int:
        return self._wrapped.get_study_id_from_name(study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._wrapped.get_study_name_from_id(study_id)

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self._wrapped.get_study_directions(study_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._wrapped.get_study_user_attrs(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._wrapped.get_study_system_attrs(study_id)

    def get_all_studies(self) -> list[FrozenStudy]:
        return self._wrapped.get_all_studies()

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._wrapped.get_trial(trial_id)

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._wrapped.get_all_trials(study_id, deepcopy=deepcopy, states=states)

    def get_n_trials(self, study_id: int,
                     state: tuple[TrialState, ...] | TrialState | None = None) -> int:
        return self._wrapped.get_n_trials(study_id, state)

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        return self._wrapped.get_best_trial(study_id)

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self._wrapped.get_trial_id_from_study_id_trial_number(study_id, trial_number)

    def get_trial_number_from_id(self, trial_id: int) -> int:
        return self._wrapped.get_trial_number_from_id(trial_id)

    def remove_session(self) -> None:
        self._wrapped.remove_session()
