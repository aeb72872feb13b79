"""What every scaling-law fit returns (`FitResult`); `FitError` for a fit that cannot be made."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sweep.scaling.limits import check_limits

__all__ = ["DEFAULT_LEVEL", "FitError", "FitResult", "dropped_note", "finite_rows"]

#: Confidence level of bootstrap intervals unless a fit is told otherwise.
DEFAULT_LEVEL = 0.9


class FitError(ValueError):
    """A fit that cannot be made: too few points, non-finite values, a degenerate grid."""


@dataclass(frozen=True, kw_only=True)
class FitResult:
    """The fields every fit has; each law's result adds its own and a ``predict``.

    Attributes:
        params: The fitted parameters by name.
        residuals: Observed minus fitted values of the points fitted (non-finite rows dropped),
            in input order (loss or log loss: the fit says).
        objective: The minimised objective at the optimum.
        converged: Whether the optimiser reported convergence and no diagnostic failed (a
            parameter at a bound, a start-grid edge); ``message`` says why when it is False.
        n_points: Points fitted (after dropping non-finite rows).
        method: What was fitted and how (for reports).
        settings: The fit's settings (starts, tolerances, bootstrap count and seed, ...).
        stderr: Standard error of each parameter where the fit defines one (empty otherwise;
            nan where the covariance is singular).
        intervals: ``(lo, hi)`` percentile bootstrap interval of each parameter at ``level``
            (empty without a bootstrap).
        level: Confidence level of ``intervals``, in (0, 1).
        draws: Each parameter's bootstrap refits, shape ``(n_bootstrap,)`` per name, in resample
            order, nan where a refit could not be made (empty without a bootstrap); what
            `sweep.scaling.allocation.optimal_allocation` turns into intervals.
        dropped: Input indices of the rows left out because a value was NaN or infinite.
        message: Why ``converged`` is False, or a note on the fit (empty when there is none).
    """

    params: dict[str, float]
    residuals: np.ndarray
    objective: float
    converged: bool
    n_points: int
    method: str
    settings: dict[str, object] = field(default_factory=dict)
    stderr: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    level: float = DEFAULT_LEVEL
    draws: dict[str, np.ndarray] = field(default_factory=dict)
    dropped: tuple[int, ...] = ()
    message: str = ""

    def predict(self, *args, **kwargs):
        """The fitted law at the given inputs (each result type defines its own)."""
        raise NotImplementedError(f"{type(self).__name__} does not define predict")


def finite_rows(names: tuple[str, ...], *columns) -> tuple[list[np.ndarray], tuple[int, ...]]:
    """Columns as float arrays of equal length, without the rows holding a NaN or an infinity.

    Every finite value must lie in its column's range (`sweep.scaling.limits.LIMITS`, by
    name), so that no solver is given a number its arithmetic overflows on.

    Args:
        names: A name per column, for the error message and its range.
        *columns: Array-likes of shape ``(n,)``.

    Returns:
        The columns with the non-finite rows removed (order kept), and those rows' input indices.

    Raises:
        FitError: Columns of different lengths, or a finite value outside its column's range
            (the column, the input row and the value named).
    """
    arrays = [np.asarray(c, dtype=float).ravel() for c in columns]
    sizes = [a.size for a in arrays]
    if len(set(sizes)) > 1:
        listed = ", ".join(f"{n} {s}" for n, s in zip(names, sizes, strict=True))
        raise FitError(f"columns of different lengths: {listed} values")
    check_limits(names, arrays, FitError)
    keep = np.ones(sizes[0] if sizes else 0, dtype=bool)
    for a in arrays:
        keep &= np.isfinite(a)
    dropped = tuple(int(i) for i in np.flatnonzero(~keep))
    return [a[keep] for a in arrays], dropped


def dropped_note(dropped: tuple[int, ...]) -> str:
    """`` after dropping k non-finite rows`` (empty when none were), for error messages."""
    if not dropped:
        return ""
    return f" after dropping {len(dropped)} non-finite row{'s' if len(dropped) > 1 else ''}"
