"""Model factory and analytic cost model: the only place that knows transformer shapes."""

from sweep_models.config import ModelConfig
from sweep_models.errors import ConfigError
from sweep_models.patterns import AttnLayout
from sweep_models.presets import PRESETS

__all__ = ["PRESETS", "AttnLayout", "ConfigError", "ModelConfig", "build_model"]


def build_model(config: ModelConfig, device=None):
    """Build the PyTorch model for ``config``; see `sweep_models.transformer.build_model`."""
    from sweep_models.transformer import build_model as _build

    return _build(config, device=device)
