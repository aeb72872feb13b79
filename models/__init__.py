"""Model factory and analytic cost model: the only place that knows transformer shapes."""

from models.config import ModelConfig
from models.errors import ConfigError
from models.patterns import AttnLayout
from models.presets import PRESETS

__all__ = ["PRESETS", "AttnLayout", "ConfigError", "ModelConfig", "build_model"]


def build_model(config: ModelConfig, device=None):
    """Build the PyTorch model for ``config``; see `models.transformer.build_model`."""
    from models.transformer import build_model as _build

    return _build(config, device=device)
