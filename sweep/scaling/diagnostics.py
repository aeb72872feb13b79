"""The known traps of a scaling analysis, each found in a report and named as a `Note`.

`sweep.scaling.verdict.diagnose` runs every check on a `sweep.scaling.report.ScalingReport` and
returns the notes, each with its cause, the evidence in the report's own numbers and the fix.
The checks (this module's, then the two modules named):

- data: a ``budget_flops`` that is not C = 6ND (`BUDGET_TOLERANCE`), rows left out before the
  fits or by approach 2 alone (a non-finite budget), and embeddings as a large share of N
  (`EMBEDDING_SHARE`), where the parameter convention moves the exponents (Kaplan et al. 2020
  count without them, Hoffmann et al. 2022 with them; Pearce & Song 2024, "Reconciling Kaplan
  and Chinchilla scaling laws", trace the two papers' different exponents to that choice);
- the fits of L(N, D) (approach 3, VPNLS): a parameter at its bound (E near 0), exponents the
  data cannot tell apart (every point on one IsoFLOP line, log D a linear function of log N),
  and a fit that ended far from the starts it was given (`sweep.scaling.parametric.HOFFMANN_GRID`,
  `sweep.scaling.vpnls.VPNLS_GRID`);
- approach 2's bias from a grid that drifts against the optimum and its disagreement with the
  L(N, D) fits (`sweep.scaling.isoflop_bias`);
- points that move the exponent alone (`sweep.scaling.influence`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sweep.scaling.runs import LOSS, column
from sweep.schema import (
    METRIC_BUDGET_FLOPS,
    METRIC_N_PARAMS,
    METRIC_N_PARAMS_NON_EMBEDDING,
    METRIC_N_TOKENS,
)

if TYPE_CHECKING:
    from sweep.scaling.report import ScalingReport

__all__ = ["BUDGET_TOLERANCE", "EMBEDDING_SHARE", "LAW_FITS", "Note", "data_notes", "law_fit",
           "law_notes", "trial_labels"]

#: A budget column more than this fraction off 6ND (median over rows) is named.
BUDGET_TOLERANCE = 0.1
#: Embeddings above this share of N (median over rows) are named.
EMBEDDING_SHARE = 0.2
#: The fits of L(N, D), in the order the verdict prefers them.
LAW_FITS = ("vpnls", "3")
# The residual spread of log D about a line in log N below which alpha and beta are one.
_COLLINEAR = 0.05
# E below this fraction of the smallest loss sits at its bound, 0.
_E_FLOOR = 1e-3
# How far (in grid steps) a fitted value may end outside its start grid before it is named.
_GRID_STEPS = 1.0


@dataclass(frozen=True)
class Note:
    """One diagnostic: what is wrong, the numbers that show it, and what to do.

    Attributes:
        code: A stable name (``approach2-bias``, ``degenerate-fit``, ``influential-point``,
            ``budget-convention``, ``rows-dropped``, ``embedding-share``,
            ``approach2-disagrees``, ``verdict-disagrees``, ...).
        subject: The approach it is about (``2``, ``3``, ``vpnls``) or ``data``.
        cause: What is wrong, in one clause.
        evidence: The report's numbers that show it.
        fix: What to do about it.
    """

    code: str
    subject: str
    cause: str
    evidence: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        """The note's fields and ``text``, for JSON."""
        return {**asdict(self), "text": self.text}

    @property
    def text(self) -> str:
        """The note as one line: cause, evidence, fix."""
        return f"{self.cause}: {self.evidence}. Fix: {self.fix}"


def law_fit(report: ScalingReport) -> str | None:
    """The first fitted approach of `LAW_FITS` in ``report`` (None when neither was fitted)."""
    return next((k for k in LAW_FITS if k in report.results and report.results[k].ok), None)


def trial_labels(points: Any) -> np.ndarray:
    """Each point's ``trial`` (a study's trial number, a table's data row), else its row."""
    return (points["trial"] if "trial" in points else points.index).to_numpy()


def _trials(values: Any, limit: int = 5) -> str:
    shown = ", ".join(str(v) for v in list(values)[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


def data_notes(report: ScalingReport) -> list[Note]:
    """The budget convention, the rows left out and the embeddings' share of N."""
    notes = []
    points = report.points
    # Rows left out by --exclude or --where were asked for: the report's header counts them.
    excluded = {k: v for k, v in report.excluded.items() if not k.startswith("--")}
    if excluded:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(excluded.items()))
        notes.append(Note(
            "rows-dropped", "data", "rows were left out before any fit",
            f"{sum(excluded.values())} of {sum(report.excluded.values()) + len(points)} "
            f"rows ({reasons}); failed, diverged, pruned and interrupted trials have no final "
            "loss on the law, and a non-finite or non-positive N, D or loss cannot be fitted",
            "rerun the failed or interrupted trials (sweep run resumes them) or correct the "
            "table's values; the fits use the other rows"))
    budget = column(points, METRIC_BUDGET_FLOPS)
    missing = ~np.isfinite(budget) | ~(budget > 0)
    if missing.any() and (~missing).any() and "2" in report.results:
        trials = trial_labels(points)[missing]
        notes.append(Note(
            "rows-dropped", "2", "approach 2 left out rows without a budget",
            f"{int(missing.sum())} of {len(points)} rows have no finite budget_flops (trials "
            f"{_trials(trials)}), so they belong to no IsoFLOP curve; approaches 3 and vpnls "
            "fit them", "give every row its FLOP budget (the budget column of --csv)"))
    notes += _budget_note(points, budget)
    notes += _embedding_note(report)
    return notes


def _budget_note(points: Any, budget: np.ndarray) -> list[Note]:
    six_nd = 6 * column(points, METRIC_N_PARAMS) * column(points, METRIC_N_TOKENS)
    ok = np.isfinite(budget) & (budget > 0) & np.isfinite(six_nd) & (six_nd > 0)
    if not ok.any():
        return []
    ratio = budget[ok] / six_nd[ok]
    median = float(np.median(ratio))
    if abs(math.log(median)) <= math.log1p(BUDGET_TOLERANCE):
        return []
    return [Note(
        "budget-convention", "data", "the budget column does not follow C = 6ND",
        f"budget_flops / (6 N D) is {median:.3g} (median of {ratio.size} rows; "
        f"{ratio.min():.3g} to {ratio.max():.3g}); approach 2 puts D_opt = C / (6 N_opt) while "
        "approach 3 and vpnls use the D trained, so their N_opt and D_opt at a budget differ by "
        "that factor and a target budget means different models", "count the budgets as 6ND "
        "(the FLOP convention of every fit here), or give D so that 6ND is the budget; if the "
        "budget counts FLOPs otherwise (attention, the output layer), convert the targets")]


def _embedding_note(report: ScalingReport) -> list[Note]:
    if report.n_params_convention not in ("total", "as given"):  # a table's N may count them
        return []
    points = report.points
    if METRIC_N_PARAMS_NON_EMBEDDING not in points:
        return []
    n, core = column(points, METRIC_N_PARAMS), column(points, METRIC_N_PARAMS_NON_EMBEDDING)
    ok = np.isfinite(n) & np.isfinite(core) & (n > 0) & (core > 0)
    if not ok.any():
        return []
    share = 1 - core[ok] / n[ok]
    if float(np.median(share)) <= EMBEDDING_SHARE:
        return []
    order = np.argsort(n[ok])
    return [Note(
        "embedding-share", "data", "the embeddings are a large share of N, so the parameter "
        "convention moves the exponents",
        f"embeddings are {share[order[0]]:.0%} of N at the smallest size ({n[ok][order[0]]:.4g}) "
        f"and {share[order[-1]]:.0%} at the largest ({n[ok][order[-1]]:.4g}); N here counts "
        "them (Hoffmann et al. 2022), Kaplan et al. 2020 do not, and at small scale that choice "
        "alone changes the fitted exponents (Pearce & Song 2024)",
        "compare with the non-embedding count (--n-params non-embedding for a study; a "
        "table's n_params_non_embedding as its n_params), and quote the convention with the "
        "exponents")]


def law_notes(report: ScalingReport, key: str) -> list[Note]:
    """A fit of L(N, D) that the data cannot pin down: one note naming every sign of it."""
    result = report.results.get(key)
    if result is None or result.fit is None:
        return []
    p = result.fit.params
    points = report.points
    loss = column(points, LOSS)
    evidence = []
    if p["E"] < _E_FLOOR * float(np.nanmin(loss)):
        evidence.append(f"E = {p['E']:.3g} sits at its bound 0: the fit puts all the loss into "
                        "the power terms")
    for name in ("alpha", "beta"):
        if not 0.01 < p[name] < 3:
            evidence.append(f"{name} = {p[name]:.3g} is at the edge of what a power law of "
                            "language-model loss takes")
    evidence += _identifiability(points)
    evidence += _grid_distance(result.fit, key)
    if not evidence:
        return []
    return [Note(
        "degenerate-fit", key, f"approach {key}'s fit of L(N, D) is not identified by the data",
        "; ".join(evidence), "train at 3 or more budgets spanning a decade or more of C, with "
        "sizes on both sides of each optimum; until then its exponents and N_opt are no "
        "estimate")]


def _identifiability(points: Any) -> list[str]:
    log_n = np.log(column(points, METRIC_N_PARAMS))
    log_d = np.log(column(points, METRIC_N_TOKENS))
    ok = np.isfinite(log_n) & np.isfinite(log_d)
    if ok.sum() < 3:
        return []
    design = np.column_stack([np.ones(ok.sum()), log_n[ok]])
    coef, *_ = np.linalg.lstsq(design, log_d[ok], rcond=None)
    spread = float(np.std(log_d[ok] - design @ coef))
    if spread >= _COLLINEAR:
        return []
    budgets = np.unique(column(points, METRIC_BUDGET_FLOPS)[ok])
    budgets = budgets[np.isfinite(budgets)]
    where = f"{budgets.size} budget{'s' if budgets.size != 1 else ''}, " if budgets.size else ""
    return [f"the points lie on one line in (log N, log D) ({where}log D = {coef[0]:.3g} "
            f"{coef[1]:+.3g} log N to within {spread:.2g}), so N's and D's exponents cannot be "
            "told apart"]


def _grid_distance(fit: Any, key: str) -> list[str]:
    """The fitted values that ended more than a grid step outside the starts they came from."""
    from sweep.scaling.parametric import HOFFMANN_GRID
    from sweep.scaling.vpnls import VPNLS_GRID

    p = fit.params
    if key == "3":
        values = {"alpha": p["alpha"], "beta": p["beta"], "e": _log(p["E"]), "a": _log(p["A"]),
                  "b": _log(p["B"])}
        grids = {name: HOFFMANN_GRID[name] for name in values}
    else:
        values = {"alpha": p["alpha"], "beta": p["beta"]}
        grids = dict.fromkeys(values, VPNLS_GRID)
    out = []
    for name, value in values.items():
        grid = grids[name]
        step = (grid[-1] - grid[0]) / max(len(grid) - 1, 1)
        if value < grid[0] - _GRID_STEPS * step or value > grid[-1] + _GRID_STEPS * step:
            out.append(f"{name} = {value:.3g} ended far outside its start grid "
                       f"[{grid[0]:.3g}, {grid[-1]:.3g}]")
    return out


def _log(value: float) -> float:
    return math.log(value) if value > 0 else -math.inf
