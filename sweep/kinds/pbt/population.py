"""Population-based training with Ray Tune (Jaderberg et al. 2017).

Ray Tune cannot combine a search algorithm with PBT, so the initial population is
`sweep.space.sample_params` (``search.n_trials`` members, seed ``search.seed``), one Ray trial
per member (`sweep.schema.CONFIG_MEMBER`), and ``search.pbt.hyperparam_mutations`` become Ray's
``hyperparam_mutations``; mutated values are clipped to their domain (integers rounded). Members
keep their shapes: the spec only lets PBT mutate shape-preserving fields. Each member opens its
trial through `sweep.study.trial.open_trial` and trains in chunks of ``checkpoint_interval``
tokens (default: the perturbation interval), reporting each chunk with a checkpoint, so every
member has one before it can be exploited. On exploit, Ray restarts the member from the donor's
checkpoint with a mutated config: the member loads it, applies the config's mutable values, and
continues logging to its own MLflow run (found by its trial number), recording the new values
with `sweep.tracking.TrialRun.log_mutation` at the donor's token count, and the donor's trial
number as ``pbt.donor`` (metric at that step and tag). ``search.pbt.synch`` picks Ray's
synchronous PBT over the default asynchronous one.

Checkpoints: Ray keeps `CHECKPOINTS_KEPT` per member (``CheckpointConfig.num_to_keep``) and
deletes older ones as a member reports new ones. PBT picks a donor's checkpoint when the donor
reaches a perturbation and reads it when another member exploits it later, by which time the
donor may have reported newer checkpoints and Ray deleted that one (ray-project/ray#8441).
`PinnedPBT` therefore copies the donor's checkpoint, on the driver and at the exploit, into a
folder of the study's (``pbt-pinned/`` in the Tune experiment's folder) and restarts the member
from that copy, which rotation never touches; a donor checkpoint already deleted is replaced by
the donor's latest one (never deleted). A copy is deleted once its member has a checkpoint of
its own, and the folder at the end of the experiment.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ray import tune

from sweep import space
from sweep.adapters.ray import session_alive
from sweep.executors.ray.reporting import Ended, TuneReporter, final_report, trial_params
from sweep.kinds.pbt.mutations import in_domain, mutation_domains
from sweep.kinds.pbt.section import PBTSpec
from sweep.schema import (
    ATTR_REASON,
    ATTR_RUN_ID,
    ATTR_STATE,
    CONFIG_MEMBER,
    METRIC_BEST_VAL_LOSS,
    METRIC_TOKENS,
    METRIC_VAL_LOSS,
    TrialState,
)
from sweep.spec import StudySpec
from sweep.study.trial import StudyContext, TrialOutcome, open_trial
from sweep.tracking import TrialRun, find_trial_run
from sweep.train import TrainConfig, Trainer
from sweep_models.config import ModelConfig

__all__ = ["CHECKPOINTS_KEPT", "initial_population", "member_index", "pbt_trainable", "pick"]

log = logging.getLogger(__name__)

_CKPT_FILE = "trainer.pt"
_META_FILE = "member.json"

#: Checkpoints Ray keeps per PBT member (``CheckpointConfig.num_to_keep``).
CHECKPOINTS_KEPT = 2


def member_index(trial_id: str) -> int:
    """A PBT member's index from its Ray trial id (``<prefix>_00003`` -> 3).

    Ray numbers grid-search trials in order, so this is the index into the initial population.
    The member's config cannot tell: an exploit copies the donor's config, ``sweep.member``
    included.
    """
    return int(trial_id.rsplit("_", 1)[1])


def pbt_trainable(ctx: StudyContext, offset: int, population: list[dict[str, Any]]):
    spec = ctx.spec
    pbt: PBTSpec = spec.section("search.pbt")
    interval = pbt.checkpoint_interval or pbt.perturbation_interval
    mutated = list(mutation_domains(spec))

    def trainable(config: dict[str, Any]) -> None:
        index = member_index(tune.get_context().get_trial_id())
        number = offset + index
        params = trial_params(config)
        configs: tuple[ModelConfig, TrainConfig] | space.InvalidConfig
        try:
            configs = space.configs_from_params(spec, in_domain(spec, params))
        except space.InvalidConfig as err:
            configs = err
        checkpoint = tune.get_checkpoint()
        replayed = -1
        if checkpoint is None:
            opened = open_trial(ctx, number, configs, raw_params=params)
            if isinstance(opened, TrialOutcome):
                final_report(TuneReporter(), 0, {
                    ATTR_STATE: opened.state.value, ATTR_RUN_ID: opened.run_id,
                    METRIC_VAL_LOSS: ctx.corpus().baseline_unigram_loss})
                return
            run = opened.run
            trainer = Trainer(opened.model, opened.train, ctx.corpus(), device=ctx.device)
        else:
            if isinstance(configs, space.InvalidConfig):
                raise configs  # never: a member with a checkpoint had valid configs
            model, train = configs
            trainer = Trainer(model, train, ctx.corpus(), device=ctx.device)
            with checkpoint.as_directory() as folder:
                meta = json.loads((Path(folder) / _META_FILE).read_text())
                trainer.load_checkpoint(Path(folder) / _CKPT_FILE)
            run_id = meta["run_id"] if meta["number"] == number else \
                find_trial_run(ctx.tracking, number)
            if run_id is None:  # PBT exploits only a member that reported, from its own run
                raise LookupError(f"PBT member {number}: its trial run is not in the study")
            run = ctx.tracking.attach_trial(run_id)
            trainer.set_hparams(**{path.split(".", 1)[1]: config[path]
                                   for path in mutated if path in config})
            if meta["number"] == number:
                replayed = run.last_step
            else:  # exploited: the donor's weights, mutated config
                changes = {path: config[path] for path in mutated if path in config}
                # Keys the donor's config brought that differ from this member's own draw
                # (searched shape fields: the donor's weights come with the donor's shape).
                changes.update({k: v for k, v in params.items() if k not in changes
                                and population[index].get(k, v) != v})
                run.log_mutation(trainer.tokens_seen, {**changes, "donor": meta["number"]})
        run.hold_s = 0.0  # Ray ends an incarnation at a report: no evaluation waits in it
        run.send_held()
        try:
            _train_member(trainer, run, number, interval, replayed)
        except (SystemExit, Ended):  # Ray ended this incarnation (exploit, pause)
            return  # the run stays open for the next one
        except Exception as exc:
            run.end(TrialState.FAILED, fail_reason=f"{type(exc).__name__}: {exc}")
            raise

    return trainable


class _MemberLog:
    """`sweep.train.Reporter` of a PBT member: MLflow at every evaluation while Ray runs it."""

    def __init__(self, run: TrialRun, replayed: int = -1) -> None:
        self.run, self.replayed = run, replayed

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        if not session_alive():
            raise Ended
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
        Ended: Ray ended this incarnation (the run is left open).
    """
    tee = _MemberLog(run, replayed)  # MLflow at every evaluation; Ray once per chunk
    while True:
        target = (trainer.tokens_seen // interval + 1) * interval
        result = trainer.train(tee, until_tokens=target)
        if result.state is not TrialState.RUNNING:
            break
        metrics: dict[str, Any] = dict(trainer.history[-1]) if trainer.history else {}
        metrics.pop(METRIC_TOKENS, None)
        folder = tempfile.mkdtemp(prefix="sweep-pbt-")
        try:
            trainer.save_checkpoint(Path(folder) / _CKPT_FILE)
            (Path(folder) / _META_FILE).write_text(json.dumps(
                {"number": number, "run_id": run.run_id, "tokens": trainer.tokens_seen}))
            metrics.update({METRIC_TOKENS: trainer.tokens_seen, ATTR_RUN_ID: run.run_id})
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if not session_alive():
            raise Ended
    if not session_alive():
        raise Ended
    run.log_result(result)
    final = {ATTR_STATE: result.state.value, ATTR_RUN_ID: run.run_id,
             METRIC_VAL_LOSS: result.best_val_loss, METRIC_BEST_VAL_LOSS: result.best_val_loss}
    if result.fail_reason:
        final[ATTR_REASON] = result.fail_reason[:500]
    try:
        tune.report({**final, METRIC_TOKENS: result.tokens})
    except SystemExit:
        pass


def initial_population(spec: StudySpec, n: int) -> list[dict[str, Any]]:
    """The initial PBT population: sampled params plus every mutated key's initial value."""
    members = space.sample_params(spec, n, seed=spec.search.seed)
    for params in members:
        try:
            model, train = space.configs_from_params(spec, params)
        except space.InvalidConfig:
            continue
        for path in mutation_domains(spec):
            if path not in params:
                section, name = path.split(".", 1)
                value = getattr(model if section == "model" else train, name)
                params[path] = list(value) if isinstance(value, tuple) else value
    return members


def pick(population: list[dict[str, Any]], key: str):
    """Ray's ``sample_from`` function giving each member (`CONFIG_MEMBER`) its own ``key``."""

    def pick(config: dict[str, Any]) -> Any:
        return population[config[CONFIG_MEMBER]].get(key)

    return pick
