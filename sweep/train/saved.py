"""A trained model on disk (``sweep train --save DIR``) and back (``sweep sample DIR``).

A folder holds the final weights and ``config.json``: the model config (`ModelConfig.to_dict`),
the train config, the corpus the model was trained on and whether its tokens are raw bytes,
and where the config came from (a preset, a config file, or a study's trial). Weights are
``model.safetensors`` (the ``safetensors`` format: plain tensors, nothing executed on load)
when the package is installed, else ``model.pt``, a ``torch.save`` of the state dict that is
loaded back with ``weights_only=True``, so a pickle in a user's folder can never run code.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep_models.config import ModelConfig
from sweep_models.errors import ConfigError

__all__ = ["CONFIG_FILE", "SAFETENSORS_FILE", "TORCH_FILE", "SavedModel", "load_saved",
           "read_saved_config", "save_model"]

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "model.pt"
#: ``config.json``'s format; a folder of another format is refused, not guessed at.
FORMAT = "transformer-sweep/model/1"


@dataclass
class SavedModel:
    """What a model folder holds, besides the weights.

    Attributes:
        model: The model config.
        train: The train config as a plain dict (``TrainConfig.to_dict``).
        data: The corpus URI the model was trained on.
        byte_level: Whether the corpus's tokens are raw bytes (ids 0-255), so text can be
            encoded as UTF-8 and decoded back (`sweep.train.generate`).
        source: Where the config came from (``preset``, ``config``, or ``study``, ``trial``,
            ``run_id``), and the MLflow run that trained it (``train_run_id``) when tracked.
        result: The training result's totals (``best_val_loss``, ``final_val_loss``,
            ``tokens``...), nats/token.
    """

    model: ModelConfig
    train: dict[str, Any]
    data: str
    byte_level: bool
    source: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "model": self.model.to_dict(), "train": self.train,
                "data": self.data, "byte_level": self.byte_level, "source": self.source,
                "result": {k: (v if not isinstance(v, float) or math.isfinite(v) else None)
                           for k, v in self.result.items()}}


def save_model(directory: Path | str, module: Any, saved: SavedModel) -> Path:
    """Write ``module``'s weights and ``saved`` as ``config.json`` into ``directory``.

    Args:
        directory: Created if missing; files of an earlier save there are replaced.
        module: The trained `sweep_models.transformer.Transformer` (not a ``torch.compile``
            wrapper).
        saved: Its configs, corpus and provenance.

    Returns:
        The weights file written.

    Raises:
        OSError: The folder cannot be written.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        from safetensors.torch import save_model as save_safetensors
    except ImportError:
        import torch

        weights, stale = directory / TORCH_FILE, directory / SAFETENSORS_FILE
        torch.save(module.state_dict(), weights)
    else:
        weights, stale = directory / SAFETENSORS_FILE, directory / TORCH_FILE
        # save_model, unlike save_file, writes tied (shared) tensors once.
        save_safetensors(module, str(weights), metadata={"format": FORMAT})
    stale.unlink(missing_ok=True)  # so a folder never holds two sets of weights
    tmp = directory / f".{CONFIG_FILE}.tmp"
    tmp.write_text(json.dumps(saved.to_json(), indent=2) + "\n")
    os.replace(tmp, directory / CONFIG_FILE)
    return weights


def read_saved_config(directory: Path | str) -> SavedModel:
    """Read and validate a model folder's ``config.json`` without loading torch.

    Raises:
        ConfigError: The folder, its ``config.json`` or its weights file is missing, or the
            config is not this format or not a valid model config (the message names the
            folder and what is wrong).
    """
    directory = Path(directory)
    path = directory / CONFIG_FILE
    if not directory.is_dir():
        raise ConfigError(f"MODEL_DIR {directory}: no such folder")
    if not path.is_file():
        raise ConfigError(f"MODEL_DIR {directory}: no {CONFIG_FILE} (write one with "
                          "`sweep train --save DIR`)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a model folder of this service (format "
                          f"{data.get('format') if isinstance(data, dict) else None!r}, "
                          f"expected {FORMAT!r})")
    if not isinstance(data.get("model"), dict):
        raise ConfigError(f"{path}: 'model' must be a mapping of model fields")
    try:
        model = ModelConfig.from_dict(data["model"])
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"{path}: model: {exc}") from None
    if not any((directory / name).is_file() for name in (SAFETENSORS_FILE, TORCH_FILE)):
        raise ConfigError(f"MODEL_DIR {directory}: no weights ({SAFETENSORS_FILE} or "
                          f"{TORCH_FILE})")
    return SavedModel(model=model, train=dict(data.get("train") or {}),
                      data=str(data.get("data", "")), byte_level=data.get("byte_level") is True,
                      source=dict(data.get("source") or {}), result=dict(data.get("result") or {}))


def load_saved(directory: Path | str, device: str = "cpu") -> tuple[Any, SavedModel]:
    """Build the model of a folder and load its weights, in eval mode on ``device``.

    ``model.safetensors`` is read with ``safetensors``; ``model.pt`` with
    ``torch.load(weights_only=True)``, which refuses any pickle that names a Python object.

    Returns:
        ``(module, saved)``: the `sweep_models.transformer.Transformer` and the folder's configs.

    Raises:
        ConfigError: As `read_saved_config`, or weights that do not match the config's shapes
            or cannot be read.
    """
    import torch

    from sweep_models.transformer import build_model

    saved = read_saved_config(directory)
    directory = Path(directory)
    module = build_model(saved.model, device=device)
    try:
        if (directory / SAFETENSORS_FILE).is_file():
            from safetensors.torch import load_model

            load_model(module, str(directory / SAFETENSORS_FILE), device=str(device))
        else:
            state = torch.load(directory / TORCH_FILE, map_location=device, weights_only=True)
            module.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001
        # Shapes that do not match (RuntimeError), a pickle naming an object that weights_only
        # refuses (pickle.UnpicklingError), a corrupt safetensors header (SafetensorError).
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ConfigError(f"MODEL_DIR {directory}: weights do not load: "
                          f"{type(exc).__name__}: {first}") from None
    module.eval()
    return module, saved
