"""Search spaces: the one place a `StudySpec` becomes sampler calls, configs and cost checks.

Optuna samples define-by-run: `suggest` walks the spec's keys in dependency order, asks the
trial for each active domain (``model.d_model``, ``train.lr``, ...) and skips keys whose
``when`` is false, so conditional fields never reach the sampler. Ray Tune reuses the same
function through ``OptunaSearch(space=define_by_run(spec))`` and rebuilds configs from its flat
``config`` dict with `configs_from_params`. Before a trial trains, `check_constraints` prices it
with `models.cost.estimate` so an infeasible config costs no training.

Optuna parameter names are the dotted spec paths; choice options that are not scalars (such as
``betas`` pairs) are passed to Optuna as their JSON text and decoded back here.
"""

from __future__ import annotations

import functools
import json
import math
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from models.config import ModelConfig
from models.errors import ConfigError
from models.presets import preset_dict
from sweep.spec import (
    ChoiceDomain,
    FloatDomain,
    IntDomain,
    SpecParam,
    StudySpec,
)
from sweep.spec_rules import section_defaults
from sweep.train_config import TrainConfig

__all__ = [
    "CONSTRAINT_NAMES",
    "N_CONSTRAINTS",
    "InvalidConfig",
    "check_constraints",
    "configs_from_params",
    "constraint_values",
    "constraints_func",
    "corner_params",
    "define_by_run",
    "describe_space",
    "device_memory_bytes",
    "grid_search_space",
    "make_pruner",
    "make_sampler",
    "memory_limit_bytes",
    "pbt_mutations",
    "record_constraints",
    "sample_params",
    "suggest",
    "training_cost",
    "summarize",
]

#: Constraint values per trial, in order: parameters, forward FLOPs per token, memory.
CONSTRAINT_NAMES = ("max_params", "max_flops_per_token", "max_memory")
N_CONSTRAINTS = len(CONSTRAINT_NAMES)
_SCALARS = (str, int, float, bool, type(None))


class InvalidConfig(ConfigError):
    """Sampled values that make no valid model or train config; record the trial INFEASIBLE.

    Attributes:
        params: The flat parameters (dotted names) that produced it.
    """

    def __init__(self, message: str, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.params = dict(params or {})


# ----------------------------------------------------------------------------- translation
def _labels(domain: ChoiceDomain) -> list[Any]:
    """Optuna categorical choices: the options, or their JSON text if any is not a scalar."""
    if all(isinstance(o, _SCALARS) for o in domain.options):
        return list(domain.options)
    return [json.dumps(o) for o in domain.options]


def _decode(domain: ChoiceDomain, value: Any) -> Any:
    labels = _labels(domain)
    if labels is not domain.options and value in labels and isinstance(value, str):
        return domain.options[labels.index(value)]
    return value


def _active(spec: StudySpec, param: SpecParam, values: Mapping[str, Any]) -> bool:
    """Whether every ``when`` of ``param`` holds for the values chosen so far."""
    for path, allowed in spec.conditions(param).items():
        section, name = path.split(".", 1)
        value = values[path] if path in values else section_defaults(spec, section).get(name)
        if value not in allowed:
            return False
    return True


def _sample(trial: Any, spec: StudySpec) -> dict[str, Any]:
    """Walk the spec define-by-run; returns every active key's value (fixed ones included)."""
    values: dict[str, Any] = {}
    for p in spec.params():
        if not _active(spec, p, values):
            continue
        d = p.domain
        if d is None:
            values[p.path] = p.value
        elif isinstance(d, FloatDomain):
            values[p.path] = trial.suggest_float(p.path, *d.bounds, log=d.log, step=d.step)
        elif isinstance(d, IntDomain):
            values[p.path] = trial.suggest_int(p.path, *d.bounds, step=d.step, log=d.log)
        else:
            values[p.path] = _decode(d, trial.suggest_categorical(p.path, _labels(d)))
    return values


def _build(spec: StudySpec, values: Mapping[str, Any]) -> tuple[ModelConfig, TrainConfig]:
    model = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("model.")}
    train = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("train.")}
    preset = model.pop("preset", None)
    d_head = model.pop("d_head", None)
    d_ff_ratio = model.pop("d_ff_ratio", None)
    merged = {**(preset_dict(preset) if preset else {}), **model}
    if spec.data.vocab_size and "vocab_size" not in merged:
        merged["vocab_size"] = spec.data.vocab_size
    d_model = merged.get("d_model", section_defaults(spec, "model")["d_model"])
    if d_head is not None:
        if d_model % d_head:
            raise InvalidConfig(
                f"model.d_model={d_model} is not divisible by model.d_head={d_head}", values)
        merged["n_heads"] = d_model // d_head
    if d_ff_ratio is not None:
        merged["d_ff"] = max(1, round(d_ff_ratio * d_model))
    try:
        model_cfg = ModelConfig.from_dict(merged)
    except ConfigError as exc:
        raise InvalidConfig(f"model: {exc}", values) from None
    try:
        train_cfg = TrainConfig.from_dict(train)
    except ConfigError as exc:
        raise InvalidConfig(f"train: {exc}", values) from None
    return model_cfg, train_cfg


def suggest(trial: Any, spec: StudySpec) -> tuple[ModelConfig, TrainConfig]:
    """Sample one trial's configs define-by-run.

    Args:
        trial: An ``optuna.trial.BaseTrial`` (``Trial``, ``FixedTrial``) or anything with its
            ``suggest_float/int/categorical`` methods (Ray's suggest captor).
        spec: The study.

    Returns:
        The validated ``(ModelConfig, TrainConfig)``.

    Raises:
        InvalidConfig: The sampled values make no valid config (e.g. ``d_model`` not divisible
            by ``n_heads`` when both are searched); the executor records the trial INFEASIBLE.
        ValueError: A ``FixedTrial`` lacks an active parameter.
    """
    return _build(spec, _sample(trial, spec))


def define_by_run(spec: StudySpec) -> Callable[[Any], None]:
    """A define-by-run function for ``ray.tune.search.optuna.OptunaSearch(space=...)``.

    It only suggests (no config building, as Ray asks); Ray's config then holds the sampled
    dotted parameters, which `configs_from_params` turns into configs inside the trainable.
    """

    def space(trial: Any) -> None:
        _sample(trial, spec)
        return None

    return space


def configs_from_params(
    spec: StudySpec, params: Mapping[str, Any]
) -> tuple[ModelConfig, TrainConfig]:
    """Configs from a flat dict of dotted parameters (a Ray config, an Optuna ``trial.params``).

    Keys for the spec's fixed fields override them (population-based training mutates, e.g.,
    ``train.lr`` of a spec where it is fixed). Keys of neither section are ignored.

    Raises:
        InvalidConfig: A missing active parameter, a value outside its domain, an unknown
            ``model.``/``train.`` key, or values that make no valid config.
    """
    params = dict(params)
    by_path = {p.path: p for p in spec.params()}
    for key in params:
        if key.startswith(("model.", "train.")) and key not in by_path:
            section, name = key.split(".", 1)
            known = section_defaults(spec, section)
            if name not in known and not (section == "model" and name in ("d_head",
                                                                          "d_ff_ratio")):
                raise InvalidConfig(f"{key}: unknown {section} field", params)
    values: dict[str, Any] = {}
    for p in spec.params():
        if not _active(spec, p, values):
            continue
        if p.domain is None:
            values[p.path] = params.get(p.path, p.value)
            continue
        if p.path not in params:
            raise InvalidConfig(f"{p.path}: missing (an active parameter of the space)", params)
        value = params[p.path]
        if isinstance(p.domain, ChoiceDomain):
            value = _decode(p.domain, value)
            if isinstance(value, tuple):
                value = list(value)
            if value not in p.domain.options:
                raise InvalidConfig(f"{p.path}={value!r} is not one of the choices", params)
        else:
            lo, hi = p.domain.bounds
            if not isinstance(value, (int, float)) or isinstance(value, bool) \
                    or not lo <= value <= hi:
                raise InvalidConfig(f"{p.path}={value!r} is outside [{lo}, {hi}]", params)
            if isinstance(p.domain, IntDomain):
                value = int(value)
        values[p.path] = value
    for key, value in params.items():  # mutated keys the spec leaves at their default
        if key.startswith(("model.", "train.")) and key not in values and key not in by_path:
            values[key] = value
    return _build(spec, values)


def sample_params(spec: StudySpec, n: int, *, seed: int | None = None) -> list[dict[str, Any]]:
    """Draw ``n`` flat parameter dicts uniformly at random (conditions honoured).

    Used for PBT's initial population and for `sweep validate`'s cost range.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(
        seed=spec.search.seed if seed is None else seed))
    out = []
    for _ in range(n):
        trial = study.ask()
        _sample(trial, spec)
        out.append(dict(trial.params))
    return out


def corner_params(spec: StudySpec) -> list[dict[str, Any]]:
    """Two corners of the space: all domains at their low end / first choice, then high / last.

    These are usually the smallest and the largest model of the space.
    """
    corners = []
    for end in (0, -1):
        values: dict[str, Any] = {}
        for p in spec.params():
            if p.domain is None or not _active(spec, p, {**values, **_fixed(spec)}):
                continue
            d = p.domain
            values[p.path] = (_labels(d)[end] if isinstance(d, ChoiceDomain)
                              else d.bounds[end])
        corners.append(values)
    return corners


def _fixed(spec: StudySpec) -> dict[str, Any]:
    return {p.path: p.value for p in spec.params() if p.domain is None}


def describe_space(spec: StudySpec) -> list[dict[str, Any]]:
    """One row per spec key: ``path``, ``kind`` (fixed/float/int/choice), ``domain``, ``when``."""
    rows = []
    for p in spec.params():
        d = p.domain
        if d is None:
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
            grid[p.path] = _labels(d)
        elif isinstance(d, IntDomain):
            grid[p.path] = list(d.values())
        elif d.step is not None:
            lo, hi = d.bounds
            n = int(math.floor((hi - lo) / d.step + 1e-9)) + 1
            grid[p.path] = [round(lo + i * d.step, 12) for i in range(n)]
        else:
            raise ValueError(f"{p.path}: a float domain needs a step for the grid sampler")
    return grid


def pbt_mutations(spec: StudySpec) -> dict[str, Any]:
    """``search.pbt.hyperparam_mutations`` as Ray Tune domains keyed by dotted path.

    Raises:
        ValueError: The spec has no ``search.pbt`` section.
    """
    from ray import tune

    from sweep.spec import PBT_MUTABLE

    if spec.search.pbt is None:
        raise ValueError("the spec has no search.pbt section")
    out: dict[str, Any] = {}
    for name, d in spec.search.pbt.hyperparam_mutations.items():
        path = name if "." in name else f"{PBT_MUTABLE[name]}.{name}"
        if isinstance(d, ChoiceDomain):
            out[path] = list(d.options)
        elif isinstance(d, FloatDomain):
            lo, hi = d.bounds
            out[path] = (tune.loguniform(lo, hi) if d.log else
                         tune.quniform(lo, hi, d.step) if d.step else tune.uniform(lo, hi))
        else:
            lo, hi = d.bounds
            out[path] = tune.lograndint(lo, hi + 1) if d.log else tune.qrandint(lo, hi, d.step)
    return out


def summarize(spec: StudySpec, *, n_samples: int = 256, device: str | None = None) -> dict:
    """Price the space without training: its two corners and ``n_samples`` random configs.

    Returns:
        A JSON-able dict: ``params`` (`describe_space`), ``n_configs``, ``n_invalid`` and
        ``n_infeasible`` with up to 3 example reasons each, ``memory_limit_bytes``, and
        ``cost``: for ``n_params``, ``flops_per_token`` (forward) and ``mem_estimate_bytes``,
        the ``[min, max]`` over the valid configs (None when there are none).
    """
    from models.cost import param_count  # noqa: F401 - fail early if the cost model is absent

    candidates = corner_params(spec) + sample_params(spec, n_samples)
    invalid: list[str] = []
    infeasible: list[str] = []
    ranges: dict[str, list[float]] = {"n_params": [], "flops_per_token": [],
                                      "mem_estimate_bytes": []}
    limit = None
    for params in candidates:
        try:
            model_cfg, train_cfg = configs_from_params(spec, params)
        except ConfigError as exc:
            invalid.append(str(exc))
            continue
        dev = device or train_cfg.device
        ok, reason, cost = check_constraints(spec, model_cfg, train_cfg, device=dev)
        limit = memory_limit_bytes(spec, dev)
        ranges["n_params"].append(cost.n_params)
        ranges["flops_per_token"].append(cost.flops_per_token_fwd)
        ranges["mem_estimate_bytes"].append(cost.memory.total)
        if not ok:
            infeasible.append(reason)
    return {
        "params": describe_space(spec),
        "n_configs": len(candidates),
        "n_invalid": len(invalid),
        "invalid_examples": list(dict.fromkeys(invalid))[:3],
        "n_infeasible": len(infeasible),
        "infeasible_examples": list(dict.fromkeys(infeasible))[:3],
        "memory_limit_bytes": limit,
        "cost": {k: [min(v), max(v)] if v else None for k, v in ranges.items()},
    }


# ----------------------------------------------------------------------------- constraints
@functools.lru_cache(maxsize=8)
def device_memory_bytes(device: str = "auto") -> int:
    """Memory a trial on ``device`` may use: the CUDA device's total memory, else the host RAM.

    Raises:
        ValueError: For an unknown or unavailable device.
    """
    from sweep.hardware import pick_device

    dev = pick_device(device)
    if dev.type == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(dev).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def memory_limit_bytes(spec: StudySpec, device: str = "auto") -> float:
    """``constraints.max_memory_gb`` in bytes, else the memory of ``device``."""
    gb = spec.constraints.max_memory_gb
    return gb * 1e9 if gb else float(device_memory_bytes(device))


def training_cost(model_cfg: ModelConfig, train_cfg: TrainConfig, device: str) -> Any:
    """The cost model's estimate for one training micro-batch of this trial on ``device``.

    ``train.batch_size`` sequences of ``seq_len`` tokens, in the precision the trial will use
    (``auto``: bf16 autocast where the device supports it) and with the attention kernels of
    the device's type.

    Returns:
        A `models.cost.CostEstimate` (memory in bytes, FLOPs per token).

    Raises:
        ValueError: An unknown or unavailable device.
    """
    from models.cost import estimate
    from sweep.hardware import autocast_dtype, pick_device

    dev = pick_device(device)
    dtype = "bf16" if autocast_dtype(train_cfg.precision, dev) is not None else "fp32"
    return estimate(model_cfg, batch_size=train_cfg.batch_size, seq_len=model_cfg.seq_len,
                    dtype=dtype, device=dev.type)


def constraint_values(spec: StudySpec, cost: Any, *, memory_limit_bytes: float) -> list[float]:
    """Optuna constraint values, <= 0 when feasible (`N_CONSTRAINTS` of them).

    Relative excess of parameters, forward FLOPs per token and training memory over the spec's
    limits; -1 where there is no limit.
    """
    c = spec.constraints
    return [
        cost.n_params / c.max_params - 1.0 if c.max_params else -1.0,
        cost.flops_per_token_fwd / c.max_flops_per_token - 1.0 if c.max_flops_per_token
        else -1.0,
        cost.memory.total / memory_limit_bytes - 1.0,
    ]


def check_constraints(
    spec: StudySpec, model_cfg: ModelConfig, train_cfg: TrainConfig, device: str | None = None
) -> tuple[bool, str | None, Any]:
    """Price a config with the cost model and check ``spec.constraints``.

    Memory is the training estimate for one micro-batch (``train.batch_size`` sequences) in
    the precision the trial will use; the default limit (``max_memory_gb`` unset) is the memory
    of ``device`` (default: ``train.device``), CUDA total memory or host RAM.

    Returns:
        ``(ok, reason, cost)``: ``reason`` names each broken limit (None when ok); ``cost`` is
        the `models.cost.CostEstimate`.
    """
    device = device or train_cfg.device
    cost = training_cost(model_cfg, train_cfg, device)
    c = spec.constraints
    limit = memory_limit_bytes(spec, device)
    reasons = []
    if c.max_params and cost.n_params > c.max_params:
        reasons.append(f"n_params={cost.n_params:,} > constraints.max_params={c.max_params:,}")
    if c.max_flops_per_token and cost.flops_per_token_fwd > c.max_flops_per_token:
        reasons.append(f"flops_per_token={cost.flops_per_token_fwd:.4g} > "
                       f"constraints.max_flops_per_token={c.max_flops_per_token:.4g}")
    if cost.memory.total > limit:
        what = "constraints.max_memory_gb" if c.max_memory_gb else f"memory of {device}"
        reasons.append(f"estimated memory {cost.memory.total / 1e9:.3g} GB > {what} "
                       f"({limit / 1e9:.3g} GB)")
    return not reasons, "; ".join(reasons) or None, cost


def record_constraints(trial: Any, values: list[float]) -> None:
    """Attach constraint values (from `constraint_values`) to an Optuna trial.

    They go where Optuna 5 samplers read them (``Trial.set_constraint``, one key per entry of
    `CONSTRAINT_NAMES`; TPE, GP and NSGA-II rank infeasible trials below feasible ones) and, for
    the results table and `constraints_func`, into ``user_attrs["constraints"]``.
    """
    values = [float(v) for v in values]
    trial.set_user_attr("constraints", values)
    for name, value in zip(CONSTRAINT_NAMES, values, strict=True):
        trial.set_constraint(name, value)


def constraints_func(trial: Any) -> list[float]:
    """``constraints_func`` for samplers built elsewhere: the values `record_constraints` stored.

    Optuna 5 deprecates ``constraints_func`` in favour of ``Trial.set_constraint``, which
    `record_constraints` already calls, so `make_sampler` does not pass this. A trial that
    stored none (it failed before the check) counts as feasible.
    """
    return list(trial.user_attrs.get("constraints", [0.0] * N_CONSTRAINTS))


# ----------------------------------------------------------------------- samplers, pruners
def _n_startup(spec: StudySpec) -> int:
    s = spec.search
    return s.n_startup_trials if s.n_startup_trials is not None else \
        min(10, max(2, s.n_trials // 3))


def make_sampler(spec: StudySpec) -> Any:
    """The Optuna sampler ``search.sampler`` names, seeded with ``search.seed``.

    TPE is multivariate (Falkner et al. 2018) and grouped, Optuna's way of modelling
    conditional define-by-run spaces jointly; with parallel workers it uses the constant liar.
    TPE, GP and NSGA-II honour the constraints `record_constraints` sets on each trial; CMA-ES
    ignores them. NSGA-II's population is ``search.population_size`` or n_trials / 4 (4 to 50).
    """
    import optuna
    from optuna.exceptions import ExperimentalWarning

    s = spec.search
    samplers = optuna.samplers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        if s.sampler == "tpe":
            return samplers.TPESampler(seed=s.seed, multivariate=True, group=True,
                                       n_startup_trials=_n_startup(spec),
                                       constant_liar=s.parallel > 1)
        if s.sampler == "gp":
            return samplers.GPSampler(seed=s.seed, n_startup_trials=_n_startup(spec))
        if s.sampler == "cmaes":
            return samplers.CmaEsSampler(seed=s.seed, n_startup_trials=_n_startup(spec),
                                         warn_independent_sampling=False)
        if s.sampler == "random":
            return samplers.RandomSampler(seed=s.seed)
        if s.sampler == "grid":
            return samplers.GridSampler(grid_search_space(spec), seed=s.seed)
        population = s.population_size or min(50, max(4, s.n_trials // 4))
        return samplers.NSGAIISampler(population_size=population, seed=s.seed)


def make_pruner(spec: StudySpec, *, min_resource: int = 1,
                max_resource: int | str = "auto") -> Any:
    """The Optuna pruner ``search.pruner`` names.

    Resources are the step numbers trials report at (evaluation index, 1-based); Hyperband
    (Li et al. 2018) and successive halving use reduction factor 3.
    """
    import optuna

    pruners = optuna.pruners
    name = spec.search.pruner
    if name == "hyperband":
        return pruners.HyperbandPruner(min_resource=min_resource, max_resource=max_resource,
                                       reduction_factor=3)
    if name == "sha":
        return pruners.SuccessiveHalvingPruner(min_resource=min_resource, reduction_factor=3)
    if name == "median":
        return pruners.MedianPruner(n_startup_trials=max(1, min(5, spec.search.n_trials // 4)),
                                    n_warmup_steps=min_resource)
    return pruners.NopPruner()
