"""The grid of an hparams study: at each budget, one shape x learning rates x batch sizes.

At budget C the study trains the shape of ``hparams.shape.rule`` nearest (in log N) to
N* = sqrt(C / (6 tokens_per_param)) (the prior the scaling kind centres its IsoFLOP grids on,
D / N = tokens_per_param under C = 6ND, `sweep.kinds.scaling.layout.prior_centre`), for
D = C / (6 N) tokens, N its parameters as the cost model counts them
(`sweep_models.cost.param_count`). Every grid point is one label, the categorical parameter
``hparams.point`` (`POINT`), ``C<budget>/lr<rate>[/B<tokens>]``, so a resumed study skips the
points already trained; the point's learning rate and batch are the trial's ``train.lr`` and
``train.batch_tokens`` (logged with its config).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweep.kinds.hparams.section import HparamsSpec
from sweep.spec import StudySpec
from sweep.spec.values import section_defaults

if TYPE_CHECKING:  # the shapes, the space and the cost model load when the grid is laid out
    from sweep.kinds.scaling.shapes import Candidate, Shape

__all__ = ["POINT", "HparamsPoint", "all_labels", "batch_values", "hparams_section",
           "micro_tokens", "point_values", "points", "shape_at"]

#: The Optuna / MLflow parameter that names a trial's grid point.
POINT = "hparams.point"


@dataclass(frozen=True)
class HparamsPoint:
    """One trial of the grid.

    Attributes:
        budget_flops: The budget C (FLOPs, C = 6ND).
        lr: Peak learning rate.
        batch_tokens: Tokens per optimizer step (None: the spec's fixed batch).
        candidate: The shape trained at this budget, priced.
        n_tokens: D = C / (6 N), tokens.
    """

    budget_flops: float
    lr: float
    batch_tokens: int | None
    candidate: Candidate
    n_tokens: int

    @property
    def label(self) -> str:
        return _label(self.budget_flops, self.lr, self.batch_tokens)


def _label(budget: float, lr: float, batch: int | None) -> str:
    return f"C{budget:.4g}/lr{lr:.4g}" + (f"/B{batch}" if batch is not None else "")


def hparams_section(spec: StudySpec) -> HparamsSpec:
    """The ``hparams`` section of an hparams study's spec."""
    return spec.section("hparams")


def micro_tokens(spec: StudySpec) -> int | None:
    """Tokens per micro-batch, ``train.batch_size * model.seq_len``; None when not fixed ints."""
    size = spec.train.get("batch_size", section_defaults(spec, "train")["batch_size"])
    seq = spec.model.get("seq_len", section_defaults(spec, "model")["seq_len"])
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (size, seq))
    return size * seq if ints else None


def batch_values(spec: StudySpec) -> list[int] | None:
    """The batch sizes in tokens per step, ascending; None without ``hparams.batch_size``.

    A range's values are rounded to the nearest multiple of `micro_tokens` (at least one).
    """
    grid = hparams_section(spec).batch_size
    if grid is None:
        return None
    if grid.values is not None:
        return sorted(grid.values)
    low, high, n = grid.low, grid.high, grid.n
    assert low is not None and high is not None and n is not None  # the section's rule
    micro = micro_tokens(spec) or 1
    ratio = (high / low) ** (1 / (n - 1))
    return sorted({max(1, round(low * ratio ** i / micro)) * micro for i in range(n)})


def _batch_axis(spec: StudySpec) -> list[int | None]:
    out: list[int | None] = []
    out.extend(batch_values(spec) or [None])
    return out


def _family(spec: StudySpec) -> list[Candidate]:
    from sweep.kinds.scaling.shapes import Candidate, Shape
    from sweep.space.sampling import build_configs, fixed_values
    from sweep_models.cost import flops_per_token, non_embedding_param_count, param_count

    rule = hparams_section(spec).shape.rule
    out = []
    for i, width in enumerate(rule.widths()):
        if rule.aspect is not None:
            depth = max(1, round(width / rule.aspect))
        else:
            depth = rule.n_layers[i] if isinstance(rule.n_layers, list) else int(rule.n_layers
                                                                                   or 1)
        shape = Shape(width, depth, width // rule.d_head, max(1, round(rule.d_ff_ratio * width)))
        model, _ = build_configs(spec, {**fixed_values(spec), **_shape_values(shape),
                                        "train.tokens": 1})
        out.append(Candidate(shape, param_count(model), non_embedding_param_count(model),
                             flops_per_token(model, train=True)))
    return sorted(out, key=lambda c: (c.n_params, c.shape))


def _shape_values(shape: Shape) -> dict[str, Any]:
    return {f"model.{k}": v for k, v in shape.fields().items()}


def shape_at(spec: StudySpec, budget_flops: float,
             family: list[Candidate] | None = None) -> tuple[Candidate, int]:
    """The shape trained at ``budget_flops`` and its tokens D = C / (6 N) (module docstring).

    Raises:
        sweep.space.InvalidConfig: A shape of the rule makes no valid model with the spec's
            fixed fields.
    """
    family = family if family is not None else _family(spec)
    target = math.sqrt(budget_flops / (6 * hparams_section(spec).shape.tokens_per_param))
    best = min(family, key=lambda c: abs(math.log(c.n_params / target)))
    return best, max(1, round(budget_flops / (6 * best.n_params)))


def points(spec: StudySpec) -> list[HparamsPoint]:
    """Every grid point: budgets ascending, then learning rates, then batch sizes."""
    section, family = hparams_section(spec), _family(spec)
    batches = _batch_axis(spec)
    out = []
    for budget in section.budgets:
        cand, tokens = shape_at(spec, budget, family)
        out += [HparamsPoint(budget, lr, b, cand, tokens) for lr in section.lr.values()
                for b in batches]
    return out


def all_labels(spec: StudySpec) -> list[str]:
    """Every point's label, in `points` order (the choices of ``hparams.point``)."""
    section = hparams_section(spec)
    batches = _batch_axis(spec)
    return [_label(c, lr, b) for c in section.budgets for lr in section.lr.values()
            for b in batches]


def point_values(spec: StudySpec, label: str) -> dict[str, Any]:
    """The dotted ``model.*`` shape and ``train.tokens``, ``lr``, ``batch_tokens`` of a label.

    Raises:
        ValueError: A label that is not one of `all_labels`.
    """
    for p in points(spec):
        if p.label == label:
            values = {**_shape_values(p.candidate.shape), "train.tokens": p.n_tokens,
                      "train.lr": p.lr}
            if p.batch_tokens is not None:
                values["train.batch_tokens"] = p.batch_tokens
            return values
    raise ValueError(f"{POINT}={label!r} is not a point of this study's grid")
