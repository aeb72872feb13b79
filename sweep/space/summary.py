"""What a search space holds, priced once.

Its domains, a grid for the grid sampler, and `SpaceSummary`, the cost range and validity of a
sample of its configs.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from sweep.params import choice_labels
from sweep.schema import METRIC_FLOPS_PER_TOKEN, METRIC_MEM_ESTIMATE, METRIC_N_PARAMS
from sweep.space.constraints import check_constraints, memory_limit_bytes
from sweep.space.sampling import configs_from_params, corner_params, sample_params
from sweep.spec import ChoiceDomain, FloatDomain, FromStudyDomain, IntDomain, StudySpec
from sweep.train.config import resolve_budget
from sweep_models.errors import ConfigError

__all__ = ["SpaceSummary", "describe_space", "grid_search_space", "summarize"]


def describe_space(spec: StudySpec) -> list[dict[str, Any]]:
    """One row per spec key: ``path``, ``kind`` (fixed, float, int, choice, from_study), ``domain``.

    And ``when``.
    """
    rows = []
    for p in spec.params():
        d = p.domain
        if isinstance(p.value, FromStudyDomain):
            kind = "from_study"
            text = (f"eta_opt(C) x [1/{p.value.width:g}, {p.value.width:g}] log" if
                    spec.kind.samples_lr_factor else "eta_opt(C)") + f" of {p.value.from_study}"
        elif d is None:
            kind, text = "fixed", json.dumps(p.value)
        elif isinstance(d, ChoiceDomain):
            kind, text = "choice", json.dumps(d.options)
        else:
            kind = "float" if isinstance(d, FloatDomain) else "int"
            text = f"[{d.bounds[0]:g}, {d.bounds[1]:g}]"
            if d.log:
                text += " log"
            if d.step not in (None, 1) or (kind == "float" and d.step):
                text += f" step {d.step:g}"
        rows.append({"path": p.path, "kind": kind, "domain": text,
                     "when": json.dumps(p.when) if p.when else ""})
    return rows


def grid_search_space(spec: StudySpec) -> dict[str, list[Any]]:
    """The searched keys as a ``GridSampler`` space (choices, int steps, float steps).

    Raises:
        ValueError: A float domain without a step (the spec validation rejects these first).
    """
    grid: dict[str, list[Any]] = {}
    for p in spec.searched():
        d = p.domain
        if isinstance(d, ChoiceDomain):
            grid[p.path] = choice_labels(d.options)
        elif isinstance(d, IntDomain):
            grid[p.path] = list(d.values())
        elif isinstance(d, FloatDomain) and d.step is not None:
            lo, hi = d.bounds
            n = int(math.floor((hi - lo) / d.step + 1e-9)) + 1
            grid[p.path] = [round(lo + i * d.step, 12) for i in range(n)]
        else:
            raise ValueError(f"{p.path}: a float domain needs a step for the grid sampler")
    return grid


@dataclass
class SpaceSummary:
    """A search space priced without training (`summarize`).

    what preflight, ``sweep validate`` and the Ray schedulers read, computed once per study.

    Attributes:
        params: `describe_space` rows.
        n_configs: Configs priced (the space's two corners and the random draws).
        n_invalid: Configs that are no valid model/train config, with up to 3 example reasons.
        n_infeasible: Valid configs outside the constraints, with up to 3 example reasons.
        memory_limit_bytes: The memory limit the constraints were checked against.
        cost: ``[min, max]`` over the valid configs of ``n_params``, ``flops_per_token``
            (forward) and ``mem_estimate_bytes`` (None when there are none).
        budget_tokens: ``(min, max)`` training budget in tokens over the valid configs whose
            budget resolves (None for a seconds budget or when none does); FLOP budgets give
            small models more tokens.
        untrainable_examples: Why a valid config's budget does not resolve (up to 3).
        min_seq_len: Shortest ``seq_len`` of a config whose budget resolves (None if none).
        max_vocab_size: Largest ``vocab_size`` of such a config (None if none).
    """

    params: list[dict[str, Any]]
    n_configs: int
    n_invalid: int
    invalid_examples: list[str]
    n_infeasible: int
    infeasible_examples: list[str]
    memory_limit_bytes: float | None
    cost: dict[str, list[float] | None]
    budget_tokens: tuple[int, int] | None = None
    untrainable_examples: list[str] = field(default_factory=list)
    min_seq_len: int | None = None
    max_vocab_size: int | None = None

    @property
    def n_ok(self) -> int:
        """Valid configs within the constraints."""
        return self.n_configs - self.n_invalid - self.n_infeasible

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields."""
        return asdict(self)


def summarize(spec: StudySpec, *, n_samples: int = 256, device: str | None = None) -> SpaceSummary:
    """Price the space without training: its two corners and ``n_samples`` random configs.

    Each config is built (`configs_from_params`), checked against the constraints with the
    cost model (`check_constraints`), and its budget resolved to tokens (`resolve_budget`).
    """
    candidates = corner_params(spec) + sample_params(spec, n_samples)
    invalid: list[str] = []
    infeasible: list[str] = []
    untrainable: list[str] = []
    ranges: dict[str, list[float]] = {METRIC_N_PARAMS: [], METRIC_FLOPS_PER_TOKEN: [],
                                      METRIC_MEM_ESTIMATE: []}
    tokens: list[int] = []
    seq_lens: list[int] = []
    vocabs: list[int] = []
    limit = None
    for params in candidates:
        try:
            model_cfg, train_cfg = configs_from_params(spec, params)
        except ConfigError as exc:
            invalid.append(str(exc))
            continue
        dev = device or train_cfg.device
        _, reason, cost = check_constraints(spec, model_cfg, train_cfg, device=dev)
        limit = memory_limit_bytes(spec, dev)
        ranges[METRIC_N_PARAMS].append(cost.n_params)
        ranges[METRIC_FLOPS_PER_TOKEN].append(cost.flops_per_token_fwd)
        ranges[METRIC_MEM_ESTIMATE].append(cost.memory.total)
        if reason is not None:  # None when the config is within the constraints
            infeasible.append(reason)
        try:
            budget = resolve_budget(train_cfg, model_cfg)
        except ValueError as exc:
            untrainable.append(str(exc))
            continue
        seq_lens.append(model_cfg.seq_len)
        vocabs.append(model_cfg.vocab_size)
        if budget.total_tokens:
            tokens.append(budget.total_tokens)
    return SpaceSummary(
        params=describe_space(spec),
        n_configs=len(candidates),
        n_invalid=len(invalid),
        invalid_examples=list(dict.fromkeys(invalid))[:3],
        n_infeasible=len(infeasible),
        infeasible_examples=list(dict.fromkeys(infeasible))[:3],
        memory_limit_bytes=limit,
        cost={k: [min(v), max(v)] if v else None for k, v in ranges.items()},
        budget_tokens=(min(tokens), max(tokens)) if tokens else None,
        untrainable_examples=list(dict.fromkeys(untrainable))[:3],
        min_seq_len=min(seq_lens) if seq_lens else None,
        max_vocab_size=max(vocabs) if vocabs else None,
    )
