"""Commands that read a study back: ``sweep results``, ``sweep ui``, ``sweep dashboard``.

A table of the trials, the MLflow UI on the study's store, optuna-dashboard on its Optuna storage.
"""

from __future__ import annotations

import math
import socket
from typing import TYPE_CHECKING, Any

import typer

from sweep.cli import common
from sweep.cli.common import app, as_bad_input, bad_input
from sweep.errors import InputError
from sweep.folder import RUNS, StudyFolder
from sweep.schema import (
    METRIC_BASELINE,
    METRIC_BEST_VAL_LOSS,
    METRIC_FINAL_VAL_LOSS,
    METRIC_FLOPS_PER_TOKEN,
    METRIC_N_PARAMS,
)

if TYPE_CHECKING:
    from rich.console import Console

_REASON_WIDTH = 40  # characters of a failure reason per line in `sweep results`


def _format_cell(value: object) -> str:

    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else "-"
    return "-" if value is None else str(value)


def _format_count(value: object) -> str:
    """A count with an SI suffix and 4 significant digits: 599040 -> ``599k``."""
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
    """Show a study's trials, best validation loss first (diverged and failed last).

    With the loss over the corpus's unigram baseline (below 1: better than any model that ignores
    context) and, for byte-level corpora, the best loss in bits per byte.
    """
    from rich.table import Table

    frame = _load(study, tracking_uri)
    if csv:
        with as_bad_input(f"--csv {csv}", OSError):
            frame.to_csv(csv, index=False)
    shown = frame.head(top)
    if as_json:
        print(shown.to_json(orient="records"))
        return
    lead, columns = _columns(frame, shown)
    counts = ("tokens", METRIC_N_PARAMS, METRIC_FLOPS_PER_TOKEN)
    cells = {c: [_format_count(v) if c in counts else _format_cell(v) for v in shown[c]]
             for c in columns}
    out, left_out = _fit(columns, len(lead), cells)
    table = Table(title=_title(frame))
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
        common.console.print(f"wrote {len(frame)} trials to {csv}", highlight=False)


def _load(study: str, tracking_uri: str | None) -> Any:
    """The study's trials (`sweep.results.load_results`); exits 2 when they cannot be read."""
    from sweep.results import load_results

    try:
        return load_results(study, tracking_uri=tracking_uri)
    except InputError:
        raise  # its message says what is wrong; the app exits 2 with it
    except Exception as exc:  # MLflow's errors for an unreachable or unknown store
        from sweep.tracking import shown_uri

        first = str(exc).splitlines()[0] if str(exc) else ""
        where = f"--tracking-uri {shown_uri(tracking_uri)}" if tracking_uri else study
        bad_input(f"{where}: {type(exc).__name__}: {first}")


def _columns(frame: Any, shown: Any) -> tuple[dict[str, str], dict[str, str]]:
    """The lead columns (always shown), and every column to show: ``{column: header}``.

    The lead ones, the failure reason where a shown trial has one, then the searched params
    as the spec names them, then the other model and train fields whose values differ.
    """
    from sweep.results import BEST_VAL_BPB, LOSS_OVER_BASELINE

    lead = {"trial": "#", "state": "state", METRIC_BEST_VAL_LOSS: "best val"}
    if math.isfinite(frame.attrs[METRIC_BASELINE]):
        lead[LOSS_OVER_BASELINE] = "loss / baseline"
    if frame.attrs["byte_level"]:
        lead[BEST_VAL_BPB] = "bpb"
    lead.update({METRIC_FINAL_VAL_LOSS: "final val", "tokens": "tokens",
                 METRIC_N_PARAMS: "params", METRIC_FLOPS_PER_TOKEN: "FLOPs/tok"})
    varied = {c: c.split(".", 1)[1] for c in frame.attrs.get("searched", [])}
    varied.update({c: c.split(".", 1)[1] for c in frame.columns if c not in varied
                   and c.startswith(("model.", "train.")) and frame[c].astype(str).nunique() > 1})
    columns = {c: h for c, h in lead.items() if c in frame.columns}
    if "fail_reason" in frame.columns and shown["fail_reason"].notna().any():
        columns["fail_reason"] = "reason"
    columns.update(varied)
    return lead, columns


def _fit(columns: dict[str, str], n_lead: int,
         cells: dict[str, list[str]]) -> tuple[Console, list[str]]:
    """The console to print on, and the headers of the columns left out to fit the terminal.

    A file or a pipe gets whole lines and every column; a terminal loses the last columns that
    do not fit (removed from ``columns``), never the ``n_lead`` first ones.
    """
    from rich.console import Console

    # A box table spends 3 characters a column (padding and border) and 1 more at the edge.
    widths = {c: max([len(h)] + [len(x) for x in cells[c]]) + 3 for c, h in columns.items()}
    if "fail_reason" in widths:
        widths["fail_reason"] = min(widths["fail_reason"], _REASON_WIDTH + 3)
    if not common.console.is_terminal:
        return Console(width=max(80, 1 + sum(widths.values()))), []
    left_out: list[str] = []
    while len(columns) > n_lead and 1 + sum(widths.values()) > common.console.width:
        dropped = list(columns)[-1]
        left_out.insert(0, columns.pop(dropped))
        widths.pop(dropped)
    return common.console, left_out


def _title(frame: Any) -> str:
    """The study, its trials and, where known, the corpus's unigram baseline."""
    title = f"{frame.attrs['study']}: {len(frame)} trials (best first)"
    if frame.attrs.get("simulated"):
        title = f"SIMULATED ({frame.attrs['simulated']}; no model trained) {title}"
    if math.isfinite(frame.attrs[METRIC_BASELINE]):
        base = frame.attrs[METRIC_BASELINE]
        title += f"; unigram baseline {base:.4f} nats/token"
        if frame.attrs["byte_level"]:
            title += f" ({base / math.log(2):.4f} bits/byte)"
    return title


def _latest_store() -> str:

    stores = sorted((StudyFolder(p).mlflow_db for p in RUNS.glob("*")
                     if StudyFolder(p).mlflow_db.is_file()), key=lambda p: p.stat().st_mtime)
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
                               help="Serve until Ctrl-C (or SIGTERM, SIGHUP), or start in the "
                                    "background and return."),
    open_browser: bool = typer.Option(False, "--open", help="Also open the URL in this "
                                                            "machine's web browser."),
    jobs: bool = typer.Option(False, "--jobs", help="Also run MLflow's GenAI job workers "
                                                    "(LLM judges; 8 more processes)."),
) -> None:
    """Serve the MLflow UI on a study's store, read-only, and print the URL of its trials."""
    from sweep.results import (
        Stopped,
        StudyNotFoundError,
        resolve_study,
        runs_view_url,
        start_ui,
        stop_signals,
        stop_ui,
    )
    from sweep.tracking import find_study, read_landing_query, shown_uri

    uri, name = resolve_study(study or _latest_store())
    if host not in ("127.0.0.1", "localhost", "::1"):
        common.err_console.print(
            f"[bold yellow]warning:[/] --host {host} serves the MLflow UI, which "
                          "has no authentication, beyond this machine", highlight=False)
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            bad_input(f"cannot serve on {host}:{port} ({exc.strerror}); pass another --port")
    found = find_study(uri, name)
    if found is None:  # resolve_study saw its parent run; the store has changed since
        raise StudyNotFoundError(f"no study {name!r} in {shown_uri(uri)}")
    experiment_id, parent_run_id = found
    query = read_landing_query(uri, experiment_id, parent_run_id)
    # From here to the end a stop signal stops the server, even while it is starting.
    with stop_signals():
        proc = None
        try:
            proc = start_ui(uri, host=host, port=port, read_only=True, job_execution=jobs)
            url = runs_view_url(f"http://{host}:{port}", experiment_id, query)
            common.console.print(f"MLflow UI for study {name}: {url}", highlight=False,
                                 soft_wrap=True)
            if open_browser:
                import webbrowser

                webbrowser.open(url)
            if not block:
                common.console.print(f"server pid {proc.pid}; stop it with: kill -- -{proc.pid}",
                                     highlight=False)
                proc = None  # left running
                return
            common.console.print("Ctrl-C to stop", highlight=False)
            proc.wait()
        except RuntimeError as exc:
            common.err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(code=1) from exc
        except (KeyboardInterrupt, Stopped) as exc:
            common.console.print(f"stopped the MLflow UI ({getattr(exc, 'name', 'SIGINT')})",
                                 highlight=False)
        finally:
            if proc is not None:
                stop_ui(proc)


@app.command()
def dashboard(
    study_dir: str = typer.Argument(..., metavar="STUDY_DIR",
                                    help="The study's output folder (runs/<name> or --out)."),
    port: int = typer.Option(8080, min=1, max=65535, help="Port to serve on."),
    storage: str = typer.Option(None, metavar="URL", help="The Optuna storage (an RDB URL or a "
                                "journal file) when the folder does not say it in full."),
    allow_writes: bool = typer.Option(False, "--allow-writes",
                                      help="Let the dashboard write to the storage (notes, "
                                           "renames, deletes); read-only otherwise."),
) -> None:
    """Serve optuna-dashboard on 127.0.0.1 over a study's Optuna storage, read-only by default.

    Live while the study runs (it reads the journal or database as trials are written); stops
    on Ctrl-C, SIGTERM or SIGHUP.
    """
    from sweep.results.dashboard import locate_storage

    host = "127.0.0.1"  # the dashboard has no authentication
    found = locate_storage(study_dir, storage)
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            bad_input(f"cannot serve on {host}:{port} ({exc.strerror}); pass another --port")
    from sweep.results.dashboard import open_storage, serve_dashboard
    from sweep.tracking import shown_uri

    opened = open_storage(found.url, writable=allow_writes)
    mode = "read-write" if allow_writes else "read-only"

    def ready(url: str) -> None:
        where = f"{url}/dashboard"
        if found.study is not None:
            try:
                where += f"/studies/{opened.get_study_id_from_name(found.study)}"
            except KeyError:  # no trial has written the study yet
                pass
        common.console.print(f"optuna-dashboard for {shown_uri(found.url)} ({mode}): {where}",
                             highlight=False, soft_wrap=True)
        common.console.print("Ctrl-C to stop", highlight=False)

    name = serve_dashboard(opened, host=host, port=port, ready=ready)
    common.console.print(f"stopped optuna-dashboard ({name})", highlight=False)


if __name__ == "__main__":  # pragma: no cover
    app()
