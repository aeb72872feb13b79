"""The work of ``sweep train``: one trial from a preset, ``--set`` overrides and a corpus URI.

Useful to debug a config before a sweep: the same `sweep.train.Trainer` the executors run, no
study, no tracking. Inputs are checked in order of cost (train config, model config, corpus),
so a bad flag fails before a corpus is prepared.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from models.config import ModelConfig
from models.errors import ConfigError
from sweep.data import Corpus, load_corpus
from sweep.schema import METRIC_TOKENS_PER_S, METRIC_TRAIN_LOSS, METRIC_VAL_BPB, METRIC_VAL_LOSS
from sweep.train.config import BUDGET_FIELDS, TrainConfig
from sweep.train.trainer import Reporter, Trainer, TrialResult

__all__ = ["DEFAULT_BUDGET_TOKENS", "PrintReporter", "TrainRequest", "result_json", "split_sets"]

DEFAULT_BUDGET_TOKENS = 200_000


def split_sets(sets: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split dotted ``--set`` keys into (model fields, train fields).

    Raises:
        ConfigError: For a key that is not ``model.FIELD`` or ``train.FIELD``.
    """
    model, train = {}, {}
    for key, value in sets.items():
        section, _, name = key.partition(".")
        if section not in ("model", "train") or not name:
            raise ConfigError(f"--set {key}: keys are model.FIELD or train.FIELD")
        (model if section == "model" else train)[name] = value
    return model, train


class TrainRequest:
    """A validated ``sweep train`` invocation.

    Args:
        preset: Model preset name (`models.presets`).
        sets: Parsed ``--set`` flags (dotted keys).
        data: Corpus URI.
        budget_tokens: Token budget; default `DEFAULT_BUDGET_TOKENS` unless ``train.*`` sets a
            budget.
        out: Output folder; prepared corpora are cached under it.

    Raises:
        ConfigError: For a bad preset, field, value or conflicting budget.
    """

    def __init__(self, preset: str, sets: dict[str, Any], data: str,
                 budget_tokens: float | None, out: Path | str) -> None:
        model_sets, train_sets = split_sets(sets)
        given = [name for name in BUDGET_FIELDS if train_sets.get(name) is not None]
        if budget_tokens is not None:
            if given:
                raise ConfigError(f"--budget-tokens and train.{given[0]} both set a budget; "
                                  "give one")
            if not budget_tokens >= 1 or not math.isfinite(budget_tokens):
                raise ConfigError(f"--budget-tokens={budget_tokens} must be >= 1")
            train_sets["tokens"] = int(budget_tokens)
        elif not given:
            train_sets["tokens"] = DEFAULT_BUDGET_TOKENS
        self.train_config = TrainConfig.from_dict(train_sets)
        self.model_sets = model_sets
        self.model_config = ModelConfig.from_preset(preset, **model_sets)  # validates early
        self.data = data
        self.out = Path(out)

    def check_fits(self, device: str | None = None) -> None:
        """Check the device and that a training step fits its memory (the cost model's peak).

        Run before anything is allocated, so an absurd config fails at once instead of
        exhausting memory.

        Raises:
            ValueError: An unknown or unavailable device.
            ConfigError: The estimated training memory exceeds the device's memory.
        """
        from sweep.space import device_memory_bytes, training_cost

        requested = device or self.train_config.device
        need = training_cost(self.model_config, self.train_config, requested).memory.total
        have = device_memory_bytes(requested)
        if need > have:
            raise ConfigError(
                f"estimated training memory {need / 1e9:.3g} GB (model.d_model="
                f"{self.model_config.d_model}, model.n_layers={self.model_config.n_layers}, "
                f"train.batch_size={self.train_config.batch_size}) exceeds the "
                f"{have / 1e9:.3g} GB of {requested}")

    def load(self) -> Corpus:
        """Prepare (or reuse) the corpus; the model's vocab follows it unless set.

        Raises:
            sweep.data.DataError: For a corpus that cannot be used.
        """
        vocab = self.model_sets.get("vocab_size")
        corpus = load_corpus(self.data, self.out / "data", vocab_size=vocab)
        if vocab is None:
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
               model=request.model_config.to_dict(), train=request.train_config.to_dict())
    return out


class PrintReporter(Reporter):
    """Calls ``emit(line)`` with one formatted line per evaluation; never prunes."""

    def __init__(self, emit) -> None:
        self.emit = emit

    def report(self, tokens: int, metrics: dict[str, float]) -> None:
        parts = [f"tokens {tokens:>10,}"]
        for key in (METRIC_VAL_LOSS, METRIC_VAL_BPB, METRIC_TRAIN_LOSS, "lr", METRIC_TOKENS_PER_S):
            if key in metrics:
                fmt = ".3g" if key == "lr" else (",.0f" if key == METRIC_TOKENS_PER_S else ".4f")
                parts.append(f"{key} {metrics[key]:{fmt}}")
        self.emit("  ".join(parts))

    def should_stop(self) -> bool:
        return False
