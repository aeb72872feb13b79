"""The GPU check's record as JSON and a short markdown table (`bench/gpu_check.py`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _mfu_rows(part: dict[str, Any]) -> list[str]:
    rows = ["| model | tokens/s | step (s) | first step (s) | MFU | MFU (nanoGPT) |",
            "|---|---|---|---|---|---|"]
    for name, c in part.items():
        if isinstance(c, dict) and "tokens_per_s" in c:
            rows.append(f"| {name} | {c['tokens_per_s']:,.0f} | {c['step_s']:.4f} | "
                        f"{c['first_step_s']:.1f} | {_pct(c['mfu'])} | {_pct(c['mfu_nanogpt'])} |")
    return rows


def _memory_rows(part: dict[str, Any]) -> list[str]:
    rows = ["| config | estimate (MB) | measured (MB) | estimate / measured |", "|---|---|---|---|"]
    for name, c in part.items():
        if isinstance(c, dict) and "ratio" in c:
            rows.append(f"| {name} | {c['estimate_bytes'] / 1e6:,.1f} | "
                        f"{c['measured_bytes'] / 1e6:,.1f} | {c['ratio']:.3f} |")
    return rows


def _flex_rows(part: dict[str, Any]) -> list[str]:
    rows = [f"dense FlexAttention, T = {part['seq_len']}: {part['dense_s'] * 1e3:.1f} ms per "
            "forward + backward", "", "| sparsity | time (ms) | speedup | FLOPs speedup |",
            "|---|---|---|---|"]
    for name, c in part.items():
        if name.startswith("sparsity_"):
            rows.append(f"| {c['sparsity_realised']:.2f} | {c['sparse_s'] * 1e3:.1f} | "
                        f"{c['speedup']:.2f}x | {c['flops_speedup']:.2f}x |")
    return rows


def _study_rows(name: str, part: dict[str, Any]) -> list[str]:
    if name == "fractional":
        p, s = part["packed"], part["sequential"]
        return [f"- packed (0.25 GPU each): {p['wall_s']:.1f} s, at most {p['max_concurrent']} "
                f"at once, states {p['states']}, devices {p['devices']}",
                f"- one at a time: {s['wall_s']:.1f} s, states {s['states']}; speedup "
                f"{part['speedup']:.2f}x" if part.get("speedup") else "- one at a time: -"]
    gb = part["device_memory_bytes"] / 1e9
    return [f"- large d_model {part['large_d_model']} against {gb:.1f} GB: states "
            f"{part['states']} (exit {part['exit']})"]


def markdown(record: dict[str, Any]) -> str:
    env = record["environment"]
    lines = [f"# GPU check, {record['date']}: {env['device']}", "",
             f"torch {env['torch']} (CUDA {env['cuda']}), Python {env['python']}"
             + (f", compute capability {env['capability']}, "
                f"{env['memory_bytes'] / 2**30:.0f} GiB" if "capability" in env else ""), ""]
    if not record["gpu_parts_run"]:
        lines += ["**No CUDA device: the GPU parts were not run.**", ""]
    render = {"mfu": _mfu_rows, "memory": _memory_rows, "flex": _flex_rows}
    for name, part in record["parts"].items():
        met = part.get("target_met")
        head = f"## {name}: {part['status']} ({part['seconds']} s)" + (
            "" if met is None else f", target {'met' if met else 'NOT met'}")
        lines += [head, ""]
        if part["status"] != "ok":
            lines += [part["reason"], ""]
        elif name in render:
            lines += [*render[name](part), ""]
        elif name in ("fractional", "gate"):
            lines += [*_study_rows(name, part), ""]
        else:
            lines += [f"`{part['summary']}`", *[f"- {f}" for f in part["failures"]], ""]
    return "\n".join(lines)


def write(record: dict[str, Any], out: Path) -> list[Path]:
    """``gpu-check-<date>-<device>.json`` and ``.md`` under ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"gpu-check-{record['date']}-{slug(record['environment']['device'])}"
    paths = [out / f"{stem}.json", out / f"{stem}.md"]
    paths[0].write_text(json.dumps(record, indent=1, default=str) + "\n")
    paths[1].write_text(markdown(record) + "\n")
    return paths


def headline(record: dict[str, Any]) -> dict[str, Any]:
    """The one JSON line: device, each part's status, the MFUs, and the targets met."""
    parts = record["parts"]
    mfu = {k: v.get("mfu") for k, v in parts.get("mfu", {}).items() if isinstance(v, dict)
           and "mfu" in v}
    return {"bench": "gpu_check", "device": record["environment"]["device"],
            "gpu_parts_run": record["gpu_parts_run"],
            "status": {k: v["status"] for k, v in parts.items()}, "mfu": mfu,
            "targets_met": record["targets_met"]}
