"""Run a study end to end: the driver behind ``sweep run``.

Data flow (``docs/architecture.md``): the validated spec -> preflight (`sweep.study.preflight`)
-> the study's MLflow parent run -> the executor's trials (each through `sweep.study.trial`) ->
the parent run's summary (best val loss, counts per state, ``trials.csv``, best config, plots).

Everything a study writes goes under its output folder, ``./runs/<name>/`` by default: the
corpus cache (``data/``), the Optuna journal, checkpoints and the default MLflow store
(``mlflow.db`` with artifacts in ``mlartifacts/``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep import tracking
from sweep.data import Corpus
from sweep.executors import get_executor
from sweep.folder import StudyFolder
from sweep.kinds import KindRun, Prepared
from sweep.schema import METRIC_BEST_VAL_LOSS, TAG_SIMULATED
from sweep.simulate.source import simulated_tag
from sweep.space import SpaceSummary
from sweep.spec import StudySpec, spec_hash
from sweep.spec.from_study import record_law, resolve_lr
from sweep.study.eta import Eta, spec_cost
from sweep.study.lock import driver_lock
from sweep.study.preflight import PreflightError, preflight
from sweep.study.progress import DEFAULT_PROGRESS_EVERY_S, ProgressView
from sweep.study.resume import (
    HOLD,
    Reconciled,
    StudyInterrupted,
    interrupt_signals,
    reconcile,
)
from sweep.study.summary import finish_study
from sweep.study.trial import StudyContext
from sweep.tracking import StudyTracker
from sweep.tracking.buffer import buffered_runs
from sweep.tracking.faults import InfrastructureError, infrastructure_fault, wait_for_server


@dataclass
class StudySummary:
    """What ``sweep run`` reports at the end.

    Attributes:
        name: Study name.
        out_dir: The study's output folder.
        tracking_uri: The MLflow store holding its runs.
        parent_run_id: The study's parent run.
        state: ``COMPLETE`` when at least one trial completed, else ``FAILED``.
        counts: Trials per state.
        best_val_loss: Best val loss over completed trials, nats/token (nan if none).
        best_trial: Its trial number.
        baseline_unigram_loss: The corpus's unigram entropy on val, nats/token.
        notes: What the study left out and why (a scaling study's dropped shapes).
    """

    name: str
    out_dir: Path
    tracking_uri: str
    parent_run_id: str
    state: str
    counts: dict[str, int] = field(default_factory=dict)
    best_val_loss: float = math.nan
    best_trial: int | None = None
    baseline_unigram_loss: float = math.nan
    notes: list[str] = field(default_factory=list)


def algorithm_name(spec: StudySpec) -> str:
    """Tag ``sweep.algorithm``: sampler and pruner (Optuna) or search and scheduler (Ray)."""
    s = spec.search
    if s.executor == "ray":
        return f"{s.sampler}+{s.scheduler}"
    return f"{s.sampler}+{s.pruner}"


def run_study(
    spec: StudySpec,
    *,
    out_dir: Path | str | None = None,
    quiet: bool = False,
    ray_address: str | None = None,
    device: str | None = None,
    console: Any = None,
    progress_every_s: float = DEFAULT_PROGRESS_EVERY_S,
    command: str | None = None,
    rebuild_journal: bool = False,
) -> StudySummary:
    """Run ``spec``'s trials with its executor and summarise them in MLflow.

    A study whose folder already holds runs of the same name is resumed: its Optuna study
    continues and the parent run is reopened.

    Args:
        spec: The validated spec (with any CLI overrides applied).
        out_dir: Output folder; default ``./runs/<name>``.
        quiet: No progress display.
        ray_address: Ray cluster address for the ``ray`` executor (default: local Ray).
        device: Training device override (``cpu``, ``cuda``...); default: the train config's.
        console: A rich Console for the progress view.
        progress_every_s: Seconds between heartbeat lines when ``console`` is not a terminal
            (`sweep.study.progress.ProgressView`); 0: none.
        command: The command line that started it (``sweep run ...``), for the experiment's
            description and tag ``sweep.command``; None through the Python API.
        rebuild_journal: Rebuild a damaged Optuna journal from the MLflow runs
            (`sweep.executors.optuna.check_journal`) instead of refusing it.

    Returns:
        The `StudySummary`.

    Raises:
        PreflightError: The study could never train a trial (see `preflight`), or Ray
            refused the connection.
        sweep.spec.from_study.FromStudyError: ``train.lr: {from_study}`` names no usable law,
            or not the one the study started with.
        sweep.tracking.ResumeError: The stored study cannot continue under this spec.
        sweep.data.DataError: The corpus cannot be prepared.
        sweep.study.lock.DriverRunningError: Another live ``sweep run`` drives the study
            folder; nothing is written.
        sweep.executors.optuna.JournalError: The Optuna storage is damaged or lacks trials
            the MLflow store has (and ``rebuild_journal`` is off).
        sweep.tracking.StoreSchemaError: The MLflow store's schema is of another version.
    """
    out = Path(out_dir) if out_dir is not None else spec.default_output_dir()
    # The outermost folder this run creates (runs/ itself on a first study), removed again
    # when the study is refused before it starts.
    created = next((p for p in reversed([out, *out.parents]) if not p.exists()), None)
    spec, law_notes = resolve_lr(spec, out)  # a resume keeps the law it started with
    corpus, space_summary = preflight(spec, out, device=device, ray_address=ray_address)
    prepared = spec.kind.prepare(spec, corpus_train_tokens=len(corpus.train), device=device)
    if prepared.problems:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise PreflightError("; ".join(prepared.problems))
    with contextlib.ExitStack() as stack:
        stack.enter_context(driver_lock(out, spec.name))
        record_law(spec, out)
        for note in law_notes:
            _printer(None)(f"note: {note}")
        if spec.search.executor == "ray":
            try:
                stack.enter_context(_ray_connection(ray_address))
            except PreflightError:
                if created is not None:
                    shutil.rmtree(created, ignore_errors=True)
                raise
        return _run(spec, out, corpus, space_summary, quiet=quiet, ray_address=ray_address,
                    device=device, console=console, prepared=prepared,
                    progress_every_s=progress_every_s, command=command,
                    rebuild_journal=rebuild_journal)


@contextlib.contextmanager
def _ray_connection(address: str | None):
    """Connect to Ray (`sweep.executors.ray.init_ray`) before the study writes its parent run.

    Raises:
        PreflightError: Ray refused the connection (e.g. a cluster with token authentication
            and no token here), naming ``--address`` or ``RAY_ADDRESS``.
    """
    from sweep.executors.ray import init_ray  # Ray only for a Ray study

    try:
        started = init_ray(address)
    except ConnectionError as exc:
        source, value = ("--address", address) if address else \
            ("RAY_ADDRESS", os.environ.get("RAY_ADDRESS", "auto"))
        raise PreflightError(
            f"{source} {value}: Ray could not connect ({exc}); a cluster with token "
            "authentication also needs RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN or "
            "~/.ray/auth_token) here") from None
    try:
        yield
    finally:
        if started:
            import ray

            ray.shutdown()


def _with_fault_retries(attempt: Any, wait_s: float, say: Any, *, tracking_uri: str = "",
                        first_delay_s: float = 5.0, max_delay_s: float = 60.0) -> Any:
    """Call ``attempt()``; after an infrastructure fault, wait and call it again.

    The waits double from ``first_delay_s`` up to ``max_delay_s``, for ``wait_s`` seconds in
    all, each ending early when the tracking server at ``tracking_uri`` comes back
    (`sweep.tracking.faults.wait_for_server`); each attempt reconciles the trials the fault
    interrupted and goes on.

    Raises:
        StudyInterrupted: The fault lasted longer than ``wait_s`` (exit status 3).
    """
    deadline = time.monotonic() + wait_s
    delay = first_delay_s
    while True:
        try:
            return attempt()
        except (InfrastructureError, Exception) as exc:
            what = infrastructure_fault(exc)
            if what is None:
                raise
            fault = exc if isinstance(exc, InfrastructureError) else InfrastructureError(what, exc)
            left = deadline - time.monotonic()
            if left <= 0:
                raise StudyInterrupted(
                    f"{fault.what} ({type(fault.cause).__name__}: "
                    f"{str(fault.cause).splitlines()[0][:300] if str(fault.cause) else ''}); "
                    f"retried for {wait_s:g} s (search.fault_wait_s); the trial it stopped is "
                    "interrupted, not failed", exit_code=3) from None
            pause = min(delay, left)
            say(f"{fault.what}; the trial it stopped is interrupted; retrying in {pause:.0f} s "
                f"({left:.0f} s left of search.fault_wait_s)")
            wait_for_server(pause, tracking_uri)
            delay = min(2 * delay, max_delay_s)


def _sync(ctx: StudyContext) -> None:
    """Send the trials' buffered writes (`sweep.tracking.buffer`).

    Raises:
        Exception: The store's infrastructure fault, when it still does not answer.
    """
    synced = ctx.tracking.sync_buffers()
    if synced.error is not None:
        raise synced.error


def _say_reconciled(done: Reconciled, say: Any) -> None:
    if done.interrupted:
        retried = f", {len(done.retried)} queued again" if done.retried else ""
        say(f"resuming: trial(s) {', '.join(map(str, done.interrupted))} of a process that is "
            f"gone marked INTERRUPTED{retried}")


def _reconcile_after_stop(executor: Any, ctx: StudyContext) -> None:
    """After an interrupt, end whatever a killed worker left RUNNING.

    No retries are queued yet: the next resume queues them.
    """
    try:
        if hasattr(executor, "reconcile"):  # the executor's own record of its trials too
            executor.reconcile(ctx, retry=False)
        else:
            reconcile(ctx)
    except Exception:  # noqa: BLE001 (a store that is down: the next resume reconciles)
        pass


def _printer(console: Any):
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    return lambda line: console.print(line, highlight=False, soft_wrap=True)


def _stored_spec(spec: StudySpec) -> dict[str, Any]:
    """The spec as the parent run stores it: no passwords of storage or tracking URLs."""
    plain = spec.to_data()
    if plain["search"].get("storage"):
        plain["search"]["storage"] = tracking.shown_uri(plain["search"]["storage"])
    if plain.get("tracking", {}).get("uri"):
        plain["tracking"]["uri"] = tracking.shown_uri(plain["tracking"]["uri"])
    return plain


def _run(spec: StudySpec, out: Path, corpus: Corpus, space_summary: SpaceSummary, *,
         quiet: bool, ray_address: str | None, device: str | None,
         console: Any, prepared: Prepared,
         progress_every_s: float = DEFAULT_PROGRESS_EVERY_S,
         command: str | None = None, rebuild_journal: bool = False) -> StudySummary:
    uri = spec.tracking_uri(out)
    executor = get_executor(spec.search.executor)
    check_journal = getattr(executor, "check_journal", None)  # the Optuna executor's storage
    rebuilt = check_journal(spec, out, uri, baseline=corpus.baseline_unigram_loss,
                            rebuild=rebuild_journal) if check_journal is not None else None
    if rebuilt:
        _printer(None)(f"note: {rebuilt}")
    tracker = StudyTracker.start(uri, spec.tracking.experiment or spec.name, _stored_spec(spec),
                                 executor=spec.search.executor, algorithm=algorithm_name(spec),
                                 resume=True, spec_hash=spec_hash(spec), command=command,
                                 searched=[p.path for p in spec.searched()])
    with tracker:
        lines = corpus.describe()
        if spec.simulate is not None:  # marked in the parent's tags and its description
            tracker.context.set_parent_tags({TAG_SIMULATED: simulated_tag(spec)})
            lines = [f"SIMULATED: every loss drawn from a law ({simulated_tag(spec)}); no "
                     "model trained", *lines]
        tracker.log_corpus(lines, corpus.baseline_unigram_loss)
        # A trial keeps its run's writes in the study folder while the store does not answer.
        tracker.context = dataclasses.replace(tracker.context,
                                              buffer_dir=str(StudyFolder(out).buffer))
        ctx = StudyContext(spec, out, tracker.context, device=device, summary=space_summary,
                           _corpus=[corpus])
        total = prepared.total if prepared.total is not None else spec.search.n_trials
        job = KindRun(executor, ctx, None, address=ray_address, prepared=prepared,
                      say=None if quiet else _printer(console))
        view = ProgressView(spec.name, total, quiet=quiet, console=console,
                            progress_every_s=progress_every_s, eta=Eta(total, spec_cost(spec)))
        study, notes = _drive(job, view, tracker, out)
    return StudySummary(
        name=spec.name, out_dir=out, tracking_uri=uri, parent_run_id=tracker.parent_run_id,
        state=study["state"], counts=study["counts"], best_val_loss=study[METRIC_BEST_VAL_LOSS],
        best_trial=study["best_trial"], baseline_unigram_loss=corpus.baseline_unigram_loss,
        notes=notes,
    )


def _drive(job: KindRun, view: ProgressView, tracker: StudyTracker,
           out: Path) -> tuple[dict[str, Any], list[str]]:
    """Run the kind's trials in ``view`` under the study's signal handlers, then summarise them.

    Returns:
        `finish_study`'s summary and the kind's notes.

    Raises:
        StudyInterrupted: A signal, workers that kept dying, or a lasting fault stopped it;
            its message says what was recorded and how to resume.
    """
    ctx, spec = job.ctx, job.ctx.spec
    names = list(spec.search.objectives) if len(spec.search.objectives) > 1 else None
    data_section = spec.data.model_dump(mode="json", exclude_none=True)
    study, notes, stopped = None, [], None
    # One signal stops the study; more, while it records the stop, are ignored.
    with interrupt_signals() as received:
        try:
            with view:
                job.view = view
                if spec.search.executor != "optuna":  # the Optuna executor reconciles
                    _say_reconciled(reconcile(ctx), view.note)

                def attempt() -> tuple[Any, list[str]]:
                    found = spec.kind.run(job)
                    _sync(ctx)  # the last trials' buffered writes, before the summary
                    return found

                study, notes = _with_fault_retries(
                    attempt, spec.search.fault_wait_s, _printer(None),  # stderr, if quiet
                    tracking_uri=ctx.tracking.tracking_uri)
        except KeyboardInterrupt:
            name = received.name or "SIGINT"
            stopped = StudyInterrupted(f"interrupted by {name}",
                                       exit_code=143 if name == "SIGTERM" else 130)
        except StudyInterrupted as exc:
            stopped = exc
            received.name = received.name or "stop"  # ignore signals while recording it
        if stopped is not None:
            _record_stop(job, tracker, out, study, stopped, names, data_section)
        # Every trial has ended: a signal now would only cut the summary short and leave
        # the parent RUNNING, so the summary is finished first (signals are ignored).
        received.name = HOLD
        return finish_study(tracker, study, objective_names=names, data=data_section), notes


def _record_stop(job: KindRun, tracker: StudyTracker, out: Path, study: Any,
                 stopped: StudyInterrupted, names: list[str] | None,
                 data_section: dict[str, Any]) -> None:
    """End what a stop left running, summarise the trials so far, and raise ``stopped``.

    Raises:
        StudyInterrupted: ``stopped``, its message naming the trials so far and how to resume.
    """
    spec = job.ctx.spec
    _reconcile_after_stop(job.executor, job.ctx)
    try:
        result = finish_study(tracker, study, objective_names=names,
                              interrupted=str(stopped), data=data_section)
        counts: Any = {k: v for k, v in result["counts"].items() if v}
    except Exception:  # noqa: BLE001 (the store failed: the resume records it)
        tracker.finished = True
        counts = "not recorded: the tracking store did not answer"
    buffer = StudyFolder(out).buffer
    kept = buffered_runs(buffer)
    waiting = (f"; {len(kept)} trial run(s) kept in {buffer} until the "
               f"tracking store answers (`sweep sync {out}` sends them)" if kept else "")
    stopped.args = (f"study {spec.name}: {stopped}; trials so far: {counts or 'none'}{waiting}; "
                    f"run the same command again to resume (output folder {out})",)
    raise stopped
