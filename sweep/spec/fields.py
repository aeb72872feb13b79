"""The field lists of a study spec, each defined once or read off where it is defined.

Derived model keys, the objectives a study can optimise, the fields population-based training
may change, the shape fields, corpus and storage schemes, and the numeric rule of each
``model``/``train`` field (`FIELD_RULES`), against which every fixed value and every domain's
bounds are checked exactly. The model fields with a fixed set of values are read off
`ModelConfig`'s ``Literal`` annotations by `sweep.spec.rules`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sweep.data.schemes import SCHEMES
from sweep.schema import COST_METRICS, METRIC_VAL_LOSS
from sweep.train.choices import LIVE_HPARAMS

__all__ = ["ARCH_FIELDS", "DATA_SCHEMES", "DERIVED_MODEL_KEYS", "FIELD_RULES", "MAX_TOKENS",
           "OBJECTIVES", "PARAMETRIZATION_FIELDS", "PBT_MUTABLE", "RDB_SCHEMES", "SHAPE_FIELDS",
           "Rule", "show_number"]

#: Model keys a spec may give that are not `ModelConfig` fields: ``preset`` (a preset's
#: fields), ``d_head`` (``n_heads = d_model / d_head``), ``d_ff_ratio`` (``d_ff``), with the
#: type a spec gives each.
DERIVED_MODEL_KEYS: dict[str, type] = {"preset": str, "d_head": int, "d_ff_ratio": float}
#: Metrics a study can optimise: the val loss and the cost metrics every trial reports.
OBJECTIVES = (METRIC_VAL_LOSS, *COST_METRICS)
#: Fields population-based training may change on a live model (shape-preserving), with their
#: section: exactly what `sweep.train.Trainer.set_hparams` can change.
PBT_MUTABLE = LIVE_HPARAMS
#: Model fields that set the parametrization (`sweep_models.parametrization`): what the weights and
#: the per-group learning rates mean, so PBT, which copies weights between members, keeps them.
PARAMETRIZATION_FIELDS = ("parametrization", "base_d_model", "base_n_layers", "completep_alpha")
#: The model fields of encoder-decoder models (`sweep_models.config.ENCODER_DECODER_FIELDS`).
ARCH_FIELDS = ("arch", "n_encoder_layers", "n_decoder_layers", "src_len")
#: Fields that fix parameter-tensor shapes, the parametrization or the data layout; PBT must
#: never mutate them.
SHAPE_FIELDS = ("vocab_size", "seq_len", "d_model", "n_heads", "n_kv_heads", "n_layers", "d_ff",
                *DERIVED_MODEL_KEYS, "activation", "norm", "bias", "tie_embeddings",
                "pos_encoding", "attn_pattern", "attn_sparsity", "attn_block_size", "causal",
                *PARAMETRIZATION_FIELDS, *ARCH_FIELDS, "batch_size")
#: Corpus URI schemes (`sweep.data`).
DATA_SCHEMES = SCHEMES
#: Database schemes an Optuna RDB storage URL may use.
RDB_SCHEMES = ("sqlite", "postgresql", "mysql")


def show_number(value: float) -> str:
    """``value`` as a message shows it: ``64``, ``0.5``, ``1e15``, ``1.23e20`` (no ``e+``).

    Whole numbers of more than 6 digits with at most 4 significant ones, and any of more than
    16 digits, are shown in scientific notation; ints too large for a float are fine.
    """
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return show_number(int(value))
        return f"{value:g}".replace("e+", "e")
    digits = str(abs(value))
    significant = digits.rstrip("0")
    if (len(digits) > 6 and len(significant) <= 4) or len(digits) > 16:
        head = significant[:4].rstrip("0")
        mantissa = head[0] + (f".{head[1:]}" if len(head) > 1 else "")
        return f"{'-' if value < 0 else ''}{mantissa}e{len(digits) - 1}"
    return str(value)


@dataclass(frozen=True)
class Rule:
    """The values a numeric field admits: finite, optionally whole, between optional bounds.

    Attributes:
        integer: The field is an integer (the spec's type check enforces it; shown in the rule).
        lo: Lower bound, or None for none.
        lo_open: ``value > lo`` when True, ``value >= lo`` when False.
        hi: Upper bound, or None for none.
        hi_open: ``value < hi`` when True, ``value <= hi`` when False.
    """

    integer: bool = False
    lo: float | None = None
    lo_open: bool = False
    hi: float | None = None
    hi_open: bool = False

    def admits(self, value: Any) -> bool:
        """Whether the number ``value`` satisfies the rule (infinities and NaN never do)."""
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def __str__(self) -> str:
        what = "integer" if self.integer else "value"
        lo = "" if self.lo is None else f"{show_number(self.lo)} {'<' if self.lo_open else '<='} "
        hi = "" if self.hi is None else f" {'<' if self.hi_open else '<='} {show_number(self.hi)}"
        if self.lo is not None and self.hi is None:  # "value > 0" reads better than "0 < value"
            return f"{what} {'>' if self.lo_open else '>='} {show_number(self.lo)}"
        return f"{lo}{what}{hi}" if lo or hi else f"finite {what}"


_POSITIVE_INT = Rule(integer=True, lo=1)
_POSITIVE = Rule(lo=0, lo_open=True)
_NON_NEGATIVE = Rule(lo=0)
_FRACTION = Rule(lo=0, hi=1, hi_open=True)

#: The rule of each numeric ``model``/``train`` field, by dotted path: what `ModelConfig` and
#: `TrainConfig` accept on construction (``tests/sweep/spec/test_field_rules.py`` builds each
#: config at every bound and just outside it), plus the derived model keys. A tuple field's
#: rule (``train.betas``) holds for each of its items. Fields without a range (``seed``,
#: ``attn_seed``) are not listed.
FIELD_RULES: dict[str, Rule] = {
    **{f"model.{name}": _POSITIVE_INT for name in (
        "vocab_size", "seq_len", "d_model", "n_heads", "n_kv_heads", "n_layers", "d_ff",
        "attn_block_size", "base_d_model", "base_n_layers", "n_encoder_layers",
        "n_decoder_layers", "src_len")},
    "model.completep_alpha": Rule(lo=0.5, hi=1),
    "model.attn_temperature": _POSITIVE,
    "model.rope_base": _POSITIVE,
    "model.norm_eps": _POSITIVE,
    "model.attn_sparsity": _FRACTION,
    "model.dropout": _FRACTION,
    "model.d_head": _POSITIVE_INT,
    "model.d_ff_ratio": _POSITIVE,
    **{f"train.{name}": _POSITIVE_INT for name in (
        "batch_size", "grad_accum", "eval_tokens", "eval_every", "batch_tokens", "tokens",
        "steps")},
    "train.lr": _POSITIVE,
    "train.weight_decay": _NON_NEGATIVE,
    "train.grad_clip": _NON_NEGATIVE,
    "train.warmup": _NON_NEGATIVE,
    "train.min_lr_ratio": Rule(lo=0, hi=1),
    "train.decay_fraction": Rule(lo=0, lo_open=True, hi=1),
    "train.betas": _FRACTION,
    "train.flops": _POSITIVE,
    "train.seconds": _POSITIVE,
}

#: The most tokens a study may train one trial on (``train.tokens``; ``train.steps`` too, as a
#: step trains at least one token). About 70x the 15T tokens of the largest published runs: a
#: larger budget is a typo (``1e100``), not a plan.
MAX_TOKENS = 10**15
