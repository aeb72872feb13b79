"""Sampling a spec's search space.

Define-by-run for Optuna (and Ray Tune's ``OptunaSearch``), flat param dicts back to configs, random
and corner draws.

`suggest` walks the spec's keys in dependency order, asks the trial for each active domain
(``model.d_model``, ``train.lr``, ...) and skips keys whose ``when`` is false, so conditional
fields never reach the sampler. Optuna parameter names are the dotted spec paths; choice options
that are not scalars (such as ``betas`` pairs) are passed to Optuna as their MLflow param text
and decoded back here (`sweep.params.choice_labels`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sweep.params import choice_labels, choice_value
from sweep.space.lr_law import suggest_factor, with_lr
from sweep.spec import (
    ChoiceDomain,
    FloatDomain,
    FromStudyDomain,
    IntDomain,
    SpecParam,
    StudySpec,
)
from sweep.spec.from_study import LR_FACTOR
from sweep.spec.values import section_defaults
from sweep.train.config import TrainConfig
from sweep_models.config import ModelConfig
from sweep_models.errors import ConfigError
from sweep_models.presets import preset_dict


class InvalidConfig(ConfigError):
    """Sampled values that make no valid model or train config; record the trial INFEASIBLE.

    Attributes:
        params: The flat parameters (dotted names) that produced it.
    """

    def __init__(self, message: str, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.params = dict(params or {})


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
    # The kind's own axes first (a transfer study's width), so conditions see what they set.
    values: dict[str, Any] = dict(spec.kind.sample(trial, spec))
    for p in spec.params():
        if not _active(spec, p, values):
            continue
        d = p.domain
        if isinstance(p.value, FromStudyDomain):  # its factor the sampler's axis
            values.update(suggest_factor(trial, spec, p.value))
        if d is None:  # a value the kind's axes set wins, as in `configs_from_params`
            values.setdefault(p.path, p.value)
        elif isinstance(d, FloatDomain):
            values[p.path] = trial.suggest_float(p.path, *d.bounds, log=d.log, step=d.step)
        elif isinstance(d, IntDomain):
            values[p.path] = trial.suggest_int(p.path, *d.bounds, step=d.step, log=d.log)
        else:
            label = trial.suggest_categorical(p.path, choice_labels(d.options))
            values[p.path] = choice_value(d.options, label)
    return values


def build_configs(spec: StudySpec, values: Mapping[str, Any]) -> tuple[ModelConfig, TrainConfig]:
    """Configs from dotted values (``model.d_head`` and ``model.d_ff_ratio`` resolved).

    A ``train.lr`` given as ``{from_study}`` becomes eta_opt(C) x ``lr.factor`` (1 when not
    given) at the trial's budget C (`sweep.space.lr_law.with_lr`).

    Raises:
        InvalidConfig: The values make no valid model or train config.
    """
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
    lr = train.pop("lr", None) if isinstance(train.get("lr"), FromStudyDomain) else None
    try:
        train_cfg = TrainConfig.from_dict(train)
        if lr is not None:
            train_cfg = with_lr(lr, model_cfg, train_cfg, float(values.get(LR_FACTOR, 1.0)))
    except (ConfigError, ValueError) as exc:
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
    return build_configs(spec, _sample(trial, spec))


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
    params.update(spec.kind.resolve(spec, params))  # the kind's own axes (a grid point)
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
            value = choice_value(p.domain.options, value)
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
        if key.startswith(("model.", "train.")) and key not in values and key not in by_path \
                or key == LR_FACTOR:
            values[key] = value
    return build_configs(spec, values)


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
            if p.domain is None or not _active(spec, p, {**values, **fixed_values(spec)}):
                continue
            d = p.domain
            values[p.path] = (choice_labels(d.options)[end] if isinstance(d, ChoiceDomain)
                              else d.bounds[end])
        values.update(spec.kind.corner(spec, end))
        corners.append(values)
    return corners


def fixed_values(spec: StudySpec) -> dict[str, Any]:
    """The spec's fixed ``model``/``train`` values under dotted paths."""
    return {p.path: p.value for p in spec.params() if p.domain is None}
