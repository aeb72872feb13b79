"""The shapes of a scaling study and the labels of its grid points.

The family of shapes (`shapes`) comes from the spec's size rule (widths, with depth from the
aspect ratio or given, ``n_heads = d_model / d_head``, ``d_ff = round(d_ff_ratio * d_model)``) or
its ladder. Each shape is priced by the project's cost model (`candidates`: N and the training
FLOPs per token of `sweep_models.cost.flops_per_token`, so D = C / flops_per_token(shape,
train=True), not C / 6N). Every (budget, shape) pair has a label, the one categorical Optuna
parameter ``scaling.point`` (`SCALING_POINT`) whose choices are every budget times every shape
of the family, so the domain does not change when a later budget is re-centred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweep.kinds.scaling.rules import scaling_section
from sweep.space.sampling import build_configs, fixed_values
from sweep.spec import StudySpec
from sweep_models.config import ModelConfig
from sweep_models.cost import flops_per_token, non_embedding_param_count, param_count
from sweep_models.errors import required

__all__ = ["ADAPTIVE_AXES", "ADAPTIVE_BUDGET", "ADAPTIVE_REPLICATE", "ADAPTIVE_SHAPE",
           "MAX_REPLICATES", "SCALING_POINT", "Candidate", "Shape", "adaptive_label",
           "adaptive_point", "adaptive_values", "all_labels", "base_seed", "budget_bounds",
           "candidates", "configs", "nearest_shapes", "parse_label", "point_label", "point_values",
           "shapes"]

#: The Optuna / MLflow parameter that names a trial's grid point.
SCALING_POINT = "scaling.point"
#: An adaptive study's axes instead (its budgets are placed as it runs, so no list of labels
#: holds them up front): the budget C in FLOPs, the shape's label and the replicate (its seed
#: offset).
ADAPTIVE_BUDGET = "scaling.budget"
ADAPTIVE_SHAPE = "scaling.shape"
ADAPTIVE_REPLICATE = "scaling.replicate"
ADAPTIVE_AXES = (ADAPTIVE_BUDGET, ADAPTIVE_SHAPE, ADAPTIVE_REPLICATE)
#: The most replicates of one point an adaptive study trains.
MAX_REPLICATES = 1000


@dataclass(frozen=True, order=True)
class Shape:
    """A model shape: width, depth, heads and MLP width."""

    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int

    @property
    def label(self) -> str:
        """``d<d_model>-L<n_layers>-h<n_heads>-ff<d_ff>``."""
        return f"d{self.d_model}-L{self.n_layers}-h{self.n_heads}-ff{self.d_ff}"

    def fields(self) -> dict[str, int]:
        """The four ``model`` fields."""
        return {"d_model": self.d_model, "n_layers": self.n_layers, "n_heads": self.n_heads,
                "d_ff": self.d_ff}


@dataclass(frozen=True)
class Candidate:
    """A shape priced by the cost model (the study's fixed model fields filled in).

    Attributes:
        shape: The shape.
        n_params: Total parameters (embeddings included), `sweep_models.cost.param_count`.
        n_params_non_embedding: Parameters without the token and position embeddings.
        flops_per_token_train: Training FLOPs per token (forward + backward, attention
            included), `sweep_models.cost.flops_per_token(train=True)`.
    """

    shape: Shape
    n_params: int
    n_params_non_embedding: int
    flops_per_token_train: float

    def tokens(self, budget_flops: float) -> float:
        """Tokens a budget of ``budget_flops`` buys this shape."""
        return budget_flops / self.flops_per_token_train




def shapes(spec: StudySpec) -> list[Shape]:
    """The family of shapes of ``spec.scaling`` (rule or ladder), in the spec's order.

    Raises:
        ValueError: ``spec`` has no ``scaling`` section.
    """
    sc = scaling_section(spec)
    if sc is None:
        raise ValueError(f"{spec.name}: not a scaling study (no scaling section)")
    if sc.ladder is not None:
        return [Shape(s.d_model, s.n_layers, s.n_heads, s.d_ff) for s in sc.ladder]
    rule = required("scaling.rule", sc.rule)  # the section gives a rule or a ladder
    depths = rule.n_layers if isinstance(rule.n_layers, list) else None
    return [_rule_shape(spec, width, depths[i] if depths else None)
            for i, width in enumerate(rule.widths())]


def configs(spec: StudySpec, shape: Shape, budget_flops: float) -> tuple[ModelConfig, Any]:
    """The ``(ModelConfig, TrainConfig)`` of ``shape`` trained for ``budget_flops``.

    Raises:
        sweep.space.InvalidConfig: The shape makes no valid model with the fixed fields.
    """
    values = {**{f"model.{k}": v for k, v in shape.fields().items()}, "train.flops": budget_flops}
    return build_configs(spec, {**fixed_values(spec), **values})


def candidates(spec: StudySpec) -> list[Candidate]:
    """Every shape of the family priced with the study's fixed model fields, smallest N first.

    Raises:
        sweep.space.InvalidConfig: A shape that makes no valid model with the fixed fields.
    """
    return sorted((_price(spec, shape) for shape in shapes(spec)),
                  key=lambda c: (c.n_params, c.shape))


def point_label(budget_flops: float, shape: Shape, replicate: int = 0) -> str:
    """``C<budget, 4 significant digits>/<shape label>``, e.g. ``C1e+13/d128-L4-h4-ff512``.

    An adaptive study's replicate ``k`` > 0 of a point (another seed) adds ``/r<k>``.
    """
    label = f"C{budget_flops:.4g}/{shape.label}"
    return f"{label}/r{replicate}" if replicate else label


def all_labels(spec: StudySpec) -> list[str]:
    """Every (budget, shape) label: budgets ascending, shapes in the family's order."""
    return [point_label(b, s) for b in scaling_section(spec).budgets for s in shapes(spec)]


def parse_label(spec: StudySpec, label: str) -> tuple[float, Shape]:
    """The budget and shape a label names.

    Raises:
        ValueError: A label that is not one of `all_labels`.
    """
    head, _, tail = label.partition("/")
    budget = next((b for b in scaling_section(spec).budgets if f"C{b:.4g}" == head), None)
    shape = next((s for s in shapes(spec) if s.label == tail), None)
    if budget is not None and shape is not None:
        return float(budget), shape
    raise ValueError(f"{SCALING_POINT}={label!r} is not a point of this study's grid")


def adaptive_point(budget_flops: float, shape: Shape, replicate: int) -> dict[str, Any]:
    """An adaptive study's point as its three axes (`ADAPTIVE_AXES`): its budget is the fits'."""
    return {ADAPTIVE_BUDGET: float(budget_flops), ADAPTIVE_SHAPE: shape.label,
            ADAPTIVE_REPLICATE: int(replicate)}


def adaptive_label(params: Mapping[str, Any]) -> str | None:
    """The label of an adaptive point's axes (`point_label`); None without them."""
    if not all(k in params for k in ADAPTIVE_AXES):
        return None
    replicate = int(params[ADAPTIVE_REPLICATE])
    shape = str(params[ADAPTIVE_SHAPE])
    return f"C{float(params[ADAPTIVE_BUDGET]):.4g}/{shape}" + (f"/r{replicate}" if replicate
                                                               else "")


def budget_bounds(spec: StudySpec) -> tuple[float, float]:
    """The range an adaptive study's budgets lie in, FLOPs: ``(lo, hi)``.

    From the smallest of ``scaling.budgets`` to the allowance (a round's budget is at most the
    allowance / its sizes), or without one the fixed grid's approximate FLOPs
    (``sizes_per_budget`` x the budgets' sum).
    """
    sc = scaling_section(spec)
    ad = required("scaling.adaptive", sc.adaptive)
    hi = ad.allowance_flops or sc.sizes_per_budget * sum(sc.budgets)
    return float(min(sc.budgets)), float(max(hi, max(sc.budgets)))


def base_seed(spec: StudySpec) -> int:
    """The spec's ``train.seed`` (fixed in an adaptive study), else the default 0."""
    seed = spec.train.get("seed", 0)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


def adaptive_values(spec: StudySpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The dotted ``model.*`` fields, ``train.flops`` and ``train.seed`` of an adaptive point.

    Replicate ``k`` trains with ``train.seed`` + k.

    Raises:
        ValueError: A shape not of the family, or a budget or replicate off its range.
    """
    lo, hi = budget_bounds(spec)
    budget, replicate = float(params[ADAPTIVE_BUDGET]), int(params[ADAPTIVE_REPLICATE])
    shape = next((s for s in shapes(spec) if s.label == params[ADAPTIVE_SHAPE]), None)
    if shape is None:
        raise ValueError(f"{ADAPTIVE_SHAPE}={params[ADAPTIVE_SHAPE]!r} is not a shape of this "
                         "study's family")
    if not lo <= budget <= hi or not 0 <= replicate <= MAX_REPLICATES:
        raise ValueError(f"{ADAPTIVE_BUDGET}={budget:.4g}, {ADAPTIVE_REPLICATE}={replicate}: "
                         f"off [{lo:.4g}, {hi:.4g}] x [0, {MAX_REPLICATES}]")
    return {**{f"model.{k}": v for k, v in shape.fields().items()}, "train.flops": budget,
            "train.seed": base_seed(spec) + replicate}


def point_values(spec: StudySpec, label: str) -> dict[str, Any]:
    """The dotted ``model.*`` fields and ``train.flops`` of a label's point."""
    budget, shape = parse_label(spec, label)
    return {**{f"model.{k}": v for k, v in shape.fields().items()}, "train.flops": budget}




def _rule_shape(spec: StudySpec, width: int, depth: int | None = None) -> Shape:
    """The size rule's shape at ``width``.

    Depth: from the aspect; else ``depth`` (a listed depth paired with the width); else the
    rule's one depth, or the last of its list for a width past the list.
    """
    rule = required("scaling.rule", scaling_section(spec).rule)
    if rule.aspect is not None:
        depth = max(1, round(width / rule.aspect))
    elif depth is None:  # no aspect: the rule gives n_layers
        depth = rule.n_layers[-1] if isinstance(rule.n_layers, list) else \
            required("scaling.rule.n_layers", rule.n_layers)
    return Shape(width, depth, width // rule.d_head, max(1, round(rule.d_ff_ratio * width)))


def _price(spec: StudySpec, shape: Shape) -> Candidate:
    model, _ = configs(spec, shape, scaling_section(spec).budgets[0])
    return Candidate(shape, param_count(model), non_embedding_param_count(model),
                     flops_per_token(model, train=True))


def nearest_shapes(spec: StudySpec, n_params: float, *, k: int = 3) -> list[Candidate]:
    """The ``k`` shapes of the study's size rule nearest to ``n_params`` (in log N).

    A ``rule`` extends past the study's widths: every multiple of the width step (the range's
    ``step``, else ``d_head``) is a shape, depth from ``aspect`` (a list of depths keeps its
    last depth beyond the list); a ``ladder`` offers its rungs only.

    Returns:
        Candidates, smallest N first.
    """
    sc = scaling_section(spec)
    if sc.ladder is not None:
        pool = candidates(spec)
    else:
        rule = required("scaling.rule", sc.rule)
        step = rule.d_model.step if not isinstance(rule.d_model, list) else rule.d_head
        step = step * rule.d_head // math.gcd(step, rule.d_head)  # heads must divide
        pool, m = [], 1
        while True:
            cand = _price(spec, _rule_shape(spec, step * m))
            pool.append(cand)
            if cand.n_params > 4 * n_params and len(pool) >= k:
                break
            # Grow the stride with the width so huge targets stay a few hundred shapes.
            m += max(1, m // 64)
    pool.sort(key=lambda c: abs(math.log(c.n_params / n_params)))
    return sorted(pool[:k], key=lambda c: c.n_params)
