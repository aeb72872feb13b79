"""Training hyperparameters: one frozen dataclass, validated on construction.

No torch import here, so specs and search spaces can build and check thousands of configs
cheaply. The budget is exactly one of ``tokens``, ``flops``, ``steps`` or ``seconds``;
`resolve_budget` turns it into tokens with the model's shape (FLOPs through
`sweep_models.cost.flops_per_token`, the project's one cost model).

The choices of the string fields live once, in the ``Literal`` aliases that annotate them
(`sweep.train.choices`, which a spec's fields are checked by without this module), as in
`sweep_models.config`: validation, the tuple constants (``SCHEDULES`` ...) and
`CHOICE_FIELDS` (field name -> allowed values, which the study spec checks by) are read from
those annotations.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin, get_type_hints

from sweep.train.choices import (
    BUDGET_FIELDS,
    LIVE_HPARAMS,
    PRECISIONS,
    SCHEDULES,
    BudgetKind,
    Precision,
    Schedule,
)
from sweep_models.config import ModelConfig
from sweep_models.errors import ConfigError, check_choice, reject_unknown

__all__ = ["BUDGET_FIELDS", "CHOICE_FIELDS", "LIVE_HPARAMS", "PRECISIONS", "SCHEDULES", "Budget",
           "BudgetKind", "Precision", "Schedule", "TrainConfig", "resolve_budget"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How one trial trains.

    Attributes:
        batch_size: Sequences per micro-batch.
        lr: Peak learning rate of AdamW.
        weight_decay: Decoupled weight decay (Loshchilov & Hutter 2019) on matrices only.
        betas: AdamW (beta1, beta2).
        warmup: Linear warmup length: a fraction of the budget if < 1, else tokens.
        schedule: Decay after warmup: ``cosine``, ``linear``, ``constant`` or ``wsd``
            (warmup-stable-decay: constant, then a (1 - sqrt) cooldown over the last
            ``decay_fraction`` of the budget; see `sweep.train.schedule`).
        min_lr_ratio: Final learning rate as a fraction of ``lr`` (cosine, linear, wsd).
        decay_fraction: ``wsd`` only: the share of the budget spent cooling down, in (0, 1].
        grad_clip: Max global gradient norm; 0 turns clipping off.
        grad_accum: Micro-batches per optimizer step.
        batch_tokens: Alternative to ``grad_accum``: tokens per optimizer step; must be a
            multiple of ``batch_size * seq_len`` (checked against the model in `resolve_budget`).
        precision: ``auto`` (bf16 autocast on CUDA, fp32 elsewhere), ``fp32`` or ``bf16``.
        compile: Wrap the model in ``torch.compile``.
        seed: Seeds initialisation, dropout and the order of training batches.
        eval_every: Tokens between evaluations; ``None``: about 10 evaluations per budget.
        eval_tokens: Target tokens per evaluation, on fixed validation windows.
        device: ``auto`` (CUDA when present) or a torch device string.
        tokens, flops, steps, seconds: The budget; exactly one is set.

    Raises:
        ConfigError: On construction, naming the field and the rule it breaks.
    """

    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    warmup: float = 0.05
    schedule: Schedule = "cosine"
    min_lr_ratio: float = 0.1
    decay_fraction: float = 0.2
    grad_clip: float = 1.0
    grad_accum: int = 1
    batch_tokens: int | None = None
    precision: Precision = "auto"
    compile: bool = False
    seed: int = 0
    eval_every: int | None = None
    eval_tokens: int = 8192
    device: str = "auto"
    tokens: int | None = None
    flops: float | None = None
    steps: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.betas, list):
            object.__setattr__(self, "betas", tuple(self.betas))
        for name in ("tokens", "steps", "eval_every", "batch_tokens"):
            v = getattr(self, name)
            if isinstance(v, float) and v.is_integer():  # YAML/CLI give 2e5 as a float
                object.__setattr__(self, name, int(v))
        self._validate()

    def _validate(self) -> None:
        for name in ("batch_size", "grad_accum", "eval_tokens"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise ConfigError(f"{name}={v!r} must be a positive integer")
        for name in ("eval_every", "batch_tokens"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                raise ConfigError(f"{name}={v!r} must be a positive integer or null")
        if self.batch_tokens is not None and self.grad_accum != 1:
            raise ConfigError(
                f"batch_tokens={self.batch_tokens} and grad_accum={self.grad_accum}: give one"
            )
        if not _is_int(self.seed):
            raise ConfigError(f"seed={self.seed!r} must be an integer")
        if not _is_num(self.lr) or self.lr <= 0:
            raise ConfigError(f"lr={self.lr!r} must be a finite number > 0")
        for name in ("weight_decay", "grad_clip", "warmup"):
            v = getattr(self, name)
            if not _is_num(v) or v < 0:
                raise ConfigError(f"{name}={v!r} must be a finite number >= 0")
        if not _is_num(self.min_lr_ratio) or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"min_lr_ratio={self.min_lr_ratio!r} must be in [0, 1]")
        if not _is_num(self.decay_fraction) or not 0 < self.decay_fraction <= 1:
            raise ConfigError(f"decay_fraction={self.decay_fraction!r} must be in (0, 1]")
        if (
            not isinstance(self.betas, tuple)
            or len(self.betas) != 2
            or not all(_is_num(b) and 0 <= b < 1 for b in self.betas)
        ):
            raise ConfigError(f"betas={self.betas!r} must be two numbers in [0, 1)")
        for name, allowed in CHOICE_FIELDS.items():
            check_choice(name, getattr(self, name), allowed)
        if not isinstance(self.compile, bool):
            raise ConfigError(f"compile={self.compile!r} must be true or false")
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"device={self.device!r} must be 'auto' or a device name")
        given = [name for name in BUDGET_FIELDS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ConfigError(
                f"budget: exactly one of tokens, flops, steps, seconds must be set; got "
                f"{', '.join(given) if given else 'none'}"
            )
        name = given[0]
        v = getattr(self, name)
        if name in ("tokens", "steps"):
            if not _is_int(v) or v < 1:
                raise ConfigError(f"{name}={v!r} must be a positive integer")
        elif not _is_num(v) or v <= 0:
            raise ConfigError(f"{name}={v!r} must be a finite number > 0")
        if name == "seconds" and self.warmup >= 1:
            raise ConfigError(
                f"warmup={self.warmup} is in tokens, which a seconds budget cannot place; give "
                "warmup as a fraction of the budget (< 1)"
            )

    @property
    def budget_kind(self) -> BudgetKind:
        """Which budget field is set: ``tokens``, ``flops``, ``steps`` or ``seconds``."""
        return next(name for name in get_args(BudgetKind) if getattr(self, name) is not None)

    def to_dict(self) -> dict[str, Any]:
        """Flat dict of plain values; ``betas`` as a list. `from_dict` inverts it."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["betas"] = list(self.betas)
        return out

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Build from a flat dict; unknown keys raise.

        Raises:
            ConfigError: For an unknown key or an invalid value (including no budget).
        """
        reject_unknown("train", values, cls.field_names())
        return cls(**values)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed (validated again).

        Setting one budget field clears the others.
        """
        values = self.to_dict()
        if any(name in changes for name in BUDGET_FIELDS):
            values.update({name: None for name in BUDGET_FIELDS})
        return self.from_dict({**values, **changes})


#: Field name -> allowed values, for every field annotated with a ``Literal`` (field order).
CHOICE_FIELDS: dict[str, tuple[str, ...]] = {
    name: get_args(hint)
    for name, hint in get_type_hints(TrainConfig).items()
    if get_origin(hint) is Literal
}


@dataclass(frozen=True)
class Budget:
    """A train config's budget resolved against a model.

    Attributes:
        grad_accum: Micro-batches per optimizer step.
        step_tokens: Tokens per optimizer step, batch_size * grad_accum * seq_len.
        total_tokens: Tokens to train on (``None`` for a seconds budget).
        total_steps: Optimizer steps (``None`` for a seconds budget).
        seconds: Wall-clock budget of training steps (``None`` otherwise).
        warmup_tokens: Warmup length in tokens (``None`` for a seconds budget).
        eval_every: Tokens between evaluations.
    """

    grad_accum: int
    step_tokens: int
    total_tokens: int | None
    total_steps: int | None
    seconds: float | None
    warmup_tokens: int | None
    eval_every: int

    def spent(self, steps: int, seconds: float) -> bool:
        """Whether ``steps`` optimizer steps, taking ``seconds`` seconds, use the budget up."""
        if self.seconds is not None:
            return seconds >= self.seconds
        assert self.total_steps is not None  # resolve_budget sets it for every other budget
        return steps >= self.total_steps


def resolve_budget(train: TrainConfig, model: ModelConfig) -> Budget:
    """Resolve the budget, accumulation and evaluation interval for ``model``.

    A FLOP budget is converted with ``sweep_models.cost.flops_per_token(model, train=True)``. Steps
    are whole: a token or FLOP budget trains floor(tokens / step_tokens) steps (at least one).

    Raises:
        ConfigError: ``batch_tokens`` is not a multiple of batch_size * seq_len, or a token or
            FLOP budget is less than one optimizer step.
    """
    micro = train.batch_size * model.seq_len
    grad_accum = train.grad_accum
    if train.batch_tokens is not None:
        if train.batch_tokens % micro:
            raise ConfigError(
                f"batch_tokens={train.batch_tokens} is not a multiple of batch_size * seq_len "
                f"= {train.batch_size} * {model.seq_len} = {micro}"
            )
        grad_accum = train.batch_tokens // micro
    step_tokens = micro * grad_accum
    if train.seconds is not None:
        eval_every = train.eval_every or 10 * step_tokens
        return Budget(grad_accum, step_tokens, None, None, float(train.seconds), None, eval_every)
    if train.steps is not None:
        steps = train.steps
    else:
        tokens: float
        if train.flops is not None:
            from sweep_models.cost import flops_per_token

            tokens = train.flops / flops_per_token(model, train=True)
            what = f"flops={train.flops:.3g} ({tokens:.3g} tokens)"
        else:
            assert train.tokens is not None  # the one budget field left (TrainConfig's rule)
            tokens, what = train.tokens, f"tokens={train.tokens}"
        if tokens < step_tokens:
            raise ConfigError(
                f"{what} is less than one optimizer step of {step_tokens} tokens (batch_size * "
                f"seq_len * grad_accum = {train.batch_size} * {model.seq_len} * {grad_accum})")
        steps = int(tokens // step_tokens)
    total = steps * step_tokens
    warmup = train.warmup * total if train.warmup < 1 else train.warmup
    eval_every = train.eval_every or max(step_tokens, (steps // 10) * step_tokens)
    return Budget(grad_accum, step_tokens, total, steps, None, int(warmup), eval_every)
