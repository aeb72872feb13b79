"""What the analysis commands (``sweep analyze ...``, each a study kind's) share.

Finding a study's local store before MLflow is imported, reading the spec it stored, the output
folder (``<study dir>/analysis`` by default) and the closing lines saying what was written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweep.cli import common
from sweep.cli.common import as_bad_input, bad_input
from sweep.folder import StudyFolder, find_store, missing_store, system_folder

__all__ = ["check_local_store", "default_out", "draw_figure", "log_analysis", "out_folder",
           "print_done", "read_analysed_study", "study_spec"]


def check_local_store(study: str) -> None:
    """Exit 2 when no local store can hold ``study``, before MLflow is imported.

    The same places `sweep.results.resolve_study` looks without a tracking URI.
    """
    if find_store(study) is None:
        bad_input(missing_store(study))


def read_analysed_study(study: str, tracking_uri: str | None) -> tuple[Any, dict[str, Any]]:
    """`sweep.results.read_study`'s trials and attributes; a study that is not there exits 2.

    Without a tracking URI the local store is found first (`check_local_store`).
    """
    if tracking_uri is None:
        check_local_store(study)
    from sweep.results import StudyNotFoundError, read_study
    from sweep.tracking import UnreachableStoreError

    try:
        return read_study(study, tracking_uri)
    except (StudyNotFoundError, UnreachableStoreError) as exc:
        bad_input(str(exc))


def draw_figure(out: str | None, points: Any, study: str, name: str,
                draw: Callable[[Path], Any]) -> Path:
    """``draw(path)`` into ``name`` in the output folder (`out_folder`); its path.

    Exits 2 when the folder or the file cannot be written.
    """
    folder = out_folder(out, points, study)
    path = folder / name
    try:
        draw(path)
    except OSError as exc:
        bad_input(f"--out {folder}: {exc.strerror or exc}")
    return path


def default_out(points: Any, study: str | None) -> Path:
    """``<study dir>/analysis``: the folder of the study's SQLite store; ``./analysis`` for CSV."""
    if study is None:
        return Path("analysis")
    from sweep.tracking.uris import sqlite_path

    db = sqlite_path(points.attrs["tracking_uri"])
    folder = StudyFolder(db.parent) if db is not None else StudyFolder.default(
        points.attrs["study"])
    return folder.analysis


def study_spec(attrs: dict[str, Any], without: str) -> Any:
    """The study's spec from its parent run's ``spec.yaml``, or None when it cannot be read.

    Then one note on stderr says what the command does ``without`` it.
    """
    from sweep.schema import SPEC_ARTIFACT
    from sweep.spec import SpecError, parse_spec
    from sweep.tracking import StoredSpecError, read_stored_spec

    try:
        return parse_spec(read_stored_spec(attrs["tracking_uri"], attrs["parent_run_id"]))
    except (SpecError, StoredSpecError, KeyError) as exc:
        common.err_console.print(f"note: {without}: the study's {SPEC_ARTIFACT} could not be "
                                 f"read ({type(exc).__name__})", highlight=False)
        return None


def out_folder(out: str | None, points: Any, study: str | None) -> Path:
    """``--out`` or the default folder, created.

    Exits 2 when it cannot be created, or when ``--out`` is the root, a home or a system
    folder (`sweep.folder.system_folder`).
    """
    reason = system_folder(out) if out else None
    if reason is not None:
        bad_input(f"--out {out}: {reason}")
    folder = Path(out) if out else default_out(points, study)
    with as_bad_input(f"--out {folder}", OSError):
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def print_done(lines: list[str], as_json: bool) -> None:
    """What was written and logged: on stderr beside JSON output, else on stdout."""
    for line in lines:
        (common.err_console if as_json else common.console).print(line, highlight=False,
                                                                  markup=False)


def log_analysis(attrs: dict[str, Any], data: Any, path: Any, artifact: str,
                 plots_dir: str) -> list[str]:
    """Log an analysis (``data`` as JSON ``artifact``) and its plot ``path`` to the study's run.

    Returns the line to print; on failure a warning on stderr and no line: the analysis stands
    without its copy in MLflow.
    """
    try:
        from sweep.tracking import log_files, log_json

        log_json(attrs["tracking_uri"], attrs["parent_run_id"], data, artifact)
        log_files(attrs["tracking_uri"], attrs["parent_run_id"], [path], plots_dir)
    except Exception as exc:  # noqa: BLE001 (reported, the analysis stands)
        from sweep.cli import common

        common.err_console.print(f"warning: the analysis was not logged to the study's run: "
                                 f"{type(exc).__name__}: {exc}", highlight=False, markup=False)
        return []
    return [f"logged the analysis and plot to run {attrs['parent_run_id']}"]
