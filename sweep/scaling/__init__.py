"""Scaling laws fitted to a study's trials.

So far the one-variable law L(X) = E + A / X^alpha (`fit_power_law`), Chinchilla's approach 2
(`fit_isoflop`: a parabola per IsoFLOP curve, with its bias flagged) and approach 3, the
parametric L(N, D) with its compute-optimal split (`fit_parametric`, `compute_optimal`).
"""

from sweep.scaling.isoflop import IsoFLOPCurve, IsoFLOPFit, fit_isoflop
from sweep.scaling.parametric import ParametricFit, compute_optimal, fit_parametric
from sweep.scaling.powerlaw import PowerLawFit, fit_power_law
from sweep.scaling.result import FitError, FitResult

__all__ = ["FitError", "FitResult", "IsoFLOPCurve", "IsoFLOPFit", "ParametricFit", "PowerLawFit",
           "compute_optimal", "fit_isoflop", "fit_parametric", "fit_power_law"]
