"""The rules of an hparams study beyond its section's fields.

The study owns every trial's shape (``hparams.shape``), budget (D = C / 6N), learning rate and
batch (its grid), and trains each point to the end on one objective, ``val_loss``.
"""

from __future__ import annotations

from collections.abc import Iterator

from sweep.kinds.hparams.grid import batch_values, hparams_section, micro_tokens, points
from sweep.schema import METRIC_VAL_LOSS
from sweep.spec.schema import StudySpec
from sweep.train.config import BUDGET_FIELDS

__all__ = ["HPARAMS_OWNED_MODEL", "hparams_problems"]

#: Model fields ``hparams.shape`` sets for every trial.
HPARAMS_OWNED_MODEL = ("preset", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff",
                       "d_head", "d_ff_ratio")


def hparams_problems(spec: StudySpec) -> Iterator[str]:
    """One line per rule the spec breaks (module docstring)."""
    section = hparams_section(spec)
    for name in HPARAMS_OWNED_MODEL:
        if name in spec.model:
            yield (f"model.{name}: an hparams study trains the shape hparams.shape picks at "
                   "each budget; remove it")
    for name in [k for k in BUDGET_FIELDS if k in spec.train]:
        yield (f"train.{name}: an hparams study trains each point for D = C / (6 N) tokens "
               "from hparams.budgets; remove it")
    if "lr" in spec.train:
        yield "train.lr: an hparams study takes every learning rate from hparams.lr; remove it"
    if section.batch_size is not None:
        for name in ("batch_tokens", "grad_accum"):
            if name in spec.train:
                yield (f"train.{name}: hparams.batch_size sets the tokens per step of every "
                       "point; remove it")
    for param in spec.searched():
        yield (f"{param.path}: an hparams study trains its grid (hparams.lr x "
               "hparams.batch_size); fix the field")
    micro = micro_tokens(spec)
    if micro is None:
        yield ("train.batch_size: must be fixed, with model.seq_len, in an hparams study (its "
               "batch sizes are multiples of their product)")
    elif section.batch_size is not None:
        bad = [b for b in batch_values(spec) or [] if b % micro]
        if bad:
            yield (f"hparams.batch_size: {', '.join(map(str, bad))} tokens not a multiple of "
                   f"train.batch_size x model.seq_len = {micro}")
    yield from _point_problems(spec)
    s = spec.search
    if s.executor != "optuna":
        yield "search.executor: an hparams study runs on the optuna executor"
    for name in ("pruner", "scheduler"):
        if getattr(s, name) != "none":
            yield (f"search.{name}: every point of an hparams grid trains to the end (a "
                   "stopped point has no final loss to compare); use none (the default)")
    if list(s.objectives) != [METRIC_VAL_LOSS]:
        yield "search.objectives: an hparams study fits val_loss only; remove the others"


def _point_problems(spec: StudySpec) -> Iterator[str]:
    """Shapes that make no model, and budgets too small for one optimizer step."""
    from sweep.space import InvalidConfig

    try:
        every = points(spec)
    except InvalidConfig as exc:
        yield f"hparams.shape.rule: {exc}"
        return
    micro = micro_tokens(spec) or 1
    batch_tokens, accum = spec.train.get("batch_tokens"), spec.train.get("grad_accum", 1)
    if not (isinstance(batch_tokens, (int, type(None))) and isinstance(accum, int)):
        return  # a searched one: refused above
    for p in every:
        step = p.batch_tokens or batch_tokens or micro * accum
        if p.n_tokens < step:
            yield (f"hparams.budgets: at C={p.budget_flops:.4g} the shape "
                   f"{p.candidate.shape.label} trains {p.n_tokens:,} tokens, less than one "
                   f"step of {step:,}; raise the budget or lower the batch")
            return
