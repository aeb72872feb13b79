"""Matplotlib for every figure the project draws: one choice of backend, one colour ramp.

matplotlib is imported inside `pyplot`, on first use, so importing this module (or a module
that draws) loads none of it.
"""

from __future__ import annotations

import sys
from types import ModuleType

import numpy as np

__all__ = ["colours", "line_collection", "pyplot"]


def pyplot() -> ModuleType:
    """``matplotlib.pyplot``, with the Agg backend unless pyplot is already in use.

    Agg draws into files without a display (a server, a cluster worker, a CI runner); a
    session that has imported pyplot already (a notebook) keeps the backend it chose.
    """
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def colours(n: int) -> list[tuple[float, float, float, float]]:
    """``n`` RGBA colours spread along viridis from its dark end to 0.9 (one when ``n < 1``)."""
    cmap = pyplot().get_cmap("viridis")
    return [cmap(x) for x in np.linspace(0.0, 0.9, max(n, 1))]


def line_collection(segments: list[list[tuple[float, float]]], **kwargs: object) -> object:
    """A `matplotlib.collections.LineCollection` of ``segments`` (each a curve's points).

    Many curves as one artist: drawn and laid out once, not once per curve.
    """
    pyplot()
    from matplotlib.collections import LineCollection

    return LineCollection(segments, **kwargs)  # type: ignore[arg-type]
