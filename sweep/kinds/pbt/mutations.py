"""What PBT may change on a live member, and how: ``search.pbt.hyperparam_mutations``.

The mutations by dotted path (`mutation_domains`), as Ray Tune's ``hyperparam_mutations``
(`pbt_mutations`), the clipping of perturbed values into their domain (`clip_mutations`) and
of a member's params into the spec's search domain (`in_domain`).
"""

from __future__ import annotations

import random
from typing import Any

from sweep.kinds.pbt.section import PBTSpec
from sweep.spec import PBT_MUTABLE, ChoiceDomain, Domain, FloatDomain, IntDomain, StudySpec

__all__ = ["IntResample", "clip_mutations", "in_domain", "mutation_domains", "pbt_mutations"]


def mutation_domains(spec: StudySpec) -> dict[str, Domain]:
    """``search.pbt.hyperparam_mutations`` keyed by dotted path (``lr`` -> ``train.lr``).

    Raises:
        ValueError: The spec has no ``search.pbt`` section.
    """
    pbt: PBTSpec | None = spec.section("search.pbt")
    if pbt is None:
        raise ValueError("the spec has no search.pbt section")
    return {name if "." in name else f"{PBT_MUTABLE[name]}.{name}": domain
            for name, domain in pbt.hyperparam_mutations.items()
            if isinstance(domain, (FloatDomain, IntDomain, ChoiceDomain))}  # the rules' check


class IntResample:
    """Ray PBT's resampling of an integer domain: one of ``lo, lo+step, ..., hi``, uniformly.

    Both bounds are included, as the spec says (``{int: [1, 4]}`` draws 1 to 4). Ray's own
    ``qrandint(lo, hi, 1)`` leaves out ``hi``, and with ``q > 1`` rounds to multiples of ``q``
    rather than to ``lo + k * step``; PBT calls a callable mutation for each resample.
    A class, not a closure: Ray saves the scheduler with plain pickle.
    """

    def __init__(self, lo: int, hi: int, step: int = 1) -> None:
        self.values = range(int(lo), int(hi) + 1, int(step))

    def __call__(self, *_: Any) -> int:
        return random.choice(self.values)

    def __repr__(self) -> str:
        v = self.values
        return f"IntResample({v.start}, {v.stop - 1}, {v.step})"


def pbt_mutations(spec: StudySpec) -> dict[str, Any]:
    """`mutation_domains` as Ray Tune domains (Ray is imported only here).

    Integer domains resample with both bounds included (`IntResample`, or Ray's
    ``lograndint(lo, hi + 1)``, whose upper bound is exclusive, for a log domain).

    Raises:
        ValueError: The spec has no ``search.pbt`` section.
    """
    from ray import tune

    out: dict[str, Any] = {}
    for path, d in mutation_domains(spec).items():
        if isinstance(d, ChoiceDomain):
            out[path] = list(d.options)
        elif isinstance(d, FloatDomain):
            lo, hi = d.bounds
            out[path] = (tune.loguniform(lo, hi) if d.log else
                         tune.quniform(lo, hi, d.step) if d.step else tune.uniform(lo, hi))
        else:
            lo, hi = d.bounds
            out[path] = tune.lograndint(lo, hi + 1) if d.log else IntResample(lo, hi, d.step)
    return out


def clip_mutations(spec: StudySpec) -> Any:
    """PBT's ``custom_explore_fn``: each perturbed value clipped into its mutation domain."""
    domains = mutation_domains(spec)

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


def in_domain(spec: StudySpec, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with mutated values moved into the spec's search domain, to build configs.

    A mutation may leave the domain the population was sampled from (``hyperparam_mutations``
    has its own); the trainer then gets the real values through `Trainer.set_hparams`.
    """
    out = dict(params)
    by_path = {p.path: p.domain for p in spec.params() if p.domain is not None}
    for path in mutation_domains(spec):
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
