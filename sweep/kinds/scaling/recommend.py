"""From fit to model: the shapes of a study's size rule to train at a target budget.

A fit gives N_opt for a budget C; `recommend` turns it into the shapes the study's size rule
(`sweep.kinds.scaling.shapes.nearest_shapes`) offers nearest to N_opt, each priced by the project's
cost model (`sweep_models.cost.estimate`: parameters, training FLOPs per token, the memory of one
training step on a named device) with the tokens the budget buys it (C / training FLOPs per token),
and a spec fragment that trains it (`spec_fragment`). `add_recommendations` does this for each
target budget of a `sweep.scaling.report.ScalingReport`, from its best fit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from sweep.spec import StudySpec

if TYPE_CHECKING:
    from sweep_models.cost.memory import Device

__all__ = ["RECOMMEND_FROM", "Recommendation", "add_recommendations",
           "cost_model_flops_per_token", "recommend", "spec_fragment"]


@dataclass(frozen=True)
class Recommendation:
    """One shape to train at a budget.

    Attributes:
        budget_flops: The target budget C (FLOPs).
        n_opt: The fit's compute-optimal N at C.
        shape: ``{"d_model", "n_layers", "n_heads", "d_ff"}``.
        n_params: Its parameters (total, as the study counts them).
        flops_per_token_train: Its training FLOPs per token (the project's count, not 6N).
        n_tokens: Tokens C buys it, C / ``flops_per_token_train``.
        tokens_per_param: ``n_tokens / n_params``.
        mem_estimate_bytes: Training memory of one step of ``batch_size`` sequences on
            ``device`` (weights, AdamW state, gradients, activations).
        device: The device type the memory is for (``cuda`` or ``cpu``).
        batch_size: Sequences per step the memory counts.
    """

    budget_flops: float
    n_opt: float
    shape: dict[str, int]
    n_params: int
    flops_per_token_train: float
    n_tokens: int
    tokens_per_param: float
    mem_estimate_bytes: int
    device: str
    batch_size: int


def recommend(spec: StudySpec, budget_flops: float, n_opt: float, *, k: int = 3,
              device: Device = "cuda") -> list[Recommendation]:
    """The ``k`` shapes of ``spec``'s size rule nearest to ``n_opt``, priced at ``budget_flops``.

    Args:
        spec: A scaling study (its size rule and fixed model/train fields).
        budget_flops: Target budget C, FLOPs (> 0).
        n_opt: Compute-optimal parameters at C from a fit (> 0).
        k: Shapes to return.
        device: ``cuda`` (bf16 autocast, as the trainer on a GPU) or ``cpu`` (fp32).

    Returns:
        Recommendations, smallest N first.

    Raises:
        ValueError: ``spec`` is not a scaling study, a non-positive budget or N, or an unknown
            device.
    """
    from sweep.kinds.scaling import shapes as grid
    from sweep.space.sampling import build_configs, fixed_values
    from sweep_models.cost import estimate

    if spec.section("scaling") is None:
        raise ValueError(f"{spec.name}: not a scaling study (no size rule to recommend from)")
    if not (budget_flops > 0 and n_opt > 0):
        raise ValueError(f"budget_flops={budget_flops!r}, n_opt={n_opt!r}: both must be > 0")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device={device!r} is not one of cuda, cpu")
    out = []
    for cand in grid.nearest_shapes(spec, n_opt, k=k):
        values = {**fixed_values(spec), "train.flops": float(budget_flops),
                  **{f"model.{f}": v for f, v in cand.shape.fields().items()}}
        model, train = build_configs(spec, values)
        cost = estimate(model, batch_size=train.batch_size, seq_len=model.seq_len,
                        dtype="bf16" if device == "cuda" else "fp32", device=device)
        tokens = int(budget_flops / cand.flops_per_token_train)
        out.append(Recommendation(float(budget_flops), float(n_opt), cand.shape.fields(),
                                  cand.n_params, cand.flops_per_token_train, tokens,
                                  tokens / cand.n_params, int(cost.memory.total), device,
                                  train.batch_size))
    return out


def spec_fragment(rec: Recommendation) -> str:
    """YAML ``model`` and ``train`` sections that train ``rec`` for its tokens.

    Merge it into the study's spec (its data, fixed fields and training settings) in place of
    the ``scaling`` section.
    """
    return yaml.safe_dump({"model": dict(rec.shape), "train": {"tokens": rec.n_tokens}},
                          sort_keys=False)


#: Which fit sizes the recommended shapes: the first of these that was fitted.
RECOMMEND_FROM = ("vpnls", "3", "2", "1")


def cost_model_flops_per_token(spec: Any, n_params: float):
    """Training FLOPs per token as a function of N, interpolated over the size rule's shapes.

    In log N between the nine shapes of the rule nearest to ``n_params``; beyond them, the
    nearest shape's FLOPs per token per parameter times N.
    """
    from sweep.kinds.scaling import shapes as grid

    shapes = grid.nearest_shapes(spec, n_params, k=9)
    log_n = np.log([c.n_params for c in shapes])
    log_ratio = np.log([c.flops_per_token_train / c.n_params for c in shapes])

    def flops_per_token(n: float) -> float:
        x = math.log(n)
        return n * math.exp(float(np.interp(x, log_n, log_ratio)))

    return flops_per_token


def add_recommendations(report: Any, spec: Any, *, k: int = 3,
                        device: Device = "cuda") -> None:
    """Fill ``report.recommendations``: the shapes to train at each target budget.

    From the verdict's approach (``report.verdict``, `sweep.scaling.verdict`), else the first
    fitted approach of `RECOMMEND_FROM` whose optimiser converged (else the first fitted):
    for a fit of L(N, D) (VPNLS, approach 3), N_opt is found again under the project's own
    FLOP count, C = D x training FLOPs per token of the cost model
    (`cost_model_flops_per_token`, `optimal_allocation`), since that is what the shapes will
    cost; for approaches 1 and 2, the fitted N_opt (C = 6ND). Then the ``k`` shapes of the
    study's size rule nearest to N_opt (`sweep.scaling.recommend.recommend`), each priced on
    ``device``. Each row carries its spec fragment under ``spec_fragment``.

    Args:
        report: `sweep.scaling.report.analyze`'s `ScalingReport`.
        spec: The study's `StudySpec` (a scaling study).
        k: Shapes per budget.
        device: ``cuda`` or ``cpu``, for the memory estimate.
    """
    from sweep.scaling.allocation import optimal_allocation
    from sweep.scaling.report import FLOP_CONVENTION
    from sweep.scaling.result import FitError

    fitted = [k_ for k_ in RECOMMEND_FROM if k_ in report.results
              and report.results[k_].ok and report.results[k_].optimal]
    key = next((k_ for k_ in fitted if report.results[k_].fit.converged),
               fitted[0] if fitted else None)
    verdict = getattr(report, "verdict", None)
    if verdict is not None:  # the verdict's approach (`sweep.scaling.verdict`) sizes them
        key = verdict.approach
    if key is None or spec is None or getattr(spec, "scaling", None) is None:
        return
    result = report.results[key]
    for row in result.optimal:
        if report.targets and row.budget_flops not in report.targets:
            continue
        n_opt, convention = row.n_params, FLOP_CONVENTION
        if key in ("vpnls", "3"):
            try:
                per_token = cost_model_flops_per_token(spec, n_opt)
                # Only N_opt is used: no per-draw searches.
                split = optimal_allocation(dataclasses.replace(result.fit, draws={}),
                                           row.budget_flops, flops_per_token=per_token)
            except FitError:
                pass
            else:
                n_opt, convention = split.n_params, split.convention
        for rec in recommend(spec, row.budget_flops, n_opt, k=k, device=device):
            shape = rec.shape
            report.recommendations.append({
                "approach": key, "C (FLOPs)": rec.budget_flops, "N_opt": float(n_opt),
                "FLOPs": convention,
                "shape": f"d{shape['d_model']}-L{shape['n_layers']}-h{shape['n_heads']}"
                         f"-ff{shape['d_ff']}",
                "N": rec.n_params, "tokens": rec.n_tokens,
                "D/N": float(rec.tokens_per_param),
                f"memory ({rec.device}, batch {rec.batch_size})":
                    _bytes(rec.mem_estimate_bytes),
                "spec_fragment": spec_fragment(rec),
            })


def _bytes(n: int) -> str:
    """``n`` bytes in MiB below 1 GiB, else GiB (3 significant digits)."""
    return f"{n / 2**20:.3g} MiB" if n < 2**30 else f"{n / 2**30:.3g} GiB"
