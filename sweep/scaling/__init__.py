"""Scaling laws fitted to a study's trials.

So far the one-variable law L(X) = E + A / X^alpha (`fit_power_law`); the IsoFLOP layouts, the
Chinchilla approaches and compute-optimal sizes build on it.
"""

from sweep.scaling.powerlaw import FitError, PowerLawFit, fit_power_law

__all__ = ["FitError", "PowerLawFit", "fit_power_law"]
