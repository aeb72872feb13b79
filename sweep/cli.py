"""The ``sweep`` command line.

Bad input (a spec, a flag, a file) exits with status 2 and one message naming what is wrong,
before anything is written. Each command's work lives in its own module; this file only parses
flags and prints.
"""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

app = typer.Typer(
    name="sweep",
    help="Hyperparameter search and scaling studies for transformer models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def bad_input(message: str) -> NoReturn:
    """Print ``message`` as an error and exit with status 2 (bad input)."""
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def parse_sets(pairs: list[str] | None) -> dict[str, object]:
    """Parse ``--set key=value`` flags; values are YAML scalars (ints, floats, bools, lists).

    ``3e-4`` is read as a number.

    Raises:
        typer.Exit: With status 2 for a flag without ``=``.
    """
    import yaml

    out: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            bad_input(f"--set {pair!r} must have the form key=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str):
            # PyYAML follows YAML 1.1, which reads 3e-4 as a string; users mean a number.
            try:
                value = float(value)
            except ValueError:
                pass
        out[key.strip()] = value
    return out


@app.callback()
def main() -> None:
    """Hyperparameter search and scaling studies for transformer models."""
    import os

    # MLflow announces every store migration at INFO; the commands report what matters.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # With a tracking server MLflow writes "View run ... at: URL" to stdout for every run it
    # ends, which would break `--json` output; `sweep results` and `sweep ui` show the runs.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


@app.command()
def validate(
    spec_path: str = typer.Argument(..., metavar="SPEC", help="Study spec YAML."),
    samples: int = typer.Option(256, min=1, help="Random configs to price with the cost model."),
    device: str = typer.Option(None, help="Device whose memory bounds max_memory_gb (default: "
                               "the spec's train.device)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Check a spec; print its search space and cost range without training anything.

    Exits 2 for an invalid spec, or a space in which no sampled config is valid and feasible.
    """
    import json

    from rich.table import Table

    from sweep import space
    from sweep.spec import SpecError, load_spec, spec_hash

    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        bad_input(str(exc))
    summary = space.summarize(spec, n_samples=samples, device=device)
    n_ok = summary["n_configs"] - summary["n_invalid"] - summary["n_infeasible"]
    if as_json:
        console.print_json(json.dumps({"name": spec.name, "spec_hash": spec_hash(spec),
                                       "search": spec.search.model_dump(mode="json"),
                                       **summary}))
    else:
        s = spec.search
        console.print(f"[bold]{spec.name}[/] ({spec_hash(spec)}): executor {s.executor}, "
                      f"sampler {s.sampler}, pruner {s.pruner}, scheduler {s.scheduler}, "
                      f"{s.n_trials} trials, objectives "
                      f"{', '.join(f'{o} ({d})' for o, d in spec.objective_directions())}")
        table = Table("parameter", "kind", "domain", "when")
        for row in summary["params"]:
            table.add_row(row["path"], row["kind"], row["domain"], row["when"])
        console.print(table)
        cost = Table("cost", "min", "max")
        for name, rng in summary["cost"].items():
            cost.add_row(name, *(f"{v:,.0f}" for v in rng) if rng else ("-", "-"))
        console.print(cost)
        console.print(f"{summary['n_configs']} configs priced (corners + random): {n_ok} ok, "
                      f"{summary['n_invalid']} invalid, {summary['n_infeasible']} over the "
                      "constraints", highlight=False)
        for kind in ("invalid", "infeasible"):
            for example in summary[f"{kind}_examples"]:
                console.print(f"  {kind}: {example}", highlight=False, soft_wrap=True)
    if n_ok == 0:
        bad_input(f"{spec_path}: none of {summary['n_configs']} sampled configs is valid and "
                  "within the constraints; the study could never train a trial")


def _load_study_spec(spec_path: str, executor: str | None = None, trials: int | None = None):
    from sweep.spec import SpecError, load_spec
    from sweep.study import with_overrides

    if executor is not None and executor not in ("optuna", "ray"):
        bad_input(f"--executor {executor!r} is not one of optuna, ray")
    try:
        return with_overrides(load_spec(spec_path), executor=executor, n_trials=trials)
    except SpecError as exc:
        bad_input(str(exc))


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
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON line."),
) -> None:
    """Run a study: search its space, train each trial, track everything in MLflow.

    Exits 0 when at least one trial completed, 1 when none did, 2 for bad input.
    """
    import json
    import math

    from sweep.data import DataError
    from sweep.study import PreflightError, run_study
    from sweep.tracking import ResumeError

    spec = _load_study_spec(spec_path, executor, trials)
    if address and spec.search.executor != "ray":
        bad_input(f"--address: only the ray executor runs on a Ray cluster; this study's "
                  f"executor is {spec.search.executor} (add --executor ray)")
    try:
        summary = run_study(spec, out_dir=out, quiet=quiet or as_json, ray_address=address,
                            device=device, console=console)
    except (DataError, ResumeError, PreflightError) as exc:
        bad_input(str(exc))
    counts = {k.lower(): v for k, v in summary.counts.items() if v}
    if as_json:
        print(json.dumps({
            "study": summary.name, "state": summary.state, "counts": counts,
            "best_val_loss": summary.best_val_loss if math.isfinite(summary.best_val_loss)
            else None,
            "best_trial": summary.best_trial,
            "baseline_unigram_loss": summary.baseline_unigram_loss,
            "out_dir": str(summary.out_dir), "tracking_uri": summary.tracking_uri,
            "parent_run_id": summary.parent_run_id,
        }))
    elif not quiet:
        _print_top_trials(summary)
    if summary.state != "COMPLETE":
        err_console.print(
            f"[bold red]study {summary.name}: no trial completed[/] ({counts or 'no trials'}); "
            f"see the trials' sweep.fail_reason tags in {summary.tracking_uri}",
            highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)


def _print_top_trials(summary, top: int = 5) -> None:
    import math

    from rich.table import Table

    from sweep.progress import format_params
    from sweep.results import load_results

    frame = load_results(summary.out_dir, tracking_uri=summary.tracking_uri)
    searched = [c for c in frame.columns if c.startswith(("model.", "train."))
                and frame[c].astype(str).nunique() > 1]
    table = Table("trial", "state", "best val_loss", "n_params", "searched params",
                  title=f"top trials of {summary.name}")
    for _, row in frame.head(top).iterrows():
        loss = row.get("best_val_loss", math.nan)
        table.add_row(str(row["trial"]), row["state"],
                      f"{loss:.4f}" if math.isfinite(loss) else "-",
                      f"{row.get('n_params', math.nan):,.0f}",
                      format_params({c: row[c] for c in searched}, limit=len(searched)))
    console.print(table)
    counts = ", ".join(f"{v} {k.lower()}" for k, v in summary.counts.items() if v)
    best = (f"{summary.best_val_loss:.4f} (trial {summary.best_trial})"
            if math.isfinite(summary.best_val_loss) else "-")
    console.print(f"{counts}; best val_loss {best}; unigram baseline "
                  f"{summary.baseline_unigram_loss:.4f} nats/token", highlight=False)
    console.print(f"MLflow store: {summary.tracking_uri}  (browse: sweep ui {summary.out_dir})",
                  highlight=False, soft_wrap=True)


@app.command()
def train(
    preset: str = typer.Option("tiny", help="Model preset (models/presets.py)."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                   help="model.FIELD=VALUE or train.FIELD=VALUE (repeatable)."),
    data: str = typer.Option("builtin:python-stdlib", help="Corpus URI (sweep/data.py)."),
    budget_tokens: float = typer.Option(None, help="Token budget (default 2e5 unless a train.* "
                                                   "budget is set)."),
    out: str = typer.Option("runs/train", help="Output folder; prepared corpora cached here."),
    device: str = typer.Option(None, help="Training device (default: CUDA when present)."),
    as_json: bool = typer.Option(False, "--json", help="End with the result as one JSON line."),
) -> None:
    """Train one trial and print its evaluations and result (debug a config before a sweep).

    Exits 0 when the trial completes, 1 when it diverges, 2 for bad input.
    """
    import json

    from models.errors import ConfigError
    from sweep.data import DataError
    from sweep.train_command import PrintReporter, TrainRequest, result_json

    try:
        request = TrainRequest(preset, parse_sets(sets), data, budget_tokens, out)
        request.check_fits(device)
        corpus = request.load()
        trainer = request.trainer(corpus, device)
    except (ConfigError, DataError, ValueError) as exc:
        bad_input(str(exc))
    lines = err_console if as_json else console
    lines.print(f"{request.model_config.n_layers} layers, d_model {request.model_config.d_model}"
                f", {trainer.n_params:,} params on {trainer.device}; {corpus.uri}: unigram "
                f"baseline {corpus.baseline_unigram_loss:.4f} nats/token"
                + (f", entropy rate {corpus.entropy_rate:.4f}" if corpus.entropy_rate else ""),
                highlight=False, soft_wrap=True)
    result = trainer.train(
        PrintReporter(lambda line: lines.print(line, highlight=False, soft_wrap=True)))
    summary = result_json(result, request, trainer)
    if as_json:
        print(json.dumps(summary))
    else:
        console.print(
            f"{result.state}: best val_loss {result.best_val_loss:.4f}, final "
            f"{result.final_val_loss:.4f} (unigram {result.baseline_unigram_loss:.4f}) after "
            f"{result.tokens:,} tokens, {result.steps} steps, {result.wall_s:.1f} s"
            + (f", MFU {result.mfu:.1%}" if result.mfu is not None else ""),
            highlight=False, soft_wrap=True)
    if result.state != "COMPLETE":
        err_console.print(f"[bold red]trial {result.state}[/]: {result.fail_reason}",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)


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
    shared file system).
    """
    from pathlib import Path

    from sweep.executors import optuna_executor
    from sweep.objective import StudyContext
    from sweep.tracking import (
        TrialContext,
        UnreachableStoreError,
        check_reachable,
        find_study,
        shown_uri,
    )

    spec = _load_study_spec(spec_path, "optuna")
    out_dir = Path(out) if out else spec.default_output_dir()
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
    ctx = StudyContext(spec, out_dir, TrialContext(uri, *found), device=device)
    optuna_executor.run_worker(ctx, trials)


def _format_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n} B"


@app.command("estimate")
def estimate_cmd(
    preset: str = typer.Option("gpt2", help="Model preset to start from."),
    sets: list[str] = typer.Option(None, "--set", metavar="FIELD=VALUE",
                                   help="Override a model field (repeatable)."),
    batch_size: int = typer.Option(1, "--batch-size", min=1, help="Sequences per step."),
    seq_len: int = typer.Option(None, "--seq-len", help="Tokens per sequence (<= the "
                                "config's seq_len; change that with --set seq_len=N)."),
    dtype: str = typer.Option("fp32", help="fp32, or bf16 (autocast, fp32 weights)."),
    optimizer: str = typer.Option("adamw", help="adamw, or sgd (with momentum)."),
    attn_backend: str = typer.Option(None, "--attn-backend",
                                     help="auto, sdpa, flex or math (default: the config's)."),
    device: str = typer.Option("cuda", help="cuda or cpu: which kernels the estimate assumes."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Parameters, FLOPs per token and training memory of a model, without building it."""
    import json

    from rich.table import Table

    from models import ConfigError, ModelConfig
    from models import cost as cost_model

    overrides = parse_sets(sets)
    try:
        config = ModelConfig.from_preset(preset, **overrides)
        est = cost_model.estimate(config, batch_size=batch_size, seq_len=seq_len, dtype=dtype,
                                  optimizer=optimizer, attn_backend=attn_backend, device=device)
    except ConfigError as exc:
        bad_input(str(exc))
    if as_json:
        typer.echo(json.dumps({"preset": preset, "config": config.to_dict(), **est.to_dict()}))
        return
    title = " ".join([preset, *(f"{k}={v}" for k, v in overrides.items())])
    table = Table("quantity", "value", title=title)
    table.add_row("parameters", f"{est.n_params:,}")
    table.add_row("non-embedding parameters", f"{est.n_params_non_embedding:,}")
    table.add_row("FLOPs/token forward (kept pairs)", f"{est.flops_per_token_fwd:,.0f}")
    table.add_row("FLOPs/token train (kept pairs)", f"{est.flops_per_token_train:,.0f}")
    table.add_row("FLOPs/token train (dense, 6N + 12LHqT)",
                  f"{est.flops_per_token_dense_train:,.0f}")
    attn = est.attn_layout
    size = ", ".join(f"{k}={attn[k]}" for k in ("window", "stride", "block_size",
                                                 "n_window_blocks", "n_global_blocks",
                                                 "n_random_blocks") if k in attn)
    table.add_row("attention", f"{attn['pattern']} {size}".strip())
    table.add_row("attention sparsity (achieved / asked)",
                  f"{attn['sparsity']:.4f} / {attn['requested_sparsity']:.4f}")
    table.add_section()
    for name, value in est.memory.to_dict().items():
        table.add_row(f"memory: {name}", _format_bytes(value))
    console.print(table)
    console.print(f"B={est.batch_size}, T={est.seq_len}, {est.dtype}, {est.optimizer}, "
                  f"attention backend {est.attn_backend} on {est.device}; memory total is the "
                  "peak of a steady-state training step", highlight=False)


_REASON_WIDTH = 40  # characters of a failure reason per line in `sweep results`


def _format_cell(value: object) -> str:
    import math

    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else "-"
    return "-" if value is None else str(value)


def _format_count(value: object) -> str:
    """A count with an SI suffix and 4 significant digits: 599040 -> ``599k``."""
    import math

    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return _format_cell(value)
    for suffix, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.4g}{suffix}"
    return f"{value:.4g}"


@app.command()
def results(
    study: str = typer.Argument(..., metavar="STUDY_OR_DIR",
                                help="Study name (./runs/<name>), its folder, or its mlflow.db."),
    csv: str = typer.Option(None, "--csv", metavar="FILE", help="Also write all trials as CSV."),
    as_json: bool = typer.Option(False, "--json", help="Print the trials as JSON records."),
    top: int = typer.Option(20, min=1, help="Trials to print (best first)."),
    tracking_uri: str = typer.Option(None, help="MLflow tracking URI (then STUDY is the "
                                                "experiment name), e.g. http://host:5000."),
) -> None:
    """Show a study's trials, best validation loss first (diverged and failed last)."""
    from rich.table import Table

    from sweep.results import StudyNotFoundError, load_results
    from sweep.tracking import UnreachableStoreError

    try:
        frame = load_results(study, tracking_uri=tracking_uri)
    except (StudyNotFoundError, UnreachableStoreError) as exc:
        bad_input(str(exc))
    except Exception as exc:  # MLflow's errors for an unreachable or unknown store
        from sweep.tracking import shown_uri

        bad_input(f"--tracking-uri {shown_uri(tracking_uri)}: {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''}")
    if csv:
        try:
            frame.to_csv(csv, index=False)
        except OSError as exc:
            bad_input(f"--csv {csv}: {exc.strerror or exc}")
    shown = frame.head(top)
    if as_json:
        print(shown.to_json(orient="records"))
        return
    lead = {"trial": "#", "state": "state", "best_val_loss": "best val", "final_val_loss":
            "final val", "tokens": "tokens", "n_params": "params", "flops_per_token": "FLOPs/tok"}
    varied = {c: c.split(".", 1)[1] for c in frame.columns
              if c.startswith(("model.", "train.")) and frame[c].astype(str).nunique() > 1}
    columns = {c: h for c, h in lead.items() if c in frame.columns}
    if "fail_reason" in frame.columns and shown["fail_reason"].notna().any():
        columns["fail_reason"] = "reason"
    columns.update(varied)
    counts = ("tokens", "n_params", "flops_per_token")
    cells = {c: [_format_count(v) if c in counts else _format_cell(v) for v in shown[c]]
             for c in columns}
    # A box table spends 3 characters a column (padding and border) and 1 more at the edge.
    widths = {c: max([len(h)] + [len(x) for x in cells[c]]) + 3 for c, h in columns.items()}
    if "fail_reason" in widths:
        widths["fail_reason"] = min(widths["fail_reason"], _REASON_WIDTH + 3)
    out, left_out = console, []
    if not console.is_terminal:  # a file or a pipe: whole lines, every column
        from rich.console import Console

        out = Console(width=max(80, 1 + sum(widths.values())))
    else:  # drop the last columns that do not fit; the lead ones always stay
        while len(columns) > len(lead) and 1 + sum(widths.values()) > console.width:
            dropped = list(columns)[-1]
            left_out.insert(0, columns.pop(dropped))
            widths.pop(dropped)
    table = Table(title=f"{frame.attrs['study']}: {len(frame)} trials (best first)")
    for column, header in columns.items():
        wide = column == "fail_reason"
        table.add_column(header, overflow="fold", no_wrap=not wide,
                         max_width=_REASON_WIDTH if wide else None)
    for row in range(len(shown)):
        table.add_row(*(cells[c][row] for c in columns))
    out.print(table)
    if left_out:
        out.print(f"not shown (terminal too narrow): {', '.join(left_out)}; all columns with "
                  "--csv FILE or --json", highlight=False)
    if csv:
        console.print(f"wrote {len(frame)} trials to {csv}", highlight=False)


def _latest_store() -> str:
    from pathlib import Path

    stores = sorted(Path("runs").glob("*/mlflow.db"), key=lambda p: p.stat().st_mtime)
    if not stores:
        bad_input("no study store under ./runs; pass STUDY_OR_DIR or --tracking-uri")
    return str(stores[-1].parent)


@app.command()
def ui(
    study: str = typer.Argument(None, metavar="[STUDY_OR_DIR]",
                                help="Study name, folder or mlflow.db (default: the latest "
                                     "store under ./runs)."),
    port: int = typer.Option(5000, min=1, max=65535, help="Port to serve on."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (keep local unless trusted)."),
    block: bool = typer.Option(True, "--block/--no-block",
                               help="Serve until Ctrl-C, or start in the background and return."),
) -> None:
    """Open the MLflow UI on a study's store and print its URL."""
    import socket

    from sweep.results import StudyNotFoundError, resolve_study, start_ui, stop_ui
    from sweep.tracking import find_study

    try:
        uri, name = resolve_study(study or _latest_store())
    except StudyNotFoundError as exc:
        bad_input(str(exc))
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(f"[bold yellow]warning:[/] --host {host} serves the MLflow UI, which "
                          "has no authentication, beyond this machine", highlight=False)
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            bad_input(f"cannot serve on {host}:{port} ({exc.strerror}); pass another --port")
    experiment_id, _ = find_study(uri, name)
    try:
        proc = start_ui(uri, host=host, port=port)
    except RuntimeError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(code=1) from exc
    url = f"http://{host}:{port}/#/experiments/{experiment_id}"
    console.print(f"MLflow UI for study {name}: {url}", highlight=False, soft_wrap=True)
    if not block:
        console.print(f"server pid {proc.pid}; stop it with: kill -- -{proc.pid}",
                      highlight=False)
        return
    console.print("Ctrl-C to stop", highlight=False)
    try:
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_ui(proc)


if __name__ == "__main__":  # pragma: no cover
    app()
