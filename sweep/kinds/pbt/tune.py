"""A PBT study's Tune experiment: the population, its scheduler, run by the Ray executor.

One Ray trial per member (`sweep.schema.CONFIG_MEMBER`, a grid search over the member indices, each
member's params picked from the initial population), numbered from the study's next trial number by
member index; Ray's `PinnedPBT` scheduler (`sweep.adapters.ray`) with the spec's mutations, clipped
into their domains; members restart in fresh actors (no actor reuse: Ray cannot stop a function
trainable's thread in place), from their own checkpoints
(`sweep.kinds.pbt.population.CHECKPOINTS_KEPT` each) or, after an exploit, from a pinned copy of the
donor's under the experiment's ``pbt-pinned/``. A rerun starts a new population, numbered after the
trials the study holds.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ray import tune

from sweep.adapters.ray import PinnedPBT
from sweep.executors.ray import Held, TunePlan, fit
from sweep.executors.ray.tuning import say
from sweep.kinds.base import KindRun
from sweep.kinds.pbt import population as members
from sweep.kinds.pbt.mutations import clip_mutations, pbt_mutations
from sweep.kinds.pbt.section import PBTSpec
from sweep.schema import CONFIG_MEMBER, METRIC_TOKENS, METRIC_VAL_LOSS
from sweep.spec import StudySpec
from sweep.study.progress import ProgressView
from sweep.study.trial import StudyContext

__all__ = ["make_pbt_scheduler", "population_plan", "run_population"]


def make_pbt_scheduler(spec: StudySpec, *, pinned_dir: Path | None = None) -> PinnedPBT:
    """Ray's PBT (time attribute: tokens trained) with the spec's ``search.pbt`` settings.

    Args:
        spec: A PBT study.
        pinned_dir: Where `PinnedPBT` copies the donors' checkpoints it exploits (None: Ray's
            PBT reads them where they are).
    """
    pbt: PBTSpec = spec.section("search.pbt")
    return PinnedPBT(
        pinned_dir=pinned_dir, time_attr=METRIC_TOKENS, metric=METRIC_VAL_LOSS, mode="min",
        perturbation_interval=pbt.perturbation_interval,
        hyperparam_mutations=pbt_mutations(spec),
        quantile_fraction=pbt.quantile_fraction,
        resample_probability=pbt.resample_probability,
        synch=pbt.synch,
        custom_explore_fn=clip_mutations(spec),
    )


def _member_number(offset: int, trial: Any) -> int:
    """A member's trial number: the experiment's first number plus its index."""
    return offset + members.member_index(trial.trial_id)


def population_plan(ctx: StudyContext, held: Held, n_trials: int, folder: Path,
                    view: ProgressView) -> TunePlan:
    """The `TunePlan` of a population of ``n_trials`` members (module docstring)."""
    spec = ctx.spec
    population = members.initial_population(spec, n_trials)
    keys = sorted({k for member in population for k in member})
    if held.trials:
        say(view, f"ray: resuming {spec.name}: {len(held.finished)} finished trial(s); PBT "
                  f"starts a new population of {n_trials} from trial {held.offset}")
    pinned = folder / "pbt-pinned"  # donors' checkpoints (`PinnedPBT`)
    return TunePlan(
        trainable=members.pbt_trainable(ctx, held.offset, population),
        tune_config=tune.TuneConfig(scheduler=make_pbt_scheduler(spec, pinned_dir=pinned),
                                    num_samples=1, reuse_actors=False),
        param_space={CONFIG_MEMBER: tune.grid_search(list(range(n_trials))),
                     **{k: tune.sample_from(members.pick(population, k)) for k in keys}},
        checkpoint_config=tune.CheckpointConfig(num_to_keep=members.CHECKPOINTS_KEPT),
        number=functools.partial(_member_number, held.offset),
        scratch=[pinned])


def run_population(job: KindRun) -> None:
    """Train the study's population (``search.n_trials`` members) with Ray Tune's PBT.

    Raises:
        sweep.study.resume.StudyInterrupted: A signal stopped the study.
    """
    fit(job.ctx, job.ctx.spec.search.n_trials, job.view, population_plan, address=job.address)
