"""Commands that run studies: ``sweep validate``, ``run``, ``worker``, ``sync``."""

from __future__ import annotations

import json
import math
import shlex
import sys
from pathlib import Path

import typer
from rich.table import Table

from sweep.cli import common
from sweep.cli.common import app, bad_input
from sweep.folder import StudyFolder
from sweep.schema import (
    METRIC_BASELINE,
    METRIC_BEST_VAL_LOSS,
    METRIC_N_PARAMS,
    TAG_FAIL_REASON,
    TrialState,
)


@app.command()
def validate(
    spec_path: str = typer.Argument(..., metavar="SPEC", help="Study spec YAML."),
    samples: int = typer.Option(256, min=1, help="Random configs to price with the cost model."),
    device: str = typer.Option(None, help="Device whose memory bounds max_memory_gb (default: "
                               "the spec's train.device)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Check a spec; print its corpus, search space and cost range without training anything.

    Exits 2 for an invalid spec, a corpus that cannot be used (``data.uri``), or a space in
    which no sampled config is valid and feasible.
    """
    from sweep.spec import SpecError, load_spec, spec_hash

    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        bad_input(str(exc))
    _check_inputs(spec, device=device)
    corpus = _inspect_corpus(spec)
    from sweep import space

    summary = space.summarize(spec, n_samples=samples, device=device).to_dict()
    n_ok = summary["n_configs"] - summary["n_invalid"] - summary["n_infeasible"]
    if as_json:
        common.console.print_json(json.dumps({"name": spec.name, "spec_hash": spec_hash(spec),
                                       "search": spec.search.model_dump(mode="json"),
                                       "corpus": _corpus_record(spec, corpus), **summary}))
    else:
        s = spec.search
        common.console.print(f"[bold]{spec.name}[/] ({spec_hash(spec)}): executor {s.executor}, "
                      f"sampler {s.sampler}, pruner {s.pruner}, scheduler {s.scheduler}, "
                      f"{spec.kind.trial_count(spec)} trials, objectives "
                      f"{', '.join(f'{o} ({d})' for o, d in spec.objective_directions())}")
        table = Table("parameter", "kind", "domain", "when")
        for row in summary["params"]:
            table.add_row(row["path"], row["kind"], row["domain"], row["when"])
        for line in _corpus_lines(spec, corpus):
            common.console.print(line, highlight=False, soft_wrap=True)
        common.console.print(table)
        cost = Table("cost", "min", "max")
        for name, rng in summary["cost"].items():
            cost.add_row(name, *(f"{v:,.0f}" for v in rng) if rng else ("-", "-"))
        common.console.print(cost)
        common.console.print(
            f"{summary['n_configs']} configs priced (corners + random): {n_ok} ok, "
                      f"{summary['n_invalid']} invalid, {summary['n_infeasible']} over the "
                      "constraints", highlight=False)
        for kind in ("invalid", "infeasible"):
            for example in summary[f"{kind}_examples"]:
                common.console.print(f"  {kind}: {example}", highlight=False, soft_wrap=True)
    if n_ok == 0:
        bad_input(f"{spec_path}: none of {summary['n_configs']} sampled configs is valid and "
                  "within the constraints; the study could never train a trial")
    problems = spec.kind.describe(spec, _say, _warn, device=device, as_json=as_json)
    if problems:
        bad_input("; ".join(problems))


def _say(line) -> None:
    common.console.print(line, highlight=False, soft_wrap=True)


def _warn(line: str) -> None:
    common.err_console.print(line, highlight=False, soft_wrap=True)


def _inspect_corpus(spec):
    """The spec's corpus, read with `sweep.data.inspect_corpus` (nothing written).

    Exits 2 with a message naming ``data.uri`` when the corpus cannot be used; None for a
    ``text:`` folder over `sweep.data.INSPECT_MAX_BYTES`. Reads the prepared copy under the
    study's default output folder when ``sweep run`` left one there, otherwise the corpus
    itself (for ``text:``, every file and the near-duplicate search of its split: about a
    second per 15 MB on one core).
    """
    from sweep.data import DataError, inspect_corpus

    try:
        return inspect_corpus(spec.data.uri, vocab_size=spec.data.vocab_size,
                              cache_dir=StudyFolder(spec.default_output_dir()).data)
    except DataError as exc:
        bad_input(f"data.uri: {exc}")


def _corpus_lines(spec, corpus) -> list[str]:
    if corpus is not None:
        return corpus.describe()
    from sweep.data import INSPECT_MAX_BYTES

    return [f"corpus {spec.data.uri}: over {INSPECT_MAX_BYTES / 2**20:.0f} MiB of files, so "
            "validate does not read it; sweep run reads and splits it once, when it prepares "
            "the corpus"]


def _corpus_record(spec, corpus) -> dict:
    if corpus is None:
        return {"uri": spec.data.uri, "read": False}
    return {"uri": corpus.uri, "read": True, "vocab_size": corpus.vocab_size,
            "byte_level": corpus.byte_level, "n_train": len(corpus.train),
            "n_val": len(corpus.val), METRIC_BASELINE: corpus.baseline_unigram_loss,
            "entropy_rate": corpus.entropy_rate, "content_hash": corpus.content_hash,
            **corpus.summary}


def _check_inputs(spec, out: Path | None = None, device: str | None = None,
                  space: bool = False, ray_address: str | None = None):
    """`sweep.study.check_inputs` (and `check_space` when ``space``), exiting 2 on bad input.

    Light: run before the command imports torch, MLflow or Optuna, so bad input is refused in
    well under a second.

    Returns:
        The priced space when ``space``, else ``None``.
    """
    from sweep.data import DataError
    from sweep.study.preflight import PreflightError, check_inputs, check_space

    try:
        check_inputs(spec, out, device=device, ray_address=ray_address)
        return check_space(spec, device=device) if space else None
    except DataError as exc:
        bad_input(f"data.uri: {exc}")
    except PreflightError as exc:
        bad_input(str(exc))


def _load_study_spec(spec_path: str, executor: str | None = None, trials: int | None = None):
    from sweep.spec import SpecError, load_spec
    from sweep.study.overrides import with_overrides

    if executor is not None and executor not in ("optuna", "ray"):
        bad_input(f"--executor {executor!r} is not one of optuna, ray")
    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        bad_input(str(exc))
    if trials is not None and spec.kind.trials_from is not None:
        bad_input(f"--trials {trials}: a {spec.kind.name} study's trials are "
                  f"{spec.kind.trials_from}; change those instead")
    try:
        return with_overrides(spec, executor=executor, n_trials=trials)
    except SpecError as exc:
        bad_input(str(exc))


def _on_cpu_without_gpus(spec, address: str | None):
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
    out: str = typer.Option(None, help="Output folder (default ./runs/<study name>)."),
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
) -> None:
    """Run a study: search its space, train each trial, track everything in MLflow.

    A Ray study that asks for ``resources.gpus_per_trial`` on a local Ray (no ``--address``
    nor ``RAY_ADDRESS``) where this machine has no GPU is refused, unless ``--allow-cpu``
    runs its trials on CPU; a cluster's GPUs are judged once Ray connects to it.

    Exits 0 when at least one trial completed, 1 when none did, 2 for bad input, 130 or 143
    when Ctrl-C or SIGTERM stopped it, 3 when it stopped for another cause outside its trials
    (workers that kept dying); a rerun of the same command resumes it.
    """
    spec = _load_study_spec(spec_path, executor, trials)
    if address and spec.search.executor != "ray":
        bad_input(f"--address: only the ray executor runs on a Ray cluster; this study's "
                  f"executor is {spec.search.executor} (add --executor ray)")
    if allow_cpu:
        spec = _on_cpu_without_gpus(spec, address)
    _check_inputs(spec, Path(out) if out else spec.default_output_dir(), device, space=True,
                  ray_address=address)
    # Only now the heavy packages (torch, MLflow, Optuna): the input is good as far as the spec
    # and the flags can tell.
    from sweep.data import DataError
    from sweep.study import PreflightError, run_study
    from sweep.study.resume import StudyInterrupted
    from sweep.tracking import ResumeError

    try:
        summary = run_study(spec, out_dir=out, quiet=quiet or as_json, ray_address=address,
                            device=device, console=common.console,
                            progress_every_s=progress_every,
                            command=shlex.join(["sweep", *sys.argv[1:]]))
    except DataError as exc:
        bad_input(f"data.uri: {exc}")
    except (ResumeError, PreflightError) as exc:
        bad_input(str(exc))
    except StudyInterrupted as exc:
        common.stopped(str(exc), exc.exit_code)
    counts = {k.lower(): v for k, v in summary.counts.items() if v}
    if as_json:
        print(json.dumps({
            "study": summary.name, "state": summary.state, "counts": counts,
            METRIC_BEST_VAL_LOSS: summary.best_val_loss if math.isfinite(summary.best_val_loss)
            else None,
            "best_trial": summary.best_trial,
            METRIC_BASELINE: summary.baseline_unigram_loss,
            "out_dir": str(summary.out_dir), "tracking_uri": summary.tracking_uri,
            "parent_run_id": summary.parent_run_id, "notes": summary.notes,
        }))
    elif not quiet:
        _print_top_trials(summary, spec.tracking.experiment)
    else:  # the progress lines said these; quiet runs still hear what was left out
        for note in summary.notes:
            common.err_console.print(f"note: {note}", highlight=False, soft_wrap=True,
                                     markup=False)
    if summary.state != TrialState.COMPLETE:
        common.err_console.print(
            f"[bold red]study {summary.name}: no trial completed[/] ({counts or 'no trials'}); "
            f"see the trials' {TAG_FAIL_REASON} tags in {summary.tracking_uri}",
            highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)


def _print_top_trials(summary, experiment: str, top: int = 5) -> None:
    """The best trials; read by experiment name, since a tracking server holds other studies.

    Params changed during training (PBT) show their initial and final values
    (``lr=0.001->0.0031``), as the per-trial lines do.
    """
    from sweep.results import load_results
    from sweep.study.progress import format_params
    from sweep.tracking import mutated_params

    frame = load_results(experiment, tracking_uri=summary.tracking_uri)
    searched = [c for c in frame.columns if c.startswith(("model.", "train."))
                and frame[c].astype(str).nunique() > 1]
    table = Table("trial", "state", "best val_loss", METRIC_N_PARAMS, "searched params",
                  title=f"top trials of {summary.name}")
    mutated = mutated_params(summary.tracking_uri, list(frame.head(top)["run_id"]))
    for _, row in frame.head(top).iterrows():
        loss = row.get(METRIC_BEST_VAL_LOSS, math.nan)
        table.add_row(str(row["trial"]), row["state"],
                      f"{loss:.4f}" if math.isfinite(loss) else "-",
                      f"{row.get(METRIC_N_PARAMS, math.nan):,.0f}",
                      format_params({c: row[c] for c in searched}, limit=len(searched),
                                    mutated=mutated.get(row["run_id"])))
    common.console.print(table)
    counts = ", ".join(f"{v} {k.lower()}" for k, v in summary.counts.items() if v)
    best = (f"{summary.best_val_loss:.4f} (trial {summary.best_trial})"
            if math.isfinite(summary.best_val_loss) else "-")
    common.console.print(f"{counts}; best val_loss {best}; unigram baseline "
                  f"{summary.baseline_unigram_loss:.4f} nats/token", highlight=False)
    common.console.print(
        f"MLflow store: {summary.tracking_uri}  (browse: sweep ui {summary.out_dir})",
                  highlight=False, soft_wrap=True)


def _check_joinable(spec, tracking_uri: str, parent_run_id: str) -> None:
    """Exit 2 unless the stored study can continue under ``spec`` (as ``sweep run`` resumes).

    Reads the parent run's ``spec.yaml`` and applies `sweep.spec.check_resume_compatible`, with
    the message ``sweep run`` gives; the allowed differences are printed as warnings.
    """
    from sweep.spec.resume import ResumeError, check_resume_compatible
    from sweep.tracking import StoredSpecError, read_stored_spec

    try:
        stored = read_stored_spec(tracking_uri, parent_run_id)
    except StoredSpecError as exc:
        bad_input(f"study {spec.name}: cannot read the spec it stored on parent run "
                  f"{parent_run_id} ({exc}), so cannot tell whether this spec may join it")
    try:
        notes = check_resume_compatible(stored, json.loads(json.dumps(spec.to_data(),
                                                                      default=str)))
    except ResumeError as exc:
        bad_input(str(exc))
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
    run`` requires to resume (`sweep.spec.check_resume_compatible` against the parent run's
    ``spec.yaml``). Exits 2, adding no trial, when it is not, or when the study is not found.
    """
    spec = _load_study_spec(spec_path, "optuna")
    if spec.kind.trials_from is not None:
        bad_input(f"{spec_path}: a {spec.kind.name} study's grid points are queued by sweep run "
                  f"({spec.kind.trials_from}); sweep worker would draw points of its own. Run "
                  "it with sweep run (search.parallel for more processes)")
    out_dir = Path(out) if out else spec.default_output_dir()
    _check_inputs(spec, out_dir, device, space=True)
    from sweep.executors import optuna as optuna_executor
    from sweep.study.trial import StudyContext
    from sweep.tracking import (
        TrialContext,
        UnreachableStoreError,
        check_reachable,
        find_study,
        shown_uri,
    )

    uri = spec.tracking_uri(out_dir)
    try:
        check_reachable(uri, spec.tracking_uri_source())
        optuna_executor.check_storage(spec.storage_url(out_dir))
    except (UnreachableStoreError, optuna_executor.StorageError) as exc:
        bad_input(str(exc))
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        bad_input(f"no study {spec.tracking.experiment!r}: {uri} does not exist; start it "
                  "with sweep run")
    found = find_study(uri, spec.tracking.experiment)
    if found is None:
        bad_input(f"no study {spec.tracking.experiment!r} in {uri}; start it with sweep run")
    storage = spec.storage_url(out_dir)
    if not optuna_executor.study_exists(spec.name, storage):
        bad_input(f"no Optuna study {spec.name!r} in search.storage "
                  f"{shown_uri(storage)}; start it with sweep run (with the "
                  "same storage and --out)")
    _check_joinable(spec, uri, found[1])
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


@app.command()
def sync(
    study_dir: str = typer.Argument(..., metavar="STUDY_DIR",
                                    help="The study's output folder (./runs/<name>)."),
    tracking_uri: str = typer.Option(None, help="Send to this MLflow tracking URI instead of "
                                                "the one the study used (e.g. with its "
                                                "password, which the folder does not keep)."),
) -> None:
    """Send the trial results kept in STUDY_DIR while the tracking store did not answer.

    A trial whose MLflow writes failed kept them in ``STUDY_DIR/mlflow-buffer``
    (`sweep.tracking.buffer`); this sends them, in order, into the runs they belong to (no run
    is created, so none is doubled) and deletes what was sent. ``sweep run`` does the same when
    it resumes. Exits 0 when everything was sent, 3 when the store still does not answer (what
    was not sent stays), 1 when the store refused a run's writes for another reason.
    """
    if not Path(study_dir).is_dir():
        bad_input(f"STUDY_DIR {study_dir}: not a folder")
    buffer = StudyFolder(Path(study_dir)).buffer
    from sweep.tracking.buffer import buffered_runs

    files = buffered_runs(buffer)
    if not files:
        common.console.print(f"nothing to send: no buffered trial runs in {buffer}",
                             highlight=False)
        return
    uris = {tracking_uri or header.get("tracking_uri") for _, header in files}
    if None in uris or any("***" in u for u in uris):
        bad_input(f"{buffer}: the study's tracking URI hides its password "
                  "(it is never stored); give it with --tracking-uri")
    from sweep.tracking import UnreachableStoreError, check_reachable, shown_uri
    from sweep.tracking.buffer import sync_to

    for uri in sorted(uris):
        try:
            check_reachable(uri, "--tracking-uri" if tracking_uri else "the study's tracking URI")
        except UnreachableStoreError as exc:
            common.stopped(f"{exc}; nothing sent, {len(files)} trial run(s) kept in {buffer}", 3)
    result = sync_to(buffer, lambda header: tracking_uri or header["tracking_uri"])
    shown = ", ".join(shown_uri(u) for u in sorted(uris))
    common.console.print(f"sent {result.writes} write(s) of {len(result.runs)} trial run(s) "
                         f"to {shown}", highlight=False)
    for run_id, reason in result.rejected:
        common.err_console.print(f"run {run_id}: not sent: {reason} (kept in {buffer})",
                                 highlight=False, soft_wrap=True)
    if result.error is not None:
        from sweep.tracking.faults import infrastructure_fault

        common.stopped(f"{infrastructure_fault(result.error)}; {len(result.left)} trial run(s) "
                       f"kept in {buffer}; run sweep sync again once it is back", 3)
    if result.rejected:
        raise typer.Exit(code=1)
