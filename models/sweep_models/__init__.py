"""Model factory and analytic cost model: the only place that knows transformer shapes.

`ModelConfig`, `AttnLayout` and `PRESETS` are imported on first use (PEP 562), so that
``sweep_models.errors`` alone (what the command line needs to name a bad config) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sweep_models.errors import ConfigError

if TYPE_CHECKING:
    from sweep_models.config import ModelConfig
    from sweep_models.patterns import AttnLayout
    from sweep_models.presets import PRESETS

__all__ = ["PRESETS", "AttnLayout", "ConfigError", "ModelConfig", "build_model"]

_LAZY = {"ModelConfig": "sweep_models.config", "AttnLayout": "sweep_models.patterns",
         "PRESETS": "sweep_models.presets"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_model(config: ModelConfig, device=None):
    """Build the PyTorch model for ``config``; see `sweep_models.transformer.build_model`."""
    from sweep_models.transformer import build_model as _build

    return _build(config, device=device)
