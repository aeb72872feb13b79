"""The Tune experiment of a searched study: ``OptunaSearch`` over the spec's space, a scheduler.

The searcher (`sweep.executors.ray.searcher.StudySearch`) drives the same Optuna sampler as the
Optuna executor (`sweep.space.make_sampler`) over the same define-by-run space
(`sweep.space.define_by_run`); the metric is ``val_loss`` (mode ``min``), or the list of
``search.objectives`` with their directions for a multi-objective study. Trial numbers are the
Optuna trial numbers of the searcher's study plus the number of trials a resumed study already
holds, passed to the trainable in its config (`sweep.schema.CONFIG_TRIAL_NUMBER`).
``search.parallel`` caps concurrent trials; trials run in actors Ray keeps for the next trial
(``reuse_actors``, `sweep.executors.ray.trainable`). With ``ctx.points`` (a grid's points) the
searcher asks exactly those (``points_to_evaluate``).

Rerun (a killed driver, then the same study again): the Tune experiment of the killed run is not
restored, since its snapshot (saved every few seconds) may list trials that finished after it as
still to run. The new searcher is given the finished trials, as the trial policy tells them
(`sweep.study.policy.told_from_run`), and a sampler seed moved on by the next trial number; with
``search.retry_interrupted`` the interrupted trials the policy retries
(`sweep.study.policy.to_retry`) are queued first, each carrying ``sweep.retry_of``, and a grid
point whose trial was interrupted is trained as that trial's retry. One line (``ray: resuming
...``) says what was done.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray import tune

from sweep import space
from sweep.adapters import ray as ray_private
from sweep.executors.ray.schedulers import make_scheduler
from sweep.executors.ray.searcher import StudySearch
from sweep.executors.ray.trainable import search_trainable
from sweep.executors.ray.tuning import Held, TunePlan, say
from sweep.schema import ATTR_RETRY_OF, CONFIG_RETRY_OF, CONFIG_TRIAL_NUMBER, METRIC_VAL_LOSS
from sweep.spec import StudySpec
from sweep.study import policy
from sweep.study.progress import ProgressView
from sweep.study.trial import StudyContext

__all__ = ["search_plan"]


class _SearchSpace:
    """Define-by-run space for ``OptunaSearch``: `sweep.space.define_by_run` plus the number.

    A class, not a closure: Ray saves the searcher (with its space) with plain pickle.
    """

    def __init__(self, spec: StudySpec, offset: int) -> None:
        self.spec, self.offset = spec, offset

    def __call__(self, trial: Any) -> dict[str, Any]:
        space.define_by_run(self.spec)(trial)
        out = {CONFIG_TRIAL_NUMBER: self.offset + trial.number}
        retry_of = trial.user_attrs.get(ATTR_RETRY_OF)  # a queued retry (`retry_trials`)
        if retry_of is not None:
            out[CONFIG_RETRY_OF] = int(retry_of)
        return out


def _to_retry(ctx: StudyContext, held: Held, n: int) -> list[tuple[int, dict[str, Any]]]:
    """``(number, params)`` of up to ``n`` interrupted trials to train again, oldest first."""
    if not ctx.spec.search.retry_interrupted:
        return []
    by_number = {t["trial"]: t for t in held.trials}
    numbers = policy.to_retry(policy.Attempt(t["trial"], t["state"], t["retry_of"])
                              for t in held.trials)
    return [(k, by_number[k]["params"]) for k in numbers if by_number[k]["params"]][:n]


def _split_points(ctx: StudyContext, held: Held, n_trials: int
                  ) -> tuple[list[tuple[int, dict[str, Any]]], list[dict[str, Any]]]:
    """The interrupted trials to retry, and the points to queue as new trials.

    Without ``ctx.points``: `_to_retry`'s trials and no points. With them (a grid's points still
    to train), a point whose last trial was interrupted is trained as that trial's retry (tag
    ``sweep.retry_of``), each other point as a new trial; points match by the kind's
    `sweep.kinds.StudyKind.point_key`.
    """
    if not ctx.points:
        return _to_retry(ctx, held, n_trials), []
    spec = ctx.spec
    wanted = {spec.kind.point_key(spec, p): dict(p) for p in ctx.points}
    retries = []
    for number, params in _to_retry(ctx, held, len(held.trials)):
        key = spec.kind.point_key(spec, params)
        if key in wanted:
            retries.append((number, wanted.pop(key)))
    return retries, list(wanted.values())


def _resume_line(spec: StudySpec, held: Held, seeded: int, seed: int, n_new: int,
                 retried: list[int]) -> str:
    rest = len(held.trials) - len(held.finished)
    left = f"; {rest} unfinished run(s) not counted" if rest else ""
    again = (f", first the params of interrupted trial(s) {', '.join(map(str, retried))} again"
             if retried else "")
    if not seeded:
        return (f"ray: resuming {spec.name}: {len(held.finished)} finished trial(s){left}, none "
                f"given to a searcher; {n_new} more from trial {held.offset}{again}")
    return (f"ray: resuming {spec.name} in a new Tune experiment: the searcher is given "
            f"{seeded} of the {len(held.finished)} finished trial(s) from MLflow{left}, sampler "
            f"seed {seed}; {n_new} more from trial {held.offset}{again}")


def search_plan(ctx: StudyContext, held: Held, n_trials: int, folder: Path,
                view: ProgressView) -> TunePlan:
    """The `TunePlan` of ``n_trials`` searched trials (module docstring)."""
    spec = ctx.spec
    multi = len(spec.search.objectives) > 1
    baseline = ctx.corpus().baseline_unigram_loss
    seeded = [] if ctx.points else [
        (t["params"], policy.told_from_run(spec, t, baseline=baseline, device=ctx.device))
        for t in held.finished]
    # A rerun's sampler starts a new stream: the first run's seed would draw its configs again
    # (a random sampler ignores the history it is given).
    sampler_spec = spec if not seeded else spec.model_copy(update={
        "search": spec.search.model_copy(update={"seed": spec.search.seed + held.offset})})
    numbering = _SearchSpace(spec, held.offset)
    to_retry, fresh = _split_points(ctx, held, n_trials)
    modes = ["min" if d == "minimize" else "max" for d in spec.search.directions or []]
    searcher = StudySearch(spec=spec, baseline=baseline, space=numbering,
                           metric=list(spec.search.objectives) if multi else METRIC_VAL_LOSS,
                           mode=modes if multi else modes[0],
                           sampler=space.make_sampler(sampler_spec),
                           points_to_evaluate=fresh or None)
    given = searcher.seed_trials(seeded) if seeded else 0
    # Queued after the added trials, so Optuna numbers them next, and asks them first.
    retried = searcher.retry_trials(to_retry)
    # A point whose retry the space does not take is still trained, as a new trial.
    searcher.queue_points(p for n, p in to_retry if n not in retried and ctx.points)
    numbering.offset = held.offset - given  # Optuna numbers the added trials first
    # (A grid's later points find the earlier points' trials: not a resume.)
    if held.trials and (not ctx.points or to_retry):
        say(view, _resume_line(spec, held, given, sampler_spec.search.seed, n_trials, retried))
    return TunePlan(
        trainable=search_trainable(ctx),
        tune_config=tune.TuneConfig(
            search_alg=searcher, scheduler=make_scheduler(spec, ctx.summary),
            num_samples=n_trials, max_concurrent_trials=spec.search.parallel,
            time_budget_s=spec.search.timeout_s, reuse_actors=True),
        study=lambda: ray_private.search_study(searcher))
