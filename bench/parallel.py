"""Study wall time at ``search.parallel`` 1 and 2: the quickstart study, 20 trials, on CPU.

Side by side in one run, each in a fresh spawned process (neither inherits the other's imports
or caches), the study of ``studies/quickstart.yaml`` with ``search.n_trials: 20`` (its shape,
attention and learning-rate space, TPE and Hyperband, the stdlib corpus) is run by
`sweep.study.run_study` with ``search.parallel`` 1, then 2 (the Optuna executor's worker
processes, each with its share of the cores as torch threads,
`sweep.train.hardware.default_threads`). ``--tokens`` shortens each trial's budget (the
quickstart's is 6e5 tokens) so both arms fit in a few minutes.

The two arms sample different configs (TPE with parallel workers sees fewer finished trials,
and Hyperband prunes differently), so the work done differs too: besides the wall-time speedup
the benchmark prints each arm's trained FLOPs (the trials' ``train_flops`` metric, the cost
model's) and the speedup in FLOPs per second of study wall time, the fairer figure. Target:
parallel 2 no slower than parallel 1 in FLOPs per second (``speedup_flops_per_s >= 1``). The
load average before and after is printed: on a shared 2-core machine others' work takes cores.
Ends with one JSON line.

    python bench/parallel.py [--trials 20] [--tokens 150000] [--parallel 1 2]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

SPEC = Path(__file__).resolve().parent.parent / "studies" / "quickstart.yaml"


def study_job(parallel: int, trials: int, tokens: int) -> dict[str, Any]:
    """Run the quickstart study at ``parallel`` in this (fresh) process; its figures."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    from sweep.spec import load_spec, parse_spec
    from sweep.study import run_study
    from sweep.tracking import find_study, read_trials

    for name in ("mlflow", "alembic", "optuna"):
        logging.getLogger(name).setLevel(logging.ERROR)
    data = load_spec(SPEC).to_data()
    data["search"].update(n_trials=trials, parallel=parallel)
    data["train"]["tokens"] = tokens
    spec = parse_spec(data)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        summary = run_study(spec, out_dir=Path(tmp), quiet=True)
        wall = time.perf_counter() - start
        found = find_study(summary.tracking_uri, spec.name)
        if found is None:
            raise RuntimeError("the study's runs were not found")
        trials_read = read_trials(summary.tracking_uri, *found)
    flops = sum(t["metrics"].get("train_flops", 0.0) for t in trials_read
                if math.isfinite(t["metrics"].get("train_flops", math.nan)))
    return {"parallel": parallel, "wall_s": wall, "train_flops": flops,
            "flops_per_s": flops / wall, "trials": len(trials_read),
            "counts": {k: v for k, v in summary.counts.items() if v},
            "best_val_loss": summary.best_val_loss}


def _fresh(*args: Any) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx, max_tasks_per_child=1) as pool:
        return pool.submit(study_job, *args).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=150_000,
                        help="Training tokens per trial (the quickstart's: 600000).")
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    if len(args.parallel) < 2 or min(args.parallel) < 1:
        parser.error("--parallel needs at least two values >= 1")
    load0 = os.getloadavg()[0]
    arms = [_fresh(p, args.trials, args.tokens) for p in args.parallel]
    load1 = os.getloadavg()[0]
    base = arms[0]
    print(f"quickstart study, {args.trials} trials of {args.tokens} tokens, "
          f"{os.cpu_count()} CPUs; load average {load0:.2f} at start, {load1:.2f} at end")
    print(f"{'parallel':>8} {'wall s':>8} {'TFLOPs':>8} {'GFLOP/s':>8} {'speedup':>8} "
          f"{'flops/s x':>9}  states")
    for arm in arms:
        arm["speedup_wall"] = base["wall_s"] / arm["wall_s"]
        arm["speedup_flops_per_s"] = arm["flops_per_s"] / base["flops_per_s"]
        print(f"{arm['parallel']:>8} {arm['wall_s']:8.1f} {arm['train_flops'] / 1e12:8.3f} "
              f"{arm['flops_per_s'] / 1e9:8.2f} {arm['speedup_wall']:8.2f} "
              f"{arm['speedup_flops_per_s']:9.2f}  {arm['counts']}")
    last = arms[-1]
    passed = bool(last["speedup_flops_per_s"] >= 1.0)
    print(f"parallel {last['parallel']} / parallel {base['parallel']}: wall speedup "
          f"{last['speedup_wall']:.2f}, FLOPs/s speedup {last['speedup_flops_per_s']:.2f} "
          f"(target >= 1: {'PASS' if passed else 'FAIL'})")
    print(json.dumps({"bench": "parallel", "cpus": os.cpu_count(), "trials": args.trials,
                      "tokens": args.tokens, "arms": arms,
                      "target": {"speedup_flops_per_s": 1.0, "pass": passed},
                      "load_average": [round(load0, 2), round(load1, 2)]}))


if __name__ == "__main__":
    main()
