"""Optuna executor: the study lives in Optuna storage, trials run through `sweep.objective`.

Storage is an Optuna journal file in the study folder by default (safe for several processes on
one machine or a shared file system) or any RDB URL (PostgreSQL on a cluster). With
``search.parallel: N`` the driver starts N worker processes that share that storage; ``sweep
worker SPEC`` joins the same study from another machine. Intermediate val losses go to the
pruner at each evaluation (step = evaluation index). Infeasible configs are told to samplers
that take ``constraints_func`` (TPE, GP, NSGA-II) as constraint violations, and to the others
as pruned trials.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from sweep import space
from sweep.objective import StudyContext, evaluate, objective_values
from sweep.progress import ProgressView, TrialRow
from sweep.tracking import shown_uri

__all__ = ["OptunaReporter", "StorageError", "check_storage", "create_study", "make_storage",
           "run", "run_worker"]

_CONSTRAINED_SAMPLERS = ("tpe", "gp", "nsga2")
_STATE_ATTR = "sweep.state"


def make_storage(url: str) -> Any:
    """Optuna storage for ``url``: an RDB URL as is, anything else a journal file path."""
    if "://" in url:
        return url
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    Path(url).parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(url)))


def study_exists(name: str, url: str) -> bool:
    """Whether the storage at ``url`` holds an Optuna study ``name`` (a missing journal: no).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: An RDB storage that cannot be read (`check_storage`
            first tells why).
    """
    if "://" not in url and not Path(url).is_file():
        return False
    storage = make_storage(url)
    return any(s.study_name == name for s in optuna.get_all_study_summaries(storage))


class StorageError(ValueError):
    """An RDB storage URL that cannot be used: no driver, or no database answers."""


def check_storage(url: str, *, timeout_s: int = 10) -> None:
    """Fail fast when an RDB storage URL cannot be used, before the study writes anything.

    Opens one connection with SQLAlchemy (what Optuna's ``RDBStorage`` uses), with a
    ``timeout_s`` connect timeout for PostgreSQL and MySQL. Journal file paths and SQLite files
    are not checked (created on first use).

    Args:
        url: ``search.storage`` as resolved (`sweep.spec.StudySpec.storage_url`).
        timeout_s: Seconds to wait for the database's answer.

    Raises:
        StorageError: Naming ``search.storage`` and the URL (password hidden), with the
            missing driver (``pip install 'transformer-sweep[postgres]'`` for PostgreSQL) or
            the database's answer.
    """
    if "://" not in url:
        return
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    shown = shown_uri(url)
    try:
        parsed = sqlalchemy.engine.make_url(url)
        parsed.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except (sqlalchemy.exc.ArgumentError, ValueError) as exc:
        raise StorageError(f"search.storage {shown}: not a database URL ({exc})") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":  # a file: created on first use, nothing to reach
        return
    args = {"connect_timeout": timeout_s} if backend in ("postgresql", "mysql") else {}
    try:
        engine = sqlalchemy.create_engine(parsed, connect_args=args, poolclass=NullPool)
    except (ImportError, sqlalchemy.exc.NoSuchModuleError) as exc:
        missing = getattr(exc, "name", None) or ""
        hint = (" (pip install 'transformer-sweep[postgres]')"
                if backend == "postgresql" and missing.startswith("psycopg") else "")
        raise StorageError(f"search.storage {shown}: no database driver for it: "
                           f"{exc}{hint}") from None
    try:
        with engine.connect():
            pass
    except (sqlalchemy.exc.SQLAlchemyError, ValueError) as exc:
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
        raise StorageError(f"search.storage {shown}: cannot connect: {reason}") from None
    finally:
        engine.dispose()


class OptunaReporter:
    """`sweep.trial.Reporter` for an Optuna trial.

    Each evaluation's ``val_loss`` goes to ``trial.report`` (step = evaluation index, 1-based;
    single-objective studies only) and, with the tokens seen, to user attrs for the progress
    view. ``should_stop`` asks the pruner.
    """

    def __init__(self, trial: optuna.Trial, *, prune: bool) -> None:
        self.trial, self.prune, self.n_evals = trial, prune, 0

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        self.n_evals += 1
        value = metrics.get("val_loss")
        if value is None or not math.isfinite(value):
            return
        if self.prune:
            self.trial.report(float(value), step=self.n_evals)
        self.trial.set_user_attr("sweep.progress", [int(tokens), float(value)])

    def should_stop(self) -> bool:
        return self.prune and self.trial.should_prune()


def _objective(ctx: StudyContext):
    spec = ctx.spec
    multi = len(spec.search.objectives) > 1
    prune = not multi and spec.search.pruner != "none"

    def objective(trial: optuna.Trial):
        try:
            configs = space.suggest(trial, spec)
        except space.InvalidConfig as err:
            configs = err
        outcome = evaluate(ctx, trial.number, configs, OptunaReporter(trial, prune=prune),
                           raw_params=dict(trial.params))
        trial.set_user_attr(_STATE_ATTR, outcome.state)
        trial.set_user_attr("sweep.run_id", outcome.run_id)
        if outcome.reason:
            trial.set_user_attr("sweep.reason", outcome.reason[:500])
        if math.isfinite(outcome.best_val_loss):
            trial.set_user_attr("sweep.best_val_loss", outcome.best_val_loss)
        if outcome.constraints is not None:
            space.record_constraints(trial, outcome.constraints)
        if outcome.state == "INFEASIBLE":
            if spec.search.sampler in _CONSTRAINED_SAMPLERS and outcome.constraints is not None:
                # Told as a constraint violation; val_loss no better than the unigram baseline.
                penalty = ctx.corpus().baseline_unigram_loss
                values = [penalty if name == "val_loss" else v for name, v in
                          zip(spec.search.objectives, objective_values(spec, outcome),
                              strict=True)]
                return values if multi else values[0]
            raise optuna.TrialPruned(outcome.reason)
        if outcome.state == "PRUNED":
            raise optuna.TrialPruned()
        if outcome.state in ("DIVERGED", "FAILED"):
            # nan makes Optuna record the trial FAIL: it never ranks as best.
            return [math.nan] * len(spec.search.objectives) if multi else math.nan
        values = objective_values(spec, outcome)
        return values if multi else values[0]

    return objective


def create_study(ctx: StudyContext, *, seed_offset: int = 0) -> optuna.Study:
    """Create or load the study in its storage, with the spec's sampler and pruner."""
    spec = ctx.spec
    if seed_offset:
        spec = spec.model_copy(
            update={"search": spec.search.model_copy(update={"seed": spec.search.seed
                                                              + seed_offset})})
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=ctx.spec.name,
        storage=make_storage(ctx.spec.storage_url(ctx.out_dir)),
        sampler=space.make_sampler(spec),
        pruner=space.make_pruner(spec),
        directions=list(spec.search.directions),
        load_if_exists=True,
    )


def _optimize(study: optuna.Study, ctx: StudyContext, n_trials: int) -> None:
    # A trial that raises is recorded FAILED (run and Optuna trial); the study goes on.
    study.optimize(_objective(ctx), n_trials=n_trials, catch=(Exception,),
                   timeout=ctx.spec.search.timeout_s)


def _worker_main(ctx: StudyContext, n_trials: int, seed_offset: int, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    _optimize(create_study(ctx, seed_offset=seed_offset), ctx, n_trials)


def run_worker(ctx: StudyContext, n_trials: int) -> None:
    """Join the study from this process (``sweep worker``) and run ``n_trials`` trials."""
    _optimize(create_study(ctx, seed_offset=os.getpid()), ctx, n_trials)


def _rows(study: optuna.Study) -> list[TrialRow]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        state = t.user_attrs.get(_STATE_ATTR)
        if state is None:
            state = {TrialState.RUNNING: "RUNNING", TrialState.WAITING: "RUNNING",
                     TrialState.PRUNED: "PRUNED", TrialState.COMPLETE: "COMPLETE"}.get(
                         t.state, "FAILED")
        elif t.state == TrialState.RUNNING:
            state = "RUNNING"
        tokens, val_loss = t.user_attrs.get("sweep.progress", [0, math.nan])
        best = t.user_attrs.get("sweep.best_val_loss", math.nan)
        rows.append(TrialRow(t.number, state, dict(t.params), int(tokens), val_loss, best,
                             t.user_attrs.get("sweep.reason")))
    return rows


def run(ctx: StudyContext, n_trials: int, view: ProgressView, *,
        address: str | None = None) -> optuna.Study:
    """Run trials until the study holds ``n_trials`` (``search.parallel`` processes).

    Args:
        ctx: The study context.
        n_trials: Trials the study should hold at the end; a resumed study runs the rest.
        view: Progress display, polled from the storage every second.
        address: Not used: Optuna workers are processes on this machine; other machines join
            through shared storage with ``sweep worker``.

    Returns:
        The Optuna study.
    """
    study = create_study(ctx)
    n_trials = max(0, n_trials - len(study.get_trials(deepcopy=False)))
    parallel = max(1, min(ctx.spec.search.parallel, n_trials))
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(1.0):
            view.update(_rows(study))

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        if n_trials and parallel == 1:
            _optimize(study, ctx, n_trials)
        elif n_trials:
            mp = multiprocessing.get_context("spawn")  # no forked torch/MLflow state
            threads = max(1, (os.cpu_count() or 1) // parallel)
            procs = []
            for i in range(parallel):
                share = n_trials // parallel + (1 if i < n_trials % parallel else 0)
                proc = mp.Process(target=_worker_main, args=(ctx, share, i, threads))
                proc.start()
                procs.append(proc)
            for proc in procs:
                while proc.is_alive():
                    proc.join(timeout=0.5)
            failed = [p.exitcode for p in procs if p.exitcode]
            if failed:
                raise RuntimeError(f"{len(failed)} worker process(es) exited with codes {failed}")
    finally:
        stop.set()
        poller.join(timeout=5)
        view.update(_rows(study))
    return study
