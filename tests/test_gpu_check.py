"""`bench/gpu_check.py` end to end on this machine, and its wheel packing.

Off CUDA the script must run what a CPU can check and name every GPU part it did not run; the
GPU figures themselves come from a machine with a GPU (docs/gpu-check/).
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.py"
GPU_PARTS = ("tests", "memory", "flex", "fractional")


def _check(tmp_path, *args):
    """``bench/gpu_check.py`` in a process of its own: its JSON line, record, markdown, stderr."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return _outputs(proc.stdout, proc.stderr)


def _outputs(stdout, stderr):
    line = json.loads(stdout.strip().splitlines()[-1])
    record = json.loads(Path(line["written"][0]).read_text())
    return line, record, Path(line["written"][1]).read_text(), stderr


def _bench_module(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path")
def test_quick_check_on_cpu_runs_the_cpu_parts_and_names_the_gpu_parts_not_run(tmp_path, capsys):
    # The script's main in this process (torch is loaded once for the suite), argv as given.
    assert _bench_module("gpu_check").main(["--out", str(tmp_path), "--quick"]) == 0
    captured = capsys.readouterr()
    line, record, md, stderr = _outputs(captured.out, captured.err)
    assert line["gpu_parts_run"] is False
    assert line["status"] == {"tests": "not run", "mfu": "ok", "memory": "not run",
                              "flex": "not run", "fractional": "not run", "gate": "not run"}
    for part in GPU_PARTS:
        assert record["parts"][part]["reason"].startswith("not run: no CUDA device here")
        assert f"{part}: not run" in stderr
    assert record["parts"]["gate"]["reason"].startswith("not run: --quick")
    (name, case), = ((k, v) for k, v in record["parts"]["mfu"].items() if isinstance(v, dict))
    assert name == "cpu-d64-L2-eager"
    assert case["tokens_per_s"] > 0 and case["mfu"] is None and case["peak_flops"] is None
    # the cost model's FLOPs of the step, exact and nanoGPT's convention
    assert case["flops_per_token_nanogpt"] >= case["flops_per_token"] > 0
    assert "**No CUDA device: the GPU parts were not run.**" in md
    assert md.count("not run: no CUDA device here") == len(GPU_PARTS)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".md"]


@pytest.mark.slow
def test_memory_gate_part_ends_the_too_large_config_infeasible_on_this_device(tmp_path):
    line, record, md, _ = _check(tmp_path, "--parts", "gate")
    gate = record["parts"]["gate"]
    assert gate["status"] == "ok", gate
    assert gate["states"] == ["COMPLETE", "INFEASIBLE"] and gate["exit"] == 0
    assert line["targets_met"] == {"gate": True}


def test_wheels_pack_into_parts_under_the_limit_and_cut_wheels_join_back(tmp_path):
    wheels = _bench_module("gpu_wheels")
    src = tmp_path / "src"
    src.mkdir()
    sizes = {"big-1.0-py3-none-any.whl": 2500, "a-1.0-py3-none-any.whl": 900,
             "b-1.0-py3-none-any.whl": 600, "c-1.0-py3-none-any.whl": 100}
    for i, (name, size) in enumerate(sizes.items()):
        (src / name).write_bytes(bytes((i + j) % 251 for j in range(size)))
    parts = wheels.pack(sorted(src.iterdir()), tmp_path / "out", 1000)
    files = [f for p in parts for f in p.iterdir()]
    for p in parts:
        assert sum(f.stat().st_size for f in p.iterdir()) <= 1000
    assert sorted(f.name for f in files if not f.name.startswith("big")) == sorted(
        n for n in sizes if not n.startswith("big"))
    pieces = sorted((f for f in files if f.name.startswith("big")), key=lambda f: f.name)
    assert [f.name[-4:] for f in pieces] == [".000", ".001", ".002"]
    whole = (src / "big-1.0-py3-none-any.whl").read_bytes()
    assert b"".join(f.read_bytes() for f in pieces) == whole
    assert wheels.dist_name(Path("Typing_Extensions-4.1-py3-none-any.whl")) == "typing-extensions"
