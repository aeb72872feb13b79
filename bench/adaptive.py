"""The adaptive scaling design against the fixed grid, simulated on three laws (``sweep plan``).

For each simulated law (``chinchilla``: Hoffmann et al. 2022's fit; ``asymmetric``: alpha 0.25,
beta 0.40; ``chinchilla-lr``: Chinchilla's with DeepSeek's learning-rate and batch penalties,
`sweep.simulate.law.LAWS`), side by side in one run, over ``--repeats`` simulated studies each
(log-normal seed noise ``--noise``), VPNLS (the verdict's estimator) fitted to:

- ``fixed``: the grid ``studies/scaling-isoflop.yaml`` lays out (its budgets, sizes, span,
  re-centring; `sweep.simulate.design.simulate_grid`);
- ``fixed_wide``: the same grid with twice its ``scaling.span`` (context: how much of the
  adaptive design's gain a wider fixed grid gets too);
- ``adaptive``: `sweep.simulate.adaptive.simulate_adaptive` with the fixed grid's compute as its
  allowance, target 100x the largest budget;
- ``adaptive_60``: the same with 60% of that compute.

Per design: the FLOPs trained (median), the width of N_opt at the target (q95 / q05 over the
repeats) and its bias (median / truth - 1). Targets (issue 24), per law: ``adaptive``'s width
at most 0.6 x ``fixed``'s, or ``adaptive_60``'s at most ``fixed``'s; and the adaptive bias no
larger in magnitude than the fixed grid's plus 0.02 (the spread of a median over 100 repeats
of this noise). Prints one line per law and design, then one JSON line.

    python bench/adaptive.py [--repeats 100] [--noise 0.01] [--seed 0]

Runtime: 951 s measured on a shared 2-core CPU (load about 6); the adaptive designs refit with
a bootstrap after each round.

Measured (100 repeats, noise 0.01, seed 0; N_opt width at 3e14 FLOPs, fixed / fixed_wide /
adaptive / adaptive_60): chinchilla x2.04 / x1.58 / x1.44 / x1.56, asymmetric x1.93 / x1.47 /
x1.44 / x1.63, chinchilla-lr x2.02 / x1.57 / x1.48 / x1.60. The adaptive design at the fixed
grid's compute is x0.71-0.75 as wide (the 0.6 target is not met); with 55% of its compute it is
narrower than the fixed grid on every law (met); its bias is no larger. Most of the gain is the
wider span: against ``fixed_wide`` the adaptive design is x0.91-0.97 as wide.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import warnings
from pathlib import Path

import yaml

from sweep.simulate.adaptive import AdaptiveSettings, simulate_adaptive
from sweep.simulate.design import Design, simulate_grid
from sweep.simulate.law import LAWS
from sweep.simulate.plan import run_plan
from sweep.spec import parse_spec

SPEC = Path(__file__).resolve().parents[1] / "studies" / "scaling-isoflop.yaml"
BIAS_SLACK = 0.02


def _specs():
    data = yaml.safe_load(SPEC.read_text())
    wide = yaml.safe_load(SPEC.read_text())
    wide["scaling"]["span"] = 2 * data["scaling"]["span"]
    return parse_spec(data), parse_spec(wide)


def _row(plan, target):
    s = plan.spread("vpnls", "n_params", target)
    return {"flops": plan.design_flops, "points": plan.n_points, "width": s.width,
            "bias": s.bias, "fits": s.n_ok}


def measure(law_name: str, repeats: int, noise: float, seed: int) -> dict:
    spec, wide = _specs()
    law = LAWS[law_name]
    target = 100 * max(spec.section("scaling").budgets)
    allowance = simulate_grid(Design.of(spec, law, noise), random.Random(0)).total_flops
    common = {"repeats": repeats, "noise": noise, "seed": seed, "estimators": ("vpnls",),
              "targets": [target]}
    out = {"fixed": _row(run_plan(spec, law, **common), target),
           "fixed_wide": _row(run_plan(wide, law, **common), target)}
    for name, share in (("adaptive", 1.0), ("adaptive_60", 0.6)):
        settings = AdaptiveSettings(target_flops=target, allowance_flops=share * allowance,
                                    target_rel_ci=1.0)
        plan = run_plan(spec, law, **common,
                        simulate=lambda d, rng, s=settings: simulate_adaptive(d, rng, s))
        out[name] = _row(plan, target)
    fixed, ad, ad60 = out["fixed"], out["adaptive"], out["adaptive_60"]
    ratio = ad["width"] / fixed["width"]
    out["width_ratio"] = ratio
    out["narrower_met"] = ratio <= 0.6
    out["cheaper_met"] = ad60["width"] <= fixed["width"] and ad60["flops"] <= 0.6 * allowance
    out["bias_met"] = abs(ad["bias"]) <= abs(fixed["bias"]) + BIAS_SLACK
    out["met"] = (out["narrower_met"] or out["cheaper_met"]) and out["bias_met"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--noise", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=RuntimeWarning)  # Nelder-Mead on inf RSS
    start = time.perf_counter()
    results = {}
    for law in LAWS:
        results[law] = measure(law, args.repeats, args.noise, args.seed)
        for design in ("fixed", "fixed_wide", "adaptive", "adaptive_60"):
            r = results[law][design]
            print(f"{law:14s} {design:12s} {r['flops']:.3g} FLOPs, {r['points']:.0f} points: "
                  f"N_opt width x{r['width']:.3f}, bias {r['bias']:+.3f} ({r['fits']} fits)")
        print(f"{law:14s} adaptive/fixed width {results[law]['width_ratio']:.3f}; targets met: "
              f"{results[law]['met']}")
    print(json.dumps({"bench": "adaptive", "repeats": args.repeats, "noise": args.noise,
                      "seed": args.seed, "seconds": round(time.perf_counter() - start, 1),
                      "laws": results, "met": all(r["met"] for r in results.values())}))


if __name__ == "__main__":
    main()
