"""The verdict: one recommended N_opt, D_opt and loss per target budget, and why.

The rule (`RULE`), in order:

1. the first fit of L(N, D) in `sweep.scaling.diagnostics.LAW_FITS` (VPNLS, then approach 3)
   that converged and has no ``degenerate-fit`` note: its compute-optimal split under C = 6ND
   (Hoffmann et al. 2022 eq. 4) and the bootstrap interval of each number. The fits of
   L(N, D) are preferred because approach 2's parabolas are biased by the grid's width, an
   off-centre or drifting grid and alpha != beta (Czech 2026, "Problems with Chinchilla
   Approach 2"), and VPNLS first because its bootstrap refits the whole procedure where
   approach 3's restarts from the full fit's optimum;
2. else approach 2, else approach 1 (their power laws of C), when 0 < a < 1 (N_opt and D_opt
   both grow with C);
3. else a fit of L(N, D) that did not converge or is degenerate, said so in the reason.

Approach 2 is the cross-check at every budget: where its N_opt and the verdict's differ beyond
their intervals (`sweep.scaling.isoflop_bias.parted`, on log N) a ``verdict-disagrees`` note
names the budgets. `conclude` adds the notes (`diagnose`) and the verdict to a report; the
shapes to train come from the verdict's approach
(`sweep.kinds.scaling.recommend.add_recommendations`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sweep.scaling.diagnostics import LAW_FITS, Note, data_notes, law_notes
from sweep.scaling.influence import influence_notes
from sweep.scaling.isoflop_bias import isoflop_notes, parted
from sweep.scaling.report import OptimalRow
from sweep.scaling.runs import LOSS
from sweep.schema import METRIC_BUDGET_FLOPS, METRIC_N_PARAMS, METRIC_N_TOKENS

if TYPE_CHECKING:
    from sweep.scaling.report import ApproachResult, ScalingReport

__all__ = ["RULE", "Verdict", "VerdictRow", "conclude", "diagnose", "make_verdict",
           "verdict_json"]

#: The rule in one line, for reports.
RULE = ("the first converged, identified fit of L(N, D) (vpnls, then approach 3), else "
        "approach 2, else approach 1; approach 2 is the cross-check")
_WHY = {
    "vpnls": "VPNLS fits L(N, D) without the bias approach 2's parabolas take from the grid "
             "(Czech 2026) and its bootstrap refits the whole procedure",
    "3": "approach 3 fits L(N, D) without the bias approach 2's parabolas take from the grid "
         "(Czech 2026)",
    "2": "approach 2's IsoFLOP parabolas (no fit of L(N, D) could be trusted)",
    "1": "approach 1's lower envelope (no other fit could be made)",
}


@dataclass(frozen=True)
class VerdictRow(OptimalRow):
    """The recommended compute-optimal model at one budget, with approach 2 beside it.

    An `OptimalRow` of the verdict's approach, its intervals at the verdict's level.

    Attributes:
        cross_check: Approach 2's N_opt at C (nan without approach 2).
        cross_interval: Its interval, or None.
        parted: Whether the two differ beyond their intervals.
    """

    cross_check: float = math.nan
    cross_interval: tuple[float, float] | None = None
    parted: bool = False


@dataclass(frozen=True)
class Verdict:
    """One recommended estimate per budget, the approach it comes from and why.

    Attributes:
        approach: The approach key the estimate comes from.
        why: One line saying why.
        level: The intervals' confidence level.
        rows: One `VerdictRow` per budget of the report, ascending.
        rule: The rule that chose the approach (`RULE`).
    """

    approach: str
    why: str
    level: float
    rows: list[VerdictRow] = field(default_factory=list)
    rule: str = RULE


def _usable(result: ApproachResult | None) -> bool:
    return result is not None and result.ok and bool(result.optimal)


def _choose(report: ScalingReport, notes: list[Note]) -> tuple[str, str] | None:
    degenerate = {n.subject for n in notes if n.code == "degenerate-fit"}
    skipped: list[str] = []
    for key in LAW_FITS:
        result = report.results.get(key)
        if not _usable(result):
            continue
        assert result is not None and result.fit is not None
        if result.fit.converged and key not in degenerate:
            return key, _WHY[key] + "".join(f"; {s}" for s in skipped)
        skipped.append(f"approach {key} passed over: "
                       + ("its fit is degenerate (see the note)" if key in degenerate
                          else f"it did not converge ({result.fit.message})"))
    for key in ("2", "1"):
        result = report.results.get(key)
        if not _usable(result):
            continue
        assert result is not None
        a = result.params.get("a", math.nan)
        if 0 < a < 1:  # N_opt and D_opt both grow with C
            return key, _WHY[key] + "".join(f"; {s}" for s in skipped)
        skipped.append(f"approach {key} passed over: its exponent a = {a:.3g} has "
                       + ("N_opt shrink" if a <= 0 else "D_opt shrink") + " as C grows")
    for key in LAW_FITS:
        if _usable(report.results.get(key)):
            return key, (f"approach {key}, the only fit with a compute-optimal table, though "
                         "it is not to be trusted: " + "; ".join(skipped))
    return None


def make_verdict(report: ScalingReport, notes: list[Note]) -> tuple[Verdict | None, list[Note]]:
    """The verdict by `RULE`, and a ``verdict-disagrees`` note where approach 2 parts from it.

    Args:
        report: An analysed `ScalingReport`.
        notes: Its diagnostics (`diagnose`), which rule out degenerate fits.

    Returns:
        ``(verdict, notes)``: None and no notes when no approach has a compute-optimal table.
    """
    chosen = _choose(report, notes)
    if chosen is None:
        return None, []
    key, why = chosen
    result = report.results[key]
    check = report.results.get("2") if key != "2" else None
    cross = {row.budget_flops: row for row in check.optimal} if check and _usable(check) else {}
    rows = []
    for row in result.optimal:
        other = cross.get(row.budget_flops)
        n_interval = row.intervals.get(METRIC_N_PARAMS)
        o_interval = other.intervals.get(METRIC_N_PARAMS) if other else None
        split = other is not None and parted(
            math.log(row.n_params), _log(n_interval), math.log(other.n_params), _log(o_interval))
        rows.append(VerdictRow(row.budget_flops, row.n_params, row.n_tokens, row.loss,
                               {k: v for k, v in row.intervals.items()
                                if k in (METRIC_N_PARAMS, METRIC_N_TOKENS, LOSS)},
                               row.extrapolated,
                               other.n_params if other else math.nan, o_interval, split))
    parts = [r for r in rows if r.parted]
    if parts:
        why += "; approach 2 parts from it (see the note)"
    elif cross and key != "2":
        agree = any(r.intervals and r.cross_interval for r in rows)
        why += ("; approach 2 agrees within the intervals" if agree
                else "; approach 2 beside it (no intervals to compare: --bootstrap 0)")
    verdict = Verdict(key, why, result.level, rows)
    if not parts:
        return verdict, []
    listed = "; ".join(f"C={r.budget_flops:.3g}: {r.n_params:.4g} "
                       f"{_bracket(r.intervals.get(METRIC_N_PARAMS))} against approach 2's "
                       f"{r.cross_check:.4g} {_bracket(r.cross_interval)}" for r in parts)
    return verdict, [Note(
        "verdict-disagrees", key, f"approach 2 and the verdict (approach {key}) give N_opt "
        "that differ beyond their intervals", listed,
        "read the other notes for the cause (approach 2's grid bias, an influential point, a "
        "degenerate fit); the verdict keeps the fit of L(N, D), and a plan that must hold "
        "under both trains sizes spanning the two")]


def _bracket(interval: tuple[float, float] | None) -> str:
    return f"[{interval[0]:.4g}, {interval[1]:.4g}]" if interval else "[-]"


def _log(interval: tuple[float, float] | None) -> tuple[float, float] | None:
    if not interval or not (interval[0] > 0 and interval[1] > 0):
        return None
    return math.log(interval[0]), math.log(interval[1])


def diagnose(report: ScalingReport) -> list[Note]:
    """Every check of `sweep.scaling.diagnostics` on ``report``, data notes first.

    Then the fits of L(N, D) (`law_notes`), approach 2's bias and disagreement
    (`sweep.scaling.isoflop_bias`), sized on the law refitted without the points that
    `sweep.scaling.influence` names, and those points.
    """
    notes = data_notes(report)
    for key in LAW_FITS:
        notes += law_notes(report, key)
    influential, law = influence_notes(report)
    return notes + isoflop_notes(report, law) + influential


def conclude(report: ScalingReport) -> ScalingReport:
    """Fill ``report.notes`` (`diagnose`) and ``report.verdict`` (`make_verdict`); returns it."""
    notes = diagnose(report)
    verdict, parting = make_verdict(report, notes)
    report.notes = notes + parting
    report.verdict = verdict
    return report


def verdict_json(verdict: Verdict | None) -> dict[str, Any] | None:
    """The verdict as JSON-ready data (None stays None; nan becomes None)."""
    if verdict is None:
        return None

    def num(v: float) -> float | None:
        return float(v) if math.isfinite(v) else None

    def pair(v: tuple[float, float] | None) -> list[float | None] | None:
        return None if v is None else [num(v[0]), num(v[1])]

    return {"approach": verdict.approach, "why": verdict.why, "rule": verdict.rule,
            "level": num(verdict.level), "rows": [{
                METRIC_BUDGET_FLOPS: r.budget_flops, METRIC_N_PARAMS: num(r.n_params),
                METRIC_N_TOKENS: num(r.n_tokens), LOSS: num(r.loss),
                "intervals": {k: pair(v) for k, v in r.intervals.items()},
                "extrapolated": r.extrapolated, "approach_2_n_params": num(r.cross_check),
                "approach_2_interval": pair(r.cross_interval), "parted": r.parted}
                for r in verdict.rows]}
