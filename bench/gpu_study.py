"""The GPU check's study parts: real `sweep run`s (`bench/gpu_check.py`).

- `fractional_case`: a 4-trial Ray study at ``resources.gpus_per_trial: 0.25`` on one GPU
  against the same study at one GPU per trial: were all four trials running at once (their
  MLflow runs' start and end times overlap), each on the device (tag ``sweep.device``), none
  out of memory (every trial COMPLETE), and the wall time of each.
- `gate_case`: the pre-flight memory gate: a grid whose large config's estimated memory is
  1.5x the device's (CUDA total memory, else host RAM) ends that trial INFEASIBLE before it
  allocates anything, while the small one trains: no OOM, no FAILED trial.

Both need the whole service installed (Optuna, MLflow, Ray); each study runs as a subprocess
``python -m sweep.cli run SPEC --out DIR --json`` and is read back with `sweep.results`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from sweep.schema import TAG_DEVICE

_SMALL_MODEL = {"seq_len": 256, "n_layers": 4, "d_model": 256, "d_head": 64, "d_ff_ratio": 4,
                "vocab_size": 64}
_MARKOV = "synthetic:markov?order=1&vocab={vocab}&seed=0&tokens={tokens}"


def _run(spec: dict[str, Any], folder: Path, timeout_s: float) -> dict[str, Any]:
    """``sweep run`` of ``spec`` into ``folder``: wall seconds, exit code, its JSON line."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = folder / spec["name"]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sweep.cli", "run", str(path), "--out", str(out),
                           "--json"], capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    summary = json.loads(lines[-1]) if lines else None
    return {"wall_s": wall, "exit": proc.returncode, "summary": summary, "out": out,
            "stderr_tail": proc.stderr[-1500:] if proc.returncode else ""}


def _trials(out: Path) -> list[dict[str, Any]]:
    """The trials' state, start/end (s) and device tag, in trial order."""
    from mlflow import MlflowClient

    from sweep.results import read_study

    trials, attrs = read_study(out)
    client = MlflowClient(attrs["tracking_uri"])
    return [{"trial": t["trial"], "state": str(t["state"].value),
             "start_s": (t["start_time"] or 0) / 1e3, "end_s": (t["end_time"] or 0) / 1e3,
             "device": client.get_run(t["run_id"]).data.tags.get(TAG_DEVICE)}
            for t in trials]


def _max_overlap(trials: list[dict[str, Any]]) -> int:
    """The most trials running at one instant (from their start and end times)."""
    events = sorted([(t["start_s"], 1) for t in trials] + [(t["end_s"], -1) for t in trials],
                    key=lambda e: (e[0], e[1]))
    live = best = 0
    for _, delta in events:
        live += delta
        best = max(best, live)
    return best


def _fractional_spec(name: str, gpus_per_trial: float, tokens: float) -> dict[str, Any]:
    return {
        "name": name, "data": _MARKOV.format(vocab=64, tokens=4_000_000),
        "model": _SMALL_MODEL,
        "train": {"tokens": tokens, "batch_size": 32, "warmup": 0.05, "device": "cuda",
                  "eval_tokens": 16384,
                  "lr": {"float": [1.0e-3, 4.0e-3], "log": True}},
        "search": {"executor": "ray", "sampler": "random", "pruner": "none", "n_trials": 4,
                   "seed": 0},
        "resources": {"gpus_per_trial": gpus_per_trial, "cpus_per_trial": 2},
    }


def fractional_case(folder: Path, *, tokens: float = 2.0e6,
                    timeout_s: float = 240) -> dict[str, Any]:
    """Four trials packed on one GPU (0.25 each) against four at one GPU each, in sequence."""
    out: dict[str, Any] = {}
    for arm, share in (("packed", 0.25), ("sequential", 1.0)):
        run = _run(_fractional_spec(f"gpu-check-{arm}", share, tokens), folder, timeout_s)
        trials = _trials(run["out"]) if run["exit"] in (0, 1) else []
        out[arm] = {"wall_s": run["wall_s"], "exit": run["exit"],
                    "states": [t["state"] for t in trials],
                    "devices": sorted({str(t["device"]) for t in trials}),
                    "max_concurrent": _max_overlap(trials) if trials else 0,
                    "stderr_tail": run["stderr_tail"]}
    packed = out["packed"]
    out["all_concurrent"] = packed["max_concurrent"] == 4
    out["all_complete"] = packed["states"] == ["COMPLETE"] * 4
    out["all_on_cuda"] = bool(packed["devices"]) and all(d.startswith("cuda")
                                                         for d in packed["devices"])
    out["speedup"] = (out["sequential"]["wall_s"] / packed["wall_s"]) if packed["wall_s"] else None
    return out


def huge_d_model(device_bytes: float, n_layers: int, seq_len: int, device: str) -> int:
    """The smallest d_model (256 times a power of two) whose training step the cost model puts at
    1.5x ``device_bytes`` or more, at batch 1."""
    from sweep_models import ModelConfig
    from sweep_models.cost import estimate

    d = 256
    while True:
        cfg = ModelConfig(vocab_size=256, seq_len=seq_len, d_model=d, n_heads=max(1, d // 128),
                          n_layers=n_layers)
        if estimate(cfg, batch_size=1, device=device).memory.total >= 1.5 * device_bytes:  # type: ignore[arg-type]
            return d
        d *= 2


def gate_case(folder: Path, device: str, *, timeout_s: float = 240) -> dict[str, Any]:
    """A grid of a small and a too-large d_model: the large one INFEASIBLE, nothing OOM."""
    from sweep.space.constraints import device_memory_bytes

    limit = device_memory_bytes(device)
    big = huge_d_model(limit, 2, 64, "cuda" if device.startswith("cuda") else "cpu")
    spec = {
        "name": "gpu-check-gate", "data": _MARKOV.format(vocab=16, tokens=20_000),
        "model": {"seq_len": 64, "n_layers": 2, "d_head": 128, "vocab_size": 16,
                  "d_model": {"choice": [128, big]}},
        "train": {"tokens": 2.0e3, "batch_size": 1, "eval_tokens": 512, "lr": 1.0e-3,
                  "device": device},
        "search": {"executor": "optuna", "sampler": "grid", "n_trials": 2, "seed": 0},
    }
    run = _run(spec, folder, timeout_s)
    trials = _trials(run["out"]) if run["exit"] in (0, 1) else []
    states = {t["trial"]: t["state"] for t in trials}
    return {"device_memory_bytes": limit, "large_d_model": big, "exit": run["exit"],
            "states": sorted(states.values()), "wall_s": run["wall_s"],
            "gated": sorted(states.values()) == ["COMPLETE", "INFEASIBLE"],
            "stderr_tail": run["stderr_tail"]}
