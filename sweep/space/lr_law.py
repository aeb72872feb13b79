"""A trial's learning rate from an hparams fit (``train.lr: {from_study: ...}``).

The convention and the sampled factor are `sweep.spec.from_study`'s: the trial's budget is
C = 6 N D (N: `sweep_models.cost.param_count`, D: the tokens its budget trains,
`sweep.train.resolve_budget`), as the hparams grid's budgets are, and its rate
eta_opt(C) x factor, the factor in [1/width, width] (log-uniform, the sampler's ``lr.factor``).
`describe_law` is what ``sweep validate`` says of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sweep.schema import METRIC_BUDGET_FLOPS
from sweep.spec import FromStudyDomain, StudySpec
from sweep.spec.from_study import LR_FACTOR, lr_domain
from sweep.train.config import TrainConfig, resolve_budget
from sweep_models.config import ModelConfig
from sweep_models.cost import param_count

__all__ = ["EXTRAPOLATION_WARN", "describe_law", "suggest_factor", "trial_budget_flops",
           "with_lr"]

#: Warn when a trial's budget lies more than this factor beyond the fitted budgets.
EXTRAPOLATION_WARN = 100.0


def suggest_factor(trial: Any, spec: StudySpec, domain: FromStudyDomain) -> dict[str, float]:
    """The sampler's factor on eta_opt(C) (``{LR_FACTOR: f}``); none for a grid kind's points."""
    if not spec.kind.samples_lr_factor:
        return {}
    return {LR_FACTOR: trial.suggest_float(LR_FACTOR, 1 / domain.width, domain.width,
                                           log=True)}


def trial_budget_flops(model: ModelConfig, train: TrainConfig) -> float:
    """C = 6 N D of a trial, FLOPs (module docstring; Kaplan et al. 2020, sec. 2.1).

    Raises:
        ValueError: A seconds budget, whose tokens are not known before training.
    """
    tokens = resolve_budget(train, model).total_tokens
    if tokens is None:
        raise ValueError("train.lr: from_study needs a budget in tokens, steps or flops")
    return 6.0 * param_count(model) * tokens


def with_lr(domain: FromStudyDomain, model: ModelConfig, train: TrainConfig,
            factor: float) -> TrainConfig:
    """``train`` with lr = eta_opt(C) x ``factor`` at its budget C (`trial_budget_flops`).

    Raises:
        ValueError: The domain's law is not resolved (`sweep.spec.from_study.resolve_lr`), a
            factor outside [1/width, width], or a seconds budget.
    """
    if domain.law is None:
        raise ValueError("train.lr: the from_study law is not resolved "
                         "(sweep.spec.from_study.resolve_lr)")
    if not 1 / domain.width * (1 - 1e-9) <= factor <= domain.width * (1 + 1e-9):
        raise ValueError(f"{LR_FACTOR}={factor!r} is outside [1/{domain.width:g}, "
                         f"{domain.width:g}]")
    eta = domain.law.lr_opt(trial_budget_flops(model, train))
    return dataclasses.replace(train, lr=eta * factor)


def _range_at(domain: FromStudyDomain, flops: float, sampled: bool) -> str:
    assert domain.law is not None
    eta = domain.law.lr_opt(flops)
    if not sampled:
        return f"at C={flops:.3g} FLOPs: lr {eta:.4g}"
    return (f"at C={flops:.3g} FLOPs: lr in [{eta / domain.width:.4g}, {eta * domain.width:.4g}]"
            f" (eta_opt {eta:.4g})")


def describe_law(spec: StudySpec, configs: list[tuple[ModelConfig, TrainConfig]],
                 ) -> tuple[list[str], list[str], dict[str, Any]]:
    """What ``sweep validate`` says of a ``from_study`` learning rate.

    Args:
        spec: A spec whose law is resolved.
        configs: The configs priced (corners and samples): their budgets' extremes are shown.

    Returns:
        Lines to print, warnings (a budget more than `EXTRAPOLATION_WARN` x beyond the
        fitted ones), and the ``--json`` record (``lr_law``).
    """
    domain = lr_domain(spec)
    if domain is None or domain.law is None:
        return [], [], {}
    law, sampled = domain.law, spec.kind.samples_lr_factor
    flops = sorted(trial_budget_flops(m, t) for m, t in configs)
    interval = law.exponent_interval
    lines = [f"train.lr from study {law.study or domain.from_study!r} ({law.source}): "
             f"eta_opt = {law.coef:.4g} C^{law.exponent:+.4f}"
             + (f", b in [{interval[0]:+.4f}, {interval[1]:+.4f}]" if interval else "")
             + f", estimator {law.estimator}, fitted on C in [{law.budgets[0]:.3g}, "
             f"{law.budgets[1]:.3g}] FLOPs (C = 6 N D)",
             ("each trial's lr = eta_opt(C) x lr.factor, the factor log-uniform in "
              f"[1/{domain.width:g}, {domain.width:g}] (train.lr.width)") if sampled else
             "each point's lr = eta_opt(C) at its budget (a grid point trains once)"]
    if flops:
        lines += [_range_at(domain, flops[0], sampled) + " (the smallest budget)",
                  _range_at(domain, flops[-1], sampled) + " (the largest budget)"]
    warnings = []
    lo, hi = law.budgets
    for c in {flops[0], flops[-1]} if flops else ():
        if c > EXTRAPOLATION_WARN * hi or c < lo / EXTRAPOLATION_WARN:
            warnings.append(f"train.lr.from_study: a budget of {c:.3g} FLOPs is "
                            f"{max(c / hi, lo / c):.3g}x beyond the fitted budgets [{lo:.3g}, "
                            f"{hi:.3g}]; eta_opt there is an extrapolation")
    record = {"from_study": domain.from_study, "width": domain.width, "sampled": sampled,
              **law.model_dump(mode="json"),
              METRIC_BUDGET_FLOPS: [flops[0], flops[-1]] if flops else None,
              "lr_opt": [law.lr_opt(flops[0]), law.lr_opt(flops[-1])] if flops else None}
    return lines, sorted(warnings), record
