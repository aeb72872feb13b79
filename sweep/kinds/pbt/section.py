"""``search.pbt``: the spec section of population-based training (Jaderberg et al. 2017)."""

from __future__ import annotations

from pydantic import Field

from sweep.spec.domains import Param
from sweep.spec.schema import Section

__all__ = ["PBTSpec"]


class PBTSpec(Section):
    """``search.pbt``: population-based training (Jaderberg et al. 2017) with Ray Tune.

    Intervals are in training tokens; members copy the weights of a better member and perturb
    ``hyperparam_mutations`` every ``perturbation_interval`` tokens. ``synch: false`` (default)
    is the asynchronous form: each member is compared with whatever the others last reported
    when it reaches its own interval, so which members overlap depends on timing. ``synch: true``
    is the synchronous form (Jaderberg et al. 2017, appendix A.1; Ray Tune's ``synch``): members
    wait at every interval until all live members reach it, then the bottom quantile exploits
    the top one; reproducible, at the cost of idle members while the slowest catches up.
    """

    perturbation_interval: int = Field(gt=0)
    checkpoint_interval: int | None = Field(default=None, gt=0)
    hyperparam_mutations: dict[str, Param] = Field(min_length=1)
    quantile_fraction: float = Field(default=0.25, gt=0, le=0.5)
    resample_probability: float = Field(default=0.25, ge=0, le=1)
    synch: bool = False

