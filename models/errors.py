"""The error every invalid model setting raises."""

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A model config value breaks a rule; the message names the field and the rule."""
