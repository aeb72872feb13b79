"""Scaling laws fitted to a study's trials or to a table of points.

- `load_runs` / `load_curves` (`sweep.scaling.runs`): a study's trained points and evaluations.
- Fits, each returning a `FitResult` with intervals: `fit_power_law` (L = E + A / X^alpha),
  `fit_envelope` (Chinchilla approach 1), `fit_isoflop` (approach 2, its grid bias sized by
  `sweep.scaling.isoflop_bias`),
  `fit_parametric` (approach 3, as Hoffmann et al.), `fit_vpnls` (variable projection).
- `fit_hparam_laws` (`sweep.scaling.hparam_laws`): eta_opt(C) and B_opt(C) as power laws, by
  DeepSeek LLM's near-optimal band and by per-budget parabola vertices.
- `optimal_allocation`: N_opt, D_opt and the loss for a budget, under C = 6ND or the cost model.
- `analyze` (`sweep.scaling.report`): the approaches side by side, as `sweep analyze scaling`;
  `conclude` (`sweep.scaling.verdict`): the notes on known traps and one recommended estimate.

The shapes a scaling study's size rule offers for each N_opt are the scaling kind's
(`sweep.kinds.scaling.recommend`).

Names are imported on first use (PEP 562), so ``import sweep.scaling`` loads neither scipy nor
MLflow; ``sweep analyze scaling`` refuses bad input before either is loaded.
"""

from __future__ import annotations

from sweep.lazy import lazy_getattr

_LAZY = {
    "Allocation": "sweep.scaling.allocation",
    "optimal_allocation": "sweep.scaling.allocation",
    "EnvelopeFit": "sweep.scaling.envelope",
    "fit_envelope": "sweep.scaling.envelope",
    "FitError": "sweep.scaling.result",
    "FitResult": "sweep.scaling.result",
    "HparamLawFit": "sweep.scaling.hparam_laws",
    "HparamReport": "sweep.scaling.hparam_laws",
    "fit_hparam_laws": "sweep.scaling.hparam_laws",
    "IsoFLOPCurve": "sweep.scaling.isoflop",
    "IsoFLOPFit": "sweep.scaling.isoflop",
    "fit_isoflop": "sweep.scaling.isoflop",
    "ParametricFit": "sweep.scaling.parametric",
    "compute_optimal": "sweep.scaling.parametric",
    "fit_parametric": "sweep.scaling.parametric",
    "PowerLawFit": "sweep.scaling.powerlaw",
    "fit_power_law": "sweep.scaling.powerlaw",
    "VPNLSFit": "sweep.scaling.vpnls",
    "fit_vpnls": "sweep.scaling.vpnls",
    "load_curves": "sweep.scaling.runs",
    "load_runs": "sweep.scaling.runs",
    "read_csv_points": "sweep.scaling.points_csv",
    "ScalingReport": "sweep.scaling.report",
    "analyze": "sweep.scaling.report",
    "Note": "sweep.scaling.diagnostics",
    "Verdict": "sweep.scaling.verdict",
    "conclude": "sweep.scaling.verdict",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
