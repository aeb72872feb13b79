"""Wall time of the scaling-law fits on 240 points: approach 3 and VPNLS, full fits and bootstraps.

Side by side in one run, on the same 240 points (the Chinchilla law of Hoffmann et al. 2022,
eq. 10, on a 16 x 15 grid of N in 7e7..1.6e10 and D in 5e9..5e11, times log-normal noise of
1%, seed 0):

- ``approach3_full``: `fit_parametric` from Hoffmann's whole grid of 4,500 initialisations
  (every start's L-BFGS advanced together, then the polish of the best starts);
- ``vpnls_full``: `fit_vpnls` (32 x 32 exponent grid, then Nelder-Mead);
- ``approach3_bootstrap``: the same fit with 1,000 bootstrap refits (each one L-BFGS run from the
  full fit's optimum); the figure is the time of the refits alone (total minus the full fit);
- ``vpnls_bootstrap``: likewise for VPNLS (each refit the whole grid and Nelder-Mead);
- ``approach3_scipy`` (unless ``--no-reference``): the reference implementation,
  ``solver="scipy"`` (scipy's L-BFGS-B start by start, BLAS held to one thread), with the
  agreement of its optimum with the batched one.

Each figure is the median of ``--repeats`` runs. Targets: each full fit under 10 s, 1,000
bootstrap refits under 60 s. Prints a table and ends with one JSON line holding every figure.

    python bench/scaling_fit.py [--repeats 3] [--n-bootstrap 1000] [--no-reference]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from sweep.scaling.parametric import fit_parametric
from sweep.scaling.vpnls import fit_vpnls

CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
TARGET_FULL_S = 10.0
TARGET_BOOTSTRAP_S = 60.0


def points(seed: int = 0):
    n, d = np.meshgrid(np.geomspace(7e7, 1.6e10, 16), np.geomspace(5e9, 5e11, 15))
    n, d = n.ravel(), d.ravel()
    p = CHINCHILLA
    loss = p["E"] + p["A"] / n ** p["alpha"] + p["B"] / d ** p["beta"]
    return n, d, loss * np.exp(np.random.default_rng(seed).normal(0, 0.01, n.size))


def timed(fn, repeats: int):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-bootstrap", type=int, default=1000)
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the scipy per-start reference of approach 3")
    args = parser.parse_args()
    n, d, y = points()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load0 = os.getloadavg()[0]
    started = time.perf_counter()
    b = args.n_bootstrap

    a3_s, a3 = timed(lambda: fit_parametric(n, d, y), args.repeats)
    vp_s, vp = timed(lambda: fit_vpnls(n, d, y), args.repeats)
    a3b_total, a3b = timed(lambda: fit_parametric(n, d, y, n_bootstrap=b, seed=1), args.repeats)
    vpb_total, vpb = timed(lambda: fit_vpnls(n, d, y, n_bootstrap=b, seed=1), args.repeats)
    a3b_s, vpb_s = a3b_total - a3_s, vpb_total - vp_s
    reference = None
    if not args.no_reference:
        ref_s, ref = timed(lambda: fit_parametric(n, d, y, solver="scipy"), 1)
        reference = {
            "wall_s": round(ref_s, 3),
            "objective_rel_diff": abs(ref.objective - a3.objective) / ref.objective,
            "max_param_rel_diff": max(abs(ref.params[k] - a3.params[k]) / abs(ref.params[k])
                                      for k in CHINCHILLA),
            "speedup": round(ref_s / a3_s, 2)}

    rows = [("approach 3, full grid (4,500 starts)", a3_s, TARGET_FULL_S),
            ("VPNLS, full fit", vp_s, TARGET_FULL_S),
            (f"approach 3, {b} bootstrap refits", a3b_s, TARGET_BOOTSTRAP_S),
            (f"VPNLS, {b} bootstrap refits", vpb_s, TARGET_BOOTSTRAP_S)]
    print(f"Scaling-law fits on {n.size} points, {cpus} CPUs, median of {args.repeats}; "
          f"load average at start {load0:.2f}")
    for label, seconds, target in rows:
        verdict = "PASS" if seconds < target else "FAIL"
        print(f"{label:>38}: {seconds:8.3f} s  (target < {target:.0f} s: {verdict})")
    if reference is not None:
        print(f"{'approach 3, scipy per start (reference)':>38}: {reference['wall_s']:8.3f} s  "
              f"({reference['speedup']}x the batched fit; objectives differ by "
              f"{reference['objective_rel_diff']:.1e} relative, parameters by at most "
              f"{reference['max_param_rel_diff']:.1e})")
    for name, fit in (("approach 3", a3b), ("VPNLS", vpb)):
        lo, hi = fit.intervals["alpha"]
        print(f"{name}: alpha {fit.params['alpha']:.4f} [{lo:.4f}, {hi:.4f}] at {fit.level}, "
              f"beta {fit.params['beta']:.4f}; converged {fit.converged}; bootstrap failures "
              f"{fit.settings['bootstrap_failed']}")
    total = time.perf_counter() - started
    print(f"load average at end {os.getloadavg()[0]:.2f}; benchmark took {total:.0f} s")

    def figure(seconds, target):
        return {"s": round(seconds, 3), "target_s": target, "pass": bool(seconds < target)}

    print(json.dumps({
        "bench": "scaling_fit", "cpus": cpus, "points": int(n.size), "repeats": args.repeats,
        "n_bootstrap": b,
        "approach3_full": figure(a3_s, TARGET_FULL_S),
        "vpnls_full": figure(vp_s, TARGET_FULL_S),
        "approach3_bootstrap": figure(a3b_s, TARGET_BOOTSTRAP_S),
        "vpnls_bootstrap": figure(vpb_s, TARGET_BOOTSTRAP_S),
        "approach3_scipy_reference": reference,
        "all_pass": bool(a3_s < TARGET_FULL_S and vp_s < TARGET_FULL_S
                         and a3b_s < TARGET_BOOTSTRAP_S and vpb_s < TARGET_BOOTSTRAP_S),
        "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "total_s": round(total, 1)}))


if __name__ == "__main__":
    main()
