"""The work of ``sweep train``: one training run from a starting config, overrides and a corpus.

The starting config (`TrainBase`) is a preset, or a resolved config: a study's trial or its
``best_config.yaml`` (`sweep.study.retrain` reads those). ``--set`` overrides come on top,
already sorted into model and train fields (`sweep.cli.common.split_sets`). The same
`sweep.train.Trainer` the executors run trains it. Inputs are checked in order of cost (train
config, model config, memory, corpus), so a bad flag fails before a corpus is prepared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep.data import Corpus, load_corpus
from sweep.folder import StudyFolder
from sweep.schema import (
    METRIC_LR,
    METRIC_TOKENS_PER_S,
    METRIC_TRAIN_LOSS,
    METRIC_VAL_BPB,
    METRIC_VAL_LOSS,
)
from sweep.train.config import BUDGET_FIELDS, TrainConfig
from sweep.train.trainer import Reporter, Trainer, TrialResult
from sweep_models.config import ModelConfig
from sweep_models.errors import ConfigError

__all__ = ["DEFAULT_BUDGET_TOKENS", "DEFAULT_DATA", "DEFAULT_PRESET", "PrintReporter",
           "TrainBase", "TrainRequest", "result_json"]

DEFAULT_BUDGET_TOKENS = 200_000
DEFAULT_DATA = "builtin:python-stdlib"
DEFAULT_PRESET = "tiny"


@dataclass
class TrainBase:
    """Where a ``sweep train`` config starts, before ``--set`` overrides.

    Attributes:
        model: Model fields: a preset's (``d_ff`` unset follows ``d_model``) or a resolved
            config's (every field).
        train: Train fields (a resolved config's, or none: the defaults).
        data: The corpus URI the config was made for.
        data_vocab_size: The vocabulary size the corpus was prepared with (a study's
            ``data.vocab_size``), or None.
        preset: The preset ``model`` is, or None for a resolved config; with a preset the
            model's vocab follows the corpus unless set.
        source: Where it came from, as recorded with the run and the saved model
            (``{"preset": name}``, ``{"config": path}``, or ``{"study", "trial", "run_id"}``).
    """

    model: dict[str, Any]
    train: dict[str, Any] = field(default_factory=dict)
    data: str = DEFAULT_DATA
    data_vocab_size: int | None = None
    preset: str | None = None
    source: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_preset(cls, name: str) -> TrainBase:
        """A preset (`sweep_models.presets`) with the default train config.

        Raises:
            ConfigError: An unknown preset.
        """
        from sweep_models.presets import preset_dict

        return cls(model=preset_dict(name), preset=name, source={"preset": name})


class TrainRequest:
    """A validated ``sweep train`` invocation.

    Args:
        base: The starting config.
        model_sets: ``--set`` model fields (applied with `ModelConfig.replace`, so a multi-head
            config stays multi-head when ``n_heads`` changes).
        train_sets: ``--set`` train fields. A budget field given here (or
            ``budget_tokens``) replaces the base's budget, so ``train.tokens=1e6`` trains a
            study's trial longer; without any budget, `DEFAULT_BUDGET_TOKENS`.
        data: Corpus URI, or None for the base's. Another corpus than the base's makes the
            model's vocab follow it (unless ``vocab_size`` is set).
        budget_tokens: Token budget (``--budget-tokens``), or None.
        out: Folder the corpus is prepared (cached) under, in ``data/``.

    Raises:
        ConfigError: For a bad preset, field, value or conflicting budget.
    """

    def __init__(self, base: TrainBase, model_sets: dict[str, Any],
                 train_sets: dict[str, Any], data: str | None, budget_tokens: float | None,
                 out: Path | str) -> None:
        train_sets = dict(train_sets)
        given = [name for name in BUDGET_FIELDS if train_sets.get(name) is not None]
        if budget_tokens is not None:
            if given:
                raise ConfigError(f"--budget-tokens and train.{given[0]} both set a budget; "
                                  "give one")
            if not budget_tokens >= 1 or not math.isfinite(budget_tokens):
                raise ConfigError(f"--budget-tokens={budget_tokens} must be >= 1")
            train_sets["tokens"] = int(budget_tokens)
            given = ["tokens"]
        values = dict(base.train)
        if given:
            values.update(dict.fromkeys(BUDGET_FIELDS))
        values.update(train_sets)
        if all(values.get(name) is None for name in BUDGET_FIELDS):
            values["tokens"] = DEFAULT_BUDGET_TOKENS
        self.train_config = TrainConfig.from_dict(values)
        self.base = base
        self.model_sets = model_sets
        if base.preset is not None:
            self.model_config = ModelConfig.from_preset(base.preset, **model_sets)
        else:
            self.model_config = ModelConfig.from_dict(base.model).replace(**model_sets)
        self.data = data or base.data
        self.vocab_follows_corpus = "vocab_size" not in model_sets and (
            base.preset is not None or self.data != base.data)
        self.out = Path(out)

    def check_fits(self, device: str | None = None) -> None:
        """Check the device and that a training step fits its memory (the cost model's peak).

        Run before anything is allocated, so an absurd config fails at once instead of
        exhausting memory.

        Raises:
            ValueError: An unknown or unavailable device.
            ConfigError: The estimated training memory exceeds the device's memory.
        """
        from sweep.space import device_memory_bytes

        requested = device or self.train_config.device
        need = self.cost_estimate(requested).memory.total
        have = device_memory_bytes(requested)
        if need > have:
            raise ConfigError(
                f"estimated training memory {need / 1e9:.3g} GB (model.d_model="
                f"{self.model_config.d_model}, model.n_layers={self.model_config.n_layers}, "
                f"train.batch_size={self.train_config.batch_size}) exceeds the "
                f"{have / 1e9:.3g} GB of {requested}")

    def cost_estimate(self, device: str | None = None) -> Any:
        """The cost model's estimate of a training micro-batch (`sweep.space.training_cost`).

        Raises:
            ValueError: An unknown or unavailable device.
        """
        from sweep.space import training_cost

        return training_cost(self.model_config, self.train_config,
                             device or self.train_config.device)

    def budget_text(self) -> str:
        """The budget in words: ``2,000,000 tokens``, ``1e+15 FLOPs``, ``300 steps``..."""
        tc = self.train_config
        if tc.tokens is not None:
            return f"{tc.tokens:,} tokens"
        if tc.flops is not None:
            return f"{tc.flops:.3g} FLOPs"
        return f"{tc.steps:,} steps" if tc.steps is not None else f"{tc.seconds:g} s"

    def load(self) -> Corpus:
        """Prepare (or reuse) the corpus; the model's vocab follows it where it should.

        Raises:
            sweep.data.DataError: For a corpus that cannot be used.
        """
        vocab = self.model_sets.get("vocab_size")
        if vocab is None and self.data == self.base.data:
            vocab = self.base.data_vocab_size
        corpus = load_corpus(self.data, StudyFolder(self.out).data, vocab_size=vocab)
        if self.vocab_follows_corpus:
            self.model_config = self.model_config.replace(vocab_size=corpus.vocab_size)
        return corpus

    def trainer(self, corpus: Corpus, device: str | None = None) -> Trainer:
        """The `Trainer` for this request.

        Raises:
            ConfigError, sweep.data.DataError: Model and corpus do not fit together.
            ValueError: An unavailable device.
        """
        return Trainer(self.model_config, self.train_config, corpus, device=device)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def result_json(result: TrialResult, request: TrainRequest, trainer: Trainer) -> dict[str, Any]:
    """The result as a JSON-ready dict (non-finite numbers become ``null``), without history."""
    out = {k: _plain(v) for k, v in result.to_dict().items() if k != "history"}
    out.update(data=request.data, device=str(trainer.device), n_evals=len(result.history),
               model=request.model_config.to_dict(), train=request.train_config.to_dict(),
               source=request.base.source)
    return out


class PrintReporter(Reporter):
    """Calls ``emit(line)`` with one formatted line per evaluation; never prunes.

    Args:
        emit: Called with each line.
        also: Another reporter each evaluation goes to first (the run's `TrialRun`), or None.
    """

    def __init__(self, emit, also: Any = None) -> None:
        self.emit, self.also = emit, also

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        if self.also is not None:
            self.also.report(tokens, metrics)
        parts = [f"tokens {tokens:>10,}"]
        for key in (METRIC_VAL_LOSS, METRIC_VAL_BPB, METRIC_TRAIN_LOSS, METRIC_LR,
                    METRIC_TOKENS_PER_S):
            if key in metrics:
                fmt = (".3g" if key == METRIC_LR
                       else ",.0f" if key == METRIC_TOKENS_PER_S else ".4f")
                parts.append(f"{key} {metrics[key]:{fmt}}")
        self.emit("  ".join(parts))

    def should_stop(self) -> bool:
        return False
