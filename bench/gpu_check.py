"""The GPU check: one command that exercises on a CUDA device what CPUs cannot.

    python bench/gpu_check.py [--out docs/gpu-check] [--quick] [--parts tests mfu ...]

Parts, in order (each skipped with its reason where it cannot run, never silently):

- ``tests``: the ``gpu``-marked tests (``pytest -m gpu``);
- ``mfu``: train-step MFU in bf16 for d_model 1024 and 2048, eager and `torch.compile`, against
  the device's datasheet bf16 peak (`sweep.train.hardware.PEAK_FLOPS`), the cost model's FLOPs
  beside nanoGPT's `estimate_mfu` convention (`bench/gpu_measure.py`);
- ``memory``: the training-memory estimate against `torch.cuda.max_memory_allocated` for six
  configs (dense, GQA, local and block-sparse on FlexAttention, encoder-decoder, fp32 with
  dropout); target within 10%;
- ``flex``: block-sparse FlexAttention against dense at 50% and 90% sparsity; target: at least
  half the speedup the FLOPs allow (it skips the masked blocks);
- ``fractional``: a 4-trial Ray study at ``gpus_per_trial: 0.25`` on one GPU: all four at once,
  each on the device, none out of memory, and its wall time against one trial at a time
  (`bench/gpu_study.py`);
- ``gate``: a space whose large config exceeds the device's memory: that trial INFEASIBLE, no OOM.

On a CPU the script runs what a CPU can check (a small eager train step through the same code,
the memory gate against the host's RAM) and says which GPU parts were not run. It writes
``gpu-check-<date>-<device>.json`` and ``.md`` under ``--out`` and prints one JSON line with the
figures and whether each target was met. Sized to finish in under 8 minutes on one GPU; a part
that would start after ``--budget-s`` is not run (said so).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ beside this file
import gpu_measure  # noqa: E402
import gpu_report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("tests", "mfu", "memory", "flex", "fractional", "gate")
# A part is started only while at least this many seconds of the budget are left.
PART_COST_S = {"tests": 150, "mfu": 150, "memory": 30, "flex": 45, "fractional": 120,
               "gate": 40}
NOT_CUDA = "not run: no CUDA device here"


class NotRun(Exception):
    """A part that cannot run here; its message says why."""


def _needs(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise NotRun(f"not run: {', '.join(missing)} not installed")


def part_tests(device: torch.device, scratch: Path, quick: bool) -> dict[str, Any]:
    if device.type != "cuda":
        raise NotRun(f"{NOT_CUDA} (pytest skips the gpu-marked tests off CUDA)")
    _needs("pytest")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p",
                           "no:cacheprovider", f"--basetemp={scratch / 'pytest'}", "tests"],
                          cwd=ROOT, capture_output=True, text=True, timeout=PART_COST_S["tests"])
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|error|skipped)", tail)}
    failures = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return {"exit": proc.returncode, "summary": tail, "counts": counts, "failures": failures,
            "target_met": proc.returncode == 0 and counts.get("passed", 0) > 0}


def part_mfu(device: torch.device, scratch: Path, quick: bool) -> dict[str, Any]:
    if device.type != "cuda":  # the same code on a small model, eager only: a CPU has no peak
        cfg = {"d_model": 64, "n_heads": 4, "n_layers": 2, "seq_len": 128, "vocab_size": 512}
        case = gpu_measure.mfu_case(cfg, 4, device, compile=False, steps=3, warmup=1)
        return {"cpu-d64-L2-eager": case, "note": f"{NOT_CUDA}: a small model's eager step on "
                "the CPU, no MFU (no datasheet peak); torch.compile not run on the CPU"}
    out: dict[str, Any] = {}
    for name, cfg in gpu_measure.MFU_MODELS.items():
        for compiled in (False, True):
            out[f"{name}-{'compile' if compiled else 'eager'}"] = gpu_measure.mfu_case(
                cfg, gpu_measure.MFU_BATCH[name], device, compile=compiled)
    return out


def part_memory(device: torch.device, scratch: Path, quick: bool) -> dict[str, Any]:
    if device.type != "cuda":
        raise NotRun(f"{NOT_CUDA} (torch.cuda.max_memory_allocated; the CPU estimate is held by "
                     "tests/models/test_cost_memory.py)")
    cases = {name: gpu_measure.memory_case(over, batch, dtype, device)
             for name, (over, batch, dtype) in gpu_measure.MEMORY_CASES.items()}
    return {**cases, "target_met": all(c["within_10pct"] for c in cases.values())}


def part_flex(device: torch.device, scratch: Path, quick: bool) -> dict[str, Any]:
    if device.type != "cuda":
        raise NotRun(f"{NOT_CUDA} (FlexAttention's backward has no CPU kernel)")
    out = gpu_measure.flex_case((0.5, 0.9), device)
    met = all(out[k]["speedup"] >= 0.5 * out[k]["flops_speedup"]
              for k in out if k.startswith("sparsity_"))
    return {**out, "target_met": met}


def part_fractional(device: torch.device, scratch: Path, quick: bool) -> dict[str, Any]:
    if device.type != "cuda":
        raise NotRun(f"{NOT_CUDA} (fractional GPUs per Ray trial)")
    _needs("ray", "optuna", "mlflow")
    import gpu_study

    out = gpu_study.fractional_case(scratch / "fractional")
    return {**out, "target_met": out["all_concurrent"] and out["all_complete"]
            and out["all_on_cuda"]}


def part_gate(device: torch.device, scratch: Path, quick: bool) -> dict[str, Any]:
    if quick:
        raise NotRun("not run: --quick (a study of two trials, about 15 s on a CPU)")
    _needs("optuna", "mlflow")
    import gpu_study

    out = gpu_study.gate_case(scratch / "gate", str(device))
    return {**out, "target_met": out["gated"]}


RUNNERS: dict[str, Callable[[torch.device, Path, bool], dict[str, Any]]] = {
    "tests": part_tests, "mfu": part_mfu, "memory": part_memory, "flex": part_flex,
    "fractional": part_fractional, "gate": part_gate}


def environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                           "device": "cpu", "cuda": torch.version.cuda}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(device=torch.cuda.get_device_name(device),
                   capability=f"{props.major}.{props.minor}",
                   memory_bytes=int(props.total_memory),
                   bf16_peak_flops=gpu_measure.peak_flops(device, torch.bfloat16))
    else:
        env["device"] = platform.processor() or platform.machine() or "cpu"
    return env


def run_parts(parts: list[str], device: torch.device, scratch: Path, *, quick: bool,
              budget_s: float) -> dict[str, Any]:
    """Each part's figures, or ``status``/``reason`` where it was not run or failed."""
    start = time.perf_counter()
    results: dict[str, Any] = {}
    for name in parts:
        left = budget_s - (time.perf_counter() - start)
        if left < PART_COST_S[name] and device.type == "cuda":
            results[name] = {"status": "not run",
                             "reason": f"not run: {left:.0f} s of the budget left"}
            continue
        t0 = time.perf_counter()
        try:
            results[name] = {"status": "ok", **RUNNERS[name](device, scratch, quick)}
        except NotRun as exc:
            results[name] = {"status": "not run", "reason": str(exc)}
        except Exception as exc:  # a failing part is a finding, and the others still run
            results[name] = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        results[name]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {results[name]['status']} ({results[name]['seconds']} s)"
              + (f" {results[name]['reason']}" if "reason" in results[name] else ""),
              file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "gpu-check")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--quick", action="store_true",
                    help="skip the parts that start a study (a smoke test)")
    ap.add_argument("--budget-s", type=float, default=450.0)
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = environment(device)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        results = run_parts(args.parts, device, Path(tmp), quick=args.quick,
                            budget_s=args.budget_s)
    record = {"date": dt.date.today().isoformat(), "environment": env, "parts": results,
              "targets_met": {k: v.get("target_met") for k, v in results.items()
                              if "target_met" in v},
              "gpu_parts_run": device.type == "cuda"}
    paths = gpu_report.write(record, args.out)
    print(json.dumps({**gpu_report.headline(record), "written": [str(p) for p in paths]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
