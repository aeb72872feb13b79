"""Ray Tune executor: a `Tuner` with `OptunaSearch` and a trial scheduler, trials in Ray actors.

Search: ``OptunaSearch`` drives the same Optuna sampler as the Optuna executor
(`sweep.space.make_sampler`) over the same define-by-run space (`sweep.space.define_by_run`);
the metric is ``val_loss`` (mode ``min``), or the list of ``search.objectives`` with their
directions for a multi-objective study. Schedulers (``search.scheduler``), all with time
attribute ``tokens`` (training tokens seen; ``time_total_s`` for a seconds budget):

- ``asha``: asynchronous successive halving (Li et al. 2020, "A System for Massively Parallel
  Hyperparameter Tuning"), reduction factor 3;
- ``hyperband``: its asynchronous Hyperband form (same paper), 3 brackets; the synchronous
  ``HyperBandScheduler`` pauses trials, which would restart these checkpoint-less trials;
- ``median``: the median stopping rule (Golovin et al. 2017, Google Vizier);
- ``pbt``: population-based training (Jaderberg et al. 2017), see below;
- ``none``: every trial trains its whole budget.

Every trial but PBT's runs through `sweep.objective.evaluate`, so the MLflow layout (child run
``trial-<n>`` per trial, state tags, metrics) and the results table are those of the Optuna
executor. Trial numbers are the Optuna trial numbers of ``OptunaSearch``'s study (plus the
number of trials a resumed study already holds), passed to the trainable in its config as
``sweep.trial_number``. Each evaluation goes to `ray.tune.report` with the tokens seen; the
trainable's last report carries ``sweep_state`` and ``val_loss`` = the trial's best val loss
(what the Optuna executor tells its sampler). A trial that a scheduler stops is ended by Ray:
the driver-side `_Tracker` callback ends its MLflow run ``PRUNED`` (when the trial did not get
to record it itself) with the tokens it had trained. Infeasible trials train nothing and report
once with val loss = the corpus's unigram baseline, so schedulers and samplers carry on (the
sampler sees that penalty, not constraint values as under the Optuna executor); trials that
raise end ``FAILED`` and the study continues. ``search.parallel`` caps concurrent trials of a
search; PBT members share what the cluster's CPUs/GPUs allow (``resources``), and members
waiting for a slot are paused and resumed from their own checkpoints.

Population-based training: Ray Tune cannot combine a search algorithm with PBT, so the initial
population is `sweep.space.sample_params` (``search.n_trials`` members, seed ``search.seed``),
one Ray trial per member (``sweep.member``), and ``search.pbt.hyperparam_mutations`` become
Ray's ``hyperparam_mutations`` (`sweep.space.pbt_mutations`); mutated values are clipped to
their domain (integers rounded). Members keep their shapes: the spec only lets PBT mutate
shape-preserving fields. Each member trains in chunks of ``checkpoint_interval`` tokens
(default: the perturbation interval) and reports each chunk with a checkpoint
(`sweep.trial.Trainer.save_checkpoint`), so every member has one before it can be exploited.
On exploit, Ray restarts the member from the donor's checkpoint with a mutated config: the
member loads it, applies the config's mutable values, and continues logging to its own MLflow
run (found by its trial number), recording the new values with
`sweep.tracking.TrialRun.log_mutation` at the donor's token count, and the donor's trial number
as ``pbt.donor`` (metric at that step and tag). ``search.pbt.synch`` picks Ray's synchronous
PBT (members wait for each other at every interval) over the default asynchronous one.

Ray: a cluster at ``address`` (or ``RAY_ADDRESS``), else a local instance bound to 127.0.0.1
with all CPUs and no dashboard; an instance already started in this process is used as is.
`check_address` refuses an address where nothing answers before anything is written (Ray itself
would wait for minutes). A cluster with token authentication needs ``RAY_AUTH_MODE=token`` and
its token in the driver's environment before Ray is imported.
GPUs per trial are requested only when the cluster has GPUs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import optuna

from models.errors import ConfigError
from sweep import space
from sweep.objective import StudyContext, evaluate, start_run
from sweep.progress import ProgressView, TrialRow
from sweep.spec import PBT_MUTABLE, ChoiceDomain, IntDomain, StudySpec
from sweep.tracking import TrialContext, TrialRun, cost_metrics, read_trials
from sweep.train_config import resolve_budget
from sweep.trial import Trainer

__all__ = ["TuneReporter", "budget_tokens", "find_trial_run", "init_ray", "make_scheduler",
           "member_index", "run"]

log = logging.getLogger(__name__)

NUMBER_KEY = "sweep.trial_number"
MEMBER_KEY = "sweep.member"
STATE_KEY = "sweep_state"
RUN_ID_KEY = "sweep_run_id"
_CKPT_FILE = "trainer.pt"
_META_FILE = "member.json"
_REDUCTION = 3


# ----------------------------------------------------------------------------------- Ray
def init_ray(address: str | None = None) -> bool:
    """Connect to Ray unless this process already has; returns whether it connected here.

    Args:
        address: A cluster address (``auto``, ``host:6379``, ``ray://host:10001``); default
            ``RAY_ADDRESS``, else a local instance (all CPUs, bound to 127.0.0.1, no dashboard).
    """
    import ray

    if ray.is_initialized():
        return False
    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, **quiet)
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False,
                 _node_ip_address="127.0.0.1", **quiet)
    return True


class UnreachableClusterError(ValueError):
    """A Ray cluster address that is malformed or where no cluster answers."""


def check_address(address: str | None, source: str = "--address", *,
                  timeout_s: float = 5.0) -> None:
    """Fail fast when a Ray cluster address does not answer.

    ``ray.init(address=...)`` waits for an absent cluster's GCS for minutes, logging retries,
    before it gives up; one TCP connection to the address (the GCS port, or the Ray Client
    server port of ``ray://host:port``) that must answer an HTTP/2 preface (both are gRPC
    servers, `_speaks_http2`) tells within ``timeout_s``. ``auto`` is resolved the way Ray does (the
    cluster last started on this machine, recorded in Ray's temp folder); ``local`` and None
    start a new local instance and need no check.

    Args:
        address: ``host:port``, ``ray://host:port``, ``auto``, ``local`` or None.
        source: Where the address came from, for the message (``--address``, ``RAY_ADDRESS``).
        timeout_s: Seconds to wait for the connection.

    Raises:
        UnreachableClusterError: Naming ``source``, the address and the rule or network error.
    """
    if address in (None, "", "local"):
        return
    target = address
    if address == "auto":
        from ray._private import services

        try:
            target = services.canonicalize_bootstrap_address("auto")
        except ConnectionError:
            target = None
        if target is None:
            raise UnreachableClusterError(
                f"{source} auto: no Ray cluster was started on this machine; start one "
                "(ray start --head --node-ip-address 127.0.0.1) or give its host:port")
    host, sep, port = target.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UnreachableClusterError(
            f"{source} {address}: not a Ray address (host:port, ray://host:port, auto or local)")
    try:
        grpc = _speaks_http2(host.strip("[]"), int(port), timeout_s)
    except OSError as exc:
        raise UnreachableClusterError(
            f"{source} {address}: no Ray cluster answers at {host}:{port} "
            f"({exc.strerror or exc or 'no answer'}); start it (ray start --head) or fix the "
            "address") from None
    if not grpc:
        raise UnreachableClusterError(
            f"{source} {address}: the server at {host}:{port} is not a Ray cluster (it does not "
            "speak gRPC); give the head's GCS port (ray start --head --port, default 6379) or "
            "ray://host:port of its Ray Client server")


def _speaks_http2(host: str, port: int, timeout_s: float) -> bool:
    """Whether ``host:port`` answers the HTTP/2 connection preface with a SETTINGS frame.

    Ray's GCS and Ray Client servers are gRPC servers, and an HTTP/2 server's first frame is
    SETTINGS (RFC 9113, section 3.4); an HTTP/1 server answers text or closes.

    Raises:
        OSError: No connection, or no answer within ``timeout_s``.
    """
    import socket

    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(preface)
        head = b""
        while len(head) < 9:
            chunk = sock.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    return head[3] == 4  # frame type SETTINGS


def _resources(spec: StudySpec) -> dict[str, float]:
    import ray

    cluster = ray.cluster_resources()
    cpus = min(spec.resources.cpus_per_trial, cluster.get("CPU", 1.0))
    gpus = spec.resources.gpus_per_trial
    if gpus and not cluster.get("GPU"):
        log.warning("resources.gpus_per_trial=%s but the Ray cluster has no GPUs; trials run "
                    "on CPUs", gpus)
        gpus = 0.0
    return {"cpu": cpus, "gpu": gpus}


# ------------------------------------------------------------------------------- budgets
def budget_tokens(spec: StudySpec, n_samples: int = 32) -> tuple[int, int] | None:
    """Smallest and largest training budget of the space in tokens, or None (seconds budget).

    Resolved with `sweep.train_config.resolve_budget` for the space's two corners and
    ``n_samples`` random configs (FLOP budgets give small models more tokens).
    """
    if spec.budget()[0] == "seconds":
        return None
    tokens = []
    for params in space.corner_params(spec) + space.sample_params(spec, n_samples):
        try:
            model, train = space.configs_from_params(spec, params)
            tokens.append(resolve_budget(train, model).total_tokens)
        except Exception:  # invalid combinations are recorded INFEASIBLE by the trials
            continue
    tokens = [t for t in tokens if t]
    return (min(tokens), max(tokens)) if tokens else None


def make_scheduler(spec: StudySpec) -> Any:
    """The Ray Tune scheduler ``search.scheduler`` names (time attribute: tokens trained).

    ASHA and async Hyperband get ``max_t`` above the largest budget (trials end on their own
    budget, never at ``max_t``) and a grace period of a ninth of the smallest budget; the
    median rule starts judging after that grace period with 3 trials. A seconds budget is
    measured in Ray's ``time_total_s`` (wall time of the trial, startup included).
    """
    from ray.tune import schedulers

    s = spec.search
    if s.scheduler == "pbt":
        return schedulers.PopulationBasedTraining(
            time_attr="tokens", metric="val_loss", mode="min",
            perturbation_interval=s.pbt.perturbation_interval,
            hyperparam_mutations=space.pbt_mutations(spec),
            quantile_fraction=s.pbt.quantile_fraction,
            resample_probability=s.pbt.resample_probability,
            synch=s.pbt.synch,
            custom_explore_fn=_clip_mutations(spec),
        )
    if s.scheduler == "none":
        return schedulers.FIFOScheduler()
    bounds = budget_tokens(spec)
    kind, budget = spec.budget()
    if kind == "seconds":
        top = max(budget.options) if isinstance(budget, ChoiceDomain) else \
            budget.bounds[1] if hasattr(budget, "bounds") else budget
        time_attr, max_t, grace = "time_total_s", float(top) * 1.5, float(top) / 9
    elif bounds is None:  # no valid config in the space: every trial is infeasible anyway
        time_attr, max_t, grace = "tokens", 2**62, 1
    else:
        time_attr, max_t, grace = "tokens", int(bounds[1] * 1.5) + 1, max(1, bounds[0] // 9)
    if s.scheduler == "median":
        return schedulers.MedianStoppingRule(time_attr=time_attr, metric="val_loss", mode="min",
                                             grace_period=grace, min_samples_required=3)
    return schedulers.AsyncHyperBandScheduler(
        time_attr=time_attr, metric="val_loss", mode="min", max_t=max_t, grace_period=grace,
        reduction_factor=_REDUCTION, brackets=3 if s.scheduler == "hyperband" else 1)


def _mutation_domains(spec: StudySpec) -> dict[str, Any]:
    out = {}
    for name, domain in spec.search.pbt.hyperparam_mutations.items():
        out[name if "." in name else f"{PBT_MUTABLE[name]}.{name}"] = domain
    return out


def _clip_mutations(spec: StudySpec):
    domains = _mutation_domains(spec)

    def explore(config: dict[str, Any]) -> dict[str, Any]:
        """Clip perturbed values into their domain; integers rounded."""
        for path, d in domains.items():
            if path not in config or isinstance(d, ChoiceDomain):
                continue
            lo, hi = d.bounds
            value = min(max(config[path], lo), hi)
            config[path] = int(round(value)) if isinstance(d, IntDomain) else float(value)
        return config

    return explore


# ------------------------------------------------------------------------------ trainables
def _session_alive() -> bool:
    """Whether Ray still runs this trial.

    When Ray ends a function trainable (a scheduler stopped it, PBT restarts it from another
    checkpoint) it shuts the session down but lets the training thread run on until the actor
    exits, and `ray.tune.report` then returns without effect; this check keeps that thread from
    writing to the trial's MLflow run.
    """
    from ray.train._internal.session import get_session

    return get_session() is not None


class _Ended(BaseException):
    """Ray ended this incarnation of a PBT member; leave its MLflow run as it is."""


class TuneReporter:
    """`sweep.trial.Reporter` that sends each evaluation to `ray.tune.report`.

    Each report is ``{**metrics, "tokens": tokens, **extra}``, except the evaluation at
    ``budget_tokens`` (the end of the budget): the trainable's final report, with the trial's
    state, stands for it, so a scheduler rung there cannot turn a finished trial into a pruned
    one. When Ray ends the trial while it
    waits in ``report`` (a scheduler stopped it), the session exits the thread with
    ``SystemExit``, or it has shut the session down by the next evaluation; either becomes
    ``should_stop() == True`` so the trial ends ``PRUNED`` in MLflow and nothing more is
    reported.
    """

    def __init__(self, extra: dict[str, Any] | None = None, *,
                 budget_tokens: int | None = None) -> None:
        self.extra = dict(extra or {})
        self.budget_tokens = budget_tokens
        self.stopped = False

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        from ray import tune

        if self.stopped or (self.budget_tokens is not None and tokens >= self.budget_tokens
                            and STATE_KEY not in metrics):
            return  # the evaluation at the budget's end goes with the final report
        if not _session_alive():
            self.stopped = True
            return
        try:
            tune.report({**metrics, "tokens": int(tokens), **self.extra})
        except SystemExit:
            self.stopped = True

    def should_stop(self) -> bool:
        return self.stopped


def _params(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k.startswith(("model.", "train."))}


def _cost_report(spec: StudySpec, cost: dict[str, float]) -> dict[str, float]:
    """The cost objectives every report carries (multi-objective searches read them)."""
    return {name: float(cost.get(name, math.nan)) for name in spec.search.objectives
            if name != "val_loss"}


def _final_report(reporter: TuneReporter, tokens: int, values: dict[str, Any]) -> None:
    reporter.extra = {k: v for k, v in reporter.extra.items() if k not in values}
    reporter.report(tokens, values)


def _search_trainable(ctx: StudyContext):
    spec = ctx.spec

    def trainable(config: dict[str, Any]) -> None:
        number = int(config[NUMBER_KEY])
        params = _params(config)
        try:
            configs = space.configs_from_params(spec, params)
        except space.InvalidConfig as err:
            configs = err
        cost_extra: dict[str, float] = {}
        total = None
        if not isinstance(configs, Exception):
            if len(spec.search.objectives) > 1:
                device = ctx.device or configs[1].device
                _, _, estimate = space.check_constraints(spec, *configs, device=device)
                cost_extra = _cost_report(spec, cost_metrics(estimate))
            try:
                total = resolve_budget(configs[1], configs[0]).total_tokens
            except ConfigError:  # the trainer raises it again, inside the trial's run
                pass
        reporter = TuneReporter(cost_extra, budget_tokens=total)
        outcome = evaluate(ctx, number, configs, reporter, raw_params=params)
        final = {STATE_KEY: outcome.state, RUN_ID_KEY: outcome.run_id,
                 **_cost_report(spec, outcome.cost)}
        if outcome.state == "INFEASIBLE":
            final["val_loss"] = ctx.corpus().baseline_unigram_loss
            tokens = 0
        else:
            final["val_loss"] = outcome.best_val_loss  # nan (DIVERGED): Optuna records FAIL
            final["best_val_loss"] = outcome.best_val_loss
            tokens = _run_tokens(ctx.tracking, outcome.run_id)
        if outcome.reason:
            final["sweep_reason"] = outcome.reason[:500]
        _final_report(reporter, tokens, final)

    return trainable


def _run_tokens(tracking: TrialContext, run_id: str | None) -> int:
    from mlflow import MlflowClient

    if run_id is None:
        return 0
    return int(MlflowClient(tracking.tracking_uri).get_run(run_id).data.metrics.get("tokens", 0))


def find_trial_run(tracking: TrialContext, number: int) -> str | None:
    """Run id of trial ``number``'s child run (the latest one), or None."""
    from mlflow import MlflowClient

    runs = MlflowClient(tracking.tracking_uri).search_runs(
        [tracking.experiment_id],
        filter_string=(f"tags.`mlflow.parentRunId` = '{tracking.parent_run_id}' and "
                       f"tags.`sweep.trial_number` = '{number}'"),
        order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def _apply_hparams(trainer: Trainer, values: dict[str, Any]) -> None:
    """Set the PBT-mutable values (bare names) on a live trainer."""
    live = {k: float(values[k]) for k in ("lr", "weight_decay", "dropout", "attn_temperature")
            if k in values}
    trainer.set_hparams(**live)
    if "betas" in values:
        for group in trainer.optimizer.param_groups:
            group["betas"] = tuple(float(b) for b in values["betas"])
    if "grad_clip" in values:
        trainer.train_config = dataclasses.replace(trainer.train_config,
                                                   grad_clip=float(values["grad_clip"]))


def _in_domain(spec: StudySpec, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with mutated values moved into the spec's search domain, to build configs.

    A mutation may leave the domain the population was sampled from (``hyperparam_mutations``
    has its own); the trainer then gets the real values through `_apply_hparams`.
    """
    out = dict(params)
    by_path = {p.path: p.domain for p in spec.params() if p.domain is not None}
    for path in _mutation_domains(spec):
        d = by_path.get(path)
        if d is None or path not in out:
            continue
        if isinstance(d, ChoiceDomain):
            value = list(out[path]) if isinstance(out[path], tuple) else out[path]
            if value not in d.options:
                out[path] = d.options[0]
        else:
            lo, hi = d.bounds
            out[path] = min(max(out[path], lo), hi)
            if isinstance(d, IntDomain):
                out[path] = int(round(out[path]))
    return out


def member_index(trial_id: str) -> int:
    """A PBT member's index from its Ray trial id (``<prefix>_00003`` -> 3).

    Ray numbers grid-search trials in order, so this is the index into the initial population.
    The member's config cannot tell: an exploit copies the donor's config, ``sweep.member``
    included.
    """
    return int(trial_id.rsplit("_", 1)[1])


def _pbt_trainable(ctx: StudyContext, offset: int, population: list[dict[str, Any]]):
    spec = ctx.spec
    pbt = spec.search.pbt
    interval = pbt.checkpoint_interval or pbt.perturbation_interval
    mutated = list(_mutation_domains(spec))

    def trainable(config: dict[str, Any]) -> None:
        from ray import tune

        index = member_index(tune.get_context().get_trial_id())
        number = offset + index
        params = _params(config)
        reporter = TuneReporter()
        try:
            model, train = space.configs_from_params(spec, _in_domain(spec, params))
        except space.InvalidConfig as err:
            outcome = evaluate(ctx, number, err, raw_params=params)
            _final_report(reporter, 0, {STATE_KEY: outcome.state, RUN_ID_KEY: outcome.run_id,
                                        "val_loss": ctx.corpus().baseline_unigram_loss})
            return
        checkpoint = tune.get_checkpoint()
        trainer = Trainer(model, train, ctx.corpus(), device=ctx.device)
        replayed = -1
        if checkpoint is None:
            run = start_run(ctx, number, model, train)
            device = ctx.device or train.device
            ok, reason, estimate = space.check_constraints(spec, model, train, device=device)
            run.log_costs(cost_metrics(estimate))
            if not ok:
                run.end("INFEASIBLE", fail_reason=reason)
                _final_report(reporter, 0, {STATE_KEY: "INFEASIBLE", RUN_ID_KEY: run.run_id,
                                            "val_loss": ctx.corpus().baseline_unigram_loss})
                return
        else:
            with checkpoint.as_directory() as folder:
                meta = json.loads((Path(folder) / _META_FILE).read_text())
                trainer.load_checkpoint(Path(folder) / _CKPT_FILE)
            run_id = meta["run_id"] if meta["number"] == number else \
                find_trial_run(ctx.tracking, number)
            run = ctx.tracking.attach_trial(run_id)
            values = {path.split(".", 1)[1]: config[path] for path in mutated if path in config}
            _apply_hparams(trainer, values)
            if meta["number"] == number:
                replayed = run.last_step
            else:  # exploited: the donor's weights, mutated config
                changes = {path: config[path] for path in mutated if path in config}
                # Keys the donor's config brought that differ from this member's own draw
                # (searched shape fields: the donor's weights come with the donor's shape).
                changes.update({k: v for k, v in params.items() if k not in changes
                                and population[index].get(k, v) != v})
                run.log_mutation(trainer.tokens_seen, {**changes, "donor": meta["number"]})
        try:
            _train_member(trainer, run, number, interval, replayed)
        except (SystemExit, _Ended):  # Ray ended this incarnation (exploit, pause)
            return  # the run stays open for the next one
        except Exception as exc:
            run.end("FAILED", fail_reason=f"{type(exc).__name__}: {exc}")
            raise

    return trainable


class _MemberLog:
    """`sweep.trial.Reporter` of a PBT member: MLflow at every evaluation while Ray runs it."""

    def __init__(self, run: TrialRun, replayed: int = -1) -> None:
        self.run, self.replayed = run, replayed

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        if not _session_alive():
            raise _Ended
        if tokens > self.replayed:
            self.run.report(tokens, metrics)

    def should_stop(self) -> bool:
        return False


def _train_member(trainer: Trainer, run: TrialRun, number: int, interval: int,
                  replayed: int = -1) -> None:
    """Train in chunks, reporting each to Ray with a checkpoint; end the run at the end.

    Ray lets a function trainable's thread run on while the driver decides on its last report,
    so a member paused there has already logged evaluations past its checkpoint; resumed from
    that checkpoint it retrains them exactly, and evaluations up to ``replayed`` tokens (the
    run's last logged step) are not logged again.

    Raises:
        _Ended: Ray ended this incarnation (the run is left open).
    """
    from ray import tune

    tee = _MemberLog(run, replayed)  # MLflow at every evaluation; Ray once per chunk
    while True:
        target = (trainer.tokens_seen // interval + 1) * interval
        result = trainer.train(tee, until_tokens=target)
        if result.state != "RUNNING":
            break
        metrics = dict(trainer.history[-1]) if trainer.history else {}
        metrics.pop("tokens", None)
        folder = tempfile.mkdtemp(prefix="sweep-pbt-")
        try:
            trainer.save_checkpoint(Path(folder) / _CKPT_FILE)
            (Path(folder) / _META_FILE).write_text(json.dumps(
                {"number": number, "run_id": run.run_id, "tokens": trainer.tokens_seen}))
            metrics.update({"tokens": trainer.tokens_seen, RUN_ID_KEY: run.run_id})
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if not _session_alive():
            raise _Ended
    if not _session_alive():
        raise _Ended
    run.log_result(result)
    final = {STATE_KEY: result.state, RUN_ID_KEY: run.run_id, "val_loss": result.best_val_loss,
             "best_val_loss": result.best_val_loss}
    if result.fail_reason:
        final["sweep_reason"] = result.fail_reason[:500]
    try:
        tune.report({**final, "tokens": result.tokens})
    except SystemExit:
        pass


# ------------------------------------------------------------------------ driver callback
def _tracker_class():
    from ray import tune

    class _Tracker(tune.Callback):
        """Progress rows from Ray's trial events; ends runs of trials Ray stopped."""

        def __init__(self, ctx: StudyContext, view: ProgressView, offset: int) -> None:
            self.ctx, self.view, self.offset = ctx, view, offset
            self.rows: dict[str, TrialRow] = {}
            self._best = math.nan  # best val loss of the run `_end_run` ended last

        def _number(self, trial: Any) -> int:
            config = trial.config
            if NUMBER_KEY in config:
                return int(config[NUMBER_KEY])
            return self.offset + member_index(trial.trial_id)

        def _row(self, trial: Any) -> TrialRow:
            row = self.rows.get(trial.trial_id)
            if row is None:
                row = TrialRow(self._number(trial), "RUNNING", _params(trial.config))
                self.rows[trial.trial_id] = row
            return row

        def __getstate__(self) -> dict[str, Any]:
            # Ray saves the run config with the experiment; the live view stays here.
            return {**self.__dict__, "view": None}

        def _show(self) -> None:
            if self.view is not None:
                self.view.update(list(self.rows.values()))

        def on_trial_start(self, iteration, trials, trial, **info) -> None:
            row = self._row(trial)
            row.params = _params(trial.config)
            self._show()

        def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
            row = self._row(trial)
            row.params = _params(trial.config)
            row.tokens = int(result.get("tokens", row.tokens))
            if STATE_KEY in result:
                row.best_val_loss = float(result.get("best_val_loss", math.nan))
                row.reason = result.get("sweep_reason")
            else:
                row.val_loss = float(result.get("val_loss", math.nan))
            self._show()

        def on_trial_complete(self, iteration, trials, trial, **info) -> None:
            row = self._row(trial)
            last = trial.last_result or {}
            if STATE_KEY in last:
                row.state = last[STATE_KEY]
            else:  # stopped by the scheduler: Ray ended the trial before it could say so
                row.state = "PRUNED"
                self._end_run(trial, "PRUNED", None, last)
                row.best_val_loss = self._best
            self._show()

        def on_trial_error(self, iteration, trials, trial, **info) -> None:
            row = self._row(trial)
            row.state = "FAILED"
            reason = (getattr(trial, "error_msg", None) or "trial raised").strip()
            row.reason = reason.splitlines()[-1][:300] if reason else None
            self._end_run(trial, "FAILED", row.reason, trial.last_result or {})
            self._show()

        def _end_run(self, trial: Any, state: str, reason: str | None,
                     last: dict[str, Any]) -> None:
            """End the trial's MLflow run in ``state`` unless the trial already ended it."""
            self._best = math.nan
            number = self._number(trial)
            run_id = last.get(RUN_ID_KEY) or find_trial_run(self.ctx.tracking, number)
            if run_id is None:  # failed before its run was created
                with self.ctx.tracking.start_trial(number, _params(trial.config)) as run:
                    run.end(state, fail_reason=reason)
                return
            from mlflow import MlflowClient

            tags = MlflowClient(self.ctx.tracking.tracking_uri).get_run(run_id).data.tags
            if tags.get("sweep.state", "RUNNING") != "RUNNING":
                return
            run = self.ctx.tracking.attach_trial(run_id)
            if "tokens" in last:
                run.log_metrics({"tokens": last["tokens"]})
            run.end(state, fail_reason=reason)
            if math.isfinite(run.best_val_loss):
                self._best = run.best_val_loss

    return _Tracker


# ------------------------------------------------------------------------------------ run
def _population(spec: StudySpec, n: int) -> list[dict[str, Any]]:
    """The initial PBT population: sampled params plus every mutated key's initial value."""
    members = space.sample_params(spec, n, seed=spec.search.seed)
    for params in members:
        try:
            model, train = space.configs_from_params(spec, params)
        except space.InvalidConfig:
            continue
        for path in _mutation_domains(spec):
            if path not in params:
                section, name = path.split(".", 1)
                value = getattr(model if section == "model" else train, name)
                params[path] = list(value) if isinstance(value, tuple) else value
    return members


def _pick(population: list[dict[str, Any]], key: str):
    def pick(config: dict[str, Any]) -> Any:
        return population[config[MEMBER_KEY]].get(key)

    return pick


@contextlib.contextmanager
def _quiet_tune():
    """No console output from Ray Tune: the progress view reports the trials.

    Ray's newer console output prints an experiment banner at any verbosity; its classic
    reporter with ``verbose=0`` prints nothing.
    """
    old = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    logger = logging.getLogger("ray.tune")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            # Actor reuse would restart a PBT member's thread in place; Ray cannot stop a
            # function trainable's thread, so members restart in fresh actors.
            warnings.filterwarnings("ignore", message="Consider boosting PBT performance")
            yield
    finally:
        logger.setLevel(level)
        if old is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = old


class _SearchSpace:
    """Define-by-run space for ``OptunaSearch``: `sweep.space.define_by_run` plus the number.

    A class, not a closure: Ray saves the searcher (with its space) with plain pickle.
    """

    def __init__(self, spec: StudySpec, offset: int) -> None:
        self.spec, self.offset = spec, offset

    def __call__(self, trial: Any) -> dict[str, Any]:
        space.define_by_run(self.spec)(trial)
        return {NUMBER_KEY: self.offset + trial.number}


def run(ctx: StudyContext, n_trials: int, view: ProgressView, *,
        address: str | None = None) -> optuna.Study | None:
    """Run the study's trials with Ray Tune until the study holds ``n_trials``.

    Args:
        ctx: The study context.
        n_trials: Trials the study should hold at the end (PBT: the population size); a
            resumed study runs the rest, numbered after the trials it holds.
        view: Progress display, updated from Ray's trial events.
        address: Ray cluster address; default ``RAY_ADDRESS``, else a local Ray.

    Returns:
        ``OptunaSearch``'s Optuna study (for plots), or None for PBT.
    """
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    spec = ctx.spec
    ctx = dataclasses.replace(ctx, out_dir=Path(ctx.out_dir).resolve())
    held = read_trials(ctx.tracking.tracking_uri, ctx.tracking.experiment_id,
                       ctx.tracking.parent_run_id)
    offset = max((t["trial"] for t in held), default=-1) + 1
    n_trials = max(0, n_trials - len(held))
    tracker = _tracker_class()(ctx, view, offset)
    if not n_trials:
        return None
    started = init_ray(address)
    try:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        multi = len(spec.search.objectives) > 1
        searcher = None
        if spec.search.scheduler == "pbt":
            population = _population(spec, n_trials)
            keys = sorted({k for member in population for k in member})
            param_space = {MEMBER_KEY: tune.grid_search(list(range(n_trials))),
                           **{k: tune.sample_from(_pick(population, k)) for k in keys}}
            trainable = _pbt_trainable(ctx, offset, population)
            tune_config = tune.TuneConfig(scheduler=make_scheduler(spec), num_samples=1,
                                          reuse_actors=False)
        else:
            metric = list(spec.search.objectives) if multi else "val_loss"
            modes = ["min" if d == "minimize" else "max" for d in spec.search.directions]
            searcher = OptunaSearch(space=_SearchSpace(spec, offset), metric=metric,
                                    mode=modes if multi else modes[0],
                                    sampler=space.make_sampler(spec))
            param_space = {}
            trainable = _search_trainable(ctx)
            tune_config = tune.TuneConfig(
                search_alg=searcher, scheduler=make_scheduler(spec), num_samples=n_trials,
                max_concurrent_trials=spec.search.parallel,
                time_budget_s=spec.search.timeout_s, reuse_actors=False)
        run_config = tune.RunConfig(
            name=f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str(ctx.out_dir / "ray"), verbose=0, callbacks=[tracker],
            failure_config=tune.FailureConfig(max_failures=0, fail_fast=False))
        tuner = tune.Tuner(tune.with_resources(trainable, _resources(spec)),
                           param_space=param_space, tune_config=tune_config,
                           run_config=run_config)
        with _quiet_tune():
            tuner.fit()  # errored trials are in the results, not raised
    finally:
        if started:
            import ray

            ray.shutdown()
    study = getattr(searcher, "_ot_study", None) if searcher is not None else None
    return study if study is not None and study.trials else None
