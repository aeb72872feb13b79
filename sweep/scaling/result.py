"""What every scaling-law fit returns (`FitResult`); `FitError` for a fit that cannot be made."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["FitError", "FitResult"]


class FitError(ValueError):
    """A fit that cannot be made: too few points, non-finite values, a degenerate grid."""


@dataclass(frozen=True, kw_only=True)
class FitResult:
    """The fields every fit has; each law's result adds its own and a ``predict``.

    Attributes:
        params: The fitted parameters by name.
        residuals: Observed minus fitted values, in input order (loss or log loss: the fit says).
        objective: The minimised objective at the optimum.
        converged: Whether the optimiser reported convergence.
        n_points: Points fitted.
        method: What was fitted and how (for reports).
        settings: The fit's settings (starts, bootstrap count and seed, ...).
    """

    params: dict[str, float]
    residuals: np.ndarray
    objective: float
    converged: bool
    n_points: int
    method: str
    settings: dict[str, object] = field(default_factory=dict)
