"""Commands that run studies: ``sweep run``, ``worker``, ``sync``."""

from __future__ import annotations

import math
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sweep.cli import common
from sweep.cli.common import app, as_bad_input, bad_input
from sweep.cli.inputs import check_study_inputs, load_study_spec
from sweep.redact import redact, shown_uri
from sweep.schema import (
    METRIC_BASELINE,
    METRIC_BEST_VAL_LOSS,
    METRIC_N_PARAMS,
    TAG_FAIL_REASON,
    TrialState,
)

if TYPE_CHECKING:
    from sweep.spec import StudySpec
    from sweep.study.driver import StudySummary


def _on_cpu_without_gpus(spec: StudySpec, address: str | None) -> StudySpec:
    """``--allow-cpu``: the spec with no GPUs per trial where a local Ray would find none.

    Says so in one line on stderr; the spec is unchanged where no fallback is needed.
    """
    from sweep.spec import parse_spec
    from sweep.study.preflight import local_gpus_missing

    reason = local_gpus_missing(spec, address)
    if reason is None:
        return spec
    common.err_console.print(
        f"note: resources.gpus_per_trial={spec.resources.gpus_per_trial:g}: {reason}; "
        "--allow-cpu: the trials run on CPU", highlight=False, soft_wrap=True, markup=False)
    data = spec.to_data()
    data["resources"]["gpus_per_trial"] = 0
    return parse_spec(data)


@app.command()
def run(
    spec_path: str = typer.Argument(..., metavar="SPEC", help="Study spec YAML."),
    executor: str = typer.Option(None, help="Override search.executor: optuna or ray."),
    trials: int = typer.Option(None, min=1, help="Override search.n_trials."),
    out: str = typer.Option(None, help="Output folder (default ./runs/<study name>); never "
                            "the root, a home or system folder, nor a non-empty folder that is "
                            "not a study's."),
    force_out: bool = typer.Option(False, "--force-out", help="Write the study into a "
                                   "non-empty --out folder that is not a study's (among "
                                   "files of yours)."),
    address: str = typer.Option(None, help="Ray cluster address, host:port or auto (ray "
                                "executor; default: RAY_ADDRESS, else a local Ray)."),
    device: str = typer.Option(None, help="Training device (default: CUDA when present)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
    progress_every: float = typer.Option(30.0, "--progress-every", metavar="SECONDS", min=0,
                                         help="Without a terminal (a log): a progress line "
                                              "every SECONDS (running trials, tokens, losses);"
                                              " 0 for none."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON line."),
    allow_cpu: bool = typer.Option(False, "--allow-cpu", help="Ray executor on a local Ray: "
                                   "where this machine has no GPU, run trials that ask for "
                                   "resources.gpus_per_trial on CPU instead of refusing."),
    rebuild_journal: bool = typer.Option(False, "--rebuild-journal", help="Rebuild a damaged "
                                         "Optuna journal from the MLflow runs, then resume."),
) -> None:
    """Run a study: search its space, train each trial, track everything in MLflow.

    A Ray study that asks for ``resources.gpus_per_trial`` on a local Ray (no ``--address``
    nor ``RAY_ADDRESS``) where this machine has no GPU is refused, unless ``--allow-cpu``
    runs its trials on CPU; a cluster's GPUs are judged once Ray connects to it.

    Exits 0 when at least one trial completed, 1 when none did, 2 for bad input, 130 or 143
    when Ctrl-C or SIGTERM stopped it, 3 when it stopped for another cause outside its trials
    (workers that kept dying); a rerun of the same command resumes it.
    """
    spec = load_study_spec(spec_path, executor, trials)
    if address and spec.search.executor != "ray":
        bad_input(f"--address: only the ray executor runs on a Ray cluster; this study's "
                  f"executor is {spec.search.executor} (add --executor ray)")
    if rebuild_journal and spec.search.executor != "optuna":
        bad_input(f"--rebuild-journal: a {spec.search.executor} study has no Optuna journal")
    if allow_cpu:
        spec = _on_cpu_without_gpus(spec, address)
    from sweep.spec.from_study import resolve_lr

    spec, _ = resolve_lr(spec, Path(out) if out else spec.default_output_dir())
    check_study_inputs(spec, Path(out) if out else spec.default_output_dir(), device, space=True,
                       ray_address=address, force_out=force_out)
    # Only now the heavy packages (torch, MLflow, Optuna): the input is good as far as the spec
    # and the flags can tell.
    from sweep.data import DataError
    from sweep.study import run_study
    from sweep.study.resume import StudyInterrupted

    try:
        with as_bad_input("data.uri", DataError):
            summary = run_study(spec, out_dir=out, quiet=quiet or as_json, ray_address=address,
                                device=device, console=common.console,
                                progress_every_s=progress_every,
                                command=shlex.join(["sweep", *sys.argv[1:]]),
                                rebuild_journal=rebuild_journal)
    except StudyInterrupted as exc:
        common.stopped(str(exc), exc.exit_code)
    _report(summary, spec, as_json=as_json, quiet=quiet)


def _report(summary: StudySummary, spec: StudySpec, *, as_json: bool, quiet: bool) -> None:
    """The run's summary (one JSON line, the top trials, or the notes); exit 1 if none completed."""
    counts = {k.lower(): v for k, v in summary.counts.items() if v}
    if as_json:
        import json

        print(redact(json.dumps({
            "study": summary.name, "state": summary.state, "counts": counts,
            METRIC_BEST_VAL_LOSS: summary.best_val_loss if math.isfinite(summary.best_val_loss)
            else None,
            "best_trial": summary.best_trial,
            METRIC_BASELINE: summary.baseline_unigram_loss,
            "out_dir": str(summary.out_dir), "tracking_uri": shown_uri(summary.tracking_uri),
            "parent_run_id": summary.parent_run_id, "notes": summary.notes,
        })))
    elif not quiet:
        _print_top_trials(summary, spec.tracking.experiment or spec.name)
    else:  # the progress lines said these; quiet runs still hear what was left out
        for note in summary.notes:
            common.err_console.print(f"note: {note}", highlight=False, soft_wrap=True,
                                     markup=False)
    if summary.state != TrialState.COMPLETE:
        common.err_console.print(
            f"[bold red]study {summary.name}: no trial completed[/] ({counts or 'no trials'}); "
            f"see the trials' {TAG_FAIL_REASON} tags in {shown_uri(summary.tracking_uri)}",
            highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)


def _print_top_trials(summary: StudySummary, experiment: str, top: int = 5) -> None:
    """The best trials; read by experiment name, since a tracking server holds other studies.

    Params changed during training (PBT) show their initial and final values
    (``lr=0.001->0.0031``), as the per-trial lines do.
    """
    from rich.table import Table

    from sweep.results import LOSS_OVER_BASELINE, load_results
    from sweep.study.progress import format_params
    from sweep.tracking import mutated_params

    frame = load_results(experiment, tracking_uri=summary.tracking_uri)
    searched = frame.attrs["searched"]
    # The loss over the unigram baseline as sweep results shows it (below 1: the model uses
    # context).
    baseline = (("loss / baseline",) if math.isfinite(summary.baseline_unigram_loss)
                and LOSS_OVER_BASELINE in frame.columns else ())
    table = Table("trial", "state", "best val_loss", *baseline, METRIC_N_PARAMS,
                  "searched params", title=f"top trials of {summary.name}")
    mutated = mutated_params(summary.tracking_uri, list(frame.head(top)["run_id"]))
    for _, row in frame.head(top).iterrows():
        loss = row.get(METRIC_BEST_VAL_LOSS, math.nan)
        ratio = row.get(LOSS_OVER_BASELINE, math.nan)
        table.add_row(str(row["trial"]), row["state"],
                      f"{loss:.4f}" if math.isfinite(loss) else "-",
                      *(f"{ratio:.4f}" if math.isfinite(ratio) else "-" for _ in baseline),
                      _count(row.get(METRIC_N_PARAMS, math.nan)),
                      format_params({c: row[c] for c in searched}, limit=len(searched),
                                    mutated=mutated.get(row["run_id"])))
    common.console.print(table)
    counts = ", ".join(f"{v} {k.lower()}" for k, v in summary.counts.items() if v)
    best = (f"{summary.best_val_loss:.4f} (trial {summary.best_trial})"
            if math.isfinite(summary.best_val_loss) else "-")
    common.console.print(f"{counts}; best val_loss {best}; unigram baseline "
                  f"{summary.baseline_unigram_loss:.4f} nats/token", highlight=False)
    common.console.print(
        f"MLflow store: {shown_uri(summary.tracking_uri)}  (browse: sweep ui {summary.out_dir})",
                  highlight=False, soft_wrap=True)


def _count(value: float) -> str:
    return f"{value:,.0f}" if math.isfinite(value) else "-"


def _check_joinable(spec: StudySpec, tracking_uri: str, parent_run_id: str) -> None:
    """Exit 2 unless the stored study can continue under ``spec`` (as ``sweep run`` resumes).

    Reads the parent run's ``spec.yaml`` and applies `sweep.spec.check_resume_compatible`, with
    the message ``sweep run`` gives; the allowed differences are printed as warnings.
    """
    import json

    from sweep.spec.resume import check_resume_compatible
    from sweep.tracking import StoredSpecError, read_stored_spec

    try:
        stored = read_stored_spec(tracking_uri, parent_run_id)
    except StoredSpecError as exc:
        bad_input(f"study {spec.name}: cannot read the spec it stored on parent run "
                  f"{parent_run_id} ({exc}), so cannot tell whether this spec may join it")
    notes = check_resume_compatible(stored, json.loads(json.dumps(spec.to_data(), default=str)))
    for note in notes:
        common.err_console.print(f"warning: joining {spec.name} with a changed spec: {note}",
                                 highlight=False, soft_wrap=True, markup=False)


@app.command()
def worker(
    spec_path: str = typer.Argument(..., metavar="SPEC", help="Study spec YAML."),
    trials: int = typer.Option(1, min=1, help="Trials this worker runs."),
    out: str = typer.Option(None, help="The study's output folder (default ./runs/<name>)."),
    device: str = typer.Option(None, help="Training device (default: CUDA when present)."),
) -> None:
    """Join a running Optuna study through its shared storage and run trials for it.

    The study must have been started (``sweep run``) with storage and tracking that this
    machine reaches (an RDB ``search.storage`` and an MLflow server ``tracking.uri``, or a
    shared file system). Its spec must be one the stored study can continue under, as ``sweep
    run`` requires to resume (checked against the ``spec.yaml`` of the study's parent run).
    Exits 2, adding no trial, when it is not, or when the study is not found.
    """
    spec = load_study_spec(spec_path, "optuna")
    if spec.kind.trials_from is not None:
        bad_input(f"{spec_path}: a {spec.kind.name} study's grid points are queued by sweep run "
                  f"({spec.kind.trials_from}); sweep worker would draw points of its own. Run "
                  "it with sweep run (search.parallel for more processes)")
    out_dir = Path(out) if out else spec.default_output_dir()
    from sweep.spec.from_study import resolve_lr

    spec, _ = resolve_lr(spec, out_dir)  # the law the study started with
    check_study_inputs(spec, out_dir, device, space=True)
    from sweep.executors import optuna as optuna_executor
    from sweep.study.trial import StudyContext
    from sweep.tracking import TrialContext, check_reachable, find_study

    uri = spec.tracking_uri(out_dir)
    check_reachable(uri, spec.tracking_uri_source())
    optuna_executor.check_storage(spec.storage_url(out_dir))
    experiment = spec.tracking.experiment or spec.name
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        bad_input(f"no study {experiment!r}: {uri} does not exist; start it with sweep run")
    found = find_study(uri, experiment)
    if found is None:
        bad_input(f"no study {experiment!r} in {uri}; start it with sweep run")
    storage = spec.storage_url(out_dir)
    if not optuna_executor.study_exists(spec.name, storage):
        bad_input(f"no Optuna study {spec.name!r} in search.storage "
                  f"{shown_uri(storage)}; start it with sweep run (with the "
                  "same storage and --out)")
    _check_joinable(spec, uri, found[1])
    from sweep.folder import StudyFolder

    ctx = StudyContext(spec, out_dir, TrialContext(uri, *found,
                                                   buffer_dir=str(StudyFolder(out_dir).buffer)),
                       device=device)
    from sweep.study.resume import interrupt_signals
    from sweep.tracking.faults import InfrastructureError

    with interrupt_signals() as received:
        try:
            optuna_executor.run_worker(ctx, trials)
        except KeyboardInterrupt:
            name = received.name or "SIGINT"
            common.stopped(f"worker for study {spec.name}: interrupted by {name}; its trial is "
                           "INTERRUPTED and will be retried", 143 if name == "SIGTERM" else 130)
        except InfrastructureError as err:
            common.stopped(f"worker for study {spec.name}: {err.what}; its trial is "
                           "INTERRUPTED; run the worker again once it is back", 3)


def _sync_targets(files: list[tuple[Path, dict[str, Any]]], tracking_uri: str | None,
                  buffer: Path) -> set[str]:
    """The stores the buffered runs go to; a SQLite one checked first (exit 2 if foreign)."""
    from sweep.store_files import sqlite_file

    uris: set[str] = set()
    for _, header in files:
        uri = tracking_uri or header.get("tracking_uri")
        if not isinstance(uri, str) or "***" in uri:
            bad_input(f"{buffer}: the study's tracking URI hides its password "
                      "(it is never stored); give it with --tracking-uri")
        uris.add(uri)
    for uri in uris:
        db = sqlite_file(uri)
        if db is not None:
            from sweep.tracking.stores import check_store

            if not db.is_file():
                bad_input(f"{uri}: no store there ({db} does not exist); nothing sent")
            check_store(db, reading=False)
    return uris


@app.command()
def sync(
    study_dir: str = typer.Argument(..., metavar="STUDY_DIR",
                                    help="The study's output folder (./runs/<name>)."),
    tracking_uri: str = typer.Option(None, help="Send to this MLflow tracking URI instead of "
                                                "the one the study used (e.g. with its "
                                                "password, which the folder does not keep)."),
) -> None:
    """Send the trial results kept in STUDY_DIR while the tracking store did not answer.

    A trial whose MLflow writes failed kept them in ``STUDY_DIR/mlflow-buffer``; this sends
    them, in order, into the runs they belong to (no run is created, so none is doubled) and
    deletes what was sent, saying how many writes of each run it sent. Only files a trial of
    this study wrote and signed are sent; any other file there gets a note and is left as it
    is. ``sweep run`` does the same when it resumes. Exits 0 when everything was sent, 3 when
    the store still does not answer (what was not sent stays), 1 when the store refused a
    run's writes for another reason.
    """
    if not Path(study_dir).is_dir():
        bad_input(f"STUDY_DIR {study_dir}: not a folder")
    from sweep.folder import StudyFolder
    from sweep.tracking.buffer import scan

    buffer = StudyFolder(Path(study_dir)).buffer

    files, refused = scan(buffer)
    for path, reason in refused:
        common.err_console.print(f"note: {path}: not sent: {reason}; left as it is",
                                 highlight=False, soft_wrap=True)
    if not files:
        common.console.print(f"nothing to send: no buffered trial runs of this study in "
                             f"{buffer}", highlight=False)
        return
    uris = _sync_targets(files, tracking_uri, buffer)
    from sweep.tracking import UnreachableStoreError, check_reachable, shown_uri
    from sweep.tracking.buffer import sync_to

    for uri in sorted(uris):
        try:
            check_reachable(uri, "--tracking-uri" if tracking_uri else "the study's tracking URI")
        except UnreachableStoreError as exc:
            common.stopped(f"{exc}; nothing sent, {len(files)} trial run(s) kept in {buffer}", 3)
    result = sync_to(buffer, lambda header: tracking_uri or header["tracking_uri"])
    trials = {header["run_id"]: header.get("trial") for _, header in files}
    for run_id, count in result.sent.items():
        common.console.print(f"run {run_id} (trial {trials.get(run_id)}): sent {count} "
                             "write(s)", highlight=False)
    shown = ", ".join(shown_uri(u) for u in sorted(uris))
    common.console.print(f"sent {result.writes} write(s) of {len(result.runs)} trial run(s) "
                         f"to {shown}", highlight=False)
    for path, reason in result.refused[len(refused):]:
        common.err_console.print(f"note: {path}: not sent: {reason}; left as it is",
                                 highlight=False, soft_wrap=True)
    for run_id, reason in result.rejected:
        common.err_console.print(f"run {run_id}: not sent: {reason} (kept in {buffer})",
                                 highlight=False, soft_wrap=True)
    if result.error is not None:
        from sweep.tracking.faults import infrastructure_fault

        common.stopped(f"{infrastructure_fault(result.error)}; {len(result.left)} trial run(s) "
                       f"kept in {buffer}; run sweep sync again once it is back", 3)
    if result.rejected:
        raise typer.Exit(code=1)
